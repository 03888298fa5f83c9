#!/usr/bin/env bash
# The 20.8M-parameter recipe of docs/BENCHMARKS.md ("at 20.8M parameters"): a byte-level GPT
# (d_model 512, 8 heads, 6 blocks, d_ff 2304, 64-token sequences) cut in two before block 3,
# 2,000 steps of 2 sequences (m = 2), AdamW 1e-3 cosine to 1e-4 after 100 warm-up steps,
# validation on 256 samples at steps 1000 and 2000, uncompressed links unless an edit says
# otherwise. Runs bench/seeds.sh over SEEDS seeds with the edits given after the recipe's.
# About 55 minutes a run on the 2-core VM with two runs side by side.
# Usage (after deploy/build.sh): bash bench/subspace_20m.sh SEEDS [PYTHON-EDIT...]
#   e.g. bash bench/subspace_20m.sh 3 's["model"]["subspace"] = {"rank": 64, "method": "cut"}'
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:?usage: subspace_20m.sh SEEDS [PYTHON-EDIT...]}
shift
exec bash bench/seeds.sh deploy/jobs/gpt-web.json "$seeds" \
  's["model"].update({"d_model": 512, "heads": 8, "d_ff": 2304, "layers": 6, "seq_len": 64})' \
  's["stages"][0]["layers"] = [0, 3]' 's["stages"][1]["layers"] = [3, 6]' \
  's["steps"] = 2000' 's["batch_size"] = 2' 's["micro_batches"] = 2' \
  's["optimizer"].update({"lr": 1e-3, "warmup_steps": 100, "min_lr": 1e-4})' \
  's["eval"].update({"interval": 1000, "samples": 256})' \
  's["compression"] = {"forward": "none", "backward": "none"}' "$@"
