#!/usr/bin/env bash
# Configures and builds one preset (default: release) after installing what the build
# needs. Usage: scripts/build.sh [release|debug|cpu-only]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
scripts/bootstrap.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
