#!/usr/bin/env bash
# The service on this machine, on loopback: one fp8-coordinator, N fp8-worker daemons
# (CPU) and, optionally, a real Prometheus scraping all of them.
#
#   scripts/local_stack.sh start [--workers N] [--prometheus] [--prometheus-port P] [--dir DIR]
#                                [--data-root DIR] [--checkpoint-root DIR]
#   scripts/local_stack.sh env   [--dir DIR]   # prints FP8_COORDINATOR=... for eval
#   scripts/local_stack.sh stop  [--dir DIR]
#
# start returns once every daemon is up (and Prometheus is ready); it prints where
# everything is and writes it to DIR/stack.env. The gRPC and metrics ports are picked by
# the daemons themselves (port 0), so several stacks can run side by side; Prometheus gets
# --prometheus-port (default 9090). stop sends SIGTERM to everything start started, waits
# for it (the workers stop their ranks first), and leaves DIR (logs, the coordinator's
# SQLite state) in place. The binaries come from build/release/bin (scripts/build.sh
# release); FP8_BIN overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=${FP8_BIN:-$root/build/release/bin}

command=${1:-}
[[ -n $command ]] && shift
dir=$root/.fp8-stack
workers=2
prometheus=0
prometheus_port=9090
data_root=$root/examples
checkpoint_root=
while (($#)); do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --prometheus) prometheus=1; shift ;;
    --prometheus-port) prometheus_port=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --data-root) data_root=$2; shift 2 ;;
    --checkpoint-root) checkpoint_root=$2; shift 2 ;;
    *) echo "local_stack: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
checkpoint_root=${checkpoint_root:-$dir}

fail() {
  echo "local_stack: $*" >&2
  exit 1
}

# Waits up to 30 s for a file to exist and be non-empty.
wait_for_file() {
  for _ in $(seq 300); do [[ -s $1 ]] && return 0; sleep 0.1; done
  return 1
}

start_daemon() {  # name, then the command; records the pid
  local name=$1
  shift
  "$@" >"$dir/$name.log" 2>&1 &
  echo "$!" >>"$dir/pids"
}

stop_stack() {
  [[ -f $dir/pids ]] || return 0
  local pids
  mapfile -t pids <"$dir/pids"
  # Workers first (they stop their ranks and report), then Prometheus and the coordinator.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -f "$dir/pids"
}

case $command in
  start)
    [[ -f $dir/pids ]] && fail "a stack already runs from $dir (scripts/local_stack.sh stop --dir $dir)"
    [[ $workers =~ ^[0-9]+$ ]] || fail "--workers: '$workers' is not a number"
    for b in fp8-coordinator fp8-worker; do
      [[ -x $bin/$b ]] || fail "$bin/$b is missing: run scripts/build.sh release"
    done
    ((prometheus == 0)) || command -v prometheus >/dev/null || fail "prometheus is not installed (scripts/bootstrap.sh)"
    rm -f "$dir"/*.port "$dir/stack.env"
    trap 'stop_stack' ERR

    start_daemon coordinator "$bin/fp8-coordinator" --listen 127.0.0.1:0 --port-file "$dir/coordinator.port" \
      --metrics-address 127.0.0.1:0 --metrics-port-file "$dir/coordinator-metrics.port" --state-dir "$dir" \
      --data-root "$data_root" --checkpoint-root "$checkpoint_root"
    wait_for_file "$dir/coordinator.port" || fail "the coordinator did not start: $(cat "$dir/coordinator.log")"
    coordinator=127.0.0.1:$(cat "$dir/coordinator.port")
    targets=("\"127.0.0.1:$(cat "$dir/coordinator-metrics.port")\"")

    for ((i = 0; i < workers; i++)); do
      start_daemon "worker-$i" "$bin/fp8-worker" --coordinator "$coordinator" \
        --token-file "$dir/fp8-worker.token" --work-dir "$dir/worker-$i" --address 127.0.0.1:0 --cpus 1
    done
    for ((i = 0; i < workers; i++)); do
      address=
      for _ in $(seq 300); do
        address=$(sed -n 's|.*metrics at http://\([^/]*\)/metrics.*|\1|p' "$dir/worker-$i.log")
        address=${address%%$'\n'*}
        [[ -n $address ]] && grep -q "registered with" "$dir/worker-$i.log" && break
        sleep 0.1
      done
      [[ -n $address ]] || fail "worker $i did not start: $(cat "$dir/worker-$i.log")"
      targets+=("\"$address\"")
    done

    if ((prometheus)); then
      mkdir -p "$dir/prometheus"
      cat >"$dir/prometheus/prometheus.yml" <<EOF
global:
  scrape_interval: 2s
  evaluation_interval: 2s
scrape_configs:
  - job_name: fp8
    static_configs:
      - targets: [$(IFS=,; echo "${targets[*]}")]
EOF
      start_daemon prometheus prometheus --config.file "$dir/prometheus/prometheus.yml" \
        --storage.tsdb.path "$dir/prometheus/data" --web.listen-address "127.0.0.1:$prometheus_port"
      ready=0
      for _ in $(seq 300); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$prometheus_port") 2>/dev/null &&
          grep -q "Server is ready to receive web requests" "$dir/prometheus.log"; then
          ready=1
          break
        fi
        sleep 0.1
      done
      ((ready)) || fail "Prometheus did not start on 127.0.0.1:$prometheus_port: $(tail -5 "$dir/prometheus.log")"
    fi
    trap - ERR

    {
      echo "FP8_COORDINATOR=$coordinator"
      echo "FP8_TOKEN_FILE=$dir/fp8-admin.token"
      echo "FP8_STACK_DIR=$dir"
      echo "FP8_METRICS_TARGETS=$(IFS=,; echo "${targets[*]}" | tr -d '"')"
      ((prometheus)) && echo "FP8_PROMETHEUS=http://127.0.0.1:$prometheus_port"
    } >"$dir/stack.env"
    echo "local stack up in $dir:"
    echo "  coordinator  $coordinator   (metrics http://${targets[0]//\"/}/metrics)"
    for ((i = 0; i < workers; i++)); do echo "  worker-$i     metrics http://${targets[i + 1]//\"/}/metrics"; done
    ((prometheus)) && echo "  prometheus   http://127.0.0.1:$prometheus_port"
    echo "  logs         $dir/*.log"
    ;;
  env)
    [[ -f $dir/stack.env ]] || fail "no stack in $dir"
    sed 's/^/export /' "$dir/stack.env"
    ;;
  stop)
    stop_stack
    echo "local stack in $dir stopped"
    ;;
  *)
    echo "usage: scripts/local_stack.sh start|env|stop [options] (see the top of the script)" >&2
    exit 2
    ;;
esac
