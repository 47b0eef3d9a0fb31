#!/usr/bin/env bash
# usage: cuda_image_test.sh SOURCE_DIR BUILD_DIR
# scripts/build_image.sh --cuda: besides the CPU image's checks, the image's loader finds
# the CUDA libraries the GPU path opens at run time: the cuBLASLt and NCCL loading tests,
# run inside it, open and resolve them (neither needs a GPU). Skipped (77) without the
# CUDA toolkit.
set -euo pipefail
src=$1
build=$2
source "$src/tests/deploy/container/podman_env.sh"
built=localhost/fp8-train:cuda-test
trap 'pm rmi -f "$built" >/dev/null 2>&1 || true; rm -f "$podman_conf"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cublaslt_test=$build/tests/kernels/fp8_cublaslt_library_test
nccl_test=$build/tests/engine/collectives/fp8_nccl_library_test
if [[ ! -x $cublaslt_test || ! -x $nccl_test ]]; then
  echo "SKIP: this build has no CUDA backend (no CUDA toolkit or NCCL)"
  exit 77
fi
"$src/scripts/build_image.sh" --cuda --tag "$built" || fail "scripts/build_image.sh --cuda"
FP8_IMAGE=$built bash "$src/tests/deploy/container/image_contents_test.sh" "$src"
for t in "$cublaslt_test" "$nccl_test"; do
  out=$(pm run --rm -v "$(dirname "$t"):/t:ro" "$built" "/t/$(basename "$t")" 2>&1) ||
    fail "$(basename "$t") in the image: $out"
  echo "ok: $(basename "$t") passes in the image"
done
echo PASS
