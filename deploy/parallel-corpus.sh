#!/usr/bin/env bash
# The Spanish->English parallel corpus of the fine-tuning experiment: Reina-Valera 1909 and
# World English Bible verses aligned by reference ("source<TAB>target" lines), with whole
# books held out — validation: Ruth, Jonah, Philippians; test: Mark, Joel, Galatians — so no
# held-out verse is seen in fine-tuning, and the pretraining text of each language with the
# same books left out, so none is seen in pretraining either.
#
# Usage: deploy/parallel-corpus.sh OUT_DIR [VOCAB_SIZE (default 8000)]
# Writes (besides what deploy/bilingual-corpus.sh writes) OUT_DIR/es-en-train.tsv,
# es-en-valid.tsv, es-en-test.tsv, en-pretrain.txt and es-pretrain.txt. Does nothing for
# files that already exist.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: parallel-corpus.sh OUT_DIR [VOCAB_SIZE]}
vocab=${2:-8000}
"$here/bilingual-corpus.sh" "$out" "$vocab"
[ -s "$out/es-en-test.tsv" ] && [ -s "$out/es-pretrain.txt" ] && exit 0
python3 - "$out" <<'PY'
import os, sys
out = sys.argv[1]
VALID = {"Ruth", "Jonah", "Philippians"}
TEST = {"Mark", "Joel", "Galatians"}
def read(lang):
    with open(os.path.join(out, lang + ".tsv"), encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in f if "\t" in line]
def book(ref):
    return ref.rsplit(" ", 1)[0]
en, es = read("en"), read("es")
english = dict(en)
files = {name: open(os.path.join(out, f"es-en-{name}.tsv.tmp"), "w", encoding="utf-8") for name in ("train", "valid", "test")}
counts = dict.fromkeys(files, 0)
for ref, text in es:
    if ref not in english:
        continue
    name = "valid" if book(ref) in VALID else "test" if book(ref) in TEST else "train"
    files[name].write(f"{text}\t{english[ref]}\n")
    counts[name] += 1
for name, f in files.items():
    f.close()
    os.replace(f.name, f.name[:-4])
held = VALID | TEST
for lang, verses in (("en", en), ("es", es)):
    path = os.path.join(out, f"{lang}-pretrain.txt")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for ref, text in verses:
            if book(ref) not in held:
                f.write(text + "\n")
    os.replace(path + ".tmp", path)
print("parallel-corpus: " + ", ".join(f"{n} {c} pairs" for n, c in counts.items()))
PY
