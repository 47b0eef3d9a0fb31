#!/usr/bin/env bash
# Checks the tree's naming convention (docs/architecture.md, "Names") with clang-tidy's
# readability-identifier-naming, configured in .clang-tidy, over every C++ translation
# unit of the release build (scripts/build.sh release first). Prints each name that breaks
# it and exits 1 if any does. CUDA sources are left out: clang-tidy does not parse them as
# nvcc does, and the kernels' names are checked where their headers are included.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/release
[[ -f $build/compile_commands.json ]] || { echo "no $build/compile_commands.json: run scripts/build.sh release" >&2; exit 2; }
tidy=$(command -v clang-tidy-14 || command -v clang-tidy || true)
[[ -n $tidy ]] || { echo "clang-tidy not found (Debian: clang-tidy)" >&2; exit 2; }

units=$(python3 -c '
import json, sys
for entry in json.load(open(sys.argv[1])):
    f = entry["file"]
    if not f.endswith(".cu") and not f.startswith(sys.argv[2]):
        print(f)' "$build/compile_commands.json" "$PWD/$build/proto/")

out=$(mktemp)
trap 'rm -f "$out"' EXIT
root=$(pwd)
# gcc-only warning flags and -Werror are the build's business, not the check's.
printf '%s\n' $units | xargs -P "$(nproc)" -n 1 "$tidy" -p "$build" --quiet \
  -header-filter="^$root/(common|server|client|worker|kernels|bench|tests)/" \
  -extra-arg=-Wno-unknown-warning-option -extra-arg=-Wno-error 2>/dev/null |
  grep -E "warning: invalid case style" | sort -u > "$out" || true
if [[ -s $out ]]; then
  cat "$out"
  echo "$(wc -l < "$out") names break the convention (docs/architecture.md, \"Names\")" >&2
  exit 1
fi
echo "every function and method name follows the convention"
