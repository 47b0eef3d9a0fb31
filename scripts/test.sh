#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the Debian packages, builds the
# Release tree and runs every test (gpu tests skip, saying why, without a GPU), then
# builds the Debug tree under AddressSanitizer + UndefinedBehaviorSanitizer and runs the
# unit tests there, then proves the numerics core (the only code that differs with and
# without CUDA) and what links it build and pass without the CUDA toolkit.
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

echo "== debug build (ASan + UBSan) + unit tests"
# Only the unit tests' executables (and what they run): the rest ran above.
cmake --preset debug >/dev/null
cmake --build --preset debug -j "$jobs" --target fp8_unit_tests
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --preset debug -L unit -E _NOT_BUILT -j "$jobs"

echo "== build without CUDA"
cmake --preset cpu-only >/dev/null
cmake --build --preset cpu-only -j "$jobs" --target fp8_kernels fp8_engine fp8_backend_contract_test fp8_format_test
# Only the targets built above have tests to list; the others show up as *_NOT_BUILT.
ctest --test-dir build/cpu-only -L unit -E _NOT_BUILT -j "$jobs"
