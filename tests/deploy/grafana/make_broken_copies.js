#!/usr/bin/env node
// Writes deliberately broken copies of the dashboards for check_catches_errors.sh.
//
//   node make_broken_copies.js JOB_DASHBOARD.json CLUSTER_DASHBOARD.json OUTDIR
//
// For each case it writes OUTDIR/NAME.json (the broken dashboard) and OUTDIR/NAME.expect
// (a regular expression the checker's output must match, so a copy that fails for some
// other reason does not count). Case "unmodified" is a plain copy that must pass.
'use strict';
const fs = require('fs');
const path = require('path');

const [jobFile, clusterFile, outDir] = process.argv.slice(2);
if (!outDir) {
  console.error('usage: make_broken_copies.js JOB.json CLUSTER.json OUTDIR');
  process.exit(2);
}
const good = {
  job: JSON.parse(fs.readFileSync(jobFile, 'utf8')),
  cluster: JSON.parse(fs.readFileSync(clusterFile, 'utf8')),
};

function allPanels(d) {
  return d.panels.flatMap((p) => [p, ...(p.type === 'row' ? p.panels : [])]);
}
function find(d, what, pred) {
  const p = allPanels(d).find(pred);
  if (!p) throw new Error(`make_broken_copies: the dashboard "${d.title}" has no ${what}; update this case`);
  return p;
}
const firstOfType = (d, type) => find(d, `${type} panel`, (p) => p.type === type);
function targetWith(d, needle) {
  const p = find(d, `target containing ${needle}`, (q) => (q.targets ?? []).some((t) => t.expr.includes(needle)));
  return p.targets.find((t) => t.expr.includes(needle));
}
const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
function annotation(d) {
  const a = (d.annotations?.list ?? []).find((x) => typeof x.target?.expr === 'string');
  if (!a) throw new Error(`make_broken_copies: the dashboard "${d.title}" has no Prometheus annotation; update this case`);
  return a;
}
const SCOPE = 'cluster=~"$cluster", namespace=~"$namespace"';

// name: [dashboard, mutate(d) -> optional text override, expected output (regex source)]
const cases = {
  unmodified: ['job', () => {}, 'dashboard\\(s\\) OK'],

  // ---- caught by tsc against @grafana/schema
  'wrong-type-schema-version': ['job', (d) => {
    d.schemaVersion = String(d.schemaVersion);
  }, "wrong-type-schema-version\\.json:\\d+:\\d+: error TS2322: Type 'string' is not assignable to type 'number'"],
  'wrong-type-gridpos': ['job', (d) => {
    firstOfType(d, 'timeseries').gridPos.w = '12';
  }, "wrong-type-gridpos\\.json:\\d+:\\d+: error TS2322: Type 'string' is not assignable to type 'number'"],
  'unknown-top-level-property': ['job', (d) => {
    d.refreshInterval = '10s';
  }, 'unknown-top-level-property\\.json:\\d+:\\d+: error TS2353: .*refreshInterval.* does not exist in type'],
  'unknown-panel-property': ['cluster', (d) => {
    firstOfType(d, 'stat').colour = 'red';
  }, 'unknown-panel-property\\.json:\\d+:\\d+: error TS2353: .*colour'],
  'bad-timeseries-option': ['job', (d) => {
    firstOfType(d, 'timeseries').options.legend.placement = 'left';
  }, 'bad-timeseries-option\\.json:\\d+:\\d+: error TS2322: .*"left"'],
  'bad-enum-value': ['job', (d) => {
    firstOfType(d, 'timeseries').fieldConfig.defaults.color.mode = 'rainbow';
  }, 'bad-enum-value\\.json:\\d+:\\d+: error TS2322: .*"rainbow"'],
  'missing-required-stat-option': ['cluster', (d) => {
    delete firstOfType(d, 'stat').options.reduceOptions;
  }, 'missing-required-stat-option\\.json:\\d+:\\d+: error TS2741: .*reduceOptions'],
  'misspelled-target-field': ['job', (d) => {
    const t = targetWith(d, 'fp8_job_loss');
    t.exp = t.expr;
    delete t.expr;
  }, 'misspelled-target-field\\.json:\\d+:\\d+: error TS2353: .*exp'],
  'legacy-annotation-field': ['job', (d) => {
    // Grafana before the target field kept a Prometheus annotation's expr and step on it.
    annotation(d).step = '60s';
  }, 'legacy-annotation-field\\.json:\\d+:\\d+: error TS2353: .*step'],

  // ---- caught by lint_dashboards.js
  'unknown-metric': ['job', (d) => {
    const t = targetWith(d, 'fp8_job_tokens_per_second');
    t.expr = t.expr.replace('fp8_job_tokens_per_second', 'fp8_job_tokens_per_sec');
  }, 'metric fp8_job_tokens_per_sec is not in METRICS\\.md'],
  'histogram-without-suffix': ['cluster', (d) => {
    const t = targetWith(d, 'grpc_server_handling_seconds_bucket');
    t.expr = t.expr.replace('grpc_server_handling_seconds_bucket', 'grpc_server_handling_seconds');
  }, 'grpc_server_handling_seconds is a histogram'],
  'unknown-label': ['cluster', (d) => {
    const t = targetWith(d, 'device_kind=~');
    t.expr = t.expr.replace('device_kind=~', 'device=~');
  }, 'has no label device '],
  'unknown-function': ['cluster', (d) => {
    const t = targetWith(d, 'rate(');
    t.expr = t.expr.replace('rate(', 'rat(');
  }, 'unknown PromQL function rat\\(\\)'],
  'missing-job-filter': ['job', (d) => {
    const t = targetWith(d, `fp8_job_loss{${SCOPE}, job_id=~"$job_id"}`);
    t.expr = t.expr.replace(`fp8_job_loss{${SCOPE}, job_id=~"$job_id"}`, `fp8_job_loss{${SCOPE}}`);
  }, escape('fp8_job_loss is not filtered on job_id=~"$job_id"')],
  'missing-job-variable': ['job', (d) => {
    d.templating.list = d.templating.list.filter((v) => v.name !== 'job_id');
  }, 'must have a `job_id` variable'],
  'single-job-variable': ['job', (d) => {
    const v = d.templating.list.find((x) => x.name === 'job_id');
    v.multi = false;
    v.includeAll = false;
  }, 'variable job_id: must be multi-value'],
  'missing-namespace-filter': ['cluster', (d) => {
    const t = targetWith(d, `fp8_scheduler_queue_depth{${SCOPE}`);
    t.expr = t.expr.replace('namespace=~"$namespace", ', '');
  }, escape('fp8_scheduler_queue_depth is not filtered on namespace=~"$namespace"')],
  'missing-cluster-variable': ['cluster', (d) => {
    d.templating.list = d.templating.list.filter((v) => v.name !== 'cluster');
  }, 'must have a `cluster` variable'],
  'scope-variable-without-all-value': ['job', (d) => {
    // Without allValue ".*", All lists the values found: series without the label match none.
    delete d.templating.list.find((x) => x.name === 'namespace').allValue;
  }, 'variable namespace: must be a multi-value query variable with includeAll and allValue'],
  'legend-label-not-in-query': ['job', (d) => {
    // recipe comes from the join with fp8_job_info: without the join, the legend prints "recipe".
    const p = find(d, 'Training loss panel', (q) => q.title === 'Training loss');
    p.targets[0].expr = p.targets[0].expr.replace(/\n\* on \([^)]*\) group_left \([^)]*\)\nfp8_job_info\{[^}]*\}/, '');
  }, 'panel \\d+ "Training loss" target A: legendFormat names \\{\\{job_name\\}\\}, a label its query does not carry'],
  'annotation-unknown-metric': ['job', (d) => {
    const a = annotation(d);
    a.target.expr = a.target.expr.replace(/fp8_job_(state|restarts_total)\{/, 'fp8_job_$1s{');
  }, 'annotation "[^"]*": metric fp8_job_(states|restarts_totals) is not in METRICS\\.md'],
  'undefined-variable': ['cluster', (d) => {
    const t = targetWith(d, '$device_kind');
    t.expr = t.expr.replace('$device_kind', '$device_type');
  }, 'undefined variable \\$device_type'],
  'duplicate-panel-id': ['job', (d) => {
    const ps = allPanels(d).filter((p) => p.type !== 'row');
    ps[1].id = ps[0].id;
  }, 'duplicate panel id'],
  'missing-gridpos': ['cluster', (d) => {
    delete firstOfType(d, 'timeseries').gridPos;
  }, 'panel without a gridPos'],
  'overlapping-panels': ['cluster', (d) => {
    const ps = allPanels(d).filter((p) => p.type === 'timeseries');
    ps[1].gridPos = { ...ps[0].gridPos };
  }, 'overlaps panel'],
  'hard-coded-datasource': ['job', (d) => {
    firstOfType(d, 'timeseries').datasource = { type: 'prometheus', uid: 'P1809F7CD0C75ACF3' };
  }, 'hard-coded datasource uid "P1809F7CD0C75ACF3"'],
  'missing-uid': ['cluster', (d) => {
    delete d.uid;
  }, 'uid undefined must be'],
  'wrong-schema-version': ['cluster', (d) => {
    d.schemaVersion = 36;
  }, "schemaVersion 36, @grafana/schema's default is"],

  // ---- caught by eval_queries.js + promtool (syntax, and queries that select nothing)
  'promql-syntax-error': ['cluster', (d) => {
    const t = targetWith(d, 'fp8_scheduler_queue_depth');
    t.expr += ')';
  }, 'parse error: unexpected right parenthesis'],
  'label-value-typo': ['cluster', (d) => {
    const t = targetWith(d, 'state="RUNNING"');
    t.expr = t.expr.replace('state="RUNNING"', 'state="RUNNNING"');
  }, 'RUNNNING[\\s\\S]*got: \\{\\} 0'],
  'join-that-matches-nothing': ['cluster', (d) => {
    const t = targetWith(d, 'group_left (component)');
    t.expr = t.expr.replace('on (cluster, namespace, instance, job)', 'on (cluster, namespace, instance, version)');
  }, 'on \\(cluster, namespace, instance, version\\)[\\s\\S]*got: \\{\\} 0'],
  // A per-job panel that shows one job only (here the baseline instead of the selected jobs).
  'query-for-one-job': ['job', (d) => {
    const p = find(d, 'Training loss panel', (q) => q.title === 'Training loss');
    p.targets[0].expr = p.targets[0].expr.replace(`fp8_job_loss{${SCOPE}, job_id=~"$job_id"}`, `fp8_job_loss{${SCOPE}, job_id="$baseline"}`);
  }, 'panel \\d+ \\\\"Training loss\\\\" A: series for each of the 2 jobs[\\s\\S]*exp: \\{\\} 2E\\+00\\s+got: \\{\\} 1E\\+00'],

  'not-formatted': ['job', (d) => JSON.stringify(d) + '\n', 'not formatted as JSON\\.stringify'],
};

fs.mkdirSync(outDir, { recursive: true });
for (const [name, [which, mutate, expect]] of Object.entries(cases)) {
  const d = structuredClone(good[which]);
  const text = mutate(d) ?? JSON.stringify(d, null, 2) + '\n';
  fs.writeFileSync(path.join(outDir, `${name}.json`), text);
  fs.writeFileSync(path.join(outDir, `${name}.expect`), expect + '\n');
}
console.log(Object.keys(cases).join('\n'));
