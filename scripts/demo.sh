#!/usr/bin/env bash
# The main job, runnable on a fresh machine: builds the product and runs the fp8
# numerics benchmarks (fp8 GEMM vs the high-precision baseline, fp8 casts vs a copy) on
# this machine's CPU, and on its GPU when one is present. Later milestones turn this into
# the full local service demo (coordinator + workers training an fp8 job).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh release
bin=build/release/bench

"$bin/bench_gemm" --device cpu --quick
echo
"$bin/bench_cast" --device cpu --quick
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo
  "$bin/bench_gemm" --device cuda --quick
  echo
  "$bin/bench_cast" --device cuda
fi
