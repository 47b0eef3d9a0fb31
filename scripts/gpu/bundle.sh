#!/usr/bin/env bash
# Builds the gpu tests, the executables they start and the GPU benchmarks here (sm_90) and
# packs them, with the non-CUDA shared libraries they need, into .devbuild/bundle.tar.xz
# for a GPU machine that has the CUDA libraries but none of Debian's -dev packages
# (scripts/gpu/run.sh unpacks it there). cuBLASLt, NCCL and the driver come from the GPU
# machine.
#
# The device tool carries at most 64 MiB, and the shared libraries alone are larger than
# that unpacked (OpenBLAS is 36 MB: it holds kernels for every x86 generation; gRPC,
# protobuf, absl and OpenSSL for fp8-coordinator, fp8-worker and fp8-train add ~20 MB), so
# binaries are stripped and everything travels xz-compressed (OpenBLAS packs to ~4 MB).
#
#   JOBS=2 scripts/gpu/bundle.sh                 builds in build/gpu-bundle
#   BUILD_DIR=build/x scripts/gpu/bundle.sh      reuses another Release build with CUDA
#
# A wanted target this tree does not define (a test still being written) is left out with
# a warning rather than failing the bundle.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/bootstrap.sh
build=${BUILD_DIR:-build/gpu-bundle}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null

wanted=(
  # gpu tests (scripts/gpu/run.sh tests)
  fp8_format_test fp8_cuda_contract_test fp8_cuda_block_scaling_test fp8_cuda_backend_test fp8_float8_linear_cuda_test
  fp8_nccl_process_group_test fp8_cuda_model_ops_test fp8_cuda_training_test fp8_cuda_fsdp_test fp8_cuda_job_test
  fp8_wgmma_probe_test fp8_device_decoder_cuda_test
  # what fp8_cuda_job_test starts (it finds them through FP8_TEST_BIN_DIR)
  fp8-coordinator fp8-worker fp8-train
  # benchmarks
  bench_gemm bench_cast bench_linear bench_train bench_attention bench_generate
)
available=$(ninja -C "$build" -t targets all | sed -e 's/: .*//')
targets=()
for t in "${wanted[@]}"; do
  if grep -qxF "$t" <<<"$available"; then
    targets+=("$t")
  else
    echo "bundle: warning: this tree has no target $t; left out" >&2
  fi
done
ninja -C "$build" -j "${JOBS:-$(nproc)}" "${targets[@]}"

stage=$build/devbuild-stage
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
for t in "${targets[@]}"; do
  f=$(find "$build" -type f -name "$t" -perm -u+x -not -path "$stage/*" -print -quit)
  [[ -n $f ]] || { echo "bundle: built $t but cannot find it under $build" >&2; exit 1; }
  cp "$f" "$stage/bin/"
  strip "$stage/bin/$t"
  # Shared libraries outside the base system and CUDA go along.
  ldd "$f" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
      libcuda.so*|libcublas*|libcudart*|libnccl*) ;;
      *) cp -nL "$lib" "$stage/lib/" ;;
    esac
  done
done
strip --strip-unneeded "$stage"/lib/* 2>/dev/null || true

rm -rf .devbuild
mkdir -p .devbuild
(cd "$stage" && find bin lib -type f -printf '%s\t%p\n' | sort -k2) > .devbuild/MANIFEST.txt
XZ_OPT="-6 -T${JOBS:-0}" tar -C "$stage" -cJf .devbuild/bundle.tar.xz bin lib
unpacked=$(du -sb "$stage" | cut -f1)
packed=$(stat -c %s .devbuild/bundle.tar.xz)
echo "bundle: ${#targets[@]} executables, $(find "$stage/lib" -type f | wc -l) shared libraries;" \
  "$((unpacked / 1048576)) MiB unpacked, $((packed / 1048576)) MiB packed in .devbuild/bundle.tar.xz"
if ((packed > 60 * 1048576)); then
  echo "bundle: warning: over 60 MiB; the device tool carries at most 64 MiB with the working tree" >&2
fi
