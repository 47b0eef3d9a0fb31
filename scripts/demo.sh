#!/usr/bin/env bash
# The main job, runnable on a fresh machine: builds the product, installs the demo corpus
# (the King James Bible), trains the example job examples/jobs/tiny-cpu.yaml (a small
# byte-level Llama with fp8 linear layers) once with fp8-train on its own, then runs the
# service on this machine: an fp8-coordinator and two fp8-worker daemons on loopback, the
# same job submitted with `fp8ctl submit --follow` as a 2-rank FSDP job (fp8 all-gather),
# then `fp8ctl list` and `describe`. Last, the fp8 GEMM and cast benchmarks (on the GPU
# too, when one is present) and the coordinator's.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh release
scripts/install_corpus.sh
build=build/release
bin=$build/bin

# A fresh run each time: the demo's state and checkpoints live in the build tree.
demo=$PWD/$build/demo
rm -rf "$demo"
mkdir -p "$demo"

echo "== fp8-train on its own (one process)"
"$bin/fp8-train" --config examples/jobs/tiny-cpu.yaml --set checkpoint.dir="$demo/checkpoints/standalone" \
  --set train.log_every=50

echo
echo "== the service: fp8-coordinator + 2 fp8-workers on loopback, fp8ctl"
pids=()
stop_service() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
}
trap stop_service EXIT
state=$demo/coordinator
mkdir -p "$state"
# Jobs may read data under examples/ and write checkpoints under the demo folder only.
"$bin/fp8-coordinator" --listen 127.0.0.1:0 --port-file "$state/port" --state-dir "$state" \
  --data-root "$PWD/examples" --checkpoint-root "$demo" >"$state/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -s $state/port ]] && break; sleep 0.1; done
[[ -s $state/port ]] || { echo "the coordinator did not start:" >&2; cat "$state/coordinator.log" >&2; exit 1; }
export FP8_COORDINATOR=127.0.0.1:$(cat "$state/port")
echo "coordinator at $FP8_COORDINATOR (log: $state/coordinator.log)"
for i in 0 1; do
  "$bin/fp8-worker" --token-file "$state/fp8-worker.token" --work-dir "$demo/worker-$i" --cpus 1 \
    >"$demo/worker-$i.log" 2>&1 &
  pids+=($!)
done

fp8ctl() { "$bin/fp8ctl" --token-file "$state/fp8-admin.token" "$@"; }
fp8ctl submit examples/jobs/tiny-cpu.yaml --follow \
  --set resources.world_size=2 --set resources.cpus_per_rank=1 \
  --set checkpoint.dir="$demo/checkpoints/service" --set train.log_every=25
echo
fp8ctl list
echo
fp8ctl describe job-1
stop_service
trap - EXIT

echo
"$build/bench/bench_gemm" --device cpu --quick
echo
"$build/bench/bench_cast" --device cpu --quick
echo
"$build/bench/bench_coordinator" --quick
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo
  "$build/bench/bench_gemm" --device cuda --quick
  echo
  "$build/bench/bench_cast" --device cuda
fi
