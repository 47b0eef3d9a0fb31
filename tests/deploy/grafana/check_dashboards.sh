#!/usr/bin/env bash
# Checks Grafana dashboards (default: every deploy/grafana/*.json).
#
#   check_dashboards.sh [--types | --lint | --promql | --all] [FILE.json ...]
#
# --types  @grafana/schema: each dashboard is inlined as an object literal in a generated
#          TypeScript file, `export const dashboard = (<json>) satisfies DashboardJson;`
#          (DashboardJson: dashboard_types.ts, built from @grafana/schema's Dashboard), and
#          deploy/tools' tsc --noEmit --strict checks it. Inlining the literal (rather than
#          importing the .json) is what makes tsc report unknown properties. Errors are
#          reported as FILE.json:LINE:COL.
# --lint   lint_dashboards.js: ids, gridPos, metric names against deploy/METRICS.md, the
#          job_id filter, data source references, formatting, ... (see that file).
# --promql eval_queries.js + promtool test rules: every query (panels, variables and
#          annotations), with the variables filled in, must parse and return data from
#          synthetic series shaped like deploy/METRICS.md with two jobs (an fp8 one and its
#          recipe none baseline); in a dashboard with a job_id variable, set to both, each
#          panel and annotation query must return series for both jobs.
# --all    all three (the default).
#
# Needs node and the tools scripts/install_deploy_tools.sh installs into deploy/tools;
# --promql needs promtool (Debian package prometheus, scripts/bootstrap.sh).
# Generated files live in a mktemp directory (under $TMPDIR) removed on exit; set
# FP8_GRAFANA_CHECK_KEEP=1 to keep it. Exit status 0 when every check passes.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
tools="$root/deploy/tools/node_modules"

mode=all
files=()
for arg in "$@"; do
  case "$arg" in
    --types) mode=types ;;
    --lint) mode=lint ;;
    --promql) mode=promql ;;
    --all) mode=all ;;
    -h | --help)
      sed -n '2,24p' "$0"
      exit 0
      ;;
    -*)
      echo "check_dashboards: unknown option $arg" >&2
      exit 2
      ;;
    *) files+=("$arg") ;;
  esac
done
if [[ ${#files[@]} -eq 0 ]]; then
  shopt -s nullglob
  files=("$root"/deploy/grafana/*.json)
  shopt -u nullglob
  if [[ ${#files[@]} -eq 0 ]]; then
    echo "check_dashboards: no dashboards in $root/deploy/grafana" >&2
    exit 1
  fi
fi

# How a path is shown: relative to the repository root when inside it.
show() {
  local p
  p=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  echo "${p#"$root"/}"
}

missing=()
command -v node >/dev/null 2>&1 || missing+=("node")
[[ -x "$tools/.bin/tsc" ]] || missing+=("deploy/tools/node_modules/.bin/tsc")
[[ -f "$tools/@grafana/schema/package.json" ]] || missing+=("deploy/tools/node_modules/@grafana/schema")
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "check_dashboards: missing ${missing[*]}: run scripts/install_deploy_tools.sh" >&2
  exit 1
fi
if [[ $mode == promql || $mode == all ]] && ! command -v promtool >/dev/null 2>&1; then
  echo "check_dashboards: missing promtool: run scripts/bootstrap.sh (Debian package prometheus)" >&2
  exit 1
fi
for f in "${files[@]}"; do
  if [[ ! -f "$f" ]]; then
    echo "check_dashboards: no such file: $f" >&2
    exit 1
  fi
done

status=0
work=$(mktemp -d "${TMPDIR:-/tmp}/fp8-grafana-check.XXXXXX") || exit 1
if [[ "${FP8_GRAFANA_CHECK_KEEP:-0}" == 1 ]]; then
  echo "check_dashboards: generated files kept in $work" >&2
else
  trap 'rm -rf "$work"' EXIT
fi

check_types() {
  # tsc resolves @grafana/schema through this link, as if the files lived in deploy/tools.
  ln -s "$tools" "$work/node_modules"
  cp "$here/dashboard_types.ts" "$work/dashboard_types.ts"
  local i=0 ts list="" f
  : >"$work/map.tsv"
  for f in "${files[@]}"; do
    ts="dashboard_$i.ts"
    # Two lines before the JSON: line L of the JSON is line L+2 of the .ts file.
    {
      echo "import type { DashboardJson } from './dashboard_types';"
      echo "export const dashboard = ("
      cat "$f"
      echo ") satisfies DashboardJson;"
    } >"$work/$ts"
    printf '%s\t%s\n' "$ts" "$(show "$f")" >>"$work/map.tsv"
    list+="${list:+, }\"$ts\""
    i=$((i + 1))
  done
  cat >"$work/tsconfig.json" <<EOF
{
  "compilerOptions": {
    "strict": true,
    "noEmit": true,
    "target": "es2022",
    "module": "esnext",
    "moduleResolution": "bundler",
    "types": [],
    "skipLibCheck": true,
    "noErrorTruncation": true
  },
  "files": [$list]
}
EOF
  local rc=0
  # --singleThreaded: quicker than the checker pool for a few files.
  (cd "$work" && "$tools/.bin/tsc" -p tsconfig.json --noEmit --strict --pretty false --singleThreaded) >"$work/tsc.out" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "check_dashboards: @grafana/schema type check failed (tsc exit $rc):"
    printf 'dashboard_types.ts\t%s\n' "tests/deploy/grafana/dashboard_types.ts" >>"$work/map.tsv"
    awk -F'\t' '
      NR == FNR { file[$1] = $2; next }
      match($0, /^[^(]+\.ts\([0-9]+,[0-9]+\)/) {
        head = substr($0, 1, RLENGTH); rest = substr($0, RLENGTH + 1)
        split(head, a, /[(,)]/)
        if (a[1] in file) {
          line = a[2]
          if (a[1] != "dashboard_types.ts") line -= 2
          printf "%s:%d:%d%s\n", file[a[1]], line, a[3], rest
          next
        }
      }
      { print }' "$work/map.tsv" "$work/tsc.out"
    return 1
  fi
  echo "check_dashboards: ${#files[@]} dashboard(s) match @grafana/schema $(node -p 'require(process.argv[1]).version' "$tools/@grafana/schema/package.json")"
}

check_lint() {
  local version
  version=$(node -p 'require(process.argv[1]).defaultDashboard.schemaVersion' "$tools/@grafana/schema") || {
    echo "check_dashboards: cannot load @grafana/schema from deploy/tools: run scripts/install_deploy_tools.sh" >&2
    return 1
  }
  local shown=() f
  for f in "${files[@]}"; do shown+=("$(show "$f")"); done
  (cd "$root" && node "$here/lint_dashboards.js" --metrics deploy/METRICS.md --schema-version "$version" "${shown[@]}")
}

check_promql() {
  local shown=() f summary
  for f in "${files[@]}"; do shown+=("$(show "$f")"); done
  summary=$(cd "$root" && node "$here/eval_queries.js" --metrics deploy/METRICS.md --out "$work/queries_test.yml" "${shown[@]}") || return 1
  if ! promtool test rules "$work/queries_test.yml" >"$work/promtool.out" 2>&1; then
    echo "check_dashboards: dashboard queries fail on synthetic deploy/METRICS.md series (promtool test rules;"
    echo "  each query is wrapped as (count(QUERY) > bool 0) or on () vector(0): got 0 means it selected nothing;"
    echo "  in a dashboard with a job_id variable as count(count by (job_id) (QUERY)), with the job variable set"
    echo "  to both synthetic jobs: got 1 means one job only, or job_id aggregated away):"
    grep -v '^\s*$' "$work/promtool.out"
    return 1
  fi
  echo "check_dashboards: ${summary#eval_queries: }: all parse and return data"
}

if [[ $mode == types || $mode == all ]]; then
  check_types || status=1
fi
if [[ $mode == lint || $mode == all ]]; then
  check_lint || status=1
fi
if [[ $mode == promql || $mode == all ]]; then
  check_promql || status=1
fi
exit $status
