#!/usr/bin/env bash
# What global-norm clipping costs a step on an emulated WAN link (root: namespaces): the
# same 2-stage job with and without optimizer.clip_norm, alternating, on a link of RATE
# Mbit/s and DELAY ms one way. The norm exchange adds 2(p-1) one-way delays at the step's
# end, less what hides behind the last backward.
# Usage (after deploy/build.sh): sudo bash bench/clip_cost.sh [RATE:DELAY] [steps] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
link=${1:-1000:20}
steps=${2:-30}
rounds=${3:-2}
corpus=$PWD/build/data/web.txt
deploy/get-corpus.sh "$corpus" > /dev/null
export SKYTRAIN_WAN_STATE=$(mktemp -d) corpus steps rounds
trap 'rm -rf "$SKYTRAIN_WAN_STATE"' EXIT
run() {
  local clip=$1
  python3 - "$SKYTRAIN_WAN_STATE/job.json" "$corpus" "$($TESTBED control 0)" "$($TESTBED control 1)" "$steps" "$clip" <<'PY'
import json, sys
out, corpus, a, b, steps, clip = sys.argv[1:]
json.dump({"name": "clip-cost", "seed": 1, "steps": int(steps), "batch_size": 16, "micro_batches": 4, "schedule": "1f1b",
           "model": {"d_model": 128, "heads": 4, "layers": 4, "d_ff": 512, "seq_len": 64},
           "optimizer": {"lr": 1e-3, "clip_norm": float(clip)}, "data": {"files": [corpus]}, "eval": {"samples": 8},
           "stages": [{"daemon": a, "layers": [0, 2]}, {"daemon": b, "layers": [2, 4]}]}, open(out, "w"))
PY
  local job
  job=$("$TESTBED" client submit "$SKYTRAIN_WAN_STATE/job.json" | awk '/submitted job/ {print $3}')
  "$TESTBED" client status --json "$job" | python3 -c "
import json, sys
rows = json.load(sys.stdin)['steps'][2:]
print(f'{sum(r[\"step_s\"] for r in rows) / len(rows):.4f}')"
}
export -f run
bash deploy/wan/testbed.sh run "$link" -- bash -c '
echo "| round | no clipping (s/step) | clip_norm 1.0 (s/step) | difference (ms) |"
echo "|---|---|---|---|"
for r in $(seq $rounds); do
  a=$(run 0); b=$(run 1.0)
  python3 -c "print(f\"| $r | $a | $b | {($b - $a) * 1e3:+.1f} |\")"
done'
