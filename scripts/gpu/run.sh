#!/usr/bin/env bash
# Runs on the GPU machine, in the repository root, after scripts/gpu/bundle.sh packed
# .devbuild/bundle.tar.xz here (carried there: the device tool's carry [".devbuild"]): the
# gpu tests, then the GPU benchmarks side by side with PyTorch. Logs go to $OUT (or
# ./gpu-out).
#
#   scripts/gpu/run.sh PART...
#
# Each part fits the device tool's 10 minutes per command (the benchmarks stop their own
# work at ~9; a test is killed after 8):
#   tests-kernels   format, the wgmma probe, CUDA contract (block scaling too) and backend, Float8Linear, NCCL,
#                   CUDA model ops
#                   (the bf16 attention also on the mma.sync and SIMT kernels)
#   tests-train     CUDA training (head_dim 64 also on the mma.sync attention), FSDP over NCCL, and a job
#                   through fp8-coordinator / fp8-worker / fp8-train
#   loss-parity     bench/loss_parity.sh: llama-h100 trained 1000 steps per recipe (none, tensorwise,
#                   rowwise, delayed), the loss curves and the last 10%'s mean against none's
#   bench-generate  bench_generate: generation with the KV cache against recomputing the context
#   bench-cast      bench_cast alone (the casts against a copy; bf16 transposing casts with one
#                   and two row tiles a block side by side)
#   bench-gemm      bench_cast, bench_gemm, then torch_gemm.py on the same shapes
#   bench-linear    bench_linear (ln -> linear -> sigmoid, and the linear alone), then torch_linear.py
#   bench-train     bench_train on llama-h100 per recipe (none first) with a per-op breakdown
#                   of 2 steps each, then torch_llama.py
#   bench-8b        bench_train on examples/jobs/llama3-8b-layers-h100.yaml (Llama 3 8B's layer shapes),
#                   none and tensorwise
#   bench-batch     bench_train on llama-h100 at the largest batch full activation checkpointing fits
#                   (by fp8-train --estimate), none and tensorwise, with MFU
#   bench-attention bench_attention (the wgmma, mma.sync and SIMT attention kernels side by side),
#                   then torch_attention.py
#   bench-fsdp      bench_train --device cuda --nproc (every GPU of the machine) on llama-h100,
#                   tensorwise, fp8 all-gather on: FSDP over NCCL in its queued mode, with the
#                   exposed communication from its events and rank 0's per-op breakdown by
#                   shape (on one GPU: FSDP's own cost beside bench-train's one process);
#                   then packed collectives and a collective a parameter, one after the other
#   breakdown-shapes bench_train's per-op breakdown of none and tensorwise (BENCH_TRAIN_RECIPES),
#                   a row per GEMM, cast and copy shape
#   profile-train   where a llama-h100 step's GPU time goes, per kernel: bench_train cut to 4
#                   layers under nsys (else ncu), per recipe in PROFILE_RECIPES (default
#                   "none tensorwise")
# and, for a machine without that limit: tests (both test parts), bench (the three bench
# parts), all (everything). For a lease of 15 minutes in all, `first` runs in one command
# what matters most: both test parts, bench-cast, bench-attention, bench-train and
# bench-fsdp, about 5 minutes (bench/RESULTS.md), each under a TOTAL_LIMIT (default 540 s)
# for the command as a whole.
#
# The wgmma attention (the default on sm_90) is used only where it passed its tests: where
# they failed on this machine (tests-kernels), every later command here runs with
# FP8_CUDA_ATTENTION=mma and bench-attention leaves the wgmma kernels out, so that a fault
# there cannot take the other figures of the same run with it.
#
# A benchmark's CSV is also kept in ./gpu-out/csv (a folder that stays on a warm machine
# between commands), so that a PyTorch peer can be rerun alone against the last run of
# ours: e.g. `scripts/gpu/run.sh torch-train` (also torch-gemm, torch-linear).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}
csv_dir=gpu-out/csv
mkdir -p "$out" "$csv_dir"
(($# > 0)) || set -- all

# The bundle, unpacked into build/gpu-run/ (ignored by git, so never carried back) unless
# already unpacked from this very archive. .devbuild/ keeps only the archive: it is what
# the device tool carries, and unpacked it would exceed the 64 MiB.
bundle=.devbuild/bundle.tar.xz
run_dir=build/gpu-run
# The archive's checksum says which one is unpacked (copies need not keep mtimes).
if [[ -f $bundle ]] && [[ "$(cksum <"$bundle")" != "$(cat "$run_dir/stamp" 2>/dev/null)" ]]; then
  rm -rf "$run_dir"
  mkdir -p "$run_dir"
  tar -C "$run_dir" -xJf "$bundle" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle" "$run_dir" ||
    { echo "cannot unpack $bundle"; exit 2; }
  cksum <"$bundle" >"$run_dir/stamp"
fi
[[ -d $run_dir/bin ]] || { echo "no $bundle: run scripts/gpu/bundle.sh on the build machine first"; exit 2; }

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
if ! grep -q 'libnccl.so.2' <<<"$(ldconfig -p)" && [[ ! -e $cuda_lib/libnccl.so.2 ]]; then
  nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
fi
export LD_LIBRARY_PATH=$PWD/$run_dir/lib:$cuda_lib${nccl_lib:+:$nccl_lib}:${LD_LIBRARY_PATH:-}
bin=$PWD/$run_dir/bin
# fp8_cuda_job_test starts fp8-coordinator, fp8-worker and fp8-train from here.
export FP8_TEST_BIN_DIR=$bin
echo "cuBLASLt from: ${cuda_lib:-not found}"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$out/gpu.txt"

status=0
failures=()
part_start=$SECONDS
# PART_LIMIT and STEP_LIMIT (seconds) shorten a part and each step in it, for a device
# lease shorter than a part's 9 minutes; BENCH_TRAIN_BUDGET (seconds, default 280) is
# bench_train's share of bench-train, and BENCH_TRAIN_RECIPES its --recipes (default all).
# TOTAL_LIMIT (seconds, default none) bounds the command as a whole: a part or step that
# would run past it is cut short or skipped.
part_limit=${PART_LIMIT:-540}
step_limit=${STEP_LIMIT:-540}
total_limit=${TOTAL_LIMIT:-0}
left() {
  local l=$((part_limit - (SECONDS - part_start)))
  ((total_limit > 0 && total_limit - SECONDS < l)) && l=$((total_limit - SECONDS))
  echo "$l"
}
run() {  # run NAME SECONDS CMD...: at most SECONDS (and what is left of the part); output to the console and $out/NAME.log
  local name=$1 limit=$2; shift 2
  local l; l=$(left)
  ((l < limit)) && limit=$l
  if ((limit < 30)); then
    echo "!! $name skipped: the part's ${part_limit}s (or the command's ${total_limit}s) are spent" | tee "$out/$name.log"
    status=1
    failures+=("$name (skipped)")
    return 1
  fi
  ((step_limit < limit)) && limit=$step_limit
  echo "== $name (at most ${limit}s): $*"
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  [[ $rc -eq 0 ]] || { echo "!! $name exited $rc"; status=1; failures+=("$name ($rc)"); }
  return "$rc"
}
# Set on this machine (gpu-out/ stays while it is warm) when the wgmma attention failed its tests.
wgmma_failed=gpu-out/wgmma_attention_failed
wgmma_avoided=0
avoid_failed_wgmma() {
  if [[ -f $wgmma_failed ]]; then
    export FP8_CUDA_ATTENTION=mma
    wgmma_avoided=1
    echo "!! the wgmma attention failed its tests here: FP8_CUDA_ATTENTION=mma"
  elif ((wgmma_avoided)); then  # they failed in an earlier command and pass now
    unset FP8_CUDA_ATTENTION
    wgmma_avoided=0
  fi
}
avoid_failed_wgmma
wgmma_untimed() { [[ -f $wgmma_failed ]] && echo "!! the wgmma attention failed its tests here: not timed"; }
keep_csv() { [[ -f $out/$1 ]] && cp "$out/$1" "$csv_dir/$1"; }
need_csv() {  # the CSV of our last run, into $out if it came from an earlier command
  [[ -f $out/$1 ]] && return 0
  [[ -f $csv_dir/$1 ]] && cp "$csv_dir/$1" "$out/$1" && return 0
  echo "!! no $1 from a run of ours on this machine"; status=1; return 1
}

# The PyTorch peers stop starting new work (a shape, a precision) when the part's time
# is nearly spent (--budget), so that what they measured is printed before the timeout.
torch_gemm() { need_csv ours_gemm.csv && run torch_gemm 240 python3 bench/torch_gemm.py --ours "$out/ours_gemm.csv"; }
torch_linear() {
  need_csv ours_linear.csv &&
    run torch_linear 480 python3 bench/torch_linear.py --ours "$out/ours_linear.csv" --budget $(($(left) - 90))
}
torch_train() {
  need_csv ours_train.csv &&
    run torch_llama 480 python3 bench/torch_llama.py --ours "$out/ours_train.csv" --budget $(($(left) - 30))
}

do_part() {
  part_start=$SECONDS
  case $1 in
    tests-kernels)
      # Each takes seconds; the limits only stop a hang.
      run format_test 60 "$bin/fp8_format_test" --gtest_brief=1
      # Seconds: which readings of wgmma's descriptors and fragments the hardware shares.
      run wgmma_probe_test 60 "$bin/fp8_wgmma_probe_test"
      run cuda_contract_test 60 "$bin/fp8_cuda_contract_test"
      run cuda_block_scaling_test 60 "$bin/fp8_cuda_block_scaling_test"
      run cuda_backend_test 60 "$bin/fp8_cuda_backend_test"
      run float8_linear_cuda_test 60 "$bin/fp8_float8_linear_cuda_test"
      run nccl_process_group_test 60 "$bin/fp8_nccl_process_group_test"
      if [[ -x $bin/fp8_cuda_model_ops_test ]]; then
        # Its bf16 attention tests run on each choice of kernels (tensor_cores, mma, simt).
        run cuda_model_ops_test 120 "$bin/fp8_cuda_model_ops_test"
        # The default kernels' attention tests alone (wgmma on sm_90, elsewhere mma.sync): on
        # failure fp8-train and the benchmarks that follow run on mma.sync (FP8_CUDA_ATTENTION).
        if run cuda_model_ops_wgmma_attention 60 "$bin/fp8_cuda_model_ops_test" \
          --gtest_filter='*CudaBf16AttentionTest*/tensor_cores'; then
          rm -f "$wgmma_failed"
        else
          touch "$wgmma_failed"
        fi
        avoid_failed_wgmma
      else
        echo "!! fp8_cuda_model_ops_test is not in the bundle"; status=1
      fi
      ;;
    tests-train)
      # Each takes seconds; the limits only stop a hang.
      run cuda_training_test 180 "$bin/fp8_cuda_training_test"  # attention on the default kernels and mma.sync
      # Both collective layouts, NCCL queued on the device and waiting on the host.
      run cuda_fsdp_test 210 "$bin/fp8_cuda_fsdp_test"
      run cuda_job_test 150 "$bin/fp8_cuda_job_test"
      run device_decoder_cuda_test 60 "$bin/fp8_device_decoder_cuda_test"  # fp8-model generate --device cuda
      ;;
    bench-cast)
      run bench_cast 120 "$bin/bench_cast" --device cuda
      ;;
    loss-parity)
      # Issue 39: does fp8 track bf16 beyond a few steps? llama-h100 for 1000 steps per recipe,
      # the same init and data order; sequences of 1024 (not 2048) so that all four fit one call.
      # The corpus is git-ignored: the device call must carry examples/jobs/corpus.
      [[ -f examples/jobs/corpus/kjv.txt ]] ||
        { echo "!! loss-parity: no examples/jobs/corpus/kjv.txt (carry examples/jobs/corpus)"; status=1
          failures+=("loss_parity (no corpus)"); return; }
      run loss_parity 540 bench/loss_parity.sh --train "$bin/fp8-train" --config examples/jobs/llama-h100.yaml \
        --recipes none,tensorwise,rowwise,delayed --steps 1000 --set data.seq_len=1024 --set model.max_seq_len=1024 \
        --set train.eval_every=0 --out "$out/loss_parity"
      ;;
    bench-generate)
      # fp8-model generate's KV-cache decoder against recomputing the context, llama-h100's shape.
      run bench_generate 120 "$bin/bench_generate" --device cuda --dim 2048 --layers 22 --heads 32 --kv-heads 8 \
        --ffn 5632 --vocab 256 --prompt 448 --new 64
      ;;
    bench-gemm)
      run bench_cast 120 "$bin/bench_cast" --device cuda
      run bench_gemm 240 "$bin/bench_gemm" --device cuda --csv "$out/ours_gemm.csv"
      keep_csv ours_gemm.csv
      torch_gemm
      ;;
    bench-linear)
      # ~2 minutes of ours; PyTorch compiles once per mode and shape.
      run bench_linear 240 "$bin/bench_linear" --device cuda --csv "$out/ours_linear.csv"
      keep_csv ours_linear.csv
      torch_linear
      ;;
    bench-train)
      # Ours stops itself after --budget seconds (plus the step in flight), leaving
      # PyTorch ~4 minutes for two compilations and its steps. `run.sh torch-train` reruns
      # PyTorch alone against this CSV if it runs out of time here.
      local recipes=${BENCH_TRAIN_RECIPES:-}
      # Each recipe also profiles 2 steps op by op (--breakdown: where a step's GPU time
      # goes, recipe beside recipe; BENCH_TRAIN_BREAKDOWN=N for another count).
      # And within what is left of the part (or command), ~150 s stay for PyTorch.
      local budget=${BENCH_TRAIN_BUDGET:-280} room=$(($(left) - 150))
      ((room < budget)) && budget=$room
      ((budget < 30)) && budget=30
      run bench_train 330 "$bin/bench_train" --device cuda --config examples/jobs/llama-h100.yaml \
        --budget "$budget" --csv "$out/ours_train.csv" ${recipes:+--recipes "$recipes"} \
        --breakdown "${BENCH_TRAIN_BREAKDOWN:-2}"
      keep_csv ours_train.csv
      torch_train
      ;;
    bench-8b)
      # Issue 39's "where fp8 pays most": Llama 3 8B's layer shapes (14 blocks on one GPU),
      # recipe none beside tensorwise (BENCH_8B_RECIPES for others), timed as bench-train times llama-h100.
      run bench_train_8b 420 "$bin/bench_train" --device cuda --config examples/jobs/llama3-8b-layers-h100.yaml \
        --budget 360 --csv "$out/ours_train_8b.csv" --recipes "${BENCH_8B_RECIPES:-none,tensorwise}"
      keep_csv ours_train_8b.csv
      ;;
    bench-batch)
      # Issue 39: the largest llama-h100 batch that full activation checkpointing fits, by the
      # memory estimate, in 85% of this GPU's memory; none and tensorwise with their MFU.
      local gib batch=4 b est
      gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{print $1 / 1024 * 0.85}')
      for b in 8 16 32 64 128 256; do
        # "memory per rank (estimate, 1 rank): 66.86 GiB"
        est=$("$bin/fp8-train" --config examples/jobs/llama-h100.yaml --set "train.batch_size=$b" \
          --set train.activation_checkpointing=full --estimate | awk 'NR == 1 { print ($NF == "GiB") ? $(NF - 1) : 0 }')
        awk -v e="$est" -v g="$gib" 'BEGIN { exit !(e > 0 && e <= g) }' && batch=$b
      done
      echo "== bench-batch: batch $batch (full checkpointing) fits the estimate in ${gib} GiB"
      run bench_train_batch 420 "$bin/bench_train" --device cuda --config examples/jobs/llama-h100.yaml \
        --set "train.batch_size=$batch" --set train.activation_checkpointing=full --recipes none,tensorwise --budget 360
      ;;
    bench-attention)
      local kernels=()
      wgmma_untimed && kernels=(--kernels mma,simt)
      run bench_attention 150 "$bin/bench_attention" --device cuda --csv "$out/ours_attention.csv" "${kernels[@]}"
      keep_csv ours_attention.csv
      need_csv ours_attention.csv && run torch_attention 120 python3 bench/torch_attention.py --ours "$out/ours_attention.csv"
      ;;
    bench-fsdp)
      local gpus
      gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
      ((gpus > 0)) || gpus=1
      local fsdp=("$bin/bench_train" --device cuda --nproc "$gpus" --all-gather-fp8 on
        --config examples/jobs/llama-h100.yaml --set fp8.recipe=tensorwise --rounds 2 --steps 4 --timeout 120)
      run bench_fsdp 300 "${fsdp[@]}" --breakdown 2 --breakdown-by-shape
      # The same without the breakdown, a unit's parameters packed into one collective (the
      # default) and then a collective a parameter, grouped (FP8_FSDP_COLLECTIVES=per_parameter).
      run bench_fsdp_packed 120 env FP8_FSDP_COLLECTIVES=packed "${fsdp[@]}"
      run bench_fsdp_per_parameter 120 env FP8_FSDP_COLLECTIVES=per_parameter "${fsdp[@]}"
      ;;
    breakdown-shapes)
      # A step's GEMMs and casts one row per shape (bench_train --breakdown-by-shape): which
      # of them fall short of the device's peak, recipe beside recipe.
      run bench_train_shapes 240 "$bin/bench_train" --device cuda --config examples/jobs/llama-h100.yaml \
        --recipes "${BENCH_TRAIN_RECIPES:-none,tensorwise}" --warmup 2 --steps 3 --breakdown 2 --breakdown-by-shape
      ;;
    profile-train)
      local nsys ncu
      nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
      ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
      for r in ${PROFILE_RECIPES:-none tensorwise}; do
        local job=(--device cuda --config examples/jobs/llama-h100.yaml --set model.n_layers=4 --recipes "$r")
        if [[ -n $nsys ]]; then
          # The report itself stays behind (tens of MB); its kernel summary is the log.
          run "profile_train_$r" 150 "$nsys" profile --stats=true --force-overwrite=true -o "/tmp/profile_train_$r" \
            "$bin/bench_train" "${job[@]}" --budget 40
        elif [[ -n $ncu ]]; then
          run "profile_train_$r" 200 "$ncu" --metrics gpu__time_duration.sum --print-summary per-kernel \
            "$bin/bench_train" "${job[@]}" --warmup 1 --steps 2 --budget 60
        else
          echo "!! neither nsys nor ncu on this machine"; status=1
        fi
      done
      ;;
    torch-gemm) torch_gemm ;;
    torch-linear) torch_linear ;;
    torch-train) torch_train ;;
    tests) do_part tests-kernels; do_part tests-train ;;
    bench) do_part bench-gemm; do_part bench-linear; do_part bench-train ;;
    all) do_part tests; do_part bench ;;
    first)
      : "${TOTAL_LIMIT:=540}"
      total_limit=$TOTAL_LIMIT
      # Every recipe (a few seconds each).
      : "${BENCH_TRAIN_RECIPES:=none,tensorwise,rowwise,rowwise_with_gw_hp,delayed}"
      do_part tests-kernels; do_part tests-train; do_part bench-cast; do_part bench-attention; do_part bench-train
      do_part bench-fsdp
      ;;
    *) echo "unknown part '$1' (tests-kernels, tests-train, bench-cast, loss-parity, bench-8b, bench-batch, bench-generate, bench-gemm, bench-linear, bench-train, bench-attention, bench-fsdp, breakdown-shapes, profile-train, torch-gemm," \
         "torch-linear, torch-train, tests, bench, all, first)"; status=2 ;;
  esac
}
for p in "$@"; do do_part "$p"; done
echo "== $(basename "$0") $* took ${SECONDS}s; ${#failures[@]} steps failed or skipped${failures[*]:+: ${failures[*]}}" |
  tee "$out/summary.txt"
exit $status
