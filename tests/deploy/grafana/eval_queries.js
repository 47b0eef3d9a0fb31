#!/usr/bin/env node
// Writes a `promtool test rules` file that evaluates every dashboard query against
// synthetic series shaped like deploy/METRICS.md, and expects each to return data.
//
//   node eval_queries.js --metrics deploy/METRICS.md --out TEST.yml FILE.json...
//
// The series: every metric in METRICS.md with every combination of the label values in
// LABEL_VALUES below (the values METRICS.md names), scraped from a coordinator
// (sections "Coordinator: ...") and/or two workers ("Worker", "Both daemons") with the
// target labels job and instance (no cluster or namespace label, as on the local stack).
// There are two jobs, an fp8 one and its recipe `none` baseline: a series with a job_id
// takes that job's own name, recipe, user, ... from JOBS (one fp8_job_info per job), and
// every job has every per-job series (per-layer casts included, so that the check below
// is about the queries, not about which recipe casts). fp8_job_state changes over time
// (STATE_TIMELINE); other gauges are constant, counters and histogram buckets grow.
//
// Dashboard variables are replaced the way Grafana would: a multi-value variable by all
// the synthetic values of its label as a regex alternation ("(job-7|job-8)"), or by its
// custom All value (allValue, ".*") when it has one; a single-value one by the first
// value; $__rate_interval by 1m, $__interval by 15s. A query becomes
//   (count(<query>) > bool 0) or on () vector(0)     expected: {} 1
// and, in a dashboard with a job_id variable (every panel of it shows each selected job),
//   count(count by (job_id) (<query>)) or on () vector(0)   expected: {} 2
// so promtool fails on a syntax error, on a query that selects nothing (a wrong label
// value, a join whose labels do not match, ...), and on a per-job query that returns
// series for one job only or aggregates job_id away, printing the query with a first
// comment line naming the dashboard, panel and refId. Annotation queries (target.expr of
// a Prometheus annotation) mark changes, so they are evaluated over the whole synthetic
// range, as last_over_time((<query>)[14m:15s]), and must fire for each job.
'use strict';
const fs = require('fs');
const path = require('path');

const args = process.argv.slice(2);
let metricsPath = null;
let out = null;
const files = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--metrics') metricsPath = args[++i];
  else if (args[i] === '--out') out = args[++i];
  else files.push(args[i]);
}
if (!metricsPath || !out || files.length === 0) {
  console.error('usage: eval_queries.js --metrics METRICS.md --out TEST.yml FILE.json...');
  process.exit(2);
}

// Values of each label (from METRICS.md's descriptions). `component` and `worker_id`
// come from the scrape target instead.
const LABEL_VALUES = {
  job_id: ['job-7', 'job-8'],
  job_name: ['llama-tiny-fp8', 'llama-tiny-bf16'],
  user: ['alice'],
  recipe: ['tensorwise', 'none'],
  device_kind: ['cpu', 'cuda'],
  world_size: ['2'],
  labels: ['purpose=smoke-test'],
  reason: ['workers', 'behind', 'backoff'],
  state: null, // per metric, below
  part: ['compute', 'exposed_communication', 'data'],
  collective: ['all_gather', 'reduce_scatter', 'all_reduce'],
  dtype: ['fp8', 'fp32'],
  kind: ['non_finite_loss', 'amax_jump', 'saturation'],
  layer: ['layers.0.attention.wq', 'layers.1.feed_forward.w2'],
  tensor: ['input', 'weight', 'grad_output'],
  version: ['0.1.0'],
  rank: ['0', '1'],
  grpc_type: ['unary', 'server_stream'],
  grpc_service: ['fp8.v1.JobService', 'fp8.v1.WorkerService'],
  grpc_method: ['Submit', 'Heartbeat'],
  grpc_code: ['OK', 'INVALID_ARGUMENT', 'UNAVAILABLE'],
  family: ['fp8_cast_amax'],
  // Two slots of one worker daemon (--device cuda:0,1): a join of worker series that
  // leaves device out matches many-to-many and fails.
  device: ['cuda:0', 'cuda:1'],
  outcome: ['success', 'failure', 'signal', 'stopped'],
};
const STATE_VALUES = {
  fp8_job_state: ['QUEUED', 'RUNNING', 'RESTARTING', 'SUCCEEDED', 'FAILED', 'CANCELLED'],
  fp8_scheduler_jobs: ['QUEUED', 'RUNNING', 'RESTARTING'],
  fp8_jobs_finished_total: ['SUCCEEDED', 'FAILED', 'CANCELLED'],
  fp8_workers: ['unconfirmed', 'idle', 'busy'],
};
const TARGETS = {
  coordinator: [{ job: 'fp8', instance: 'fp8-coordinator:9400', component: 'coordinator' }],
  worker: [
    { job: 'fp8', instance: 'fp8-worker-0:9401', component: 'worker', worker_id: 'worker-0' },
    { job: 'fp8', instance: 'fp8-worker-1:9401', component: 'worker', worker_id: 'worker-1' },
  ],
};
// The jobs: an fp8 job and its bf16 baseline (recipe none). A series with a job_id label
// takes these values for the job's other labels.
const JOBS = {
  'job-7': { job_name: 'llama-tiny-fp8', recipe: 'tensorwise', user: 'alice', device_kind: 'cuda', world_size: '2' },
  'job-8': { job_name: 'llama-tiny-bf16', recipe: 'none', user: 'alice', device_kind: 'cuda', world_size: '2' },
};
// Each job's state from the given minute on (fp8_job_state is 1 for it, 0 for the others):
// job-7 restarts once, job-8 finishes, so annotations on state changes have some to mark.
const STATE_TIMELINE = {
  'job-7': [[0, 'QUEUED'], [2, 'RUNNING'], [6, 'RESTARTING'], [7, 'RUNNING']],
  'job-8': [[0, 'QUEUED'], [1, 'RUNNING'], [10, 'SUCCEEDED']],
};
const STEPS = 60; // samples, 15s apart: 15 minutes
const SAMPLE_SECONDS = 15;
function stateAt(jobId, minute) {
  let state = null;
  for (const [from, s] of STATE_TIMELINE[jobId]) if (minute >= from) state = s;
  return state;
}
// Gauges are 1 unless listed here (labels -> the STEPS + 1 values, or one constant value).
const GAUGE_VALUES = {
  fp8_job_state: (l) =>
    Array.from({ length: STEPS + 1 }, (_, i) => (stateAt(l.job_id, (i * SAMPLE_SECONDS) / 60) === l.state ? 1 : 0)),
};
const BUCKETS = ['0.005', '0.05', '0.5', '5', '60', '+Inf'];
const EVAL_TIME = '14m';
// Annotation queries are evaluated over this range before EVAL_TIME, at this step.
const ANNOTATION_RANGE = '14m';
const ANNOTATION_STEP = '15s';

// ---------------------------------------------------------------------------- series

function parseMetrics(text) {
  const metrics = [];
  let section = '';
  for (const line of text.split('\n')) {
    const h = /^##\s+(.*)/.exec(line);
    if (h) section = h[1];
    const m = /^\|\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\s*\|([^|]*)\|([^|]*)\|/.exec(line);
    if (!m) continue;
    const type = m[2].trim().split(/\s+/)[0];
    const labels = m[3].split(',').map((s) => s.trim()).filter(Boolean);
    const targets = /^Both/i.test(section)
      ? [...TARGETS.coordinator, ...TARGETS.worker]
      : /^Worker/i.test(section)
        ? TARGETS.worker
        : TARGETS.coordinator;
    metrics.push({ name: m[1], type, labels, targets });
  }
  return metrics;
}

function product(lists) {
  return lists.reduce((acc, l) => acc.flatMap((a) => l.map((v) => [...a, v])), [[]]);
}

function seriesOf(metric) {
  const out = [];
  for (const target of metric.targets) {
    const own = metric.labels.filter((l) => !(l in target));
    const values = own.map((l) => {
      const v = l === 'state' ? STATE_VALUES[metric.name] : LABEL_VALUES[l];
      if (!v) throw new Error(`eval_queries: no synthetic values for label ${l} of ${metric.name}: add them to LABEL_VALUES`);
      return v;
    });
    for (const combo of product(values)) {
      const labels = { job: target.job, instance: target.instance };
      own.forEach((l, i) => (labels[l] = combo[i]));
      for (const l of metric.labels) if (l in target) labels[l] = target[l];
      // A job's own name, recipe, ...: one fp8_job_info per job.
      const job = JOBS[labels.job_id];
      if (job && Object.keys(job).some((l) => l in labels && labels[l] !== job[l])) continue;
      out.push(labels);
    }
  }
  return out;
}

const sel = (name, labels) =>
  `${name}{${Object.entries(labels).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(',')}}`;

function inputSeries(metrics) {
  const lines = [];
  for (const m of metrics) {
    for (const labels of seriesOf(m)) {
      if (m.type === 'histogram') {
        BUCKETS.forEach((le, i) => lines.push([sel(`${m.name}_bucket`, { ...labels, le }), `0+${i + 1}x${STEPS}`]));
        lines.push([sel(`${m.name}_count`, labels), `0+${BUCKETS.length}x${STEPS}`]);
        lines.push([sel(`${m.name}_sum`, labels), `0+3x${STEPS}`]);
      } else if (m.type === 'counter') {
        lines.push([sel(m.name, labels), `0+2x${STEPS}`]);
      } else {
        const v = GAUGE_VALUES[m.name] ? GAUGE_VALUES[m.name](labels) : 1;
        lines.push([sel(m.name, labels), Array.isArray(v) ? v.join(' ') : `${v}+0x${STEPS}`]);
      }
    }
  }
  return lines;
}

// ---------------------------------------------------------------------------- queries

const metrics = parseMetrics(fs.readFileSync(metricsPath, 'utf8'));
const series = inputSeries(metrics);

for (const [id, job] of Object.entries(JOBS)) {
  for (const [l, v] of Object.entries(job)) {
    if (!LABEL_VALUES[l]?.includes(v)) throw new Error(`eval_queries: ${id}'s ${l} ${v} is not in LABEL_VALUES.${l}`);
  }
}

// The synthetic values of a label (for a variable's value).
function valuesOfLabel(label) {
  if (label === 'state') return Object.values(STATE_VALUES).flat();
  if (LABEL_VALUES[label]) return LABEL_VALUES[label];
  const fromTargets = [...TARGETS.coordinator, ...TARGETS.worker].map((t) => t[label]).filter(Boolean);
  return fromTargets;
}

function substitute(expr, vars) {
  return expr
    .replace(/\$__rate_interval\b|\$\{__rate_interval\}/g, '1m')
    .replace(/\$__interval\b|\$\{__interval\}/g, '15s')
    .replace(/\$__range\b|\$\{__range\}/g, '10m')
    .replace(/\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g, (all, name) => (name in vars ? vars[name] : all));
}

// A variable's value as Grafana writes it into a Prometheus query.
function variableValue(v, label) {
  const values = valuesOfLabel(label);
  if (v.multi || v.includeAll) {
    if (v.includeAll && v.allValue) return v.allValue;
    const escaped = values.map((x) => x.replace(/[\\^$*+?.()|{}[\]]/g, '\\\\$&'));
    return escaped.length ? `(${escaped.join('|')})` : '';
  }
  return values[0] ?? '';
}

const jobCount = Object.keys(JOBS).length;
// [name, expr, kind]: kind 'any' (returns data) or 'jobs' (returns each job).
const tests = [];
for (const file of files) {
  const d = JSON.parse(fs.readFileSync(file, 'utf8'));
  const base = path.basename(file);
  const vars = {};
  const list = d.templating?.list ?? [];
  const perJob = list.some((v) => v.name === 'job_id');
  for (const v of list) {
    if (v.type !== 'query') continue;
    const q = typeof v.query === 'string' ? v.query : v.query?.query ?? '';
    const lv = /label_values\(\s*(.*?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)/.exec(q);
    if (!lv) continue;
    tests.push([`${base} variable ${v.name}`, substitute(lv[1], vars), 'any']);
    vars[v.name] = variableValue(v, lv[2]);
  }
  const panels = (d.panels ?? []).flatMap((p) => [p, ...(p.type === 'row' ? p.panels ?? [] : [])]);
  for (const p of panels) {
    for (const t of p.targets ?? []) {
      if (typeof t.expr !== 'string') continue;
      tests.push([`${base} panel ${p.id} "${p.title}" ${t.refId}`, substitute(t.expr, vars), perJob ? 'jobs' : 'any']);
    }
  }
  for (const a of d.annotations?.list ?? []) {
    if (typeof a.target?.expr !== 'string') continue;
    const expr = `last_over_time((\n${substitute(a.target.expr, vars)}\n)[${ANNOTATION_RANGE}:${ANNOTATION_STEP}])`;
    tests.push([`${base} annotation "${a.name}"`, expr, perJob ? 'jobs' : 'any']);
  }
}
// The values of the job variable in the queries above, for the summary.
const jobsShown = variableValue({ multi: true }, 'job_id');

// JSON is YAML: promtool reads this file as its test file.
const doc = {
  rule_files: [],
  evaluation_interval: '1m',
  tests: [
    {
      interval: '15s',
      input_series: series.map(([s, values]) => ({ series: s, values })),
      promql_expr_test: tests.map(([name, expr, kind]) => ({
        expr:
          kind === 'jobs'
            ? `# ${name.replace(/\n/g, ' ')}: series for each of the ${jobCount} jobs\ncount(count by (job_id) (\n${expr}\n)) or on () vector(0)`
            : `# ${name.replace(/\n/g, ' ')}\n(count(\n${expr}\n) > bool 0) or on () vector(0)`,
        eval_time: EVAL_TIME,
        exp_samples: [{ labels: '{}', value: kind === 'jobs' ? jobCount : 1 }],
      })),
    },
  ],
};
fs.writeFileSync(out, JSON.stringify(doc, null, 1) + '\n');
const perJobCount = tests.filter((t) => t[2] === 'jobs').length;
console.log(
  `eval_queries: ${tests.length} queries (${perJobCount} of them per job, with job_id=~"${jobsShown}") over ${series.length} synthetic series`,
);
