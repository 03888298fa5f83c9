#!/usr/bin/env bash
# Pretraining a subspace model with a dense warm start, against the unconstrained model, side
# by side over SEEDS seeds: per seed, the job's model trains unconstrained for WARM steps
# (constant learning rate after the job's warm-up; in one cloud, or across at full width),
# is exported, and converted into the subspace form at rank K (model.subspace with
# init_from) for the remaining steps (the job's decay over them, a 10-step warm-up: AdamW's
# moments start anew). Prints each seed's final validation loss, then the mean, spread and
# the difference; the unconstrained rows run the whole job as it is.
# Usage (after deploy/build.sh): bash bench/subspace_warmstart.sh JOB.json SEEDS K WARM [PYTHON-EDIT...]
#   e.g. bash bench/subspace_warmstart.sh deploy/jobs/gpt-web.json 3 32 50
set -euo pipefail
cd "$(dirname "$0")/.."
job=$1 seeds=$2 k=$3 warm=$4
shift 4
source deploy/local-daemons.sh
bench_workspace
data_root=$PWD/build/data
make_keys "$work/keys" "$cli" 2
start_daemon A build/daemon/skytraind "$work/a"
start_daemon B build/daemon/skytraind "$work/b"

spec() {  # spec OUT SEED PHASE: the job for one phase (full, warm or rest), from JOB and the edits
  python3 - "$job" "$corpus" "$A" "$B" "$2" "$3" "$warm" "$k" "$work/warm-$2.safetensors" "$1" "${edits[@]}" <<'PY'
import json, sys
job, corpus, a, b, seed, phase, warm, k, pretrained, out, *edits = sys.argv[1:]
s = json.load(open(job))
s["data"]["files"] = [corpus]
s["stages"][0]["daemon"], s["stages"][-1]["daemon"] = a, b
s["seed"] = int(seed)
for e in edits:
    exec(e, {"s": s})
if phase == "warm":
    s["steps"] = int(warm)
    s["optimizer"]["schedule"] = "constant"
elif phase == "rest":
    s["steps"] -= int(warm)
    s["optimizer"]["warmup_steps"] = 10
    s["model"]["subspace"] = {"rank": int(k)}
    s["model"]["init_from"] = pretrained
json.dump(s, open(out, "w"))
PY
}
run() {  # run SPEC: to the end; prints the job id
  local id
  id=$("$cli" --daemon "$A" submit --detach "$1" | awk '{print $3}')
  "$cli" --daemon "$A" logs -f "$id" > /dev/null || true
  echo "$id"
}
validation() {  # validation ID: state and validation loss
  "$cli" --daemon "$A" status --json "$1" | python3 -c "
import json, sys
s = json.load(sys.stdin)
print(s['state'], s['summary'].get('validation_loss', float('nan')), s['summary'].get('bytes_sent_per_step', 0))"
}
edits=("$@")
: > "$work/results"
for seed in $(seq 1 "$seeds"); do
  spec "$work/full.json" "$seed" full
  line="unconstrained $(validation "$(run "$work/full.json")")"
  echo "seed $seed: $line" && echo "$seed $line" >> "$work/results"
  spec "$work/warm.json" "$seed" warm
  id=$(run "$work/warm.json")
  "$cli" --daemon "$A" export "$id" -o "$work/warm-$seed.safetensors" > /dev/null
  spec "$work/rest.json" "$seed" rest
  line="warm$warm+k$k $(validation "$(run "$work/rest.json")")"
  echo "seed $seed: $line" && echo "$seed $line" >> "$work/results"
done
python3 - "$work/results" <<'PY'
import statistics as st, sys
rows = {}
for line in open(sys.argv[1]):
    seed, label, state, loss, _ = line.split()
    rows.setdefault(label, []).append((state, float(loss)))
base = None
for label, runs in rows.items():
    v = [l for _, l in runs]
    mean = st.mean(v)
    base = base or mean
    print(f"{label}: validation loss mean {mean:.4f}, min-max {min(v):.4f}-{max(v):.4f}, "
          f"std {st.stdev(v) if len(v) > 1 else 0:.4f}, {100 * (mean / base - 1):+.1f}% "
          f"({sum(s == 'succeeded' for s, _ in runs)} of {len(runs)} succeeded)")
PY
