#!/usr/bin/env bash
# The Helm chart's PrometheusRule (deploy/helm/fp8/templates/prometheusrule.yaml) through
# promtool: its rule groups, rendered by helm for release "fp8" in namespace "training",
# pass `promtool check rules` (with the defaults, with every option of
# tests/deploy/helm/values-all-options.yaml and with a hand-written coordinatorSelector),
# and `promtool test rules` runs fp8_alerts_test.yaml (when each alert fires, on
# synthetic series) and fp8_alert_annotations_test.yaml (what each one says).
#
# Needs helm and js-yaml from scripts/install_deploy_tools.sh (deploy/tools), node, and
# promtool (Debian's prometheus package: scripts/bootstrap.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
chart=$root/deploy/helm/fp8
tools=${FP8_DEPLOY_TOOLS:-$root/deploy/tools}
helm=$tools/bin/helm

fail() { echo "FAIL: $*" >&2; exit 1; }
[[ -x $helm ]] || fail "$helm is missing: run scripts/install_deploy_tools.sh"
[[ -d $tools/node_modules/js-yaml ]] || fail "$tools/node_modules/js-yaml is missing: run scripts/install_deploy_tools.sh"
command -v node >/dev/null || fail "node is not on PATH: install Node.js"
command -v promtool >/dev/null || fail "promtool is missing: run scripts/bootstrap.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/fp8-rules-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

# render NAME helm-args...: the PrometheusRule's groups into $work/NAME.yaml, checked by promtool.
render() {
  local name=$1; shift
  "$helm" template fp8 "$chart" --namespace training --show-only templates/prometheusrule.yaml "$@" \
    >"$work/$name.manifest" 2>"$work/$name.err" ||
    { grep -v 'found symbolic link in path' "$work/$name.err" >&2; fail "helm template ($name) failed"; }
  node "$here/extract_rules.js" "$tools" "$work/$name.manifest" "$work/$name.yaml"
  promtool check rules "$work/$name.yaml" || fail "promtool check rules ($name)"
}

render fp8-rules --set prometheusRule.enabled=true --set serviceMonitor.enabled=true
render all-options -f "$root/tests/deploy/helm/values-all-options.yaml"
render own-selector --set prometheusRule.enabled=true \
  --set-string 'prometheusRule.coordinatorSelector=job=~"fp8-coord.*"\,cluster="eu-1"' \
  --set-json prometheusRule.alerts.throughputDrop.ratio=0.25 --set prometheusRule.alerts.workersMissing.expected=16
grep -q 'job=~"fp8-coord.\*",cluster="eu-1",state="FAILED"' "$work/own-selector.yaml" ||
  fail "prometheusRule.coordinatorSelector is not in the expressions: $(grep -m1 FAILED "$work/own-selector.yaml")"
grep -q '< 0.25 \* quantile_over_time' "$work/own-selector.yaml" || fail "alerts.throughputDrop.ratio is not in the expression"
grep -q ') < 16$' "$work/own-selector.yaml" || fail "alerts.workersMissing.expected is not in the expression"

# The unit tests name their rule files relative to themselves.
node "$here/extract_rules.js" "$tools" "$work/fp8-rules.manifest" "$work/fp8-rules-no-annotations.yaml" --no-annotations
cp "$here/fp8_alerts_test.yaml" "$here/fp8_alert_annotations_test.yaml" "$work/"
(cd "$work" && promtool test rules fp8_alerts_test.yaml fp8_alert_annotations_test.yaml) ||
  fail "promtool test rules"
echo "PASS"
