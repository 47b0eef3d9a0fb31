#!/usr/bin/env bash
# usage: containerfile_test.sh SOURCE_DIR
# deploy/image/Containerfile, as a user with a registry builds it: `podman build` of the
# context scripts/build_image.sh --context writes. Its base image comes from mmdebstrap
# here (a stand-in for debian:bookworm-slim: no registry is reachable); the result must
# pass the same checks as the mmdebstrap image.
set -euo pipefail
src=$1
work=$(mktemp -d)
source "$src/tests/deploy/container/podman_env.sh"
base=localhost/fp8-test-base:bookworm
built=localhost/fp8-train:containerfile-test
trap 'pm rmi -f "$built" >/dev/null 2>&1 || true; rm -rf "$work" "$podman_conf"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if ! pm image exists "$base"; then
  sources=/etc/apt/sources.list.d/debian.sources
  [[ -f $sources ]] || sources=/etc/apt/sources.list
  mmdebstrap --variant=apt bookworm "$work/base.tar" "$sources" >"$work/mmdebstrap.log" 2>&1 ||
    fail "mmdebstrap: $(tail -5 "$work/mmdebstrap.log")"
  pm import --quiet "$work/base.tar" "$base" >/dev/null
fi
"$src/scripts/build_image.sh" --context "$work/context" >/dev/null
pm build --quiet --network=host --build-arg BASE="$base" -t "$built" "$work/context" >"$work/build.log" 2>&1 ||
  fail "podman build: $(tail -20 "$work/build.log")"
FP8_IMAGE=$built bash "$src/tests/deploy/container/image_contents_test.sh" "$src"
