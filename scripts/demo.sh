#!/usr/bin/env bash
# The main job, runnable on a fresh machine: builds the product, installs the demo corpus
# (the King James Bible) and trains the example job examples/jobs/tiny-cpu.yaml, a small
# byte-level Llama with fp8 linear layers, on this machine's CPU with fp8-train, first as
# one process, then sharded over two local ranks (FSDP with fp8 all-gather); then runs
# the fp8 GEMM and cast benchmarks (on the GPU too, when one is present). Later
# milestones turn this into the full local service (coordinator + workers).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh release
scripts/install_corpus.sh
build=build/release

# A fresh run each time: the demo's checkpoints live in the build tree. Stop it with
# Ctrl-C and continue with the same command plus --resume.
checkpoints=$build/demo/checkpoints
rm -rf "$checkpoints" "$checkpoints-fsdp"
"$build/bin/fp8-train" --config examples/jobs/tiny-cpu.yaml --set checkpoint.dir="$PWD/$checkpoints"

echo
# The same job on two ranks (one core each): every parameter sharded, fp8 weights
# all-gathered as e4m3 bytes, a `comm` line per report.
"$build/bin/fp8-train" --nproc 2 --config examples/jobs/tiny-cpu.yaml \
  --set checkpoint.dir="$PWD/$checkpoints-fsdp" --set resources.cpus_per_rank=1 --set train.log_every=50

echo
"$build/bench/bench_gemm" --device cpu --quick
echo
"$build/bench/bench_cast" --device cpu --quick
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo
  "$build/bench/bench_gemm" --device cuda --quick
  echo
  "$build/bench/bench_cast" --device cuda
fi
