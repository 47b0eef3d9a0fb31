#!/usr/bin/env bash
# Builds the gpu tests and GPU benchmarks here (sm_90) and packs them, with the
# non-CUDA shared libraries they need, into .devbuild/ for a GPU machine that has the
# CUDA libraries but none of Debian's -dev packages. One shared OpenBLAS travels (a
# static one would add ~28 MB to every binary); cuBLASLt and the driver come from the GPU
# machine. The device tool carries at most 64 MiB, so binaries are stripped.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/bootstrap.sh
build=build/gpu-bundle
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
targets=(fp8_format_test fp8_cuda_contract_test fp8_cuda_backend_test fp8_float8_linear_cuda_test fp8_nccl_process_group_test
         bench_gemm bench_cast)
ninja -C "$build" -j "${JOBS:-$(nproc)}" "${targets[@]}"

rm -rf .devbuild
mkdir -p .devbuild/bin .devbuild/lib
for t in "${targets[@]}"; do
  f=$(find "$build" -type f -name "$t" -perm -u+x | head -n 1)
  cp "$f" .devbuild/bin/
  strip .devbuild/bin/"$t"
  # Shared libraries outside the base system and CUDA go along.
  ldd "$f" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
      libcuda.so*|libcublas*|libcudart*|libnccl*) ;;
      *) cp -nL "$lib" .devbuild/lib/ ;;
    esac
  done
done
du -sh .devbuild
