#!/usr/bin/env node
// The rule groups of the PrometheusRule in a rendered manifest, as a Prometheus rule file:
//
//   node extract_rules.js TOOLS_DIR rendered.yaml rules.yaml [--no-annotations]
//
// TOOLS_DIR is deploy/tools (js-yaml). Exactly one PrometheusRule must be in the input.
// --no-annotations drops every rule's annotations (promtool's alert_rule_test then
// compares labels only).
'use strict';

const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

const [toolsDir, input, output, flag] = process.argv.slice(2);
if (!toolsDir || !input || !output || (flag !== undefined && flag !== '--no-annotations')) {
  console.error('usage: extract_rules.js TOOLS_DIR rendered.yaml rules.yaml [--no-annotations]');
  process.exit(2);
}
const yaml = createRequire(path.join(path.resolve(toolsDir), 'package.json'))('js-yaml');
const rules = yaml.loadAll(fs.readFileSync(input, 'utf8'))
  .filter((d) => d && d.apiVersion === 'monitoring.coreos.com/v1' && d.kind === 'PrometheusRule');
if (rules.length !== 1) {
  console.error(`extract_rules: expected one PrometheusRule in ${input}, found ${rules.length}`);
  process.exit(1);
}
const groups = rules[0].spec.groups;
if (flag === '--no-annotations') {
  for (const g of groups) for (const r of g.rules) delete r.annotations;
}
fs.writeFileSync(output, yaml.dump({ groups }, { lineWidth: -1 }));
console.log(`extract_rules: ${groups.reduce((n, g) => n + g.rules.length, 0)} rules -> ${path.basename(output)}`);
