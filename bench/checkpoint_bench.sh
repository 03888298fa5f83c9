#!/usr/bin/env bash
# What checkpoints cost a running job (docs/BENCHMARKS.md): the demo model on two loopback
# daemons, m and schedule fixed, checkpoints only after the last step vs every 10 steps vs
# every step, alternating in one run. Each step row carries checkpoint_s, the time the stage
# spent taking the snapshot (a copy; the file is written in the background).
# Usage (after deploy/build.sh): bash bench/checkpoint_bench.sh [steps] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-60}
rounds=${2:-2}
work=$(mktemp -d)
source deploy/local-daemons.sh
trap 'stop_daemons; rm -rf "$work"' EXIT
start_demo_pair "$work"
run() {  # run INTERVAL -> "mean step s, mean checkpoint_s over checkpointed steps, checkpoint MB"
  python3 - deploy/jobs/gpt-web.json "$corpus" "$A" "$B" "$steps" "$1" "$work/job.json" <<'PY'
import json, sys
job, corpus, a, b, steps, interval, out = sys.argv[1:]
s = json.load(open(job))
s["data"]["files"] = [corpus]
s["stages"][0]["daemon"], s["stages"][1]["daemon"] = a, b
s.update({"steps": int(steps), "micro_batches": 4, "schedule": "1f1b", "eval": {"samples": 8},
          "checkpoint": {"interval": int(interval), "keep": 2}})
json.dump(s, open(out, "w"))
PY
  local job
  job=$(build/client/skytrain --daemon "$A" submit "$work/job.json" | awk '/submitted job/ {print $3}')
  build/client/skytrain --daemon "$A" status --json "$job" | python3 -c "
import json, sys, glob, os
s = json.load(sys.stdin)
rows = s['steps'][1:-1]  # the first pays for allocation, the last for the final checkpoint and eval
mean = sum(r['step_s'] for r in rows) / len(rows)
ck = [r['checkpoint_s'] for r in rows if r['checkpoint_s'] > 0]
size = sum(os.path.getsize(f) for f in glob.glob('$work/*/jobs/$job/checkpoints/*/stage-*.safetensors'))
size /= max(1, len(glob.glob('$work/*/jobs/$job/checkpoints/*')))
print(f'{mean:.4f} {sum(ck) / len(ck) if ck else 0:.4f} {size / 1e6:.2f}')"
}
echo "| round | interval | mean step (s) | snapshot on the critical path (s, per checkpoint) | checkpoint size (MB, both stages) |"
echo "|---|---|---|---|---|"
for r in $(seq "$rounds"); do
  for interval in 0 10 1; do
    read -r mean ck size <<< "$(run "$interval")"
    echo "| $r | $interval | $mean | $ck | $size |"
  done
done
