#!/usr/bin/env bash
# Extracts the World English Bible (Debian's sword-text-web) to plain text: the demo corpus.
# Usage: deploy/get-corpus.sh OUT.txt   (does nothing if OUT.txt already exists)
set -euo pipefail
out=${1:?usage: get-corpus.sh OUT.txt}
if [ -s "$out" ]; then exit 0; fi
command -v diatheke >/dev/null || { echo "get-corpus: diatheke is missing (run deploy/install-deps.sh)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
diatheke -b engWEB2015eb -f plain -k "Genesis 1 - Revelation 22" > "$out.tmp"
size=$(wc -c < "$out.tmp")
if [ "$size" -lt 1000000 ]; then
  echo "get-corpus: diatheke produced only $size bytes (is sword-text-web installed?)" >&2
  rm -f "$out.tmp"; exit 1
fi
mv "$out.tmp" "$out"
echo "get-corpus: wrote $out ($size bytes)"
