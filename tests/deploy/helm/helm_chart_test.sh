#!/usr/bin/env bash
# Checks of the Helm chart deploy/helm/fp8 with the tools scripts/install_deploy_tools.sh
# puts in deploy/tools (helm, and node_modules with kubernetes-models, js-yaml and
# typescript). One part per ctest test:
#
#   helm_chart_test.sh lint        helm lint --strict: default, CPU profile, ServiceMonitor, all options,
#                                  several GPUs per pod, PrometheusRule and NetworkPolicy, the helm
#                                  test, budget and startup probes off
#   helm_chart_test.sh manifests   helm template of both profiles, several GPUs per pod, the
#                                  monitoring objects and all options; every object validated
#                                  against the Kubernetes API (validate_manifests.js)
#   helm_chart_test.sh behaviour   what the rendered objects say (chart_behaviour.js)
#   helm_chart_test.sh invalid     every invalid/*.yaml makes helm template fail with its message
#   helm_chart_test.sh package     helm package carries the dashboards; the package lints and renders
set -euo pipefail

part=${1:?usage: helm_chart_test.sh lint|manifests|behaviour|invalid|package}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
chart=$root/deploy/helm/fp8
tools=${FP8_DEPLOY_TOOLS:-$root/deploy/tools}  # override: for checking the message below
helm=$tools/bin/helm
grafana=$root/deploy/grafana

fail() { echo "FAIL: $*" >&2; exit 1; }

# --- the tools --------------------------------------------------------------------------
[[ -x $helm ]] || fail "$helm is missing: run scripts/install_deploy_tools.sh"
command -v node >/dev/null || fail "node is not on PATH: install Node.js, then run scripts/install_deploy_tools.sh"
for m in kubernetes-models js-yaml typescript; do
  [[ -d $tools/node_modules/$m ]] || fail "$tools/node_modules/$m is missing: run scripts/install_deploy_tools.sh"
done
# The chart packages deploy/grafana/*.json through the symlink dashboards -> ../../grafana.
[[ -L $chart/dashboards ]] || fail "$chart/dashboards should be a symlink to ../../grafana"
[[ -d $chart/dashboards ]] || fail "$chart/dashboards -> $(readlink "$chart/dashboards") does not resolve (deploy/grafana is missing)"

work=$(mktemp -d "${TMPDIR:-/tmp}/fp8-helm-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

# helm prints "found symbolic link in path" for dashboards/ on every load: expected noise.
quiet() { grep -v 'found symbolic link in path' || true; }

# helm template into $work/<name>.yaml; any failure shows helm's message.
render() {
  local name=$1; shift
  if ! "$helm" template fp8 "$chart" --namespace training "$@" >"$work/$name.yaml" 2>"$work/$name.err"; then
    quiet <"$work/$name.err" >&2
    fail "helm template ($name: $*) failed"
  fi
  local n
  n=$(grep -c '^kind: ' "$work/$name.yaml" || true)
  echo "rendered $name: $n objects"
}

lint() {
  local name=$1; shift
  local out rc=0
  out=$("$helm" lint --strict "$@" 2>&1) || rc=$?
  out=$(quiet <<<"$out")
  if (( rc != 0 )) || ! grep -q '0 chart(s) failed' <<<"$out" || grep -q '^\[\(WARNING\|ERROR\)\]' <<<"$out"; then
    echo "$out" >&2
    fail "helm lint --strict ($name) failed"
  fi
  echo "lint ok: $name"
}

case $part in
  lint)
    lint default "$chart"
    lint cpu "$chart" -f "$chart/values-cpu.yaml"
    lint service-monitor "$chart" --set serviceMonitor.enabled=true
    lint cpu+service-monitor "$chart" -f "$chart/values-cpu.yaml" --set serviceMonitor.enabled=true
    lint all-options "$chart" -f "$here/values-all-options.yaml"
    lint multi-gpu "$chart" --set workers.gpusPerPod=4 --set workers.device=cuda:all
    lint monitoring+network-policy "$chart" --set serviceMonitor.enabled=true --set prometheusRule.enabled=true \
      --set networkPolicy.enabled=true
    lint no-test-no-budget "$chart" --set helmTest.enabled=false --set workers.podDisruptionBudget.enabled=false \
      --set coordinator.startupProbe.enabled=false --set workers.startupProbe.enabled=false
    ;;

  manifests)
    render default
    render cpu -f "$chart/values-cpu.yaml"
    render service-monitor --set serviceMonitor.enabled=true
    render multi-gpu --set workers.gpusPerPod=4 --set workers.device=cuda:all
    render all-options -f "$here/values-all-options.yaml"
    render cpu-all-options -f "$here/values-all-options.yaml" -f "$chart/values-cpu.yaml" \
      --set workers.podAntiAffinity=
    render monitoring --set serviceMonitor.enabled=true --set prometheusRule.enabled=true --set networkPolicy.enabled=true
    render no-extras --set dashboards.enabled=false --set coordinator.persistence.enabled=false \
      --set tokens.existingSecret=fp8-tokens --set helmTest.enabled=false --set workers.podDisruptionBudget.enabled=false
    # Each profile renders the objects it should (the kinds, sorted). The Pod is the helm
    # test's (helm template renders test hooks too).
    kinds() { grep '^kind: ' "$work/$1.yaml" | sort | uniq -c | awk '{printf "%s=%s ", $3, $1}'; }
    want="ConfigMap=3 Deployment=1 PersistentVolumeClaim=1 Pod=1 PodDisruptionBudget=1 Secret=1 Service=2 StatefulSet=1 "
    [[ "$(kinds default)" == "$want" ]] || fail "default profile renders $(kinds default), want $want"
    [[ "$(kinds cpu)" == "$want" ]] || fail "cpu profile renders $(kinds cpu), want $want"
    want_sm="ConfigMap=3 Deployment=1 PersistentVolumeClaim=1 Pod=1 PodDisruptionBudget=1 Secret=1 Service=2 ServiceMonitor=1 StatefulSet=1 "
    [[ "$(kinds service-monitor)" == "$want_sm" ]] || fail "serviceMonitor.enabled renders $(kinds service-monitor), want $want_sm"
    want_mon="ConfigMap=3 Deployment=1 NetworkPolicy=2 PersistentVolumeClaim=1 Pod=1 PodDisruptionBudget=1 PrometheusRule=1 Secret=1 Service=2 ServiceMonitor=1 StatefulSet=1 "
    [[ "$(kinds monitoring)" == "$want_mon" ]] || fail "monitoring and network policy render $(kinds monitoring), want $want_mon"
    want_none="ConfigMap=1 Deployment=1 Service=2 StatefulSet=1 "
    [[ "$(kinds no-extras)" == "$want_none" ]] || fail "everything optional off renders $(kinds no-extras), want $want_none"
    node "$here/validate_manifests.js" "$tools" "$work"/*.yaml
    ;;

  behaviour)
    node "$here/chart_behaviour.js" "$helm" "$chart" "$tools" "$grafana"
    ;;

  invalid)
    failures=0 count=0
    for values in "$here"/invalid/*.yaml; do
      name=$(basename "$values")
      for mode in schema without-schema; do
        if [[ $mode == schema ]]; then
          expect=$(sed -n 's/^# expect: //p' "$values")
          flags=()
        else
          expect=$(sed -n 's/^# expect-without-schema: //p' "$values")
          flags=(--skip-schema-validation)
          [[ -n $expect ]] || continue
        fi
        [[ -n $expect ]] || fail "$name has no '# expect: <message>' line"
        count=$((count + 1))
        rc=0
        out=$("$helm" template fp8 "$chart" --namespace training -f "$values" "${flags[@]}" 2>&1 >/dev/null) || rc=$?
        out=$(quiet <<<"$out")
        if (( rc == 0 )); then
          echo "FAIL $name ($mode): helm template succeeded" >&2
          failures=$((failures + 1))
        elif ! grep -qF -- "$expect" <<<"$out"; then
          echo "FAIL $name ($mode): the message lacks '$expect':" >&2
          echo "$out" | sed 's/^/    /' >&2
          failures=$((failures + 1))
        else
          echo "ok   $name ($mode): $(grep -F -- "$expect" <<<"$out" | head -1 | sed 's/^ *//')"
        fi
      done
    done
    (( count > 0 )) || fail "no invalid/*.yaml cases"
    (( failures == 0 )) || fail "$failures of $count invalid-values cases"
    echo "invalid values: $count cases refused with their messages"
    ;;

  package)
    "$helm" package "$chart" --destination "$work" 2>&1 | quiet
    tgz=$(ls "$work"/fp8-*.tgz)
    tar -tzf "$tgz" >"$work/contents"
    for f in Chart.yaml values.yaml values-cpu.yaml values.schema.json templates/NOTES.txt; do
      grep -qx "fp8/$f" "$work/contents" || fail "the package lacks fp8/$f"
    done
    shopt -s nullglob
    dashboards=("$grafana"/*.json)
    (( ${#dashboards[@]} > 0 )) || fail "no deploy/grafana/*.json to package"
    for d in "${dashboards[@]}"; do
      f=fp8/dashboards/$(basename "$d")
      grep -qx "$f" "$work/contents" || fail "the package lacks $f"
      cmp -s "$d" <(tar -xzOf "$tgz" "$f") || fail "$f in the package differs from $d"
    done
    [[ $(grep -c '^fp8/dashboards/' "$work/contents") == "${#dashboards[@]}" ]] || fail "the package has other files under dashboards/"
    lint package "$tgz"
    "$helm" template fp8 "$tgz" --show-only templates/dashboards-configmap.yaml >"$work/dash.yaml" \
      || fail "helm template of the package failed"
    for d in "${dashboards[@]}"; do
      grep -q "^  $(basename "$d"): |" "$work/dash.yaml" || fail "the packaged chart's ConfigMap lacks $(basename "$d")"
    done
    echo "package ok: $(basename "$tgz") with ${#dashboards[@]} dashboards"
    ;;

  *)
    fail "unknown part '$part' (lint, manifests, behaviour, invalid, package)"
    ;;
esac
