#!/bin/bash
# How the runs of this folder were made, from the repository root: BENCH_TRAIN=<a copy of
# build/release/bench/bench_train> bench/results/2026-11-30-cpu/run_all.sh (the copy, so that no
# rebuild by anyone else changes the binary between runs; machine.txt names it).
TINY="--set model.ffn_dim=192"
WIDE="--set model.dim=256 --set model.n_heads=4 --set model.ffn_dim=768"
D512="--set model.dim=512 --set model.n_layers=4 --set model.n_heads=4 --set model.ffn_dim=1536 --set model.max_seq_len=128 --set data.seq_len=128 --set train.batch_size=2"
C=bench/results/2026-11-30-cpu/clean_run.sh
for i in 1 2 3; do
  $C nproc2_tensor12_tiny-run$i --nproc 2 --tensor 1,2 $TINY --rounds 10 --steps 6
  $C nproc2_tensor12_wide-run$i --nproc 2 --tensor 1,2 $WIDE --rounds 8 --steps 6
  $C nproc4_tensor12_tiny-run$i --nproc 4 --tensor 1,2 $TINY --rounds 10 --steps 6
  $C nproc2_tensor12_recipes_tiny-run$i --nproc 2 --tensor 1,2 --recipes none,tensorwise $TINY --rounds 10 --steps 6
  $C nproc2_tensor12_recipes_wide-run$i --nproc 2 --tensor 1,2 --recipes none,tensorwise $WIDE --rounds 8 --steps 6
done
for i in 4 5; do $C nproc2_tensor12_tiny-run$i --nproc 2 --tensor 1,2 $TINY --rounds 10 --steps 6; done
for i in 1 2; do
  $C nproc4_tensor124_tiny-run$i --nproc 4 --tensor 1,2,4 $TINY --rounds 10 --steps 6
  $C nproc2_tensor12_dim512-run$i --nproc 2 --tensor 1,2 $D512 --rounds 4 --steps 4
done
$C nproc2_tensor12_recipes_wide_breakdown --nproc 2 --tensor 1,2 --recipes none,tensorwise $WIDE --rounds 4 --steps 6 --breakdown 3
echo ALL DONE
