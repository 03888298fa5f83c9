#!/usr/bin/env bash
# The bilingual corpus and the shared vocabulary of the cross-cloud ELECTRA experiment:
# the World English Bible (sword-text-web) and the Spanish Reina-Valera 1909
# (sword-text-sparv), verse text only (the "Book C:V:" reference, English in both modules,
# is cut off), and one SentencePiece model trained on both, which every generator and the
# discriminator share.
#
# Usage: deploy/bilingual-corpus.sh OUT_DIR [VOCAB_SIZE (default 8000)]
# Writes OUT_DIR/en.txt and es.txt (a verse a line), en.tsv and es.tsv (reference TAB text,
# aligned by reference: a parallel corpus, and book names for labels), and
# OUT_DIR/spm-en-es.model (+ .vocab). Does nothing for files that already exist.
set -euo pipefail
out=${1:?usage: bilingual-corpus.sh OUT_DIR [VOCAB_SIZE]}
vocab=${2:-8000}
command -v diatheke >/dev/null || { echo "bilingual-corpus: diatheke is missing (run deploy/install-deps.sh)" >&2; exit 1; }
command -v spm_train >/dev/null || { echo "bilingual-corpus: spm_train is missing (Debian's sentencepiece)" >&2; exit 1; }
mkdir -p "$out"

extract() {  # module language
  local module=$1 lang=$2
  [ -s "$out/$lang.tsv" ] && return 0
  # A verse starts at "Book C:V: " (book names may carry I, II, III); poetry continues on
  # the lines after it, each kept once a blank line follows or it ends in a space (the WEB
  # ends a verse so). A line right before the next verse is a heading ("A praise psalm by
  # David.", which diatheke repeats before every verse from Psalm 145 on): not verse text.
  diatheke -b "$module" -f plain -k "Genesis 1 - Revelation 22" | python3 -c '
import re, sys
start = re.compile(r"^\s*((?:I{1,3} )?[A-Z][A-Za-z ]*? [0-9]+:[0-9]+): ?(.*)$")
ref, text, pending, open_ = None, [], [], False
def flush():
    if ref and " ".join(text).split():
        print(ref + "\t" + " ".join(" ".join(text).split()))
for raw in sys.stdin:
    line = raw.rstrip("\n")
    m = start.match(line)
    if m:
        flush()
        ref, text, pending, open_ = m.group(1), [m.group(2)], [], not line.endswith(" ")
    elif not line.strip() or line.startswith("("):
        text += pending if open_ else []
        pending, open_ = [], False
    elif ref and open_:
        pending.append(line.strip())
        if line.endswith(" "):
            text += pending
            pending, open_ = [], False
flush()
' > "$out/$lang.tsv.tmp"
  local verses
  verses=$(wc -l < "$out/$lang.tsv.tmp")
  if [ "$verses" -lt 20000 ]; then
    echo "bilingual-corpus: $module gave only $verses verses (is its sword-text package installed?)" >&2
    rm -f "$out/$lang.tsv.tmp"; exit 1
  fi
  mv "$out/$lang.tsv.tmp" "$out/$lang.tsv"
  cut -f2 "$out/$lang.tsv" > "$out/$lang.txt"
  echo "bilingual-corpus: $lang: $verses verses"
}
extract engWEB2015eb en
extract spaRV1909eb es

if [ ! -s "$out/spm-en-es.model" ]; then
  spm_train --input="$out/en.txt,$out/es.txt" --model_prefix="$out/spm-en-es" --vocab_size="$vocab" \
    --model_type=unigram --character_coverage=1.0 --num_threads=2 --minloglevel=2 > /dev/null
  echo "bilingual-corpus: trained $out/spm-en-es.model ($vocab pieces, English and Spanish)"
fi
