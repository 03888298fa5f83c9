#!/usr/bin/env bash
# The data-and-memory issue's end-to-end run at LLM scale: a GPT-2-small-sized model (124M,
# the gpt2-small preset) in bf16 with block recompute, across two loopback daemons (blocks
# 0-5 with the embedding, 6-11 with the tied head), from a pre-tokenised corpus of over 1 GB
# (the Bible repeated COPIES times, `skytrain data prepare`), checkpointing every 2 steps.
# Run twice: undisturbed, then with the second stage's daemon killed (kill -9) after step
# KILL_AT and started again; the job resumes from its last checkpoint by itself. Prints
# each run's start-up, step time, the resume, each daemon's peak resident memory against
# admission's estimate, and whether the final weights of the two runs are bit-identical.
# Usage (after deploy/build.sh): [SEQ=128] [BATCH=4] bash bench/llm_resume.sh [steps] [kill_at] [copies] [precision] [recompute]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-8}
kill_at=${2:-3}
copies=${3:-150}
precision=${4:-bf16}
recompute=${5:-block}
seq=${SEQ:-128}
batch=${BATCH:-4}
source deploy/local-daemons.sh
bench_workspace
for _ in $(seq "$copies"); do cat "$corpus"; done > "$work/big.txt"
"$cli" data prepare "$work/big.txt" -o "$work/tokens" --split line --no-progress
rm -f "$work/big.txt"
echo "corpus: $(du -sh "$work/tokens" | cut -f1) of token shards"

ports=($(python3 -c '
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))'))
data_root=$work
make_keys "$work/keys" "$cli" 2
start_daemon A build/daemon/skytraind "$work/a" "tcp://127.0.0.1:${ports[0]}" "tcp://127.0.0.1:${ports[1]}"
start_daemon B build/daemon/skytraind "$work/b" "tcp://127.0.0.1:${ports[2]}" "tcp://127.0.0.1:${ports[3]}"
export SKYTRAIN_DAEMON=$A
python3 - "$A" "$B" "$steps" "$precision" "$recompute" "$work/tokens" "$work/job.json" "$seq" "$batch" <<'PY'
import json, sys
a, b, steps, precision, recompute, tokens, out, seq, batch = sys.argv[1:]
json.dump({"name": f"gpt2-small-{precision}-{recompute}", "seed": 1, "steps": int(steps), "batch_size": int(batch),
           "micro_batches": 2, "schedule": "1f1b", "precision": precision,
           "model": {"kind": "gpt2", "preset": "gpt2-small", "seq_len": int(seq), "recompute": recompute},
           "optimizer": {"lr": 3e-4},
           "data": {"format": "tokens", "files": [tokens]}, "eval": {"samples": 4},
           "checkpoint": {"interval": 2, "keep": 2}, "failure": {"max_restarts": 3},
           "stages": [{"daemon": a, "layers": [0, 6]}, {"daemon": b, "layers": [6, 12]}]}, open(out, "w"))
PY
steps_done() { "$cli" status --json "$1" | python3 -c "import json, sys; print(len(json.load(sys.stdin)['steps']))"; }
peak() {  # peak I: daemon I's peak resident memory since its (last) start
  grep VmHWM "/proc/${daemon_pids[$1]}/status" | awk '{printf "%.0f MB", $2 / 1024}'
}
run() {  # run NAME KILL: not in a subshell, so a restarted daemon's pid is kept
  local job start
  start=$(date +%s.%N)
  job=$("$cli" submit --detach "$work/job.json" | awk '/submitted job/ {print $3}')
  if [ "$2" = kill ]; then
    until [ "$(steps_done "$job")" -ge "$kill_at" ]; do sleep 0.5; done
    kill -9 "${daemon_pids[1]}"; wait "${daemon_pids[1]}" 2>/dev/null || true
    echo "killed stage 1's daemon after step $(steps_done "$job")" >&2
    sleep 1
    build/daemon/skytraind --config "$work/b/config.json" >> "$work/b/daemon.log" 2>&1 &
    daemon_pids[1]=$!
  fi
  "$cli" logs -f "$job" > "$work/$1.log" 2>&1 || true
  "$cli" status --json "$job" > "$work/$1.status.json"
  "$cli" export "$job" -o "$work/$1.safetensors" > /dev/null
  python3 - "$work/$1.status.json" "$start" "$1" <<'PYS' >&2
import json, statistics, sys
s = json.load(open(sys.argv[1])); start = float(sys.argv[2])
rows = s["steps"]
print(f"{sys.argv[3]}: {s['state']}, {len(rows)} steps, start-up {rows[0]['time'] - start:.1f} s, "
      f"median step {statistics.median(r['step_s'] for r in rows[1:]):.1f} s, restarts {s.get('restarts', 0)}")
for e in s.get("events", []):
    print("  event:", e.get("message", e) if isinstance(e, dict) else e)
PYS
  echo "$1: stage 0's daemon peak $(peak 0) so far, stage 1's $(peak 1) since its last start"
}
run undisturbed none
run killed kill
for i in 0 1; do
  echo "stage $i: admission's $(grep -o "estimated [0-9.]* MB" "$work/$([ $i = 0 ] && echo a || echo b)/daemon.log" | tail -1)"
done
python3 - "$work/undisturbed.safetensors" "$work/killed.safetensors" <<'PY'
import json, struct, sys
def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    return {k: body[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
same = sum(1 for k in a if b.get(k) == a[k])
print(f"final weights: {same} of {len(a)} tensors bit-identical to the undisturbed run's"
      + ("" if same == len(a) == len(b) else " -- MISMATCH"))
sys.exit(0 if same == len(a) == len(b) else 1)
PY
