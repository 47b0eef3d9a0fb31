#!/usr/bin/env bash
# usage: image_contents_test.sh SOURCE_DIR
# The image scripts/build_image.sh made (the fp8_image_build fixture): it runs as uid
# 65532, every shared library its binaries load is in it, and every binary starts.
set -euo pipefail
src=$1
source "$src/tests/deploy/container/podman_env.sh"
trap 'rm -f "$podman_conf"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

pm image exists "$image" || fail "no image $image: the fp8_image_build test makes it"
[[ $(pm run --rm "$image" id -u) == 65532 ]] || fail "the image does not run as uid 65532"
[[ $(pm run --rm "$image" id -g) == 65532 ]] || fail "the image does not run as gid 65532"
[[ $(pm run --rm "$image" stat -c %u /var/lib/fp8) == 65532 ]] || fail "/var/lib/fp8 is not the user's"

binaries=(fp8-coordinator fp8-worker fp8-train fp8ctl fp8-data fp8-model)
for b in "${binaries[@]}"; do
  out=$(pm run --rm "$image" ldd "/usr/local/bin/$b") || fail "ldd $b in the image: $out"
  if grep -q "not found" <<<"$out"; then fail "$b misses libraries in the image: $(grep 'not found' <<<"$out")"; fi
  pm run --rm "$image" "$b" --help >/dev/null 2>&1 || fail "$b --help does not run in the image"
  echo "ok: $b loads every library and runs"
done
# On PATH, as the chart's commands name them.
pm run --rm "$image" sh -c 'command -v fp8-coordinator fp8-worker fp8ctl' >/dev/null || fail "binaries not on PATH"
echo PASS
