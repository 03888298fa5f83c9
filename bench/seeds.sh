#!/usr/bin/env bash
# Quality with its spread: runs one job spec over N seeds on two loopback daemons and prints
# each seed's final train loss (mean of the last 10 steps) and validation loss, then the
# mean, min-max and standard deviation, and the last step's code_share and sender's loss by
# cut (a model with learned codes). Every quality figure in docs/ comes from this.
# Usage (after deploy/build.sh): bash bench/seeds.sh JOB.json SEEDS [PYTHON-EDIT...]
#   e.g. bash bench/seeds.sh deploy/jobs/gpt-web.json 3 's["steps"] = 300' 's["optimizer"]["lr"] = 1e-3'
# DAEMONS=3: a third daemon for the stages between the first and the last (a 3-stage job).
# FIRST_SEED=S: seeds S to S + SEEDS - 1 (default 1 to SEEDS).
set -euo pipefail
cd "$(dirname "$0")/.."
job=$1 seeds=$2
shift 2
work=$(mktemp -d)
source deploy/local-daemons.sh
trap 'stop_daemons; rm -rf "$work"' EXIT
demo_daemons=${DAEMONS:-2}
start_demo_pair "$work"
results=()
for seed in $(seq "${FIRST_SEED:-1}" $((${FIRST_SEED:-1} + seeds - 1))); do
  python3 - "$job" "$corpus" "$A" "$B" "${C:-$A}" "$seed" "$work/job.json" "$@" <<'PY'
import json, sys
job, corpus, a, b, c, seed, out, *edits = sys.argv[1:]
s = json.load(open(job))
s["data"]["files"] = [corpus]
s["seed"] = int(seed)
for e in edits:
    exec(e, {"s": s})
for stage in s["stages"][1:-1]:
    stage["daemon"] = c
s["stages"][0]["daemon"], s["stages"][-1]["daemon"] = a, b
json.dump(s, open(out, "w"))
PY
  id=$(build/client/skytrain --daemon "$A" submit --detach "$work/job.json" | awk '{print $3}')
  build/client/skytrain --daemon "$A" logs -f "$id" > /dev/null || true
  line=$(build/client/skytrain --daemon "$A" status --json "$id" | python3 -c "
import json, sys
s = json.load(sys.stdin)
m = s['summary']
import statistics
last = s['steps'][-1] if s['steps'] else {}
by_cut = lambda name, f: ','.join(f'{k}:{v:{f}}' for k, v in last.get(name, {}).items()) or '-'
print(s['state'], m.get('final_loss', float('nan')), m.get('validation_loss', float('nan')), sum(1 for r in s['steps'] if r.get('skipped')),
      statistics.median(r['step_s'] for r in s['steps']), statistics.median(r['bytes_sent'] for r in s['steps']),
      by_cut('code_share', '.3f'), by_cut('sender_loss', '.4f'))")
  echo "seed $seed: state, train loss (last 10), validation loss, skipped steps, median step s, median bytes sent a step, last step's code share and sender's loss by cut: $line"
  results+=("$line")
done
printf '%s\n' "${results[@]}" | python3 -c "
import sys, statistics as st
rows = [l.split() for l in sys.stdin if l.strip()]
for i, what in ((1, 'train loss'), (2, 'validation loss')):
    v = [float(r[i]) for r in rows]
    sd = st.stdev(v) if len(v) > 1 else 0.0
    print(f'{what}: mean {st.mean(v):.4f}, min-max {min(v):.4f}-{max(v):.4f}, std {sd:.4f} over {len(v)} seeds')
print(f'median step time: mean {st.mean(float(r[4]) for r in rows):.4f} s over {len(rows)} seeds')
print(f'bytes sent a step: {st.mean(float(r[5]) for r in rows):.0f} (median of each run, mean over seeds)')
print('succeeded:', sum(r[0] == 'succeeded' for r in rows), 'of', len(rows))"
