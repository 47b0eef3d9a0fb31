#!/usr/bin/env bash
# Peak memory per rank of a training job at several world sizes and activation
# checkpointing modes, measured by fp8-train (the `peak` of its step lines: the most the
# device had in use; on the CPU the host memory of its tensors) beside the memory estimate
# (`fp8-train --estimate`), with each run's ratio to the first (list 1 first in --worlds and
# none first in --modes for ratios to one rank keeping every activation).
#
#   bench/train_memory.sh [--config JOB] [--worlds "1 2 4"] [--modes "none full"]
#                         [--steps 3] [--set FIELD=VALUE ...]
#
# The per-rank batch stays train.batch_size at every world size, so the activations per
# rank stay the same and what shrinks is the sharded state (parameters, gradients, AdamW).
# No validation split (data.val_fraction=0): an evaluation's forward would add its own
# activations after a step's peak is taken.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
train="$root/build/release/bin/fp8-train"
config="$root/examples/jobs/tiny-cpu.yaml"
worlds="1 2 4"
modes="none full"
steps=3
sets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --config) config="$2"; shift 2 ;;
    --worlds) worlds="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) echo "train_memory.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$train" ]] || { echo "train_memory.sh: build first (scripts/build.sh release): no $train" >&2; exit 2; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

common=(--config "$config" "${sets[@]}" --set "train.steps=$steps" --set train.warmup_steps=0
        --set train.log_every=1 --set data.val_fraction=0 --set train.eval_every=0)
# MiB as fp8-train prints them ("peak 11.4 MiB", "peak 1.20 GiB") -> MiB.
to_mib() { awk -v v="$1" -v u="$2" 'BEGIN { m = (u == "GiB") ? v * 1024 : (u == "KiB") ? v / 1024 : v; printf "%.1f", m }'; }

echo "# bench/train_memory.sh $(date -u +%Y-%m-%d) on $(nproc) cores; job $(basename "$config") ${sets[*]:-}"
echo
"$train" "${common[@]}" --estimate | head -1 | sed 's/^/# one rank: /'
printf '| ranks | activation checkpointing | peak per rank MiB | estimate MiB | estimate vs peak | peak vs the first row |\n'
printf '|---|---|---|---|---|---|\n'
base=""
for mode in $modes; do
  for w in $worlds; do
    run=("${common[@]}" --set "train.activation_checkpointing=$mode" --set "checkpoint.dir=$scratch/ckpt-$mode-$w")
    [[ "$w" -gt 1 ]] && run+=(--nproc "$w")
    log="$scratch/$mode-$w.log"
    if ! "$train" "${run[@]}" > "$log" 2>&1; then
      echo "train_memory.sh: $w ranks, $mode failed:" >&2
      tail -5 "$log" >&2
      exit 1
    fi
    peak=0
    while read -r value unit; do
      mib="$(to_mib "$value" "$unit")"
      peak="$(awk -v a="$peak" -v b="$mib" 'BEGIN { print (b > a) ? b : a }')"
    done < <(grep -o 'peak [0-9.]* [KMG]iB' "$log" | awk '{ print $2, $3 }')
    estimate_line="$("$train" "${run[@]}" --estimate | head -1)"
    estimate="$(to_mib $(echo "$estimate_line" | awk '{ print $(NF-1), $NF }'))"
    [[ -z "$base" ]] && base="$peak"
    printf '| %s | %s | %s | %s | %s | %s |\n' "$w" "$mode" "$peak" "$estimate" \
      "$(awk -v e="$estimate" -v p="$peak" 'BEGIN { printf "%+.1f%%", 100 * (e - p) / p }')" \
      "$(awk -v p="$peak" -v b="$base" 'BEGIN { printf "%.2fx", p / b }')"
  done
done
