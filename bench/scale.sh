#!/usr/bin/env bash
# A GPT-2-small-sized model (124M, the gpt2-small preset) across two daemons under each
# precision and recompute setting (docs/BENCHMARKS.md, "124M: precision, recompute,
# memory"): a fresh pair of loopback daemons per setting trains it cut in two (blocks 0-5
# with the embedding, 6-11 with the tied head) from the pre-tokenised Bible for STEPS steps
# at a fixed plan. Prints per setting admission's estimate and the measured peak resident
# memory of each daemon, the start-up (submit to the end of step 1), and the step time and
# tokens/s of the steps after the first, the profile's time, and with CHECKPOINT=k (every k
# steps) what a checkpoint costs: the snapshot on the critical path, and the median step
# right after one against the median of the others (the file is written meanwhile).
# Usage (after deploy/build.sh): [CHECKPOINT=k] bash bench/scale.sh [steps] [batch] [seq_len] [SETTING...]
#   SETTING: fp32/none fp32/block bf16/none bf16/block (default: all four)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-4}
batch=${2:-4}
seq=${3:-128}
shift $(( $# < 3 ? $# : 3 ))
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=(fp32/none fp32/block bf16/none bf16/block)
source deploy/local-daemons.sh
bench_workspace
"$cli" data prepare "$corpus" -o "$work/tokens" --split line --no-progress > /dev/null

interval=${CHECKPOINT:-0}
echo "| setting | stage | admission's estimate | peak resident memory | measured / estimate | start-up | profile | step | tokens/s | snapshot | step after a checkpoint / others |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for setting in "${settings[@]}"; do
  precision=${setting%/*} recompute=${setting#*/}
  stop_daemons; daemon_pids=(); daemons_started=0
  start_demo_pair "$work/run-${precision}-${recompute}"
  python3 - "$A" "$B" "$steps" "$batch" "$seq" "$precision" "$recompute" "$work/tokens" "$work/job.json" "$interval" <<'PY'
import json, sys
a, b, steps, batch, seq, precision, recompute, tokens, out, interval = sys.argv[1:]
json.dump({"name": f"gpt2-small-{precision}-{recompute}", "seed": 1, "steps": int(steps), "batch_size": int(batch),
           "micro_batches": 4, "schedule": "1f1b", "precision": precision,
           "model": {"kind": "gpt2", "preset": "gpt2-small", "seq_len": int(seq), "recompute": recompute},
           "optimizer": {"lr": 3e-4, "warmup_steps": 2, "clip_norm": 1.0},
           "compression": {"forward": "none", "backward": "none"},
           "data": {"format": "tokens", "files": [tokens]}, "eval": {"samples": 4}, "checkpoint": {"interval": int(interval), "keep": 1},
           "stages": [{"daemon": a, "layers": [0, 6]}, {"daemon": b, "layers": [6, 12]}]}, open(out, "w"))
PY
  start=$(date +%s.%N)
  job=$("$cli" --daemon "$A" submit --detach "$work/job.json" | awk '/submitted job/ {print $3}')
  "$cli" --daemon "$A" logs -f "$job" > /dev/null || true
  "$cli" --daemon "$A" status --json "$job" > "$work/status.json"
  cp "$work/status.json" "build/data/scale-${precision}-${recompute}.status.json"  # kept for a closer look
  for i in 0 1; do
    dir=$work/run-${precision}-${recompute}/$( [ $i = 0 ] && echo a || echo b )
    estimate=$(grep -o "needs an estimated [0-9.]* MB\|estimated [0-9.]* MB\|([0-9.]* MB (weights" "$dir/daemon.log" | head -1 | grep -o "[0-9.]* MB" | head -1 || true)
    [ -n "$estimate" ] || estimate=$(grep -o "[0-9.]* MB (weights" "$dir/daemon.log" | head -1 | cut -d' ' -f1-2)
    peak=$(grep VmHWM "/proc/${daemon_pids[$i]}/status" | awk '{printf "%.0f MB", $2 / 1024}')
    python3 - "$work/status.json" "$start" "$setting" "$i" "$estimate" "$peak" "$batch" "$seq" "$interval" <<'PY'
import json, statistics, sys
path, start, setting, stage, estimate, peak, batch, seq, interval = sys.argv[1:]
s = json.load(open(path))
if s["state"] != "succeeded":
    print(f"| {setting} | {stage} | job {s['state']}: {s.get('error', '')} |"); sys.exit()
steps = s["steps"]
startup = steps[0]["time"] - float(start)
step = statistics.median(x["step_s"] for x in steps[1:]) if len(steps) > 1 else steps[0]["step_s"]
e, p = float(estimate.split()[0]), float(peak.split()[0])
profile = (s.get("plans") or [{}])[0].get("stages", [{}, {}])[int(stage)].get("profile", {})
profiled = f"{profile['seconds']:.1f} s ({profile['passes']})" if profile else "?"
k = int(interval)
# Rows count steps from 0; a checkpoint is taken after step n when (n + 1) % k == 0.
inner = steps[1:-1]  # the first pays for allocation, the last for the final checkpoint and eval
follows = lambda x: k > 0 and x["step"] > 0 and x["step"] % k == 0
after = [x["step_s"] for x in inner if follows(x)]
others = [x["step_s"] for x in inner if not follows(x)]
snap = [x.get("checkpoint_s", 0) for x in steps if x.get("checkpoint_s", 0) > 0]
snapshot = f"{statistics.median(snap):.2f} s" if snap else "-"
ratio = f"{statistics.median(after) / statistics.median(others):.2f}" if after and others else "-"
print(f"| {setting} | {stage} | {e:.0f} MB | {p:.0f} MB | {p / e:.2f} | {startup:.1f} s | {profiled} | {step:.2f} s | {int(batch) * int(seq) / step:.0f} | {snapshot} | {ratio} |")
PY
  done
done
