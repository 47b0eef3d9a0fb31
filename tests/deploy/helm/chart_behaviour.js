#!/usr/bin/env node
// Behaviour of the fp8 chart's rendered output: renders the chart with `helm template`
// under several value sets and checks what the objects say (not just that they are valid).
//
//   node chart_behaviour.js HELM CHART_DIR TOOLS_DIR GRAFANA_DIR
//
// Every case prints "ok <name>" or "FAIL <name>: <why>" lines; exit 1 if any failed.
'use strict';

const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');
const { spawnSync } = require('child_process');

const [helm, chartDir, toolsDir, grafanaDir] = process.argv.slice(2);
if (!helm || !chartDir || !toolsDir || !grafanaDir) {
  console.error('usage: chart_behaviour.js HELM CHART_DIR TOOLS_DIR GRAFANA_DIR');
  process.exit(2);
}
const yaml = createRequire(path.join(path.resolve(toolsDir), 'package.json'))('js-yaml');
const cpuValues = path.join(chartDir, 'values-cpu.yaml');
const RELEASE = 'fp8';
const NAMESPACE = 'training';

// helm template -> the list of objects.
function render(args) {
  const r = spawnSync(helm, ['template', RELEASE, chartDir, '--namespace', NAMESPACE, ...args], { encoding: 'utf8' });
  if (r.status !== 0) {
    const err = r.stderr.split('\n').filter((l) => l && !l.includes('found symbolic link in path')).join(' | ');
    throw new Error(`helm template ${args.join(' ')} failed: ${err}`);
  }
  return yaml.loadAll(r.stdout).filter((d) => d);
}

class Failure extends Error {}
function expect(cond, what) {
  if (!cond) throw new Failure(what);
}
function eq(actual, expected, what) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  expect(a === e, `${what}: expected ${e}, got ${a}`);
}
function one(objs, kind, pred = () => true, what = kind) {
  const found = objs.filter((o) => o.kind === kind && pred(o));
  expect(found.length === 1, `expected exactly one ${what}, found ${found.length}`);
  return found[0];
}
function none(objs, kind) {
  const found = objs.filter((o) => o.kind === kind);
  expect(found.length === 0, `expected no ${kind}, found ${found.map((o) => o.metadata.name).join(', ')}`);
}
const component = (c) => (o) => o.metadata.labels && o.metadata.labels['app.kubernetes.io/component'] === c;
const workersSts = (objs) => one(objs, 'StatefulSet');
const coordDeploy = (objs) => one(objs, 'Deployment');
const workerContainer = (objs) => workersSts(objs).spec.template.spec.containers.find((c) => c.name === 'worker');
const coordContainer = (objs) => coordDeploy(objs).spec.template.spec.containers.find((c) => c.name === 'coordinator');
// The value following `flag` in an args list (undefined when absent).
function flagValue(args, flag) {
  const i = args.indexOf(flag);
  return i >= 0 ? args[i + 1] : undefined;
}
function envOf(container, name) {
  const e = (container.env || []).find((v) => v.name === name);
  return e === undefined ? undefined : (e.value !== undefined ? e.value : e.valueFrom);
}
function selects(selector, labels) {
  return Object.entries(selector).every(([k, v]) => labels[k] === v);
}
const gpuIn = (resources) => ['limits', 'requests'].map((k) => ((resources || {})[k] || {})['nvidia.com/gpu']);
function decode(b64) {
  return Buffer.from(b64, 'base64').toString('utf8');
}

const cases = [];
function test(name, fn) {
  cases.push({ name, fn });
}

// --- default (GPU) profile ------------------------------------------------------------
test('default profile: each worker requests one nvidia.com/gpu and runs --device cuda:0', () => {
  const objs = render([]);
  const c = workerContainer(objs);
  eq(gpuIn(c.resources), [1, 1], 'worker nvidia.com/gpu limits/requests');
  eq(flagValue(c.args, '--device'), 'cuda:0', '--device');
  expect(c.args.includes('--token-file'), 'worker gets --token-file');
  eq(workersSts(objs).spec.replicas, 2, 'worker replicas');
  eq(workersSts(objs).spec.podManagementPolicy, 'Parallel', 'podManagementPolicy');
  expect((workersSts(objs).spec.template.spec.tolerations || []).some((t) => t.key === 'nvidia.com/gpu'),
         'workers tolerate the nvidia.com/gpu taint');
});

test('several GPUs per pod: gpusPerPod 4 requests nvidia.com/gpu: 4 and --device names them', () => {
  const four = ['--set', 'workers.gpusPerPod=4'];
  let c = workerContainer(render([...four, '--set', 'workers.device=cuda:all']));
  eq(gpuIn(c.resources), [4, 4], 'cuda:all: worker nvidia.com/gpu limits/requests');
  eq(flagValue(c.args, '--device'), 'cuda:all', 'cuda:all: --device');
  c = workerContainer(render([...four, '--set', 'workers.device=cuda:0\\,2']));
  eq(gpuIn(c.resources), [4, 4], 'cuda:0,2: worker nvidia.com/gpu limits/requests');
  eq(flagValue(c.args, '--device'), 'cuda:0,2', 'cuda:0,2: --device');
  c = workerContainer(render([...four, '--set-json', 'workers.device="cuda:3,1,0,2"']));
  eq(flagValue(c.args, '--device'), 'cuda:3,1,0,2', 'a list in any order: --device');
  eq(c.args.filter((a) => a === '--device').length, 1, 'one --device flag');
});

test('default profile: NCCL_SOCKET_IFNAME, NCCL_IB_DISABLE and NCCL_DEBUG come from values', () => {
  let c = workerContainer(render([]));
  eq(envOf(c, 'NCCL_SOCKET_IFNAME'), 'eth0', 'default NCCL_SOCKET_IFNAME');
  eq(envOf(c, 'NCCL_IB_DISABLE'), '1', 'default NCCL_IB_DISABLE');
  eq(envOf(c, 'NCCL_DEBUG'), 'WARN', 'default NCCL_DEBUG');
  c = workerContainer(render(['--set', 'workers.nccl.socketIfname=ens5f0', '--set', 'workers.nccl.debug=INFO',
                              '--set', 'workers.nccl.ibDisable=0']));
  eq(envOf(c, 'NCCL_SOCKET_IFNAME'), 'ens5f0', 'NCCL_SOCKET_IFNAME from --set');
  eq(envOf(c, 'NCCL_DEBUG'), 'INFO', 'NCCL_DEBUG from --set');
  eq(envOf(c, 'NCCL_IB_DISABLE'), '0', 'NCCL_IB_DISABLE from --set');
  c = workerContainer(render(['--set-json', 'workers.extraEnv=[{"name":"NCCL_P2P_DISABLE","value":"1"}]']));
  eq(envOf(c, 'NCCL_P2P_DISABLE'), '1', 'extraEnv');
  eq(envOf(c, 'NCCL_SOCKET_IFNAME'), 'eth0', 'NCCL_SOCKET_IFNAME next to extraEnv');
});

test('workers: /dev/shm is a memory emptyDir', () => {
  const objs = render([]);
  const spec = workersSts(objs).spec.template.spec;
  const mount = workerContainer(objs).volumeMounts.find((m) => m.mountPath === '/dev/shm');
  expect(mount, '/dev/shm is mounted');
  const vol = spec.volumes.find((v) => v.name === mount.name);
  eq(vol.emptyDir && vol.emptyDir.medium, 'Memory', '/dev/shm medium');
  eq(vol.emptyDir.sizeLimit, '8Gi', '/dev/shm sizeLimit');
});

test('workers: advertise $(POD_NAME).<headless>.<ns>.svc and dial the coordinator Service', () => {
  const objs = render([]);
  const sts = workersSts(objs);
  const headless = one(objs, 'Service', component('worker'), 'worker Service');
  const coordSvc = one(objs, 'Service', component('coordinator'), 'coordinator Service');
  eq(sts.spec.serviceName, headless.metadata.name, 'StatefulSet serviceName');
  const c = workerContainer(objs);
  eq(flagValue(c.args, '--address'), `$(POD_NAME).${headless.metadata.name}.${NAMESPACE}.svc:9401`, '--address');
  eq(envOf(c, 'POD_NAME'), { fieldRef: { fieldPath: 'metadata.name' } }, 'POD_NAME env');
  const podNameIndex = c.env.findIndex((e) => e.name === 'POD_NAME');
  expect(podNameIndex === 0, 'POD_NAME is defined first ($(POD_NAME) expands only earlier variables)');
  eq(flagValue(c.args, '--coordinator'), `${coordSvc.metadata.name}.${NAMESPACE}.svc:7070`, '--coordinator');
  eq(flagValue(c.args, '--metrics-address'), '0.0.0.0:9401', 'worker --metrics-address');
  const port = c.ports.find((p) => p.name === 'metrics');
  eq(port && port.containerPort, 9401, 'worker metrics containerPort');
  eq(c.readinessProbe.httpGet, { path: '/readyz', port: 'metrics' }, 'worker readinessProbe');
  eq(c.livenessProbe.httpGet, { path: '/healthz', port: 'metrics' }, 'worker livenessProbe');
  const byIp = workerContainer(render(['--set', 'workers.addressFrom=podIP']));
  eq(flagValue(byIp.args, '--address'), '$(POD_IP):9401', '--address with addressFrom=podIP');
  eq(envOf(byIp, 'POD_IP'), { fieldRef: { fieldPath: 'status.podIP' } }, 'POD_IP env');
  expect(byIp.env.findIndex((e) => e.name === 'POD_IP') < 2, 'POD_IP is defined before the other variables');
  const withDomain = workerContainer(render(['--set', 'clusterDomain=cluster.local']));
  expect(flagValue(withDomain.args, '--address').endsWith(`.${NAMESPACE}.svc.cluster.local:9401`), '--address with clusterDomain');
});

test('headless worker Service: clusterIP None, publishNotReadyAddresses, selects the worker pods', () => {
  const objs = render([]);
  const svc = one(objs, 'Service', component('worker'), 'worker Service');
  eq(svc.spec.clusterIP, 'None', 'clusterIP');
  eq(svc.spec.publishNotReadyAddresses, true, 'publishNotReadyAddresses');
  const sts = workersSts(objs);
  expect(selects(svc.spec.selector, sts.spec.template.metadata.labels), 'Service selector matches the worker pods');
  expect(selects(sts.spec.selector.matchLabels, sts.spec.template.metadata.labels), 'StatefulSet selector matches its pods');
  expect(!selects(svc.spec.selector, coordDeploy(objs).spec.template.metadata.labels), 'worker Service does not select the coordinator');
  eq(svc.spec.ports.map((p) => [p.name, p.port]), [['metrics', 9401]], 'worker Service ports');
});

// --- coordinator ------------------------------------------------------------------------
test('coordinator: one replica, Recreate, state on the PVC, probes on /readyz and /healthz, non-root', () => {
  const objs = render([]);
  const d = coordDeploy(objs);
  eq(d.spec.replicas, 1, 'replicas');
  eq(d.spec.strategy, { type: 'Recreate' }, 'strategy');
  expect(selects(d.spec.selector.matchLabels, d.spec.template.metadata.labels), 'Deployment selector matches its pods');
  const pvc = one(objs, 'PersistentVolumeClaim');
  eq(pvc.spec.resources.requests.storage, '5Gi', 'PVC size');
  eq(pvc.spec.accessModes, ['ReadWriteOnce'], 'PVC accessModes');
  const c = coordContainer(objs);
  const vol = d.spec.template.spec.volumes.find((v) => v.persistentVolumeClaim);
  expect(vol, 'a persistentVolumeClaim volume');
  eq(vol.persistentVolumeClaim.claimName, pvc.metadata.name, 'claimName');
  const mount = c.volumeMounts.find((m) => m.name === vol.name);
  expect(mount, 'the claim is mounted');
  const cm = one(objs, 'ConfigMap', component('coordinator'), 'coordinator ConfigMap');
  eq(cm.data.FP8_STATE_DIR, mount.mountPath, 'FP8_STATE_DIR is the claim mount');
  eq(cm.data.FP8_COORDINATOR_DB, `${mount.mountPath}/fp8-coordinator.db`, 'FP8_COORDINATOR_DB');
  expect(c.envFrom.some((e) => e.configMapRef && e.configMapRef.name === cm.metadata.name), 'envFrom the ConfigMap');
  eq(flagValue(c.args, '--metrics-address'), '0.0.0.0:9400', 'coordinator --metrics-address');
  eq(c.ports.map((p) => [p.name, p.containerPort]), [['grpc', 7070], ['metrics', 9400]], 'container ports');
  eq(c.readinessProbe.httpGet, { path: '/readyz', port: 'metrics' }, 'coordinator readinessProbe');
  eq(c.livenessProbe.httpGet, { path: '/healthz', port: 'metrics' }, 'coordinator livenessProbe');
  eq(d.spec.template.spec.securityContext.runAsNonRoot, true, 'runAsNonRoot');
  eq(c.securityContext.allowPrivilegeEscalation, false, 'allowPrivilegeEscalation');
  expect(c.resources && c.resources.requests, 'coordinator resources');
  expect(d.spec.template.metadata.annotations['checksum/config'], 'config checksum annotation rolls the pod');
});

test('coordinator: ConfigMap carries the settings from values', () => {
  const objs = render(['--set', 'coordinator.lostAfterMs=30000', '--set', 'coordinator.heartbeatIntervalMs=2000',
                       '--set', 'coordinator.stopGraceSeconds=20',
                       '--set-json', 'coordinator.dataRoots=["/shared/data","/datasets"]']);
  const cm = one(objs, 'ConfigMap', component('coordinator'), 'coordinator ConfigMap');
  const svc = one(objs, 'Service', component('coordinator'), 'coordinator Service');
  eq(cm.data.FP8_LOST_AFTER_MS, '30000', 'FP8_LOST_AFTER_MS');
  eq(cm.data.FP8_HEARTBEAT_INTERVAL_MS, '2000', 'FP8_HEARTBEAT_INTERVAL_MS');
  eq(cm.data.FP8_STOP_GRACE_S, '20', 'FP8_STOP_GRACE_S');
  eq(cm.data.FP8_DATA_ROOTS, '/shared/data:/datasets', 'FP8_DATA_ROOTS');
  eq(cm.data.FP8_CHECKPOINT_ROOTS, '/shared/checkpoints', 'FP8_CHECKPOINT_ROOTS');
  eq(cm.data.FP8_COORDINATOR_LISTEN, '0.0.0.0:7070', 'FP8_COORDINATOR_LISTEN');
  eq(cm.data.FP8_COORDINATOR_ADVERTISE, `${svc.metadata.name}.${NAMESPACE}.svc:7070`, 'FP8_COORDINATOR_ADVERTISE');
  for (const v of Object.values(cm.data)) expect(typeof v === 'string', 'ConfigMap values are strings');
});

test('coordinator Service: grpc and metrics ports, selects only the coordinator', () => {
  const objs = render([]);
  const svc = one(objs, 'Service', component('coordinator'), 'coordinator Service');
  eq(svc.spec.type, 'ClusterIP', 'type');
  eq(svc.spec.ports.map((p) => [p.name, p.port, p.targetPort]), [['grpc', 7070, 'grpc'], ['metrics', 9400, 'metrics']], 'ports');
  expect(selects(svc.spec.selector, coordDeploy(objs).spec.template.metadata.labels), 'selects the coordinator pod');
  expect(!selects(svc.spec.selector, workersSts(objs).spec.template.metadata.labels), 'does not select workers');
});

test('persistence: existingClaim is used as is; disabled falls back to an emptyDir', () => {
  let objs = render(['--set', 'coordinator.persistence.existingClaim=fp8-state']);
  none(objs, 'PersistentVolumeClaim');
  let vol = coordDeploy(objs).spec.template.spec.volumes.find((v) => v.name === 'state');
  eq(vol.persistentVolumeClaim, { claimName: 'fp8-state' }, 'existing claim');
  objs = render(['--set', 'coordinator.persistence.storageClass=fast-ssd', '--set', 'coordinator.persistence.size=20Gi']);
  const pvc = one(objs, 'PersistentVolumeClaim');
  eq(pvc.spec.storageClassName, 'fast-ssd', 'storageClassName');
  eq(pvc.spec.resources.requests.storage, '20Gi', 'size');
  objs = render(['--set', 'coordinator.persistence.enabled=false']);
  none(objs, 'PersistentVolumeClaim');
  vol = coordDeploy(objs).spec.template.spec.volumes.find((v) => v.name === 'state');
  eq(vol.emptyDir, {}, 'state emptyDir');
});

// --- tokens -----------------------------------------------------------------------------
test('tokens: generated in the coordinator form; workers mount only the worker token', () => {
  const objs = render([]);
  const secret = one(objs, 'Secret');
  expect(/^fp8u_[0-9a-f]{64}$/.test(decode(secret.data['admin-token'])), 'admin token fp8u_ + 64 hex');
  expect(/^fp8w_[0-9a-f]{64}$/.test(decode(secret.data['worker-token'])), 'worker token fp8w_ + 64 hex');
  eq(secret.metadata.annotations['helm.sh/resource-policy'], 'keep', 'Secret kept on uninstall');
  const coordVol = coordDeploy(objs).spec.template.spec.volumes.find((v) => v.secret && v.secret.secretName === secret.metadata.name);
  expect(coordVol, 'coordinator mounts the tokens Secret');
  const c = coordContainer(objs);
  const dir = c.volumeMounts.find((m) => m.name === coordVol.name).mountPath;
  eq(flagValue(c.args, '--admin-token-file'), `${dir}/admin-token`, '--admin-token-file');
  eq(flagValue(c.args, '--worker-token-file'), `${dir}/worker-token`, '--worker-token-file');
  const wVol = workersSts(objs).spec.template.spec.volumes.find((v) => v.secret && v.secret.secretName === secret.metadata.name);
  eq(wVol.secret.items, [{ key: 'worker-token', path: 'worker-token' }], 'worker Secret items');
  const w = workerContainer(objs);
  eq(flagValue(w.args, '--token-file'), `${w.volumeMounts.find((m) => m.name === wVol.name).mountPath}/worker-token`, 'worker --token-file');
});

test('tokens: given in values, or from an existingSecret (then no Secret is made)', () => {
  let objs = render(['--set', 'tokens.adminToken=fp8u_admin', '--set', 'tokens.workerToken=fp8w_worker']);
  const secret = one(objs, 'Secret');
  eq(decode(secret.data['admin-token']), 'fp8u_admin', 'admin token from values');
  eq(decode(secret.data['worker-token']), 'fp8w_worker', 'worker token from values');
  objs = render(['--set', 'tokens.existingSecret=my-tokens']);
  none(objs, 'Secret');
  for (const spec of [coordDeploy(objs).spec.template.spec, workersSts(objs).spec.template.spec]) {
    expect(spec.volumes.some((v) => v.secret && v.secret.secretName === 'my-tokens'), 'pods mount the existing Secret');
  }
});

// --- CPU profile ------------------------------------------------------------------------
test('cpu profile: no GPU anywhere, --device cpu, no NCCL variables, --cpus from values', () => {
  const objs = render(['-f', cpuValues]);
  const c = workerContainer(objs);
  eq(gpuIn(c.resources), [undefined, undefined], 'worker nvidia.com/gpu');
  expect(!JSON.stringify(objs.filter((o) => o.kind !== 'ConfigMap' || !o.metadata.name.endsWith('-dashboards'))).includes('nvidia.com/gpu'),
         'nvidia.com/gpu appears nowhere (no request, no toleration)');
  eq(flagValue(c.args, '--device'), 'cpu', '--device');
  eq(flagValue(c.args, '--cpus'), '2', '--cpus');
  eq(flagValue(c.args, '--memory-gb'), '4', '--memory-gb');
  for (const v of ['NCCL_SOCKET_IFNAME', 'NCCL_IB_DISABLE', 'NCCL_DEBUG']) eq(envOf(c, v), undefined, v);
  eq(envOf(c, 'NVIDIA_VISIBLE_DEVICES'), 'void', 'NVIDIA_VISIBLE_DEVICES');
  const aff = workersSts(objs).spec.template.spec.affinity;
  expect(aff && aff.podAntiAffinity && aff.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution,
         'soft pod anti-affinity');
});

test('workers: podAntiAffinity hard, shared claim, TLS', () => {
  let objs = render(['--set', 'workers.podAntiAffinity=hard', '--set', 'workers.shared.existingClaim=fp8-shared']);
  const spec = workersSts(objs).spec.template.spec;
  const terms = spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution;
  eq(terms[0].topologyKey, 'kubernetes.io/hostname', 'anti-affinity topologyKey');
  expect(selects(terms[0].labelSelector.matchLabels, workersSts(objs).spec.template.metadata.labels), 'anti-affinity selects workers');
  eq(spec.volumes.find((v) => v.name === 'shared').persistentVolumeClaim, { claimName: 'fp8-shared' }, 'shared claim');
  objs = render(['--set', 'tls.enabled=true', '--set', 'tls.secretName=fp8-tls']);
  const cm = one(objs, 'ConfigMap', component('coordinator'), 'coordinator ConfigMap');
  eq(cm.data.FP8_TLS_CERT, '/etc/fp8/tls/tls.crt', 'FP8_TLS_CERT');
  eq(cm.data.FP8_TLS_KEY, '/etc/fp8/tls/tls.key', 'FP8_TLS_KEY');
  eq(flagValue(workerContainer(objs).args, '--coordinator-ca'), '/etc/fp8/tls/ca.crt', '--coordinator-ca');
  expect(coordDeploy(objs).spec.template.spec.volumes.some((v) => v.secret && v.secret.secretName === 'fp8-tls'), 'coordinator mounts the TLS Secret');
});

// --- monitoring ---------------------------------------------------------------------------
test('ServiceMonitor: off by default; when on it selects the coordinator and worker Services', () => {
  none(render([]), 'ServiceMonitor');
  const objs = render(['--set', 'serviceMonitor.enabled=true', '--set', 'serviceMonitor.labels.release=prometheus',
                       '--set', 'serviceMonitor.interval=30s']);
  const sm = one(objs, 'ServiceMonitor');
  eq(sm.apiVersion, 'monitoring.coreos.com/v1', 'apiVersion');
  eq(sm.metadata.labels.release, 'prometheus', 'ServiceMonitor labels from values');
  eq(sm.spec.namespaceSelector, { matchNames: [NAMESPACE] }, 'namespaceSelector');
  const matches = (svc) => selects(sm.spec.selector.matchLabels, svc.metadata.labels) &&
      (sm.spec.selector.matchExpressions || []).every((e) => e.operator === 'In' && e.values.includes(svc.metadata.labels[e.key]));
  const services = objs.filter((o) => o.kind === 'Service');
  eq(services.filter(matches).map((s) => s.metadata.labels['app.kubernetes.io/component']).sort(), ['coordinator', 'worker'],
     'Services the ServiceMonitor selects');
  for (const ep of sm.spec.endpoints) {
    expect(services.every((s) => s.spec.ports.some((p) => p.name === ep.port)), `every Service has port ${ep.port}`);
    eq(ep.path, '/metrics', 'endpoint path');
    eq(ep.interval, '30s', 'endpoint interval');
  }
});

test('dashboards ConfigMap: sidecar label and one key per deploy/grafana/*.json', () => {
  const files = fs.readdirSync(grafanaDir).filter((f) => f.endsWith('.json')).sort();
  expect(files.length > 0, `no dashboards in ${grafanaDir}`);
  let objs = render([]);
  const cm = one(objs, 'ConfigMap', (o) => o.metadata.name.endsWith('-dashboards'), 'dashboards ConfigMap');
  eq(cm.metadata.labels.grafana_dashboard, '1', 'sidecar label');
  eq(Object.keys(cm.data).sort(), files, 'ConfigMap keys');
  for (const f of files) {
    const text = fs.readFileSync(path.join(grafanaDir, f), 'utf8');
    eq(JSON.parse(cm.data[f]), JSON.parse(text), `${f} content`);
  }
  objs = render(['--set', 'dashboards.label=fp8_dashboard', '--set', 'dashboards.labelValue=yes',
                 '--set', 'dashboards.namespace=monitoring', '--set', 'dashboards.annotations.grafana_folder=fp8']);
  const custom = one(objs, 'ConfigMap', (o) => o.metadata.name.endsWith('-dashboards'), 'dashboards ConfigMap');
  eq(custom.metadata.labels.fp8_dashboard, 'yes', 'custom sidecar label');
  eq(custom.metadata.labels.grafana_dashboard, undefined, 'default label gone');
  eq(custom.metadata.namespace, 'monitoring', 'dashboards namespace');
  eq(custom.metadata.annotations.grafana_folder, 'fp8', 'dashboards annotations');
  objs = render(['--set', 'dashboards.enabled=false']);
  expect(!objs.some((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-dashboards')), 'dashboards disabled');
});

test('labels and names: standard labels everywhere, namespace set, fullnameOverride', () => {
  const objs = render(['--set', 'commonLabels.team=ml']);
  for (const o of objs) {
    const l = o.metadata.labels || {};
    expect(l['app.kubernetes.io/instance'] === RELEASE && l['app.kubernetes.io/managed-by'] === 'Helm' && l.team === 'ml',
           `${o.kind}/${o.metadata.name} has the standard and common labels`);
    eq(o.metadata.namespace, NAMESPACE, `${o.kind}/${o.metadata.name} namespace`);
  }
  const named = render(['--set', 'fullnameOverride=ml-fp8']);
  eq(coordDeploy(named).metadata.name, 'ml-fp8-coordinator', 'coordinator name');
  eq(workersSts(named).metadata.name, 'ml-fp8-worker', 'workers name');
  const long = render(['--set', `fullnameOverride=${'x'.repeat(70)}`]);
  expect(workersSts(long).metadata.name.length <= 52, 'StatefulSet name at most 52 characters');
});

// NOTES.txt is not part of `helm template`'s output and `helm install --dry-run` wants a
// cluster, so a copy of the chart renders it through tpl inside a ConfigMap.
function renderNotes(args) {
  const dir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'fp8-helm-notes-'));
  try {
    const chart = path.join(dir, 'fp8');
    fs.cpSync(chartDir, chart, { recursive: true, dereference: true });
    fs.copyFileSync(path.join(chart, 'templates', 'NOTES.txt'), path.join(chart, 'notes.txt'));
    fs.writeFileSync(path.join(chart, 'templates', 'zz-notes-test.yaml'),
                     'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes-test\ndata:\n' +
                     '  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n');
    const r = spawnSync(helm, ['template', RELEASE, chart, '--namespace', NAMESPACE,
                               '--show-only', 'templates/zz-notes-test.yaml', ...args], { encoding: 'utf8' });
    expect(r.status === 0, `rendering NOTES.txt failed: ${r.stderr}`);
    return yaml.load(r.stdout).data.notes;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

test('NOTES: port-forward, admin token from the Secret, fp8ctl submit, warnings, GPU workers', () => {
  let notes = renderNotes([]);
  expect(notes.includes(`port-forward service/${RELEASE}-coordinator 7070:7070`), 'NOTES: port-forward');
  expect(notes.includes(`get secret ${RELEASE}-tokens -o jsonpath='{.data.admin-token}' | base64 -d > fp8-admin.token`),
         'NOTES: admin token out of the Secret');
  expect(/fp8ctl --coordinator 127\.0\.0\.1:7070 submit job\.yaml/.test(notes), 'NOTES: fp8ctl submit');
  expect(notes.includes('fp8-coordinator token --role user'), 'NOTES: more tokens');
  expect(!notes.includes('WARNING'), 'no warning by default');
  notes = renderNotes(['--set', 'coordinator.persistence.enabled=false', '--set', 'tls.enabled=true',
                       '--set', 'tls.secretName=t', '--set', 'tokens.existingSecret=mine']);
  expect(notes.includes('WARNING: coordinator.persistence.enabled=false'), 'NOTES warns about state in an emptyDir');
  expect(notes.includes('--coordinator-ca ca.crt'), 'NOTES: fp8ctl with TLS');
  expect(notes.includes('get secret mine '), 'NOTES: the existing Secret');
  notes = renderNotes(['--set', 'workers.gpusPerPod=4', '--set', 'workers.device=cuda:all']);
  expect(notes.includes('2 x --device cuda:all, 4 nvidia.com/gpu each: 8 workers, 4 GPU slots per pod'),
         'NOTES: workers of a multi-GPU pod');
  expect(!notes.includes('GPUs it requests'), 'no unused-GPU note with cuda:all');
  notes = renderNotes(['--set', 'workers.gpusPerPod=4', '--set', 'workers.device=cuda:0\\,2']);
  expect(notes.includes('4 workers, 2 GPU slots per pod'), 'NOTES: workers of a GPU list');
  expect(notes.includes('each worker pod uses 2 of the 4 GPUs it requests'), 'NOTES: GPUs requested but not offered');
});

let failed = 0;
for (const { name, fn } of cases) {
  try {
    fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e instanceof Failure ? e.message : e.stack}`);
  }
}
console.log(`chart_behaviour: ${cases.length - failed}/${cases.length} passed`);
process.exit(failed ? 1 : 0);
