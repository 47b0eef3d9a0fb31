#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the Debian packages, builds the
# Release tree and runs every test (gpu tests skip, saying why, without a GPU), then
# builds the Debug tree under AddressSanitizer + UndefinedBehaviorSanitizer without the
# CUDA backend and runs the unit tests there: that also proves the code builds and passes
# without the CUDA toolkit.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# OpenBLAS's idle threads otherwise spin between calls and, with ctest running tests side
# by side, slow the training tests down severalfold (worker/fp8_train/blas_environment.h).
export OPENBLAS_THREAD_TIMEOUT=4

echo "== release build + all tests"
scripts/build.sh release
scripts/install_corpus.sh  # the loss-parity test trains on it
scripts/install_deploy_tools.sh  # the deploy tests' helm, typescript and schemas
ctest --preset release -j "$jobs"

echo "== debug build (ASan + UBSan, no CUDA) + unit tests"
# Only the unit tests' executables (and what they run): the rest ran above. Each
# executable is one ctest test here (tests/CMakeLists.txt: a sanitized process is slow to
# start).
cmake --preset debug >/dev/null
cmake --build --preset debug -j "$jobs" --target fp8_unit_tests
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --preset debug -L unit -E _NOT_BUILT -j "$jobs"
