#!/usr/bin/env bash
# Proves check_dashboards.sh catches errors: make_broken_copies.js writes broken copies of
# deploy/grafana/training-job.json and cluster.json (a field of the wrong type, unknown
# properties at the top level, in a panel and in an annotation, a bad panel option, a
# metric that is not in deploy/METRICS.md, a query without the job_id or namespace filter,
# a single-value job variable, a namespace variable whose All does not match series
# without the label, a duplicate panel id, a PromQL syntax error, a label value typo, a
# per-job query that returns one job only, ...) into a temporary directory; the checker
# (all stages) must fail on each one with the expected message, and pass on an unmodified
# copy.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)

if ! command -v node >/dev/null 2>&1 || [[ ! -x "$root/deploy/tools/node_modules/.bin/tsc" ]]; then
  echo "check_catches_errors: deploy tools missing: run scripts/install_deploy_tools.sh" >&2
  exit 1
fi
if ! command -v promtool >/dev/null 2>&1; then
  echo "check_catches_errors: missing promtool: run scripts/bootstrap.sh (Debian package prometheus)" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fp8-grafana-broken.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

list=$(node "$here/make_broken_copies.js" "$root/deploy/grafana/training-job.json" \
  "$root/deploy/grafana/cluster.json" "$work") || exit 1
mapfile -t cases <<<"$list"

# Run the checker on every copy, $(nproc) at a time; judge the results in order below.
# shellcheck disable=SC2016 # $1..$3 are the inner bash's arguments
printf '%s\n' "${cases[@]}" | xargs -P "$(nproc 2>/dev/null || echo 2)" -I{} \
  bash -c 'bash "$1/check_dashboards.sh" "$2/$3.json" >"$2/$3.out" 2>&1; echo $? >"$2/$3.rc"' _ "$here" "$work" {}

# Judge: "unmodified" must pass; every other copy must fail, with output matching its
# .expect regular expression (so a copy failing for an unrelated reason does not count).
node - "$work" "${cases[@]}" <<'EOF_JS'
const fs = require('fs');
const [work, ...names] = process.argv.slice(2);
let failures = 0;
if (!names.includes('unmodified') || names.length < 2) {
  console.log(`check_catches_errors: make_broken_copies.js made no cases (${names.join(' ')})`);
  process.exit(1);
}
for (const name of names) {
  const read = (ext) => { try { return fs.readFileSync(`${work}/${name}.${ext}`, 'utf8'); } catch { return null; } };
  const rc = (read('rc') ?? 'missing').trim();
  const output = read('out') ?? '';
  const expect = read('expect').trim();
  const matched = new RegExp(expect).test(output);
  const pass = name === 'unmodified';
  if ((pass ? rc === '0' : rc !== '0' && rc !== 'missing') && matched) {
    console.log(`ok   ${name}`);
    continue;
  }
  failures++;
  console.log(`FAIL ${name}: ${pass ? 'should pass' : `should fail with /${expect}/`}, checker exit ${rc}, output:`);
  console.log(output.replace(/^/gm, '       '));
}
if (failures) {
  console.log(`check_catches_errors: ${failures} of ${names.length} case(s) wrong`);
  process.exit(1);
}
console.log(`check_catches_errors: all ${names.length} case(s) behave`);
EOF_JS
