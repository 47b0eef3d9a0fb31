#!/usr/bin/env bash
# usage: local_stack_prometheus_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
src=$1
export FP8_BIN=$2
work=$(mktemp -d)
stack=$work/stack
cleanup() {
  "$src/scripts/local_stack.sh" stop --dir "$stack" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for log in "$stack"/*.log; do
    [[ -f $log ]] && { echo "--- $log" >&2; tail -20 "$log" >&2; }
  done
  exit 1
}

command -v promtool >/dev/null || fail "promtool is missing: run scripts/bootstrap.sh"
command -v prometheus >/dev/null || fail "prometheus is missing: run scripts/bootstrap.sh"

# A free port for Prometheus (it cannot report one it picked itself).
port=19090
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done

"$src/scripts/local_stack.sh" start --dir "$stack" --workers 2 --prometheus --prometheus-port "$port" \
  --data-root "$work" --checkpoint-root "$work" || fail "the stack did not start"
eval "$("$src/scripts/local_stack.sh" env --dir "$stack")"

# A small corpus inside the data root.
mkdir -p "$work/data"
for i in $(seq 400); do echo "In the beginning was the word $i, and the word was with fp8."; done >"$work/data/text.txt"

# 2 ranks, long enough for several scrapes (every 2 s) while it runs.
"$FP8_BIN/fp8ctl" submit "$src/examples/jobs/tiny-cpu.yaml" --follow \
  --set data.path="$work/data/text.txt" --set resources.world_size=2 --set resources.cpus_per_rank=1 \
  --set checkpoint.dir="$work/ckpt" --set train.steps=300 --set train.log_every=10 \
  >"$work/follow.out" 2>&1 || { cat "$work/follow.out" >&2; fail "the job did not succeed"; }
grep -q "SUCCEEDED" "$work/follow.out" || fail "no SUCCEEDED in: $(cat "$work/follow.out")"

# Both kinds of /metrics endpoint pass promtool's checks.
IFS=, read -ra targets <<<"$FP8_METRICS_TARGETS"
((${#targets[@]} == 3)) || fail "expected 3 metrics targets, got '$FP8_METRICS_TARGETS'"
for t in "${targets[@]}"; do
  curl -fsS "http://$t/metrics" >"$work/metrics.txt" || fail "GET http://$t/metrics"
  out=$(promtool check metrics <"$work/metrics.txt" 2>&1) || fail "promtool on $t: $out"
  [[ -z $out ]] || fail "promtool on $t: $out"
  [[ $(curl -fsS "http://$t/healthz") == ok ]] || fail "GET http://$t/healthz"
done
grep -q '^fp8_worker_rank_exits_total{device="cpu",outcome="success"} 1' "$work/metrics.txt" ||
  fail "the last worker's /metrics does not count its rank's successful exit"

# Prometheus scraped the job while it ran: one more scrape, then ask its query API.
sleep 3
query() {  # prints the first value of an instant query, or nothing
  curl -fsS --get "$FP8_PROMETHEUS/api/v1/query" --data-urlencode "query=$1" |
    sed -n 's/.*"value":\[[^,]*,"\([^"]*\)"\].*/\1/p'
}
positive() {  # query, what
  local v
  v=$(query "$1")
  [[ -n $v ]] || fail "Prometheus has no $2 ($1)"
  awk -v v="$v" 'BEGIN { exit !(v > 0) }' || fail "$2 is $v, expected > 0 ($1)"
  echo "ok: $2 = $v"
}
positive 'max_over_time(fp8_job_tokens_per_second{job_id="job-1"}[10m])' "tokens/s"
positive 'count_over_time(fp8_job_loss{job_id="job-1"}[10m])' "loss samples"
positive 'min_over_time(fp8_job_loss{job_id="job-1"}[10m])' "loss"
positive 'max_over_time(fp8_job_step{job_id="job-1"}[10m]) == 300' "last step"
positive 'count(count_over_time(fp8_cast_amax{job_id="job-1"}[10m]))' "fp8 cast series"
positive 'max(max_over_time(fp8_job_communication_bytes_total{job_id="job-1",collective="all_gather",dtype="fp8"}[10m]))' "fp8 all-gather bytes"
positive 'count(up == 1)' "scrape targets up"
[[ $(query 'count(up == 1)') == 3 ]] || fail "not all 3 targets are up"

# stop ends every process it started.
mapfile -t pids <"$stack/pids"
"$src/scripts/local_stack.sh" stop --dir "$stack" >/dev/null
for pid in "${pids[@]}"; do
  kill -0 "$pid" 2>/dev/null && fail "process $pid still runs after stop"
done
echo "PASS"
