#!/usr/bin/env bash
# A Hugging Face LLaMA checkpoint across two daemons (docs/BENCHMARKS.md, "Hugging Face
# checkpoints at 162M"): the reference writes a random llama-160m-shaped checkpoint in HF
# layout (fp32, SHARDS shards), two loopback daemons train it cut in two (blocks 0-5, 6-11)
# for STEPS steps at lr 0 — so the weights must come back unchanged — the CLI exports it with
# --format hf, and the reference compares the export with the original bit for bit. Prints
# per stage the bytes read, the start-up (submit to the end of step 1) and each daemon's peak
# resident memory.
# Usage (after deploy/build.sh): bash bench/hf_import.sh [shards] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
shards=${1:-4}
steps=${2:-2}
python=/usr/bin/python3
work=$(mktemp -d -p "$PWD/build/data")
source deploy/local-daemons.sh
trap 'stop_daemons; rm -rf "$work"' EXIT
start_demo_pair "$work"
"$python" tests/stages/hf_reference.py make --family llama --out "$work/llama-160m" --seed 1 --vocab 32000 \
  --hidden 768 --layers 12 --heads 12 --kv-heads 12 --intermediate 3072 --max-pos 2048 --shards "$shards"
du -sh "$work/llama-160m"
python3 - "$corpus" "$A" "$B" "$steps" "$work/llama-160m" "$work/job.json" <<'PY'
import json, sys
corpus, a, b, steps, hf, out = sys.argv[1:]
json.dump({"name": "llama-160m-hf", "seed": 1, "steps": int(steps), "batch_size": 4, "micro_batches": 2,
           "schedule": "1f1b",
           "model": {"kind": "llama", "preset": "llama-160m", "seq_len": 64, "norm_eps": 1e-5, "init_from": hf},
           "optimizer": {"lr": 0.0, "weight_decay": 0.0},
           "data": {"files": [corpus]}, "eval": {"samples": 4}, "checkpoint": {"interval": 0},
           "stages": [{"daemon": a, "layers": [0, 6]}, {"daemon": b, "layers": [6, 12]}]}, open(out, "w"))
PY
start=$(date +%s.%N)
job=$(build/client/skytrain --daemon "$A" submit --detach "$work/job.json" | awk '/submitted job/ {print $3}')
build/client/skytrain --daemon "$A" logs -f "$job" > "$work/logs.txt" || true
build/client/skytrain --daemon "$A" status "$job" | sed -n '/plan/,/chosen/p' | grep -E "stage|init_from|read "
build/client/skytrain --daemon "$A" status --json "$job" > "$work/status.json"
python3 - "$work/status.json" "$start" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
first = s["steps"][0]
print(f"state {s['state']}; start-up (submit to the end of step 1) {first['time'] - float(sys.argv[2]):.1f} s;"
      f" step time {s['steps'][-1]['step_s']:.2f} s")
PY
for i in 0 1; do echo "daemon $i peak resident memory: $(grep VmHWM "/proc/${daemon_pids[$i]}/status" | awk '{print $2 / 1024 " MB"}')"; done
build/client/skytrain --daemon "$A" export "$job" --format hf -o "$work/exported"
"$python" tests/stages/hf_reference.py compare --a "$work/llama-160m" --b "$work/exported"
