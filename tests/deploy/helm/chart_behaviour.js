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

test('image: what scripts/build_image.sh tags, -cuda for GPU workers; a given tag as is', () => {
  const images = (objs) => [coordContainer(objs).image, workerContainer(objs).image];
  eq(images(render([])), ['localhost/fp8-train:0.1.0-cuda', 'localhost/fp8-train:0.1.0-cuda'], 'default profile');
  eq(images(render(['-f', cpuValues])), ['localhost/fp8-train:0.1.0', 'localhost/fp8-train:0.1.0'], 'cpu profile');
  const given = render(['--set', 'image.repository=registry.example.com/fp8-train', '--set', 'image.tag=2']);
  eq(images(given), ['registry.example.com/fp8-train:2', 'registry.example.com/fp8-train:2'], 'given');
});

test('workers: an init container makes the data and checkpoint roots that lie on the shared volume', () => {
  const init = (objs) => (workersSts(objs).spec.template.spec.initContainers || []).find((c) => c.name === 'roots');
  const roots = init(render(['-f', cpuValues]));
  expect(roots, 'a roots init container');
  eq(roots.command, ['mkdir', '-p', '/shared/data', '/shared/checkpoints'], 'its command');
  eq(roots.volumeMounts, [{ name: 'shared', mountPath: '/shared' }], 'its mounts');
  const elsewhere = init(render(['--set', 'coordinator.dataRoots={/data}', '--set', 'coordinator.checkpointRoots={/shared/ckpt}']));
  eq(elsewhere.command, ['mkdir', '-p', '/shared/ckpt'], 'only roots under the shared mount');
  expect(!init(render(['--set', 'workers.shared.readOnly=true'])), 'none when the shared volume is read-only');
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
  // The helm test's corpus folder is a data root of its own (helmTest.enabled, the default).
  eq(cm.data.FP8_DATA_ROOTS, '/shared/data:/datasets:/etc/fp8/helm-test', 'FP8_DATA_ROOTS');
  eq(cm.data.FP8_CHECKPOINT_ROOTS, '/shared/checkpoints', 'FP8_CHECKPOINT_ROOTS');
  eq(cm.data.FP8_COORDINATOR_LISTEN, '0.0.0.0:7070', 'FP8_COORDINATOR_LISTEN');
  eq(cm.data.FP8_COORDINATOR_ADVERTISE, `${svc.metadata.name}.${NAMESPACE}.svc:7070`, 'FP8_COORDINATOR_ADVERTISE');
  for (const v of Object.values(cm.data)) expect(typeof v === 'string', 'ConfigMap values are strings');
});

test('logFormat and logLevel reach the coordinator (ConfigMap) and every worker (flags)', () => {
  const objs = render(['--set', 'logFormat=json', '--set', 'logLevel=warning']);
  const cm = one(objs, 'ConfigMap', component('coordinator'), 'coordinator ConfigMap');
  eq(cm.data.FP8_LOG_FORMAT, 'json', 'FP8_LOG_FORMAT');
  eq(cm.data.FP8_LOG_LEVEL, 'warning', 'FP8_LOG_LEVEL');
  const args = workerContainer(objs).args;
  eq(flagValue(args, '--log-format'), 'json', 'worker --log-format');
  eq(flagValue(args, '--log-level'), 'warning', 'worker --log-level');
  const defaults = render([]);
  eq(one(defaults, 'ConfigMap', component('coordinator'), 'coordinator ConfigMap').data.FP8_LOG_FORMAT, 'text',
     'text by default');
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
  expect(notes.includes(`helm test ${RELEASE} -n ${NAMESPACE} --logs`), 'NOTES: helm test');
  expect(notes.includes('a 2-rank cuda job of 20 steps'), 'NOTES: what the helm test runs');
  expect(!renderNotes(['--set', 'helmTest.enabled=false']).includes('helm test'), 'NOTES: no helm test when disabled');
  expect(!notes.includes('networkPolicy.grpcFrom'), 'no network policy note by default');
  expect(renderNotes(['--set', 'networkPolicy.enabled=true', '--set', 'coordinator.service.type=LoadBalancer']).includes('networkPolicy.grpcFrom'),
         'NOTES: a LoadBalancer behind the network policy needs grpcFrom');
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

// --- startup probes ------------------------------------------------------------------------
test('startupProbe: /healthz on the metrics port of the coordinator and the workers; timings from values; off when disabled', () => {
  let objs = render([]);
  for (const [who, c, timings] of [['coordinator', coordContainer(objs), { failureThreshold: 60, periodSeconds: 2, timeoutSeconds: 2 }],
                                   ['worker', workerContainer(objs), { failureThreshold: 60, periodSeconds: 5, timeoutSeconds: 3 }]]) {
    expect(c.startupProbe, `${who} has a startupProbe`);
    eq(c.startupProbe.httpGet, { path: '/healthz', port: 'metrics' }, `${who} startupProbe.httpGet`);
    expect(c.ports.some((p) => p.name === 'metrics'), `${who} has the port the probe names`);
    const { httpGet, ...rest } = c.startupProbe;
    eq(rest, timings, `${who} startupProbe timings (and no "enabled" key)`);
  }
  objs = render(['--set', 'coordinator.startupProbe.failureThreshold=300', '--set', 'workers.startupProbe.periodSeconds=15']);
  eq(coordContainer(objs).startupProbe.failureThreshold, 300, 'coordinator startupProbe.failureThreshold from values');
  eq(workerContainer(objs).startupProbe.periodSeconds, 15, 'worker startupProbe.periodSeconds from values');
  objs = render(['--set', 'coordinator.startupProbe.enabled=false', '--set', 'workers.startupProbe.enabled=false']);
  eq(coordContainer(objs).startupProbe, undefined, 'coordinator startupProbe disabled');
  eq(workerContainer(objs).startupProbe, undefined, 'worker startupProbe disabled');
  expect(coordContainer(objs).livenessProbe && workerContainer(objs).livenessProbe, 'liveness probes stay');
});

// --- PodDisruptionBudget --------------------------------------------------------------------
test('PodDisruptionBudget: on by default, maxUnavailable 1, selects exactly the worker pods', () => {
  let objs = render([]);
  const pdb = one(objs, 'PodDisruptionBudget');
  eq(pdb.apiVersion, 'policy/v1', 'apiVersion');
  eq(pdb.spec.maxUnavailable, 1, 'maxUnavailable');
  eq(pdb.spec.minAvailable, undefined, 'no minAvailable beside maxUnavailable');
  eq(pdb.spec.unhealthyPodEvictionPolicy, undefined, "unhealthyPodEvictionPolicy left to the API server");
  expect(selects(pdb.spec.selector.matchLabels, workersSts(objs).spec.template.metadata.labels), 'selects the worker pods');
  expect(!selects(pdb.spec.selector.matchLabels, coordDeploy(objs).spec.template.metadata.labels), 'not the coordinator');
  objs = render(['--set', 'workers.podDisruptionBudget.maxUnavailable=null', '--set-string', 'workers.podDisruptionBudget.minAvailable=75%',
                 '--set', 'workers.podDisruptionBudget.unhealthyPodEvictionPolicy=AlwaysAllow']);
  const byPercent = one(objs, 'PodDisruptionBudget');
  eq([byPercent.spec.minAvailable, byPercent.spec.maxUnavailable], ['75%', undefined], 'minAvailable as a percentage');
  eq(byPercent.spec.unhealthyPodEvictionPolicy, 'AlwaysAllow', 'unhealthyPodEvictionPolicy');
  eq(one(render(['--set', 'workers.podDisruptionBudget.maxUnavailable=0']), 'PodDisruptionBudget').spec.maxUnavailable, 0,
     'maxUnavailable 0 (no voluntary eviction)');
  eq(one(render(['--set-string', 'workers.podDisruptionBudget.maxUnavailable=2']), 'PodDisruptionBudget').spec.maxUnavailable, 2,
     'a count given as a string is an integer');
  none(render(['--set', 'workers.podDisruptionBudget.enabled=false']), 'PodDisruptionBudget');
});

// --- NetworkPolicy ----------------------------------------------------------------------------
// Does a NetworkPolicyPeer admit a pod with these labels in namespace ns (whose labels are nsLabels)?
function admits(peer, podLabels, ns, nsLabels) {
  const matchSel = (sel, labels) => Object.entries(sel.matchLabels || {}).every(([k, v]) => labels[k] === v) &&
      (sel.matchExpressions || []).every((e) => (e.operator === 'In' ? e.values.includes(labels[e.key])
                                                : e.operator === 'NotIn' ? !e.values.includes(labels[e.key])
                                                : e.operator === 'Exists' ? e.key in labels : !(e.key in labels)));
  if (peer.ipBlock) return false;
  if (peer.namespaceSelector ? !matchSel(peer.namespaceSelector, nsLabels) : ns !== NAMESPACE) return false;
  return peer.podSelector ? matchSel(peer.podSelector, podLabels) : true;
}
// The ingress rules of a policy that let a pod reach `port` (a rule without ports: every port).
function reaches(policy, port, podLabels, ns = NAMESPACE, nsLabels = { 'kubernetes.io/metadata.name': ns }) {
  return (policy.spec.ingress || []).some((r) => (!r.ports || r.ports.some((p) => p.port === port)) &&
                                                 (r.from || []).some((peer) => admits(peer, podLabels, ns, nsLabels)));
}

test('NetworkPolicy: off by default; on, gRPC only from workers (and their ranks), the coordinator and the helm test', () => {
  none(render([]), 'NetworkPolicy');
  const objs = render(['--set', 'networkPolicy.enabled=true']);
  const coordPol = one(objs, 'NetworkPolicy', component('coordinator'), 'coordinator NetworkPolicy');
  const workerPol = one(objs, 'NetworkPolicy', component('worker'), 'worker NetworkPolicy');
  const coordPod = coordDeploy(objs).spec.template.metadata.labels;
  const workerPod = workersSts(objs).spec.template.metadata.labels;
  const testPod = one(objs, 'Pod').metadata.labels;
  eq(coordPol.spec.policyTypes, ['Ingress'], 'coordinator policyTypes (egress stays open)');
  eq(workerPol.spec.policyTypes, ['Ingress'], 'worker policyTypes');
  expect(selects(coordPol.spec.podSelector.matchLabels, coordPod) && !selects(coordPol.spec.podSelector.matchLabels, workerPod),
         'the coordinator policy covers the coordinator pod only');
  expect(selects(workerPol.spec.podSelector.matchLabels, workerPod) && !selects(workerPol.spec.podSelector.matchLabels, coordPod),
         'the worker policy covers the worker pods only');
  const grpc = coordContainer(objs).ports.find((p) => p.name === 'grpc').containerPort;
  const coordMetrics = coordContainer(objs).ports.find((p) => p.name === 'metrics').containerPort;
  const workerMetrics = workerContainer(objs).ports.find((p) => p.name === 'metrics').containerPort;
  expect(reaches(coordPol, grpc, workerPod), 'worker pods (workers and fp8-train ranks) reach the gRPC port');
  expect(reaches(coordPol, grpc, coordPod), 'the coordinator pod reaches its own gRPC port (kubectl exec fp8ctl)');
  expect(reaches(coordPol, grpc, testPod), 'the helm test pod reaches the gRPC port');
  expect(!reaches(coordPol, grpc, { app: 'other' }), 'another pod of the namespace does not');
  expect(!reaches(coordPol, grpc, workerPod, 'other'), 'worker-labelled pods of another namespace do not');
  expect(!reaches(coordPol, coordMetrics, workerPod), 'workers do not reach the coordinator metrics port');
  // Prometheus in "monitoring" scrapes both; nothing else does.
  const prom = { 'app.kubernetes.io/name': 'prometheus' };
  expect(reaches(coordPol, coordMetrics, prom, 'monitoring'), 'monitoring reaches the coordinator /metrics');
  expect(reaches(workerPol, workerMetrics, prom, 'monitoring'), 'monitoring reaches the workers /metrics');
  expect(!reaches(coordPol, grpc, prom, 'monitoring'), 'monitoring does not reach gRPC');
  expect(!reaches(workerPol, workerMetrics, prom, 'default'), 'another namespace does not reach the workers /metrics');
  expect(!reaches(workerPol, workerMetrics, { app: 'other' }), 'another pod of the namespace does not reach the workers /metrics');
  // Ranks connect to their peers on ports the OS picks: every port between worker pods.
  for (const port of [workerMetrics, 29500, 41234, 60999]) {
    expect(reaches(workerPol, port, workerPod), `worker pods reach each other on port ${port}`);
    expect(!reaches(workerPol, port, coordPod), `the coordinator does not reach the workers on ${port}`);
  }
  expect(!reaches(workerPol, 41234, testPod), 'the helm test pod does not reach the workers');
});

test('NetworkPolicy: ports follow the values; monitoring by selector, narrowed to pods; grpcFrom; no helm test peer without the test', () => {
  let objs = render(['--set', 'networkPolicy.enabled=true', '--set', 'coordinator.grpcPort=8080', '--set', 'coordinator.metricsPort=9500',
                     '--set', 'workers.metricsPort=9600', '--set', 'networkPolicy.metrics.namespace=prom',
                     '--set', 'networkPolicy.metrics.podSelector.matchLabels.app=prometheus',
                     '--set-json', 'networkPolicy.grpcFrom=[{"namespaceSelector":{"matchLabels":{"team":"ml"}}},{"ipBlock":{"cidr":"10.1.0.0/16"}}]']);
  const coordPol = one(objs, 'NetworkPolicy', component('coordinator'), 'coordinator NetworkPolicy');
  const workerPol = one(objs, 'NetworkPolicy', component('worker'), 'worker NetworkPolicy');
  const workerPod = workersSts(objs).spec.template.metadata.labels;
  expect(reaches(coordPol, 8080, workerPod), 'gRPC on coordinator.grpcPort');
  expect(!reaches(coordPol, 7070, workerPod), 'not on the default port');
  expect(reaches(coordPol, 9500, { app: 'prometheus' }, 'prom'), 'coordinator metrics on coordinator.metricsPort from the prom namespace');
  expect(reaches(workerPol, 9600, { app: 'prometheus' }, 'prom'), 'worker metrics on workers.metricsPort');
  expect(!reaches(workerPol, 9600, { app: 'grafana' }, 'prom'), 'podSelector narrows to Prometheus');
  expect(!reaches(workerPol, 9600, { app: 'prometheus' }, 'monitoring'), 'the default namespace is replaced');
  expect(reaches(coordPol, 8080, { any: 'pod' }, 'ml-users', { team: 'ml' }), 'grpcFrom namespaces reach gRPC');
  const grpcRule = coordPol.spec.ingress.find((r) => r.ports.some((p) => p.port === 8080));
  expect(grpcRule.from.some((p) => p.ipBlock && p.ipBlock.cidr === '10.1.0.0/16'), 'grpcFrom ipBlock');
  objs = render(['--set', 'networkPolicy.enabled=true', '--set-json', 'networkPolicy.metrics.namespaceSelector={"matchLabels":{"monitoring":"true"}}']);
  const bySelector = one(objs, 'NetworkPolicy', component('worker'), 'worker NetworkPolicy');
  expect(reaches(bySelector, 9401, {}, 'obs', { monitoring: 'true' }), 'namespaceSelector admits a labelled namespace');
  expect(!reaches(bySelector, 9401, {}, 'monitoring'), 'namespaceSelector replaces the namespace name');
  objs = render(['--set', 'networkPolicy.enabled=true', '--set', 'helmTest.enabled=false']);
  const noTest = one(objs, 'NetworkPolicy', component('coordinator'), 'coordinator NetworkPolicy');
  const testLabels = { ...noTest.spec.podSelector.matchLabels, 'app.kubernetes.io/component': 'helm-test' };
  expect(!reaches(noTest, 7070, testLabels), 'no helm test peer without the helm test');
});

// --- PrometheusRule ---------------------------------------------------------------------------
test('PrometheusRule: off by default; its alerts select this release by the ServiceMonitor labels, on the metrics of METRICS.md', () => {
  none(render(['--set', 'serviceMonitor.enabled=true']), 'PrometheusRule');
  let objs = render(['--set', 'serviceMonitor.enabled=true', '--set', 'prometheusRule.enabled=true',
                     '--set', 'prometheusRule.labels.release=prometheus', '--set', 'prometheusRule.additionalLabels.team=ml']);
  const pr = one(objs, 'PrometheusRule');
  eq(pr.apiVersion, 'monitoring.coreos.com/v1', 'apiVersion');
  eq(pr.metadata.labels.release, 'prometheus', 'PrometheusRule labels from values');
  eq(pr.metadata.namespace, NAMESPACE, 'namespace');
  const rules = pr.spec.groups.flatMap((g) => g.rules);
  eq(rules.map((r) => r.alert), ['FP8JobFailed', 'FP8JobLossNotFinite', 'FP8JobThroughputDropped', 'FP8WorkerLost',
                                 'FP8WorkersMissing', 'FP8CoordinatorDown'], 'alerts');
  // The ServiceMonitor's job label is the Service's name: the rules must select that one.
  const coordSvc = one(objs, 'Service', component('coordinator'), 'coordinator Service').metadata.name;
  for (const r of rules) {
    expect(r.expr.includes(`job="${coordSvc}",namespace="${NAMESPACE}"`), `${r.alert} selects job="${coordSvc}" in ${NAMESPACE}`);
    expect(!/\{[^}]*\bjob="[^"]*"[^}]*\}/.test(r.expr.replace(new RegExp(`job="${coordSvc}"`, 'g'), '')), `${r.alert} selects no other job`);
    eq(r.labels.team, 'ml', `${r.alert} additionalLabels`);
    expect(r.labels.severity, `${r.alert} has a severity`);
    expect(r.annotations && r.annotations.summary && r.annotations.description, `${r.alert} has a summary and a description`);
  }
  const by = Object.fromEntries(rules.map((r) => [r.alert, r]));
  const metricNames = fs.readFileSync(path.join(grafanaDir, '..', 'METRICS.md'), 'utf8');
  for (const r of rules) {
    for (const m of r.expr.match(/\bfp8_[a-z_]+/g) || []) expect(metricNames.includes(`\`${m}\``), `${r.alert}: ${m} is in deploy/METRICS.md`);
  }
  expect(by.FP8JobThroughputDropped.expr.includes('< 0.5 * quantile_over_time(0.5, fp8_job_tokens_per_second'), 'half of the median');
  expect(by.FP8JobThroughputDropped.expr.includes('[1h]'), 'median over 1h');
  eq(by.FP8JobThroughputDropped.for, '10m', 'throughput drop for');
  expect(/\) < 2$/.test(by.FP8WorkersMissing.expr), 'workers expected: 2 replicas x 1 GPU');
  eq([by.FP8JobFailed.labels.severity, by.FP8JobLossNotFinite.labels.severity, by.FP8CoordinatorDown.labels.severity],
     ['warning', 'critical', 'critical'], 'severities');
  objs = render(['--set', 'serviceMonitor.enabled=true', '--set', 'prometheusRule.enabled=true', '--set', 'workers.gpusPerPod=4',
                 '--set', 'workers.device=cuda:all', '--set', 'workers.replicas=3', '--set', 'prometheusRule.alerts.workerLost.enabled=false',
                 '--set', 'prometheusRule.alerts.throughputDrop.window=3h', '--set', 'prometheusRule.namespace=monitoring']);
  const pr2 = one(objs, 'PrometheusRule');
  const rules2 = Object.fromEntries(pr2.spec.groups.flatMap((g) => g.rules).map((r) => [r.alert, r]));
  expect(!rules2.FP8WorkerLost, 'a disabled alert is left out');
  expect(/\) < 12$/.test(rules2.FP8WorkersMissing.expr), 'workers expected: 3 pods x 4 GPUs');
  expect(rules2.FP8JobThroughputDropped.expr.includes('[3h]'), 'throughput window from values');
  eq(pr2.metadata.namespace, 'monitoring', 'prometheusRule.namespace');
  expect(rules2.FP8JobFailed.expr.includes(`namespace="${NAMESPACE}"`), 'rules in another namespace still select the release namespace');
  const own = one(render(['--set', 'prometheusRule.enabled=true', '--set-string', 'prometheusRule.coordinatorSelector=job="fp8"']), 'PrometheusRule');
  expect(own.spec.groups[0].rules.every((r) => r.expr.includes('{job="fp8"') && !r.expr.includes('namespace=')),
         'coordinatorSelector replaces the ServiceMonitor labels');
});

// --- helm test -------------------------------------------------------------------------------
test('helm test: a test-hook Pod submits the tiny job through the coordinator Service with the admin token and follows it', () => {
  const objs = render([]);
  const pod = one(objs, 'Pod');
  eq(pod.metadata.annotations['helm.sh/hook'], 'test', 'helm.sh/hook');
  eq(pod.metadata.annotations['helm.sh/hook-delete-policy'], 'before-hook-creation', 'hook-delete-policy');
  eq(pod.spec.restartPolicy, 'Never', 'restartPolicy');
  eq(pod.spec.activeDeadlineSeconds, 600, 'activeDeadlineSeconds');
  eq(pod.spec.automountServiceAccountToken, false, 'no service account token');
  const c = pod.spec.containers[0];
  eq(c.image, coordContainer(objs).image, 'the chart image');
  eq(c.command, ['fp8ctl'], 'command');
  const coordSvc = one(objs, 'Service', component('coordinator'), 'coordinator Service');
  eq(flagValue(c.args, '--coordinator'), `${coordSvc.metadata.name}.${NAMESPACE}.svc:7070`, '--coordinator: the Service');
  eq(c.args.slice(-3, -2), ['submit'], 'submit');
  eq(c.args[c.args.length - 1], '--follow', '--follow');
  // The token file: the admin token of the chart's Secret, and only it.
  const secret = one(objs, 'Secret');
  const tokenFile = flagValue(c.args, '--token-file');
  const tokenMount = c.volumeMounts.find((m) => tokenFile.startsWith(`${m.mountPath}/`));
  const tokenVol = pod.spec.volumes.find((v) => v.name === tokenMount.name);
  eq(tokenVol.secret.secretName, secret.metadata.name, 'token volume: the chart Secret');
  eq(tokenVol.secret.items, [{ key: 'admin-token', path: tokenFile.slice(tokenMount.mountPath.length + 1) }], 'token volume: the admin token only');
  // The job file: job.yaml of the test ConfigMap.
  const jobFile = c.args[c.args.length - 2];
  const jobMount = c.volumeMounts.find((m) => jobFile.startsWith(`${m.mountPath}/`));
  const jobVol = pod.spec.volumes.find((v) => v.name === jobMount.name);
  const cm = one(objs, 'ConfigMap', (o) => o.metadata.name === jobVol.configMap.name, 'test ConfigMap');
  eq(jobVol.configMap.items, [{ key: 'job.yaml', path: jobFile.slice(jobMount.mountPath.length + 1) }], 'job.yaml from the ConfigMap');
  expect(!cm.metadata.annotations || !cm.metadata.annotations['helm.sh/hook'], 'the ConfigMap is a release object (the workers mount it)');
  const job = yaml.load(cm.data['job.yaml']);
  eq(job.resources, { world_size: 2, device: 'cuda' }, 'GPU workers: a 2-rank cuda job');
  eq(job.train.steps, 20, 'steps');
  const cfg = one(objs, 'ConfigMap', component('coordinator'), 'coordinator ConfigMap');
  expect(cfg.data.FP8_DATA_ROOTS.split(':').some((r) => job.data.path.startsWith(`${r}/`)), `data.path ${job.data.path} under a data root`);
  expect(cfg.data.FP8_CHECKPOINT_ROOTS.split(':').some((r) => job.checkpoint.dir.startsWith(`${r}/`)), 'checkpoint.dir under a checkpoint root');
  // Every worker has the corpus at data.path: a subPath mount of the ConfigMap's corpus.txt.
  const w = workerContainer(objs);
  const corpusMount = w.volumeMounts.find((m) => m.mountPath === job.data.path);
  expect(corpusMount, 'the workers mount the corpus at data.path');
  eq([corpusMount.subPath, corpusMount.readOnly], ['corpus.txt', true], 'a read-only subPath mount (a plain file, no symlinks)');
  const corpusVol = workersSts(objs).spec.template.spec.volumes.find((v) => v.name === corpusMount.name);
  eq(corpusVol.configMap.name, cm.metadata.name, 'from the test ConfigMap');
  const corpus = cm.data['corpus.txt'];
  expect(corpus.length >= 8192 && corpus.length < 65536, `a corpus of 8-64 KiB (${corpus.length} bytes)`);
  expect(corpus.length * job.data.val_fraction > 4 * (job.data.seq_len + 1), 'the validation split holds several sequences');
});

test('helm test: CPU workers get a CPU job; world size, steps, TLS, timeout from values; disabled leaves no trace', () => {
  let objs = render(['-f', cpuValues]);
  let job = yaml.load(one(objs, 'ConfigMap', (o) => o.metadata.name === 'fp8-test', 'test ConfigMap').data['job.yaml']);
  eq(job.resources, { world_size: 2, device: 'cpu', cpus_per_rank: 1 }, 'CPU workers: a 2-rank cpu job within workers.cpus');
  objs = render(['-f', cpuValues, '--set', 'workers.replicas=1']);
  job = yaml.load(one(objs, 'ConfigMap', (o) => o.metadata.name === 'fp8-test', 'test ConfigMap').data['job.yaml']);
  eq(job.resources.world_size, 1, 'one worker: a 1-rank job');
  objs = render(['--set', 'helmTest.worldSize=4', '--set', 'workers.replicas=4', '--set', 'helmTest.steps=7',
                 '--set', 'helmTest.timeoutSeconds=900', '--set', 'tls.enabled=true', '--set', 'tls.secretName=fp8-tls',
                 '--set-json', 'coordinator.checkpointRoots=["/ckpt/"]']);
  job = yaml.load(one(objs, 'ConfigMap', (o) => o.metadata.name === 'fp8-test', 'test ConfigMap').data['job.yaml']);
  eq([job.resources.world_size, job.train.steps, job.train.warmup_steps], [4, 7, 2], 'world size and steps from values');
  eq(job.checkpoint.dir, '/ckpt/fp8-helm-test', 'checkpoint.dir under the first checkpoint root');
  const pod = one(objs, 'Pod');
  eq(pod.spec.activeDeadlineSeconds, 900, 'timeoutSeconds');
  const c = pod.spec.containers[0];
  const ca = flagValue(c.args, '--coordinator-ca');
  eq(ca, '/etc/fp8/tls/ca.crt', '--coordinator-ca');
  const caVol = pod.spec.volumes.find((v) => v.name === c.volumeMounts.find((m) => ca.startsWith(`${m.mountPath}/`)).name);
  eq([caVol.secret.secretName, caVol.secret.items], ['fp8-tls', [{ key: 'ca.crt', path: 'ca.crt' }]], 'the CA only');
  expect(c.args.indexOf('--coordinator-ca') < c.args.indexOf('submit'), 'global flags before the verb');
  objs = render(['--set', 'helmTest.enabled=false']);
  none(objs, 'Pod');
  expect(!objs.some((o) => o.kind === 'ConfigMap' && o.metadata.name === 'fp8-test'), 'no test ConfigMap');
  expect(!workerContainer(objs).volumeMounts.some((m) => m.mountPath.startsWith('/etc/fp8/helm-test')), 'no corpus mount');
  eq(one(objs, 'ConfigMap', component('coordinator'), 'coordinator ConfigMap').data.FP8_DATA_ROOTS, '/shared/data', 'no test data root');
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
