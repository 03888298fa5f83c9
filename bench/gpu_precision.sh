#!/usr/bin/env bash
# The gpt2-small preset (124M) on a GPU (docs/BENCHMARKS.md, "124M on a GPU"): two
# loopback daemons, each stage on the same CUDA device (blocks 0-5 with the embedding, 6-11
# with the tied head), trained from the pre-tokenised Bible for STEPS steps at a fixed plan
# (m = 4, 1F1B, links uncompressed) under each precision; then the same model, batch and
# recipe in one plain PyTorch process (bench/torch_gpt2_baseline.py) for the ratio. Prints
# per precision the median step after the first two, tokens/s, the ratio to PyTorch, the
# start-up (submit to the end of step 1), the last step's loss and the steps the loss
# scaler skipped. Needs a build against a CUDA LibTorch (build/) and a Python with torch.
# Usage: [PYTHON=python3] [DEVICE=cuda] bash bench/gpu_precision.sh [steps] [batch] [seq_len] [PRECISION...]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-12}
batch=${2:-16}
seq=${3:-1024}
shift $(( $# < 3 ? $# : 3 ))
precisions=("$@")
[ ${#precisions[@]} -gt 0 ] || precisions=(fp32 bf16 fp16)
device=${DEVICE:-cuda}
python=${PYTHON:-python3}
source deploy/local-daemons.sh
bench_workspace
"$cli" data prepare "$corpus" -o "$work/tokens" --split line --no-progress > /dev/null

echo "| precision | median step | tokens/s | one PyTorch process | skytrain / PyTorch | start-up | last loss | skipped steps |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for precision in "${precisions[@]}"; do
  stop_daemons; daemon_pids=(); daemons_started=0
  start_demo_pair "$work/run-$precision"
  python3 - "$A" "$B" "$steps" "$batch" "$seq" "$precision" "$device" "$work/tokens" "$work/job.json" <<'PY'
import json, sys
a, b, steps, batch, seq, precision, device, tokens, out = sys.argv[1:]
json.dump({"name": f"gpt2-small-{precision}", "seed": 1, "steps": int(steps), "batch_size": int(batch),
           "micro_batches": 4, "schedule": "1f1b", "precision": precision,
           "model": {"kind": "gpt2", "preset": "gpt2-small", "seq_len": int(seq)},
           "optimizer": {"lr": 3e-4, "warmup_steps": 2, "clip_norm": 1.0},
           "compression": {"forward": "none", "backward": "none"},
           "data": {"format": "tokens", "files": [tokens]}, "eval": {"interval": 0, "samples": 4},
           "stages": [{"daemon": a, "layers": [0, 6], "device": device},
                      {"daemon": b, "layers": [6, 12], "device": device}]}, open(out, "w"))
PY
  start=$(date +%s.%N)
  job=$("$cli" --daemon "$A" submit --detach "$work/job.json" | awk '/submitted job/ {print $3}')
  "$cli" --daemon "$A" logs -f "$job" > /dev/null || true
  "$cli" --daemon "$A" status --json "$job" > "$work/status.json"
  cp "$work/status.json" "build/data/gpu-$precision.status.json"  # kept for a closer look
  baseline=$("$python" bench/torch_gpt2_baseline.py --precision "$precision" --steps "$steps" --batch "$batch" \
               --seq "$seq" --micro-batches 4 --device "$device" | grep -o "median step [0-9.]*" | awk '{print $3}')
  python3 - "$work/status.json" "$start" "$precision" "$batch" "$seq" "$baseline" <<'PY'
import json, statistics, sys
path, start, precision, batch, seq, baseline = sys.argv[1:]
s = json.load(open(path))
if s["state"] != "succeeded":
    print(f"| {precision} | job {s['state']}: {s.get('error', '')} |"); sys.exit()
steps = s["steps"]
step = statistics.median(x["step_s"] for x in steps[2:])
tokens = int(batch) * int(seq)
base = float(baseline)
skipped = sum(1 for x in steps if x.get("skipped"))
print(f"| {precision} | {step:.3f} s | {tokens / step:.0f} | {base:.3f} s, {tokens / base:.0f} tokens/s | "
      f"{base / step:.2f} | {steps[0]['time'] - float(start):.1f} s | {steps[-1]['loss']:.4f} | {skipped} |")
PY
done
