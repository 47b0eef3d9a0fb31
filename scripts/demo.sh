#!/usr/bin/env bash
# The main job, runnable on a fresh machine: installs what it needs, builds the product,
# installs the demo corpus (the King James Bible), starts the local stack (an
# fp8-coordinator, two fp8-worker daemons and a real Prometheus, all on loopback),
# submits examples/jobs/tiny-cpu.yaml (a small byte-level Llama with fp8 linear layers)
# as a 2-rank FSDP job with fp8 weight all-gathers, follows it to the end with
# `fp8ctl submit --follow`, prints its summary and what Prometheus recorded of it, stops
# the stack, and lets the trained model continue a prompt (`fp8-model generate`).
set -euo pipefail
cd "$(dirname "$0")/.."
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
trap 'scripts/local_stack.sh stop --dir "$demo"' EXIT
eval "$(scripts/local_stack.sh env --dir "$demo")"

echo
echo "== fp8ctl submit --follow: the tiny fp8 job as 2 ranks (FSDP, fp8 all-gather)"
fp8ctl() { "$bin/fp8ctl" "$@"; }
fp8ctl submit examples/jobs/tiny-cpu.yaml --follow \
  --set resources.world_size=2 --set resources.cpus_per_rank=1 \
  --set checkpoint.dir="$demo/checkpoints" --set train.log_every=25
echo
fp8ctl describe job-1

echo
echo "== what Prometheus scraped ($FP8_PROMETHEUS)"
sleep 3  # one more scrape after the last report
query() {
  curl -fsS --get "$FP8_PROMETHEUS/api/v1/query" --data-urlencode "query=$1" |
    sed -n 's/.*"value":\[[^,]*,"\([^"]*\)"\].*/\1/p'
}
echo "  tokens/s (max over the run)   $(query 'max_over_time(fp8_job_tokens_per_second{job_id="job-1"}[10m])')"
echo "  loss (last)                   $(query 'last_over_time(fp8_job_loss{job_id="job-1"}[10m])')"
echo "  fp8 all-gather bytes          $(query 'max(fp8_job_communication_bytes_total{job_id="job-1",collective="all_gather",dtype="fp8"})')"
echo "  fp8 casts with metrics        $(query 'count(max_over_time(fp8_cast_amax{job_id="job-1"}[10m]))')"
echo
echo "metrics: coordinator and workers at $(echo "$FP8_METRICS_TARGETS" | sed 's|\([^,]*\)|http://\1/metrics|g; s|,|  |g')"
echo "Grafana dashboards to import: deploy/grafana/*.json (deploy/grafana/README.md)"
echo

echo "== fp8-model generate: the model just trained continues a prompt (fp32 on the CPU, KV cache)"
"$bin/fp8-model" generate --checkpoint "$demo/checkpoints/job-1" --prompt "And God said, " \
  --max-new-tokens 50 --temperature 0.6 --top-k 20 --seed 1
