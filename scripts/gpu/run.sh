#!/usr/bin/env bash
# Runs on the GPU machine, in the repository root, after scripts/gpu/bundle.sh packed
# .devbuild/ here: the gpu tests, then the GPU benchmarks side by side with PyTorch.
# Logs go to $OUT (or ./gpu-out). Usage: scripts/gpu/run.sh [tests|bench|all]
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
out=${OUT:-gpu-out}
mkdir -p "$out"

# The CUDA libraries: the toolkit's, else those PyTorch's wheels carry.
cuda_lib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -e $d/libcublasLt.so.13 ]] && cuda_lib=$d && break
done
if [[ -z $cuda_lib ]]; then
  cuda_lib=$(dirname "$(ldconfig -p | awk '/libcublasLt.so.13/ {print $NF; exit}')" 2>/dev/null || true)
fi
if [[ -z $cuda_lib || $cuda_lib == . ]]; then
  cuda_lib=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
fi
# NCCL (libnccl.so.2, too big to carry): the toolkit's, the system's, else PyTorch's wheel.
nccl_lib=""
if ! ldconfig -p | grep -q 'libnccl.so.2' && [[ ! -e $cuda_lib/libnccl.so.2 ]]; then
  nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
fi
export LD_LIBRARY_PATH=$PWD/.devbuild/lib:$cuda_lib${nccl_lib:+:$nccl_lib}:${LD_LIBRARY_PATH:-}
echo "cuBLASLt from: ${cuda_lib:-not found}"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$out/gpu.txt"

status=0
run() {  # run NAME CMD...: output to the console and $out/NAME.log
  local name=$1; shift
  echo "== $name: $*"
  timeout 900 "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  [[ $rc -eq 0 ]] || { echo "!! $name exited $rc"; status=1; }
}
bin=.devbuild/bin
if [[ $what == tests || $what == all ]]; then
  run format_test $bin/fp8_format_test --gtest_brief=1
  run cuda_contract_test $bin/fp8_cuda_contract_test
  run cuda_backend_test $bin/fp8_cuda_backend_test
  run float8_linear_cuda_test $bin/fp8_float8_linear_cuda_test
  run nccl_process_group_test $bin/fp8_nccl_process_group_test
fi
if [[ $what == bench || $what == all ]]; then
  run bench_cast $bin/bench_cast --device cuda
  run bench_gemm $bin/bench_gemm --device cuda --csv "$out/ours_gemm.csv"
  run torch_gemm python3 bench/torch_gemm.py --ours "$out/ours_gemm.csv"
fi
exit $status
