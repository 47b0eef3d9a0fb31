#!/usr/bin/env bash
# The main job, runnable on a fresh machine: installs what it needs, builds the product,
# installs the demo corpus (the King James Bible), starts the local stack (an
# fp8-coordinator, two fp8-worker daemons and a real Prometheus, all on loopback),
# submits examples/jobs/tiny-cpu.yaml (a small byte-level Llama with fp8 linear layers)
# as a 2-rank FSDP job with fp8 weight all-gathers, follows it to the end with
# `fp8ctl submit --follow`, prints its summary and what Prometheus recorded of it, stops
# the stack, and lets the trained model continue a prompt (`fp8-model generate`).
#
#   scripts/demo.sh [--keep]   # --keep: leave the stack running afterwards (it says how to stop it)
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
case ${1:-} in
  "") ;;
  --keep) keep=1 ;;
  *) echo "usage: scripts/demo.sh [--keep]" >&2; exit 2 ;;
esac
scripts/build.sh release
scripts/install_corpus.sh
bin=$PWD/build/release/bin

# A fresh run each time: the demo's state, logs and checkpoints live in the build tree.
demo=$PWD/build/release/demo
scripts/local_stack.sh stop --dir "$demo" >/dev/null 2>&1 || true
rm -rf "$demo"
mkdir -p "$demo"

# The first free port from 9090 for Prometheus.
prometheus_port=9090
while (exec 3<>"/dev/tcp/127.0.0.1/$prometheus_port") 2>/dev/null; do prometheus_port=$((prometheus_port + 1)); done

echo "== the local stack: fp8-coordinator + 2 fp8-workers + Prometheus on loopback"
scripts/local_stack.sh start --dir "$demo" --workers 2 --prometheus --prometheus-port "$prometheus_port" \
  --data-root "$PWD/examples" --checkpoint-root "$demo"
((keep)) || trap 'scripts/local_stack.sh stop --dir "$demo"' EXIT
eval "$(scripts/local_stack.sh env --dir "$demo")"

echo
echo "== fp8ctl submit --follow: the tiny fp8 job as 2 ranks (FSDP, fp8 all-gather)"
fp8ctl() { "$bin/fp8ctl" "$@"; }
started=$(date +%s.%N)
fp8ctl submit examples/jobs/tiny-cpu.yaml --follow \
  --set resources.world_size=2 --set resources.cpus_per_rank=1 \
  --set checkpoint.dir="$demo/checkpoints" --set train.log_every=25
ended=$(date +%s.%N)
echo
fp8ctl describe job-1

echo
echo "== what Prometheus scraped ($FP8_PROMETHEUS)"
sleep 3  # one more scrape after the last report
query() {
  curl -fsS --get "$FP8_PROMETHEUS/api/v1/query" --data-urlencode "query=$1" |
    sed -n 's/.*"value":\[[^,]*,"\([^"]*\)"\].*/\1/p'
}
# 19400 -> 19.4k; with a unit of bytes, 76600000 -> 76.6 MB. Empty stays "n/a".
human() {
  awk -v v="$1" -v unit="${2:-}" 'BEGIN {
    if (v == "") { print "n/a"; exit }
    n = split(unit == "B" ? " B, kB, MB, GB, TB" : ",k,M,G,T", s, ",")
    i = 1; while (v >= 1000 && i < n) { v /= 1000; i++ }
    printf (v == int(v) ? "%d%s\n" : "%.1f%s\n"), v, s[i] }'
}
job='job_id="job-1"'
tokens=$(query "max_over_time(fp8_job_tokens_total{$job}[10m])")
# End to end: the counter's tokens over the job's wall time from submit to its end,
# start-up and evaluations included (fp8ctl's tokens/s is the last report window's).
rate=$(awk -v t="$tokens" -v a="$started" -v b="$ended" 'BEGIN { if (t != "" && b > a) printf "%.0f", t / (b - a) }')
echo "  tokens trained                $(human "$tokens")"
echo "  tokens/s, end to end          $(human "$rate")"
echo "  MFU (last report, vs sgemm)   $(query "last_over_time(fp8_job_mfu_ratio{$job}[10m])" | awk '{ printf "%.1f%%\n", 100 * $1 }')"
echo "  loss (last)                   $(query "last_over_time(fp8_job_loss{$job}[10m])" | awk '{ printf "%.3f\n", $1 }')"
echo "  fp8 all-gather traffic        $(human "$(query "max(fp8_job_communication_bytes_total{$job,collective=\"all_gather\",dtype=\"fp8\"})")" B)"
echo "  fp8 casts with metrics        $(query "count(max_over_time(fp8_cast_amax{$job}[10m]))")"
echo
if ((keep)); then
  echo "the stack stays up (--keep):"
  echo "  metrics     $(echo "$FP8_METRICS_TARGETS" | sed 's|\([^,]*\)|http://\1/metrics|g; s|,|  |g')"
  echo "  Prometheus  $FP8_PROMETHEUS"
  echo "  fp8ctl      eval \"\$(scripts/local_stack.sh env --dir $demo)\"; build/release/bin/fp8ctl list"
  echo "  stop it     scripts/local_stack.sh stop --dir $demo"
else
  echo "(the stack stops when the demo ends; scripts/demo.sh --keep leaves it up to explore)"
fi
echo "Grafana dashboards to import: deploy/grafana/*.json (deploy/grafana/README.md)"
echo

echo "== fp8-model generate: the model just trained continues a prompt (fp32 on the CPU, KV cache)"
"$bin/fp8-model" generate --checkpoint "$demo/checkpoints/job-1" --prompt "And God said, " \
  --max-new-tokens 50 --temperature 0.6 --top-k 20 --seed 1
