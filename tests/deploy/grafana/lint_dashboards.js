#!/usr/bin/env node
// Checks of deploy/grafana/*.json that the @grafana/schema types cannot express:
//   * the file is JSON formatted with 2-space indentation (JSON.stringify(d, null, 2));
//   * uid set (Grafana's limit: 1-40 of [A-Za-z0-9_-]) and unique across the dashboards;
//     schemaVersion equal to @grafana/schema's default; editable, tags ["fp8"], refresh
//     "10s", time now-1h..now;
//   * a `datasource` variable of type datasource/prometheus, and no hard-coded data source
//     uid anywhere (panels, targets, variables use "${datasource}");
//   * every panel (rows and panels nested in rows included) has a unique numeric id and a
//     gridPos inside the 24-column grid, and no two panels overlap;
//   * every target (and every Prometheus annotation's target) has an expr; every metric
//     its expr selects is listed in deploy/METRICS.md (histograms only through their
//     _bucket/_sum/_count series), every label matcher names one of that metric's labels
//     (or a scrape target label), every function is a PromQL function, every $variable is
//     defined;
//   * each dashboard has the variables REQUIRED_VARIABLES names; `cluster` and `namespace`
//     are multi-value query variables whose All value is ".*" (so they also match series
//     without the label, as on the local stack), and a dashboard with them filters every
//     selector (panels, annotations, and the variables defined after them) on
//     cluster=~"$cluster" and namespace=~"$namespace";
//   * `job_id` is a multi-value label_values(fp8_job_info{...}, job_id) variable, and a
//     dashboard with it filters every selector of its panels and annotations on
//     job_id=~"$job_id" (or job_id="$baseline", the one job a `baseline` variable picks);
//   * every {{label}} of a legend (and of an annotation's title and text, and its tagKeys)
//     is a label its query can carry: one of its metrics' labels, a scrape target label or
//     a label group_left/group_right copies (Grafana shows the label's name where a series
//     lacks it);
//   * units are Grafana unit ids from a known list.
//
// Usage: node lint_dashboards.js --metrics deploy/METRICS.md [--schema-version N] FILE...
// Prints "FILE: message" per problem and exits 1 if there is any.
'use strict';
const fs = require('fs');
const path = require('path');

// ---------------------------------------------------------------------------- options

const args = process.argv.slice(2);
let metricsPath = null;
let schemaVersion = null;
const files = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--metrics') metricsPath = args[++i];
  else if (args[i] === '--schema-version') schemaVersion = Number(args[++i]);
  else files.push(args[i]);
}
if (!metricsPath || files.length === 0) {
  console.error('usage: lint_dashboards.js --metrics METRICS.md [--schema-version N] FILE...');
  process.exit(2);
}

// Dashboards (by uid) that must declare these variables.
const REQUIRED_VARIABLES = {
  'fp8-training-job': ['datasource', 'cluster', 'namespace', 'job_name', 'job_id', 'baseline'],
  'fp8-cluster': ['datasource', 'cluster', 'namespace'],
};
// Labels Prometheus (or the ServiceMonitor) attaches to every scraped series; `cluster` is
// the external (or relabelled) label of a data source that reads several clusters.
const TARGET_LABELS = new Set(['job', 'instance', 'namespace', 'pod', 'container', 'service', 'endpoint', 'node', 'cluster']);
// Variables that select where series come from: query variables, multi-value, whose All
// value ".*" also matches a series without the label.
const SCOPE_VARIABLES = ['cluster', 'namespace'];
// Grafana unit ids the dashboards may use (valueFormats/categories.ts in Grafana). Not
// "wps": in Grafana that is writes/s, not the tokens/s this project calls wps.
const UNITS = new Set([
  'none', 'short', 'sci', 'percent', 'percentunit', 'locale',
  's', 'ms', 'us', 'ns', 'm', 'h', 'd', 'dtdurations', 'dtdhms',
  'bytes', 'decbytes', 'bits', 'Bps', 'binBps', 'bps', 'KBs', 'MBs', 'GBs',
  'reqps', 'ops', 'rps', 'iops', 'cps',
  'dateTimeAsIso', 'dateTimeFromNow',
]);
const GRAFANA_VARIABLES = new Set([
  '__interval', '__interval_ms', '__rate_interval', '__rate_interval_ms', '__range', '__range_s', '__range_ms',
  '__from', '__to', '__dashboard', '__org', '__user', '__timezone', '__name',
]);
// Data source references that are not a Prometheus instance.
const BUILTIN_DATASOURCE_UIDS = new Set(['-- Grafana --', 'grafana', '-- Dashboard --', '-- Mixed --']);

const PROMQL_FUNCTIONS = new Set([
  'abs', 'absent', 'absent_over_time', 'acos', 'acosh', 'asin', 'asinh', 'atan', 'atanh', 'avg_over_time', 'ceil',
  'changes', 'clamp', 'clamp_max', 'clamp_min', 'cos', 'cosh', 'count_over_time', 'day_of_month', 'day_of_week',
  'day_of_year', 'days_in_month', 'deg', 'delta', 'deriv', 'exp', 'floor', 'histogram_avg', 'histogram_count',
  'histogram_fraction', 'histogram_quantile', 'histogram_stddev', 'histogram_stdvar', 'histogram_sum',
  'holt_winters', 'double_exponential_smoothing', 'hour', 'idelta', 'increase', 'irate', 'label_join',
  'label_replace', 'last_over_time', 'ln', 'log10', 'log2', 'mad_over_time', 'max_over_time', 'min_over_time',
  'minute', 'month', 'pi', 'predict_linear', 'present_over_time', 'quantile_over_time', 'rad', 'rate', 'resets',
  'round', 'scalar', 'sgn', 'sin', 'sinh', 'sort', 'sort_by_label', 'sort_by_label_desc', 'sort_desc', 'sqrt',
  'stddev_over_time', 'stdvar_over_time', 'sum_over_time', 'tan', 'tanh', 'time', 'timestamp', 'vector', 'year',
]);
const PROMQL_AGGREGATIONS = new Set([
  'sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count', 'count_values', 'bottomk', 'topk', 'quantile',
  'limitk', 'limit_ratio',
]);
// Keywords followed by a parenthesised label list.
const LABEL_LIST_KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right']);
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'atan2', 'inf', 'nan', 'start', 'end']);

// ---------------------------------------------------------------------------- METRICS.md

// name -> { type, labels: Set }
function parseMetrics(text) {
  const metrics = new Map();
  for (const line of text.split('\n')) {
    const m = /^\|\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\s*\|([^|]*)\|([^|]*)\|/.exec(line);
    if (!m) continue;
    const type = m[2].trim().split(/\s+/)[0];
    const labels = new Set(m[3].split(',').map((s) => s.trim()).filter(Boolean));
    metrics.set(m[1], { type, labels });
  }
  return metrics;
}

const metrics = parseMetrics(fs.readFileSync(metricsPath, 'utf8'));
if (metrics.size === 0) {
  console.error(`${metricsPath}: no metric tables found`);
  process.exit(2);
}

// The series a selector may name: every metric, and a histogram's _bucket (with `le`),
// _sum and _count. Returns { labels } or an error string.
function lookupSeries(name) {
  const direct = metrics.get(name);
  if (direct) {
    if (direct.type === 'histogram') {
      return `${name} is a histogram: select ${name}_bucket, ${name}_sum or ${name}_count`;
    }
    return { labels: direct.labels };
  }
  const h = /^(.*)_(bucket|sum|count)$/.exec(name);
  if (h && metrics.get(h[1])?.type === 'histogram') {
    const labels = new Set(metrics.get(h[1]).labels);
    if (h[2] === 'bucket') labels.add('le');
    return { labels };
  }
  return `metric ${name} is not in ${path.basename(metricsPath)}`;
}

// ---------------------------------------------------------------------------- PromQL

// A small PromQL scanner: enough to find metric selectors, their label matchers,
// function names, Grafana variables and the labels group_left/group_right copy. Returns
// { selectors, functions, variables, joined, errors }.
function scanPromQL(expr) {
  const out = { selectors: [], functions: [], variables: [], joined: [], errors: [] };
  for (const m of expr.matchAll(/\$\{?([A-Za-z_][A-Za-z0-9_]*)/g)) out.variables.push(m[1]);
  let i = 0;
  const n = expr.length;
  const skipSpace = () => {
    while (i < n && /\s/.test(expr[i])) i++;
  };
  const readString = () => {
    const q = expr[i++];
    let s = '';
    while (i < n && expr[i] !== q) {
      if (expr[i] === '\\') s += expr[i++];
      s += expr[i++];
    }
    if (i >= n) out.errors.push('unterminated string');
    i++;
    return s;
  };
  const readMatchers = () => {
    // at '{'
    i++;
    const matchers = [];
    for (;;) {
      skipSpace();
      if (expr[i] === '}') {
        i++;
        return matchers;
      }
      const m = /^([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*/.exec(expr.slice(i));
      if (!m) {
        out.errors.push(`cannot parse label matcher at "${expr.slice(i, i + 20)}"`);
        const close = expr.indexOf('}', i);
        i = close < 0 ? n : close + 1;
        return matchers;
      }
      i += m[0].length;
      if (expr[i] !== '"' && expr[i] !== "'" && expr[i] !== '`') {
        out.errors.push(`label matcher ${m[1]}${m[2]} needs a quoted value`);
        return matchers;
      }
      matchers.push({ label: m[1], op: m[2], value: readString() });
      skipSpace();
      if (expr[i] === ',') i++;
    }
  };
  while (i < n) {
    const c = expr[i];
    if (/\s/.test(c)) {
      i++;
    } else if (c === '"' || c === "'" || c === '`') {
      readString();
    } else if (c === '[') {
      const close = expr.indexOf(']', i);
      i = close < 0 ? n : close + 1;
    } else if (c === '{') {
      out.errors.push('selector without a metric name');
      readMatchers();
    } else if (c === '#') {
      while (i < n && expr[i] !== '\n') i++;
    } else if (/[A-Za-z_:]/.test(c)) {
      const m = /^[A-Za-z_:][A-Za-z0-9_:]*/.exec(expr.slice(i));
      const word = m[0];
      i += word.length;
      const save = i;
      skipSpace();
      const next = expr[i];
      if (LABEL_LIST_KEYWORDS.has(word)) {
        if (next === '(') {
          const close = expr.indexOf(')', i);
          if (word === 'group_left' || word === 'group_right') {
            for (const l of expr.slice(i + 1, close < 0 ? n : close).split(',')) if (l.trim()) out.joined.push(l.trim());
          }
          i = close < 0 ? n : close + 1;
        }
      } else if (PROMQL_AGGREGATIONS.has(word) || KEYWORDS.has(word)) {
        // aggregation, operator keyword
      } else if (next === '(') {
        out.functions.push(word);
      } else if (word.startsWith('__')) {
        out.errors.push(`unexpected ${word}`);
      } else {
        i = save;
        skipSpace();
        const matchers = expr[i] === '{' ? readMatchers() : [];
        out.selectors.push({ metric: word, matchers });
      }
    } else if (c === '$') {
      // Grafana variable outside a string or range: skip its name.
      i++;
      if (expr[i] === '{') {
        const close = expr.indexOf('}', i);
        i = close < 0 ? n : close + 1;
      } else {
        while (i < n && /[A-Za-z0-9_]/.test(expr[i])) i++;
      }
    } else if (/[0-9.]/.test(c)) {
      const m = /^[0-9.]+(e[+-]?[0-9]+)?([a-z]+)?/i.exec(expr.slice(i));
      i += m ? m[0].length : 1;
    } else {
      i++;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------- checks

let problems = 0;
function report(file, where, msg) {
  problems++;
  console.log(`${file}: ${where ? `${where}: ` : ''}${msg}`);
}

function checkDatasourceRef(file, where, ds) {
  if (ds === undefined || ds === null) return;
  if (typeof ds === 'string') {
    if (ds !== '${datasource}') report(file, where, `datasource "${ds}" must be {"type": "prometheus", "uid": "\${datasource}"}`);
    return;
  }
  if (BUILTIN_DATASOURCE_UIDS.has(ds.uid)) return;
  if (ds.uid !== '${datasource}') {
    report(file, where, `hard-coded datasource uid ${JSON.stringify(ds.uid)}: use "\${datasource}"`);
  }
  if (ds.type !== undefined && ds.type !== 'prometheus') {
    report(file, where, `datasource type ${JSON.stringify(ds.type)}: the dashboards query Prometheus`);
  }
}

function panelName(p) {
  return `panel ${p.id ?? '?'} "${p.title ?? ''}"`;
}

function flattenPanels(panels) {
  const all = [];
  for (const p of panels ?? []) {
    all.push(p);
    if (p.type === 'row') for (const q of p.panels ?? []) all.push(q);
  }
  return all;
}

function checkGrid(file, panels) {
  const ids = new Map();
  for (const p of flattenPanels(panels)) {
    const name = panelName(p);
    if (!Number.isInteger(p.id)) report(file, name, 'panel without an integer id');
    else if (ids.has(p.id)) report(file, name, `duplicate panel id ${p.id} (also "${ids.get(p.id).title}")`);
    else ids.set(p.id, p);
    const g = p.gridPos;
    if (!g || typeof g !== 'object') {
      report(file, name, 'panel without a gridPos');
      continue;
    }
    for (const k of ['h', 'w', 'x', 'y']) {
      if (!Number.isInteger(g[k]) || g[k] < 0) report(file, name, `gridPos.${k} must be a non-negative integer`);
    }
    if (g.w < 1 || g.h < 1) report(file, name, 'gridPos with zero width or height');
    if (g.x + g.w > 24) report(file, name, `gridPos x + w = ${g.x + g.w} is wider than the 24-column grid`);
    if (p.type === 'row' && (g.w !== 24 || g.h !== 1 || g.x !== 0)) report(file, name, 'a row must have gridPos w 24, h 1, x 0');
  }
  // Overlaps among the panels laid out on the dashboard (collapsed rows keep theirs hidden).
  const laid = (panels ?? []).filter((p) => p.gridPos);
  for (let a = 0; a < laid.length; a++) {
    for (let b = a + 1; b < laid.length; b++) {
      const p = laid[a].gridPos;
      const q = laid[b].gridPos;
      if (p.x < q.x + q.w && q.x < p.x + p.w && p.y < q.y + q.h && q.y < p.y + p.h) {
        report(file, panelName(laid[b]), `overlaps ${panelName(laid[a])}`);
      }
    }
  }
}

// The matchers every selector must carry, given the dashboard's variables: a list of
// { label, accept: [{ op, value }], text } (one of accept must be present).
function requiredFilters(names, withJob) {
  const filters = SCOPE_VARIABLES.filter((n) => names.has(n)).map((n) => ({
    label: n,
    accept: [{ op: '=~', value: `$${n}` }],
    text: `${n}=~"$${n}"`,
  }));
  if (withJob && names.has('job_id')) {
    const accept = [{ op: '=~', value: '$job_id' }];
    if (names.has('baseline')) accept.push({ op: '=', value: '$baseline' });
    filters.push({ label: 'job_id', accept, text: 'job_id=~"$job_id"' });
  }
  return filters;
}

function checkVariables(file, d) {
  const list = d.templating?.list ?? [];
  const names = new Set();
  for (const v of list) {
    const where = `variable ${v.name}`;
    if (names.has(v.name)) report(file, where, 'defined twice');
    names.add(v.name);
    checkDatasourceRef(file, where, v.datasource);
    if (v.type === 'datasource' && v.query !== 'prometheus') report(file, where, 'a datasource variable must have query "prometheus"');
    if (v.type === 'query') {
      const q = typeof v.query === 'string' ? v.query : v.query?.query;
      if (typeof q !== 'string') {
        report(file, where, 'query variable without a query');
      } else {
        const lv = /^\s*label_values\(\s*(.*?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$/.exec(q);
        if (!lv) report(file, where, `query ${JSON.stringify(q)}: expected label_values(selector, label)`);
        // A variable filters on the scope variables defined before it.
        else checkExpr(file, where, lv[1], names, requiredFilters(new Set([...names].filter((n) => n !== v.name)), false), lv[2]);
      }
      if (v.datasource?.uid !== '${datasource}') report(file, where, 'a query variable must use the ${datasource} variable');
    }
  }
  const ds = list.find((v) => v.name === 'datasource');
  if (!ds || ds.type !== 'datasource') report(file, 'templating', 'no `datasource` variable of type datasource');
  for (const name of REQUIRED_VARIABLES[d.uid] ?? []) {
    if (!names.has(name)) report(file, 'templating', `dashboard ${d.uid} must have a \`${name}\` variable`);
  }
  if (names.has('job_id')) {
    const v = list.find((x) => x.name === 'job_id');
    const q = typeof v.query === 'string' ? v.query : v.query?.query;
    if (v.type !== 'query' || !/^\s*label_values\(\s*fp8_job_info\s*(\{.*\})?\s*,\s*job_id\s*\)\s*$/.test(q ?? '')) {
      report(file, 'variable job_id', 'must be a query variable label_values(fp8_job_info{...}, job_id)');
    }
    if (v.multi !== true) report(file, 'variable job_id', 'must be multi-value: the dashboard compares several jobs');
  }
  if (names.has('baseline')) {
    const v = list.find((x) => x.name === 'baseline');
    if (v.type !== 'query' || v.multi || v.includeAll) report(file, 'variable baseline', 'must be a query variable selecting one job (multi and includeAll off)');
  }
  for (const n of SCOPE_VARIABLES) {
    const v = list.find((x) => x.name === n);
    if (!v) continue;
    if (v.type !== 'query' || v.multi !== true || v.includeAll !== true || v.allValue !== '.*') {
      report(file, `variable ${n}`, 'must be a multi-value query variable with includeAll and allValue ".*" (so All matches series without the label)');
    }
  }
  return names;
}

// The labels a query's series can carry: its metrics' labels, the scrape target labels and
// the labels a join copies (an upper bound: aggregations may drop some).
function labelsOf(expr) {
  const s = scanPromQL(expr);
  const labels = new Set([...TARGET_LABELS, ...s.joined]);
  for (const sel of s.selectors) {
    const series = lookupSeries(sel.metric);
    if (typeof series !== 'string') for (const l of series.labels) labels.add(l);
  }
  return labels;
}

// Checks that every {{label}} of a legend (or annotation title) is a label the query can
// carry: Grafana prints the label's name where a series lacks it.
function checkLegend(file, where, format, expr, field) {
  if (typeof format !== 'string') return;
  const labels = labelsOf(expr);
  for (const m of format.matchAll(/\{\{\s*(.+?)\s*\}\}/g)) {
    if (!labels.has(m[1])) report(file, where, `${field} names {{${m[1]}}}, a label its query does not carry`);
  }
}

// Checks one PromQL expression. filters: the matchers every selector must carry
// (requiredFilters). valuesOf: the label a label_values() query reads (one of the
// metric's labels or a scrape target label).
function checkExpr(file, where, expr, variables, filters, valuesOf) {
  const s = scanPromQL(expr);
  for (const e of s.errors) report(file, where, `${e} in ${JSON.stringify(expr)}`);
  for (const f of s.functions) if (!PROMQL_FUNCTIONS.has(f)) report(file, where, `unknown PromQL function ${f}()`);
  for (const v of s.variables) {
    if (!variables.has(v) && !GRAFANA_VARIABLES.has(v)) report(file, where, `undefined variable $${v}`);
  }
  if (s.selectors.length === 0 && !/^\s*(time\(\)|vector\(|[0-9])/.test(expr)) report(file, where, `no metric in ${JSON.stringify(expr)}`);
  for (const sel of s.selectors) {
    const series = lookupSeries(sel.metric);
    if (typeof series === 'string') {
      report(file, where, series);
      continue;
    }
    for (const m of sel.matchers) {
      if (!series.labels.has(m.label) && !TARGET_LABELS.has(m.label)) {
        report(file, where, `${sel.metric} has no label ${m.label} (labels: ${[...series.labels].join(', ') || 'none'})`);
      }
    }
    if (valuesOf && !series.labels.has(valuesOf) && !TARGET_LABELS.has(valuesOf)) report(file, where, `${sel.metric} has no label ${valuesOf}`);
    for (const f of filters) {
      if (!sel.matchers.some((m) => m.label === f.label && f.accept.some((a) => a.op === m.op && a.value === m.value))) {
        report(file, where, `${sel.metric} is not filtered on ${f.text}`);
      }
    }
  }
}

function checkPanels(file, d, variables) {
  const filters = requiredFilters(variables, true);
  for (const p of flattenPanels(d.panels)) {
    const name = panelName(p);
    if (!p.title) report(file, name, 'panel without a title');
    checkDatasourceRef(file, name, p.datasource);
    if (p.type === 'row') continue;
    if (p.datasource?.uid !== '${datasource}') report(file, name, 'panel datasource must be {"type": "prometheus", "uid": "${datasource}"}');
    const unit = p.fieldConfig?.defaults?.unit;
    if (unit !== undefined && !UNITS.has(unit) && !/^(suffix|prefix|si|count):/.test(unit)) {
      report(file, name, `unknown unit ${JSON.stringify(unit)} (known: ${[...UNITS].join(' ')})`);
    }
    const targets = p.targets ?? [];
    if (targets.length === 0) report(file, name, 'panel without targets');
    const refIds = new Set();
    for (const t of targets) {
      const where = `${name} target ${t.refId ?? '?'}`;
      if (!t.refId) report(file, where, 'target without refId');
      else if (refIds.has(t.refId)) report(file, where, 'duplicate refId');
      refIds.add(t.refId);
      checkDatasourceRef(file, where, t.datasource);
      if (typeof t.expr !== 'string' || t.expr.trim() === '') {
        report(file, where, 'target without an expr');
        continue;
      }
      checkExpr(file, where, t.expr, variables, filters, null);
      checkLegend(file, where, t.legendFormat, t.expr, 'legendFormat');
    }
  }
}

// Annotations: the built-in one (Grafana's own annotations), or Prometheus queries whose
// target is checked like a panel's.
function checkAnnotations(file, d, variables) {
  const filters = requiredFilters(variables, true);
  for (const a of d.annotations?.list ?? []) {
    const where = `annotation ${JSON.stringify(a.name)}`;
    checkDatasourceRef(file, where, a.datasource);
    if (a.builtIn === 1 || BUILTIN_DATASOURCE_UIDS.has(a.datasource?.uid)) continue;
    if (a.datasource?.uid !== '${datasource}') report(file, where, 'annotation datasource must be {"type": "prometheus", "uid": "${datasource}"}');
    const expr = a.target?.expr;
    if (typeof expr !== 'string' || expr.trim() === '') {
      report(file, where, 'Prometheus annotation without target.expr');
      continue;
    }
    checkExpr(file, where, expr, variables, filters, null);
    checkLegend(file, where, a.titleFormat, expr, 'titleFormat');
    checkLegend(file, where, a.textFormat, expr, 'textFormat');
    for (const k of (a.tagKeys ?? '').split(',').map((x) => x.trim()).filter(Boolean)) {
      if (!labelsOf(expr).has(k)) report(file, where, `tagKeys names ${k}, a label its query does not carry`);
    }
  }
}

function checkDashboard(file, text) {
  let d;
  try {
    d = JSON.parse(text);
  } catch (e) {
    report(file, '', `not valid JSON: ${e.message}`);
    return null;
  }
  if (text !== JSON.stringify(d, null, 2) + '\n') {
    report(file, '', 'not formatted as JSON.stringify(dashboard, null, 2) plus a newline ' +
      `(reformat: node -e 'const f=process.argv[1],fs=require("fs");fs.writeFileSync(f,JSON.stringify(JSON.parse(fs.readFileSync(f,"utf8")),null,2)+"\\n")' ${file})`);
  }
  if (typeof d.uid !== 'string' || !/^[A-Za-z0-9_-]{1,40}$/.test(d.uid)) report(file, 'uid', `uid ${JSON.stringify(d.uid)} must be 1-40 of [A-Za-z0-9_-]`);
  if (!d.title) report(file, 'title', 'dashboard without a title');
  if (schemaVersion !== null && d.schemaVersion !== schemaVersion) {
    report(file, 'schemaVersion', `schemaVersion ${d.schemaVersion}, @grafana/schema's default is ${schemaVersion}`);
  }
  if (d.editable !== true) report(file, 'editable', 'must be true');
  if (!Array.isArray(d.tags) || !d.tags.includes('fp8')) report(file, 'tags', 'must include "fp8"');
  if (d.refresh !== '10s') report(file, 'refresh', `refresh ${JSON.stringify(d.refresh)}, expected "10s"`);
  if (d.time?.from !== 'now-1h' || d.time?.to !== 'now') report(file, 'time', 'default time range must be now-1h to now');
  if (d.id !== undefined && d.id !== null) report(file, 'id', 'id is Grafana-instance specific: leave it null');
  const variables = checkVariables(file, d);
  checkAnnotations(file, d, variables);
  checkGrid(file, d.panels);
  checkPanels(file, d, variables);
  return d;
}

const seenUids = new Map();
const seenTitles = new Map();
for (const file of files) {
  let text;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    report(file, '', e.message);
    continue;
  }
  const d = checkDashboard(file, text);
  if (!d) continue;
  if (seenUids.has(d.uid)) report(file, 'uid', `uid ${d.uid} also used by ${seenUids.get(d.uid)}`);
  seenUids.set(d.uid, file);
  if (seenTitles.has(d.title)) report(file, 'title', `title "${d.title}" also used by ${seenTitles.get(d.title)}`);
  seenTitles.set(d.title, file);
}
if (problems) {
  console.log(`lint_dashboards: ${problems} problem(s)`);
  process.exit(1);
}
console.log(`lint_dashboards: ${files.length} dashboard(s) OK`);
