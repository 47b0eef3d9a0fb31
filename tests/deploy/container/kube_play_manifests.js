#!/usr/bin/env node
// Turns the chart's `helm template` output into what `podman kube play` can run, for the
// manifests' smoke test (kube_play_test.sh). podman plays Pods, Deployments, ConfigMaps
// and PVCs, but has no Services, StatefulSets or cluster DNS; so, and only so:
//   - the StatefulSet becomes one Pod per replica, named as its pods would be;
//   - every pod gets hostAliases for the in-cluster names it dials (the coordinator
//     Service, the workers' headless names) at the fixed IPs the test gives each pod;
//   - what the kubelet fills in, podman does not: env from the fieldRefs metadata.name,
//     metadata.namespace and status.podIP gets its value, and $(VAR) in command and args
//     is expanded;
//   - a subPath mount of a ConfigMap key (a plain file in a cluster; podman mounts the whole
//     volume there) becomes a hostPath of that key written out to OUT_DIR;
//   - a pod with init containers restarts OnFailure, not Always: podman applies the pod's
//     policy to init containers too and would rerun them for ever, where the kubelet runs
//     each once;
//   - containerPorts are dropped: podman would bind each on the host (two workers on one
//     host clash), where a cluster only names them; pods reach each other by pod IP;
//   - the Secret is written out alone, for `podman secret create`.
// Everything else (commands, args, env, volumes, security contexts) is played as rendered.
//
//   node kube_play_manifests.js TOOLS_DIR RENDERED.yaml OUT_DIR COORDINATOR_IP TEST_IP WORKER_IP...
//
// Writes OUT_DIR/secret-<name>.yaml, coordinator.yaml, worker-<i>.yaml, test.yaml.
'use strict';

const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

const [toolsDir, renderedFile, outDir, coordinatorIp, testIp, ...workerIps] = process.argv.slice(2);
if (!toolsDir || !renderedFile || !outDir || !coordinatorIp || !testIp || workerIps.length === 0) {
  console.error('usage: kube_play_manifests.js TOOLS_DIR RENDERED.yaml OUT_DIR COORDINATOR_IP TEST_IP WORKER_IP...');
  process.exit(2);
}
const yaml = createRequire(path.join(path.resolve(toolsDir), 'package.json'))('js-yaml');
const objs = yaml.loadAll(fs.readFileSync(renderedFile, 'utf8')).filter((o) => o);
const ofKind = (kind) => objs.filter((o) => o.kind === kind);
function onlyOne(kind) {
  const found = ofKind(kind);
  if (found.length !== 1) throw new Error(`expected one ${kind} in ${renderedFile}, found ${found.length}`);
  return found[0];
}

const coordinatorService = ofKind('Service').find((s) => s.spec.clusterIP !== 'None');
const headless = ofKind('Service').find((s) => s.spec.clusterIP === 'None');
const deployment = onlyOne('Deployment');
const statefulSet = onlyOne('StatefulSet');
const testPod = ofKind('Pod').find((p) => (p.metadata.annotations || {})['helm.sh/hook'] === 'test');
const ns = deployment.metadata.namespace;
const configMaps = ofKind('ConfigMap');
fs.mkdirSync(outDir, { recursive: true });
if (statefulSet.spec.replicas !== workerIps.length) {
  throw new Error(`the chart renders ${statefulSet.spec.replicas} workers, the test gave ${workerIps.length} IPs`);
}

// Every in-cluster name a pod may dial, with and without the namespace and ".svc".
function names(host, sub) {
  return [`${host}.${sub}.svc`, `${host}.${sub}`].concat(sub === ns ? [host] : []);
}
const workerNames = workerIps.map((_, i) => `${statefulSet.metadata.name}-${i}`);
const hostAliases = [{ ip: coordinatorIp, hostnames: names(coordinatorService.metadata.name, ns) }].concat(
  workerNames.map((n, i) => ({ ip: workerIps[i], hostnames: names(n, `${headless.metadata.name}.${ns}`) })));

// What the kubelet does to a pod's containers that podman does not (see above).
function asKubeletWould(podSpec, podName, ip) {
  const fields = { 'metadata.name': podName, 'metadata.namespace': ns, 'status.podIP': ip };
  for (const c of [...(podSpec.initContainers || []), ...podSpec.containers]) {
    const values = {};
    for (const e of c.env || []) {
      const field = ((e.valueFrom || {}).fieldRef || {}).fieldPath;
      if (field in fields) {
        e.value = fields[field];
        delete e.valueFrom;
      }
      if (e.value !== undefined) values[e.name] = e.value;
    }
    const expand = (s) => s.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, name) => (name in values ? values[name] : m));
    if (c.command) c.command = c.command.map(expand);
    if (c.args) c.args = c.args.map(expand);
    delete c.ports;
  }
  projectSubPathKeys(podSpec);
  if ((podSpec.initContainers || []).length > 0 && podSpec.restartPolicy !== 'Never') podSpec.restartPolicy = 'OnFailure';
}

// Each subPath mount of a configMap volume: the key, as a file of its own.
function projectSubPathKeys(podSpec) {
  const volumes = podSpec.volumes || [];
  for (const c of podSpec.containers) {
    for (const m of c.volumeMounts || []) {
      const v = volumes.find((x) => x.name === m.name);
      if (!m.subPath || !v || !v.configMap) continue;
      const item = (v.configMap.items || []).find((it) => it.path === m.subPath) || { key: m.subPath };
      const cm = configMaps.find((x) => x.metadata.name === v.configMap.name);
      if (!cm || !(item.key in (cm.data || {}))) throw new Error(`configMap ${v.configMap.name} has no key ${item.key}`);
      const file = path.resolve(outDir, `configmap-${cm.metadata.name}-${item.key}`);
      fs.writeFileSync(file, cm.data[item.key], { mode: 0o644 });
      const name = `${m.name}-${item.key}`.replace(/[^a-z0-9-]/g, '-');
      volumes.push({ name, hostPath: { path: file, type: 'File' } });
      m.name = name;
      delete m.subPath;
    }
  }
}

const dump = (list) => list.map((o) => yaml.dump(o, { lineWidth: -1 })).join('---\n');
for (const secret of ofKind('Secret')) fs.writeFileSync(path.join(outDir, `secret-${secret.metadata.name}.yaml`), dump([secret]));

deployment.spec.template.spec.hostAliases = hostAliases;
asKubeletWould(deployment.spec.template.spec, `${deployment.metadata.name}-0`, coordinatorIp);
fs.writeFileSync(path.join(outDir, 'coordinator.yaml'), dump([...configMaps, ...ofKind('PersistentVolumeClaim'), deployment]));

workerNames.forEach((name, i) => {
  const pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { ...statefulSet.spec.template.metadata, name, namespace: ns },
    spec: { ...structuredClone(statefulSet.spec.template.spec), hostname: name, hostAliases },
  };
  asKubeletWould(pod.spec, name, workerIps[i]);
  fs.writeFileSync(path.join(outDir, `worker-${i}.yaml`), dump([...configMaps, pod]));
});

if (testPod) {
  testPod.spec.hostAliases = hostAliases;
  asKubeletWould(testPod.spec, testPod.metadata.name, testIp);
  fs.writeFileSync(path.join(outDir, 'test.yaml'), dump([...configMaps, testPod]));
}
