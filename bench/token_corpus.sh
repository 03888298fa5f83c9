#!/usr/bin/env bash
# Start-up and memory against corpus size (docs/BENCHMARKS.md, "Pre-tokenised corpora"):
# `skytrain data prepare` turns the Bible (7 MB) and the Bible repeated COPIES times (about
# 1 GB at 150) into token shards, then for each a fresh pair of loopback daemons trains the
# demo-sized GPT from them (data.format "tokens", 2 stages, fixed plan) for STEPS steps.
# Prints the prepare time, the start-up (submit to the end of step 1) and each daemon's
# peak resident memory, per corpus.
# Usage (after deploy/build.sh): bash bench/token_corpus.sh [copies] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
copies=${1:-150}
steps=${2:-20}
source deploy/local-daemons.sh
bench_workspace
for _ in $(seq "$copies"); do cat "$corpus"; done > "$work/big.txt"
echo "corpora: $(du -h "$corpus" | cut -f1) and $(du -h "$work/big.txt" | cut -f1) of text"
for name in small big; do
  input=$corpus; [ "$name" = big ] && input=$work/big.txt
  /usr/bin/time -f "prepare $name: %e s, peak %M KB" "$cli" data prepare "$input" -o "$work/$name" --split line --no-progress
done
rm -f "$work/big.txt"
du -sh "$work/small" "$work/big"

for name in small big; do
  stop_daemons; daemon_pids=(); daemons_started=0
  start_demo_pair "$work/run-$name"
  python3 - "$A" "$B" "$steps" "$work/$name" "$work/$name.json" <<'PY'
import json, sys
a, b, steps, tokens, out = sys.argv[1:]
json.dump({"name": "tokens-" + tokens, "seed": 1, "steps": int(steps), "batch_size": 16, "micro_batches": 4,
           "schedule": "1f1b",
           "model": {"kind": "gpt", "d_model": 128, "heads": 4, "layers": 4, "d_ff": 512, "seq_len": 128},
           "data": {"format": "tokens", "files": [tokens]}, "eval": {"samples": 16},
           "checkpoint": {"interval": 0},
           "stages": [{"daemon": a, "layers": [0, 2]}, {"daemon": b, "layers": [2, 4]}]}, open(out, "w"))
PY
  start=$(date +%s.%N)
  job=$("$cli" --daemon "$A" submit --detach "$work/$name.json" | awk '/submitted job/ {print $3}')
  "$cli" --daemon "$A" logs -f "$job" > "$work/$name.logs" || true
  "$cli" --daemon "$A" status --json "$job" > "$work/$name.status.json"
  python3 - "$work/$name.status.json" "$start" "$name" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
first = s["steps"][0]
print(f"{sys.argv[3]}: state {s['state']}; start-up (submit to the end of step 1) {first['time'] - float(sys.argv[2]):.2f} s;"
      f" final loss {s['steps'][-1]['loss']:.3f}")
PY
  for i in 0 1; do
    echo "$name: daemon $i peak resident memory $(grep VmHWM "/proc/${daemon_pids[$i]}/status" | awk '{printf "%.0f MB", $2 / 1024}')"
  done
done
