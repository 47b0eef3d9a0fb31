#!/usr/bin/env bash
# Loss parity: the same job trained once per fp8 recipe (the same initial weights and data
# order: the job's seed), each run's loss curve kept, and each recipe's mean loss over the
# last 10% of steps against recipe none's (bench/loss_parity.py prints the table and writes
# the curves side by side as CSV).
#
#   bench/loss_parity.sh [--config JOB] [--recipes none,tensorwise,rowwise,delayed] [--steps N]
#                        [--out DIR] [--train PATH] [--set FIELD=VALUE ...]
#
# none must come first: the ratios are to it. --train: the fp8-train to run (default the
# release build's). The logs (one per recipe), loss_curves.csv and
# summary.md go to --out (default: a new folder under /tmp). Each run's checkpoint goes to a
# scratch folder, removed when the run ends; validation keeps the job's own settings.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
train="$root/build/release/bin/fp8-train"
config="$root/examples/jobs/tiny-cpu.yaml"
recipes="none,tensorwise,rowwise,delayed"
steps=""
out=""
sets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --config) config="$2"; shift 2 ;;
    --recipes) recipes="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --train) train="$2"; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) echo "loss_parity.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$train" ]] || { echo "loss_parity.sh: no $train (build first: scripts/build.sh release)" >&2; exit 2; }
[[ "${recipes%%,*}" == none ]] || { echo "loss_parity.sh: --recipes must start with none (the baseline)" >&2; exit 2; }
[[ -n "$out" ]] || out="$(mktemp -d /tmp/loss_parity.XXXXXX)"
mkdir -p "$out"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

[[ -n "$steps" ]] && sets+=(--set "train.steps=$steps")
IFS=, read -r -a recipe_list <<<"$recipes"
for r in "${recipe_list[@]}"; do
  echo "== $r" >&2
  "$train" --config "$config" "${sets[@]}" --set "fp8.recipe=$r" --set train.log_every=1 \
    --set "checkpoint.dir=$scratch/$r" >"$out/$r.log" 2>&1 ||
    { echo "loss_parity.sh: the $r run failed; its log: $out/$r.log" >&2; tail -5 "$out/$r.log" >&2; exit 1; }
  rm -rf "${scratch:?}/$r"  # the run's final checkpoint: a large model's would fill the disk
done
logs=()
for r in "${recipe_list[@]}"; do logs+=("$out/$r.log"); done
python3 "$root/bench/loss_parity.py" --out "$out" "${logs[@]}" | tee "$out/summary.md"
