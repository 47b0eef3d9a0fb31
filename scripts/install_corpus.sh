#!/usr/bin/env bash
# Writes the demo corpus: the whole King James Bible as plain text (~4.3 MB), from the
# Debian package bible-kjv. The example jobs read it as corpus/kjv.txt next to them.
#
#   scripts/install_corpus.sh [DEST]     DEST defaults to examples/jobs/corpus/kjv.txt
#
# Idempotent: an existing DEST of plausible size is kept as it is, and the package is
# installed (like scripts/bootstrap.sh does it) only when it is missing.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$repo_root/examples/jobs/corpus/kjv.txt}

# The full text is 4.3 MB; anything much smaller is a truncated or failed earlier run.
min_bytes=4000000

file_size() { stat -c %s "$1"; }

if [[ -f $dest ]] && (($(file_size "$dest") >= min_bytes)); then
  echo "install_corpus: $dest already present ($(file_size "$dest") bytes)"
  exit 0
fi

if ! dpkg-query -W -f='${Status}' bible-kjv 2>/dev/null | grep -q "install ok installed"; then
  echo "install_corpus: installing bible-kjv" >&2
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends bible-kjv >/dev/null
fi

# Write beside DEST and rename, so an interrupted run never leaves a short file that a
# later run (or a training job) would take for the corpus.
mkdir -p "$(dirname "$dest")"
tmp="$dest.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# -l100000: one verse per line (the default wraps lines at 80 columns).
bible -l100000 'gen1:1-rev22:21' >"$tmp"
size=$(file_size "$tmp")
if ((size < min_bytes)); then
  echo "install_corpus: bible printed only $size bytes (expected about 4.3 MB)" >&2
  exit 1
fi
mv "$tmp" "$dest"
trap - EXIT
echo "install_corpus: wrote $dest ($size bytes)"
