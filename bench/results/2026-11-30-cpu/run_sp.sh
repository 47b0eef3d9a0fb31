#!/bin/bash
# The sequence-parallelism runs of this folder (sp_*), from the repository root:
# BENCH_TRAIN=<a copy of bench_train> BENCH_ALLGATHER=<a copy of bench_allgather> \
#   bench/results/2026-11-30-cpu/run_sp.sh
# bench_train runs go through clean_run.sh (flock /tmp/bench.lock, kept only when nothing
# else used the cores); bench_allgather runs under the same lock, their log ending with what
# else ran beside them (cpumon.py).
set -u
R=bench/results/2026-11-30-cpu
TINY="--set model.ffn_dim=192"
WIDE="--set model.dim=256 --set model.n_heads=4 --set model.ffn_dim=768"
D512="--set model.dim=512 --set model.n_layers=4 --set model.n_heads=4 --set model.ffn_dim=1536 --set model.max_seq_len=128 --set data.seq_len=128 --set train.batch_size=2"
C=$R/clean_run.sh
allgather() {  # NAME ARGS...
  local name=$1; shift
  exec 9>/tmp/bench.lock; flock 9
  echo "\$ bench_allgather $*" > $R/$name.txt
  setsid $BENCH_ALLGATHER "$@" >> $R/$name.txt 2>&1 &
  local bp=$! mon; mon=$(mktemp)
  $R/cpumon.py $bp > $mon &
  local mp=$!
  wait $bp
  kill $mp; wait $mp 2>/dev/null
  flock -u 9; exec 9>&-
  echo "# processes outside the benchmark above 20% of a core in a second: $(awk '{print $1}' $mon | sort | uniq -c | tr '\n' ';')" >> $R/$name.txt
  rm -f $mon
}
SHAPES=1024x64,1024x256,512x512,256x256,1024x512,4096x1024
for i in 1 2; do
  $C sp_nproc2_tiny-run$i --nproc 2 --tensor 1,2,2sp --recipes none,tensorwise $TINY --rounds 10 --steps 6
  $C sp_nproc2_wide-run$i --nproc 2 --tensor 1,2,2sp --recipes none,tensorwise $WIDE --rounds 8 --steps 6
  $C sp_nproc2_dim512-run$i --nproc 2 --tensor 1,2,2sp --recipes none,tensorwise $D512 --rounds 4 --steps 4
  allgather sp_allgather_ranks2-run$i --ranks 2 --shapes $SHAPES --repeats 20
done
echo ALL DONE
