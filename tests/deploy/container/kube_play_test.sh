#!/usr/bin/env bash
# usage: kube_play_test.sh SOURCE_DIR HELM TOOLS_DIR
# Smoke test of the chart's manifests with the image: `helm template` of the CPU profile,
# played by `podman kube play` (kube_play_manifests.js says what it adapts, and why) on a
# podman network: the coordinator Deployment with its ConfigMap, Secret and claim, both
# worker pods of the StatefulSet, then the chart's `helm test` Pod, which submits its job
# through the coordinator and must see it succeed. Covers the pods' commands, args, env,
# volumes, users and read-only root filesystems against the real binaries; not Services,
# probes, scheduling, policies or a rolling update, which only a cluster runs.
set -euo pipefail
src=$1
helm=$2
tools=$3
source "$src/tests/deploy/container/podman_env.sh"
work=$(mktemp -d)
chmod 755 "$work"
network=fp8-kube-test-$$
subnet=10.213.77
pods=(fp8-coordinator-pod-0 fp8-worker-0 fp8-worker-1 fp8-test)
# What a run killed before its cleanup may have left.
pm pod rm -f -t 0 "${pods[@]}" >/dev/null 2>&1 || true
pm network ls --format '{{.Name}}' | grep '^fp8-kube-test-' | xargs -r podman network rm -f >/dev/null 2>&1 || true
volumes_before=$(pm volume ls -q | sort)
secrets=()
cleanup() {
  pm pod rm -f -t 0 "${pods[@]}" >/dev/null 2>&1 || true
  comm -13 <(echo "$volumes_before") <(pm volume ls -q | sort) | xargs -r podman volume rm -f >/dev/null 2>&1 || true
  for s in "${secrets[@]}"; do pm secret rm "$s" >/dev/null 2>&1 || true; done
  pm network rm -f "$network" >/dev/null 2>&1 || true
  rm -rf "$work" "$podman_conf"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
  echo "FAIL: $*" >&2
  for c in fp8-coordinator-pod-0-coordinator fp8-worker-0-worker fp8-worker-1-worker fp8-test-submit; do
    echo "--- $c" >&2
    pm logs "$c" 2>&1 | grep -v 'systemd\|syslog' | tail -15 >&2 || true
  done
  exit 1
}
play() { pm kube play --network "$network" "$@" >>"$work/play.log" 2>&1 || fail "kube play $*: $(tail -5 "$work/play.log")"; }

pm image exists "$image" || fail "no image $image: the fp8_image_build test makes it"
"$helm" template fp8 "$src/deploy/helm/fp8" -f "$src/deploy/helm/fp8/values-cpu.yaml" --namespace default \
  --set image.repository="${image%:*}" --set image.tag="${image##*:}" >"$work/rendered.yaml" 2>"$work/helm.err" ||
  fail "helm template: $(cat "$work/helm.err")"
node "$src/tests/deploy/container/kube_play_manifests.js" "$tools" "$work/rendered.yaml" "$work/play" \
  "$subnet.10" "$subnet.20" "$subnet.11" "$subnet.12" || fail "kube_play_manifests.js"

pm network create --subnet "$subnet.0/24" "$network" >/dev/null || fail "podman network create $subnet.0/24"
for f in "$work"/play/secret-*.yaml; do
  name=$(basename "$f" .yaml)
  name=${name#secret-}
  pm secret rm "$name" >/dev/null 2>&1 || true
  pm secret create "$name" "$f" >/dev/null
  secrets+=("$name")
done

wait_for() {  # seconds, what, command...
  local seconds=$1 what=$2
  shift 2
  for _ in $(seq $((seconds * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  fail "waited ${seconds}s for $what"
}

play --ip "$subnet.10" "$work/play/coordinator.yaml"
wait_for 60 "the coordinator's /readyz" curl -fsS "http://$subnet.10:9400/readyz"
echo "ok: the coordinator Deployment runs and is ready"
play --ip "$subnet.11" "$work/play/worker-0.yaml"
play --ip "$subnet.12" "$work/play/worker-1.yaml"
for i in 1 2; do
  wait_for 60 "worker $i's /readyz" curl -fsS "http://$subnet.1$i:9401/readyz"
done
# Each check reads its whole input before grep: under pipefail, `grep -q` closing the pipe
# early would fail the writer (curl: "Failure writing output") and so the check.
grep -q "registered with fp8-coordinator.default.svc:7070" <<<"$(pm logs fp8-worker-0-worker 2>&1)" ||
  fail "worker 0 did not register through the coordinator Service's name"
echo "ok: both worker pods run and registered"

play --ip "$subnet.20" "$work/play/test.yaml"
exited() { [[ $(pm inspect -f '{{.State.Status}}' fp8-test-submit) == exited ]]; }
wait_for 300 "the helm test Pod to finish" exited
code=$(pm inspect -f '{{.State.ExitCode}}' fp8-test-submit)
[[ $code == 0 ]] || fail "the helm test Pod exited $code"
grep -q SUCCEEDED <<<"$(pm logs fp8-test-submit 2>&1)" || fail "the helm test's job did not succeed"
echo "ok: the chart's helm test Pod submitted its job and it succeeded"
metrics=$(curl -fsS "http://$subnet.10:9400/metrics") || fail "the coordinator's /metrics did not answer"
grep -q '^fp8_jobs' <<<"$metrics" || fail "no fp8_jobs metrics on the coordinator"
echo PASS
