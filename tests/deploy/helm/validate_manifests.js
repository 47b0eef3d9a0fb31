#!/usr/bin/env node
// Validates rendered Kubernetes manifests (the output of `helm template`, several YAML
// documents per file) against the Kubernetes API schemas of the kubernetes-models package:
//
//   node validate_manifests.js TOOLS_DIR rendered.yaml [more.yaml ...]
//
// TOOLS_DIR is deploy/tools (node_modules with kubernetes-models, js-yaml, typescript).
// For every document:
//   1. the model class is picked by apiVersion and kind (kubernetes-models/<group>/<version>)
//      and its validate() runs: types, enums, required fields, formats. A kind without a
//      model is an error, except monitoring.coreos.com/v1 ServiceMonitor and
//      PrometheusRule, which are checked by hand below
//      (@kubernetes-models/prometheus-operator is not installed).
//   2. unknown fields: the JSON schemas behind validate() allow extra properties, so a
//      misspelt field (publishNotReadyAddress) would pass. Each document is written as a
//      typed object literal (`const d: IStatefulSet = {...}`) and type-checked with the
//      installed TypeScript compiler, whose excess-property check names any field the
//      API does not have.
// Exit status 0 when every document passes; 1 with one line per problem otherwise.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { createRequire } = require('module');
const { spawnSync } = require('child_process');

const [toolsDir, ...files] = process.argv.slice(2);
if (!toolsDir || files.length === 0) {
  console.error('usage: validate_manifests.js TOOLS_DIR rendered.yaml...');
  process.exit(2);
}
const toolsRequire = createRequire(path.join(path.resolve(toolsDir), 'package.json'));
const yaml = toolsRequire('js-yaml');

const problems = [];
const typed = [];  // {name, module, iface, doc} for the TypeScript pass
let checked = 0;

// "v1" -> "kubernetes-models/v1"; "apps/v1" -> "kubernetes-models/apps/v1".
function modelModule(apiVersion) {
  return `kubernetes-models/${apiVersion}`;
}

function describe(doc, file, index) {
  const kind = doc && doc.kind ? doc.kind : '?';
  const name = doc && doc.metadata && doc.metadata.name ? doc.metadata.name : '?';
  return `${path.basename(file)}#${index} ${kind}/${name}`;
}

// --- ServiceMonitor (monitoring.coreos.com/v1), the fields this chart may use --------
const DURATION = /^(0|([0-9]+(\.[0-9]+)?(ms|s|m|h))+)$/;
function checkKeys(obj, allowed, where, out) {
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
    out.push(`${where}: must be an object`);
    return false;
  }
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) out.push(`${where}.${k}: unknown field`);
  }
  return true;
}
function checkStringMap(obj, where, out) {
  if (obj === undefined) return;
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
    out.push(`${where}: must be a map of strings`);
    return;
  }
  for (const [k, v] of Object.entries(obj)) {
    if (typeof v !== 'string') out.push(`${where}.${k}: must be a string`);
  }
}
function validateServiceMonitor(doc) {
  const out = [];
  checkKeys(doc, ['apiVersion', 'kind', 'metadata', 'spec'], 'ServiceMonitor', out);
  const md = doc.metadata || {};
  if (typeof md.name !== 'string' || !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(md.name) || md.name.length > 253) {
    out.push('metadata.name: missing or not a DNS subdomain');
  }
  checkStringMap(md.labels, 'metadata.labels', out);
  checkStringMap(md.annotations, 'metadata.annotations', out);
  const spec = doc.spec;
  if (!checkKeys(spec, ['jobLabel', 'targetLabels', 'podTargetLabels', 'endpoints', 'selector',
                        'namespaceSelector', 'sampleLimit', 'attachMetadata'], 'spec', out)) {
    return out;
  }
  // selector: a LabelSelector.
  if (checkKeys(spec.selector, ['matchLabels', 'matchExpressions'], 'spec.selector', out)) {
    checkStringMap(spec.selector.matchLabels, 'spec.selector.matchLabels', out);
    for (const [i, e] of (spec.selector.matchExpressions || []).entries()) {
      const w = `spec.selector.matchExpressions[${i}]`;
      checkKeys(e, ['key', 'operator', 'values'], w, out);
      if (typeof e.key !== 'string' || e.key === '') out.push(`${w}.key: required string`);
      if (!['In', 'NotIn', 'Exists', 'DoesNotExist'].includes(e.operator)) out.push(`${w}.operator: not In/NotIn/Exists/DoesNotExist`);
      if (['In', 'NotIn'].includes(e.operator) && !(Array.isArray(e.values) && e.values.length > 0 && e.values.every((v) => typeof v === 'string'))) {
        out.push(`${w}.values: In/NotIn need a non-empty list of strings`);
      }
    }
    if (!spec.selector.matchLabels && !spec.selector.matchExpressions) out.push('spec.selector: empty (would select every Service)');
  }
  if (spec.namespaceSelector !== undefined && checkKeys(spec.namespaceSelector, ['any', 'matchNames'], 'spec.namespaceSelector', out)) {
    const ns = spec.namespaceSelector;
    if (ns.any !== undefined && typeof ns.any !== 'boolean') out.push('spec.namespaceSelector.any: must be a boolean');
    if (ns.matchNames !== undefined && !(Array.isArray(ns.matchNames) && ns.matchNames.every((n) => typeof n === 'string' && n))) {
      out.push('spec.namespaceSelector.matchNames: must be a list of names');
    }
  }
  if (!Array.isArray(spec.endpoints) || spec.endpoints.length === 0) {
    out.push('spec.endpoints: required non-empty list');
  } else {
    for (const [i, ep] of spec.endpoints.entries()) {
      const w = `spec.endpoints[${i}]`;
      if (!checkKeys(ep, ['port', 'targetPort', 'path', 'scheme', 'interval', 'scrapeTimeout', 'honorLabels',
                          'honorTimestamps', 'relabelings', 'metricRelabelings', 'params', 'tlsConfig'], w, out)) continue;
      if (ep.port === undefined && ep.targetPort === undefined) out.push(`${w}: port or targetPort required`);
      if (ep.port !== undefined && (typeof ep.port !== 'string' || ep.port === '')) out.push(`${w}.port: must be a port name`);
      if (ep.path !== undefined && (typeof ep.path !== 'string' || !ep.path.startsWith('/'))) out.push(`${w}.path: must start with /`);
      if (ep.scheme !== undefined && !['http', 'https'].includes(ep.scheme)) out.push(`${w}.scheme: http or https`);
      for (const d of ['interval', 'scrapeTimeout']) {
        if (ep[d] !== undefined && (typeof ep[d] !== 'string' || !DURATION.test(ep[d]))) out.push(`${w}.${d}: not a duration (15s, 1m)`);
      }
    }
  }
  return out;
}

// --- PrometheusRule (monitoring.coreos.com/v1), the fields this chart may use ---------
// Only the shape: the expressions themselves go through promtool in
// tests/deploy/prometheus (prometheus_rules_test.sh).
const PROM_DURATION = /^(([0-9]+)(y|w|d|h|m|s|ms))+$/;
function validatePrometheusRule(doc) {
  const out = [];
  checkKeys(doc, ['apiVersion', 'kind', 'metadata', 'spec'], 'PrometheusRule', out);
  const md = doc.metadata || {};
  if (typeof md.name !== 'string' || !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(md.name) || md.name.length > 253) {
    out.push('metadata.name: missing or not a DNS subdomain');
  }
  checkStringMap(md.labels, 'metadata.labels', out);
  checkStringMap(md.annotations, 'metadata.annotations', out);
  if (!checkKeys(doc.spec, ['groups'], 'spec', out)) return out;
  const groups = doc.spec.groups;
  if (!Array.isArray(groups) || groups.length === 0) {
    out.push('spec.groups: required non-empty list');
    return out;
  }
  const groupNames = new Set();
  for (const [i, g] of groups.entries()) {
    const w = `spec.groups[${i}]`;
    if (!checkKeys(g, ['name', 'interval', 'rules', 'partial_response_strategy', 'limit'], w, out)) continue;
    if (typeof g.name !== 'string' || g.name === '') out.push(`${w}.name: required string`);
    else if (groupNames.has(g.name)) out.push(`${w}.name: ${g.name} twice`);
    groupNames.add(g.name);
    if (g.interval !== undefined && !(typeof g.interval === 'string' && PROM_DURATION.test(g.interval))) out.push(`${w}.interval: not a duration`);
    if (!Array.isArray(g.rules) || g.rules.length === 0) {
      out.push(`${w}.rules: required non-empty list`);
      continue;
    }
    for (const [j, r] of g.rules.entries()) {
      const rw = `${w}.rules[${j}]`;
      if (!checkKeys(r, ['alert', 'record', 'expr', 'for', 'keep_firing_for', 'labels', 'annotations'], rw, out)) continue;
      if ((r.alert === undefined) === (r.record === undefined)) out.push(`${rw}: exactly one of alert and record`);
      if (r.alert !== undefined && !(typeof r.alert === 'string' && /^[a-zA-Z_][a-zA-Z0-9_]*$/.test(r.alert))) out.push(`${rw}.alert: not a valid name`);
      if (typeof r.expr !== 'string' || r.expr.trim() === '') out.push(`${rw}.expr: required string`);
      for (const d of ['for', 'keep_firing_for']) {
        if (r[d] !== undefined && !(typeof r[d] === 'string' && PROM_DURATION.test(r[d]))) out.push(`${rw}.${d}: not a duration (10m, 1h)`);
      }
      if (r.record !== undefined && (r.for !== undefined || r.annotations !== undefined)) out.push(`${rw}: a recording rule has no for or annotations`);
      checkStringMap(r.labels, `${rw}.labels`, out);
      checkStringMap(r.annotations, `${rw}.annotations`, out);
    }
  }
  return out;
}

// --- pass 1: kubernetes-models validate() --------------------------------------------
for (const file of files) {
  let docs;
  try {
    docs = yaml.loadAll(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    problems.push(`${file}: YAML does not parse: ${e.message.split('\n')[0]}`);
    continue;
  }
  docs.forEach((doc, index) => {
    if (doc === null || doc === undefined) return;  // an empty document between ---
    const name = describe(doc, file, index);
    checked++;
    if (typeof doc !== 'object' || Array.isArray(doc) || typeof doc.apiVersion !== 'string' || typeof doc.kind !== 'string') {
      problems.push(`${name}: not a Kubernetes object (apiVersion and kind)`);
      return;
    }
    if (doc.apiVersion === 'monitoring.coreos.com/v1' && doc.kind === 'ServiceMonitor') {
      for (const p of validateServiceMonitor(doc)) problems.push(`${name}: ${p}`);
      return;
    }
    if (doc.apiVersion === 'monitoring.coreos.com/v1' && doc.kind === 'PrometheusRule') {
      for (const p of validatePrometheusRule(doc)) problems.push(`${name}: ${p}`);
      return;
    }
    let Model;
    try {
      Model = toolsRequire(modelModule(doc.apiVersion))[doc.kind];
    } catch (e) {
      Model = undefined;
    }
    if (typeof Model !== 'function') {
      problems.push(`${name}: unknown kind ${doc.apiVersion} ${doc.kind} (no kubernetes-models class)`);
      return;
    }
    try {
      new Model(doc).validate();
    } catch (e) {
      problems.push(`${name}: ${String(e.message || e).replace(/\s+/g, ' ')}`);
    }
    typed.push({ name, module: `${modelModule(doc.apiVersion)}/${doc.kind}`, iface: `I${doc.kind}`, doc });
  });
}

// --- pass 2: unknown fields, through TypeScript's excess-property check ---------------
function typeCheck(entries) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fp8-helm-tsc-'));
  try {
    fs.symlinkSync(path.resolve(toolsDir, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
    const lines = [];
    const spans = [];  // [firstLine, lastLine, name], 1-based
    entries.forEach((e, i) => lines.push(`import type { ${e.iface} as T${i} } from "${e.module}";`));
    entries.forEach((e, i) => {
      const body = `const d${i}: T${i} = ${JSON.stringify(e.doc, null, 2)};`.split('\n');
      spans.push([lines.length + 1, lines.length + body.length, e.name]);
      lines.push(...body);
    });
    lines.push('export {};');
    fs.writeFileSync(path.join(dir, 'manifests.ts'), lines.join('\n') + '\n');
    fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
      compilerOptions: { strict: true, noEmit: true, skipLibCheck: true, types: [],
                         module: 'nodenext', moduleResolution: 'nodenext' },
      files: ['manifests.ts'],
    }));
    const tsc = path.resolve(toolsDir, 'node_modules', 'typescript', 'bin', 'tsc');
    const r = spawnSync(process.execPath, [tsc, '-p', path.join(dir, 'tsconfig.json'), '--pretty', 'false'],
                        { cwd: dir, encoding: 'utf8' });
    if (r.status === 0) return [];
    const out = [];
    for (const line of `${r.stdout}${r.stderr}`.split('\n')) {
      const m = /^manifests\.ts\((\d+),\d+\): error (TS\d+): (.*)$/.exec(line.trim());
      if (!m) {
        if (line.trim()) out.push(`typescript: ${line.trim()}`);
        continue;
      }
      const n = Number(m[1]);
      const span = spans.find(([a, b]) => n >= a && n <= b);
      out.push(`${span ? span[2] : `line ${n}`}: ${m[3]}`);
    }
    return out.length ? out : [`typescript exited ${r.status} without diagnostics`];
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
if (typed.length > 0) problems.push(...typeCheck(typed));

if (checked === 0) problems.push('no Kubernetes objects found');
if (problems.length > 0) {
  for (const p of problems) console.error(`INVALID ${p}`);
  console.error(`validate_manifests: ${problems.length} problem(s) in ${checked} object(s)`);
  process.exit(1);
}
console.log(`validate_manifests: ${checked} object(s) valid (${files.map((f) => path.basename(f)).join(', ')})`);
