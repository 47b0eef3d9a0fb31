#!/usr/bin/env bash
# usage: container_stack_test.sh SOURCE_DIR BIN_DIR
# The service from its image: the coordinator and two workers each in a container of
# their own (host network, on loopback), a 2-rank fp8 job submitted from the host with
# fp8ctl runs to SUCCEEDED, every container's /metrics answers; then a second job whose
# worker container is killed (SIGKILL) mid-job and started again, as a kubelet would,
# restarts from its checkpoint and succeeds. Everything it made is removed at the end.
set -euo pipefail
src=$1
bin=$2
source "$src/tests/deploy/container/podman_env.sh"
work=$(mktemp -d)
chmod 755 "$work"
names=(fp8-ct-$$-coordinator fp8-ct-$$-worker-0 fp8-ct-$$-worker-1)
cleanup() {
  pm rm -f -t 0 "${names[@]}" >/dev/null 2>&1 || true
  rm -rf "$work" "$podman_conf"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for n in "${names[@]}"; do
    echo "--- $n" >&2
    pm logs "$n" 2>&1 | tail -20 >&2 || true
  done
  exit 1
}

pm image exists "$image" || fail "no image $image: the fp8_image_build test makes it"

# What a cluster gives the pods as volumes: the coordinator's state, a data folder, one
# checkpoint folder every worker sees. The same paths inside and outside, so that the
# host's fp8ctl and the containers agree on them; owned by the image's user.
mkdir -p "$work/state" "$work/data" "$work/checkpoints"
for i in $(seq 400); do echo "In the beginning was the word $i, and the word was with fp8."; done >"$work/data/text.txt"
chown -R 65532:65532 "$work/state" "$work/checkpoints"
volume=(-v "$work:$work")

wait_for() {  # seconds, what, command...: runs the command every 0.2 s until it succeeds
  local seconds=$1 what=$2
  shift 2
  for _ in $(seq $((seconds * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  fail "waited ${seconds}s for $what"
}

pm run -d --name "${names[0]}" --network host "${volume[@]}" "$image" \
  fp8-coordinator --listen 127.0.0.1:0 --port-file "$work/state/coordinator.port" \
  --metrics-address 127.0.0.1:0 --metrics-port-file "$work/state/coordinator-metrics.port" \
  --state-dir "$work/state" --data-root "$work/data" --checkpoint-root "$work/checkpoints" \
  --heartbeat-interval-ms 200 --lost-after-ms 2000 >/dev/null
wait_for 30 "the coordinator's port file" test -s "$work/state/coordinator.port"
export FP8_COORDINATOR=127.0.0.1:$(cat "$work/state/coordinator.port")
export FP8_TOKEN_FILE=$work/state/fp8-admin.token
wait_for 10 "the coordinator's tokens" test -s "$work/state/fp8-worker.token"

start_worker() {  # index
  pm run -d --name "${names[$1 + 1]}" --network host "${volume[@]}" "$image" \
    fp8-worker --coordinator "$FP8_COORDINATOR" --token-file "$work/state/fp8-worker.token" \
    --work-dir "/var/lib/fp8/worker-$1" --address 127.0.0.1:0 --cpus 1 >/dev/null
}
registered() {  # container: its log says it registered since it last started
  pm logs --since "$(pm inspect -f '{{.State.StartedAt}}' "$1" | cut -d. -f1 | tr ' ' T)" "$1" 2>&1 |
    grep -q "registered with"
}
start_worker 0
start_worker 1
wait_for 30 "worker 0 to register" registered "${names[1]}"
wait_for 30 "worker 1 to register" registered "${names[2]}"

submit() {  # job name, steps, then fp8ctl flags; prints the follow output's file
  "$bin/fp8ctl" submit "$src/examples/jobs/tiny-cpu.yaml" --set name="$1" \
    --set data.path="$work/data/text.txt" --set resources.world_size=2 --set resources.cpus_per_rank=1 \
    --set checkpoint.dir="$work/checkpoints/$1" --set train.steps="$2" --set train.log_every=10 \
    --set checkpoint.every=20 "${@:3}"
}

# 1. A job from the host runs to the end on the containers.
submit first 60 --follow >"$work/first.out" 2>&1 || fail "the first job did not succeed: $(cat "$work/first.out")"
grep -q SUCCEEDED "$work/first.out" || fail "no SUCCEEDED in: $(cat "$work/first.out")"
echo "ok: a 2-rank job submitted from the host succeeded on the worker containers"

# 2. Every container's /metrics answers, and promtool accepts it.
metrics_targets=("127.0.0.1:$(cat "$work/state/coordinator-metrics.port")")
for n in "${names[@]:1}"; do
  address=$(pm logs "$n" 2>&1 | sed -n 's|.*metrics at http://\([^/]*\)/metrics.*|\1|p' | tail -1)
  [[ -n $address ]] || fail "$n printed no metrics address"
  metrics_targets+=("$address")
done
for t in "${metrics_targets[@]}"; do
  curl -fsS "http://$t/metrics" >"$work/metrics.txt" || fail "GET http://$t/metrics"
  if command -v promtool >/dev/null; then
    out=$(promtool check metrics <"$work/metrics.txt" 2>&1) || fail "promtool on $t: $out"
  fi
  grep -q '^fp8_' "$work/metrics.txt" || fail "no fp8_ metrics at $t"
done
echo "ok: /metrics of the coordinator and both workers"

# 3. A worker container killed mid-job: the attempt fails, the container comes back (as a
#    kubelet restarts it), and the job restarts from its checkpoint and succeeds.
id=$(submit second 3000 --set checkpoint.every=100 2>"$work/second.err" | tail -1) || fail "submit: $(cat "$work/second.err")"
id=${id#job/}
[[ -n $id ]] || fail "submit printed no job id: $(cat "$work/second.err")"
field() {  # json field of the job
  "$bin/fp8ctl" describe "$id" -o json | python3 -c "import json,sys; print(json.load(sys.stdin)['job'].get('$1', 0))"
}
has_checkpoint() { (($(field last_checkpoint_step) > 0)); }
wait_for 120 "the second job's first checkpoint" has_checkpoint
pid=$(pm inspect -f '{{.State.Pid}}' "${names[2]}")
kill -KILL "$pid"
echo "ok: killed worker 1 (pid $pid) at checkpoint step $(field last_checkpoint_step)"
wait_for 30 "the killed container to exit" test "$(pm inspect -f '{{.State.Running}}' "${names[2]}")" = false
pm start "${names[2]}" >/dev/null
finished() { [[ $(field state) =~ ^(SUCCEEDED|FAILED|CANCELLED)$ ]]; }
wait_for 400 "the second job to finish" finished
[[ $(field state) == SUCCEEDED ]] || fail "the second job ended $(field state): $("$bin/fp8ctl" describe "$id")"
(($(field attempts) >= 2)) || fail "the second job succeeded without a restart: $("$bin/fp8ctl" describe "$id")"
resumed=$("$bin/fp8ctl" describe "$id" -o json |
  python3 -c "import json,sys; print(json.load(sys.stdin)['job']['attempt_history'][-1].get('resumed_from_step', 0))")
(($resumed > 0)) || fail "the last attempt started from scratch, not from a checkpoint"
echo "ok: the job restarted from step $resumed after the worker container was killed and succeeded"

# 4. Stopping: the workers end their ranks and exit, then the coordinator.
pm stop -t 30 "${names[2]}" "${names[1]}" "${names[0]}" >/dev/null
for n in "${names[@]}"; do
  [[ $(pm inspect -f '{{.State.Running}}' "$n") == false ]] || fail "$n still runs after stop"
done
echo PASS
