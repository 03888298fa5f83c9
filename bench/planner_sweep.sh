#!/usr/bin/env bash
# The planner against reality: runs a real two-daemon job at every micro-batch count m that
# divides its batch and prints predicted vs measured step time, and the planner's m
# against the best measured one. Loopback, one torch thread per daemon.
# Usage: bench/planner_sweep.sh [job.json] [steps]     (after deploy/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
job=${1:-deploy/jobs/gpt-web.json}
steps=${2:-30}
corpus=$PWD/build/data/web.txt
deploy/get-corpus.sh "$corpus" >/dev/null
work=$(mktemp -d)
source deploy/local-daemons.sh
cleanup() { stop_daemons; rm -rf "$work"; }
trap cleanup EXIT
data_root=$(dirname "$corpus")
make_keys "$work/keys" build/client/skytrain 2
start_daemon A build/daemon/skytraind "$work/d0"
start_daemon B build/daemon/skytraind "$work/d1"
export SKYTRAIN_DAEMON=$A

variant() {  # variant M SCHEDULE -> spec path
  python3 - "$job" "$corpus" "$A" "$B" "$steps" "$1" "$2" "$work/spec-$1-$2.json" <<'PY'
import json, sys
job, corpus, a, b, steps, m, schedule, out = sys.argv[1:]
s = json.load(open(job))
s["data"]["files"] = [corpus]
s["stages"][0]["daemon"], s["stages"][1]["daemon"] = a, b
s["steps"] = int(steps)
s["eval"] = {"samples": 8}
s["micro_batches"] = m if m == "auto" else int(m)
s["schedule"] = schedule
json.dump(s, open(out, "w"))
print(out)
PY
}

plan_job=$(build/client/skytrain plan "$(variant auto auto)" | awk '/profiling job/ {print $3}')
build/client/skytrain status --json "$plan_job" > "$work/plan.json"
schedule=$(python3 -c "import json;print(json.load(open('$work/plan.json'))['plans'][-1]['schedule'])")
echo "planner: $(python3 -c "import json;p=json.load(open('$work/plan.json'))['plans'][-1];print('m=%d %s predicted %.4f s/step' % (p['micro_batches'], p['schedule'], p['step_s']))")"
for m in $(python3 -c "import json;p=json.load(open('$work/plan.json'))['plans'][-1];print(' '.join(str(r['micro_batches']) for r in p['table'] if r['schedule']==p['schedule']))"); do
  id=$(build/client/skytrain submit --detach "$(variant "$m" "$schedule")" | awk '{print $3}')
  while ! build/client/skytrain status "$id" | grep -qE ": (succeeded|failed|cancelled)"; do sleep 0.5; done
  build/client/skytrain status --json "$id" > "$work/run-$m.json"
done
# The planner for real: "auto", re-planning (and calibrating) as it runs.
auto=$(build/client/skytrain submit --detach "$(variant auto auto)" | awk '{print $3}')
while ! build/client/skytrain status "$auto" | grep -qE ": (succeeded|failed|cancelled)"; do sleep 0.5; done
build/client/skytrain status --json "$auto" > "$work/auto.json"
python3 - "$work" "$steps" <<'PY'
import glob, json, os, sys
work, steps = sys.argv[1], sys.argv[2]
plan = json.load(open(os.path.join(work, "plan.json")))["plans"][-1]
predicted = {r["micro_batches"]: r["step_s"] for r in plan["table"] if r["schedule"] == plan["schedule"]}
rows = []
for path in sorted(glob.glob(os.path.join(work, "run-*.json")), key=lambda p: int(p.split("-")[-1][:-5])):
    run = json.load(open(path))
    m = int(path.split("-")[-1][:-5])
    if run["state"] != "succeeded":
        sys.exit(f"run with m={m} {run['state']}: {run['error']}")
    rows_ = [s for s in run["steps"] if s["step"] >= 1]  # step 0 allocates the buffers
    measured = sum(s["step_s"] for s in rows_) / len(rows_)
    bubble = sum(1 - sum(s["compute_s"]) / (len(s["compute_s"]) * s["step_s"]) for s in rows_) / len(rows_)
    predicted_bubble = next(r["bubble"] for r in plan["table"] if r["schedule"] == plan["schedule"] and r["micro_batches"] == m)
    rows.append((m, predicted[m], measured, bubble, predicted_bubble))
print(f"\nschedule {plan['schedule']}, {steps} steps a run; measured = mean step time after the first step\n")
print("| m | predicted s/step | measured s/step | error | predicted bubble | measured bubble |")
print("|---:|---:|---:|---:|---:|---:|")
for m, p, meas, mb, pb in rows:
    print(f"| {m} | {p:.4f} | {meas:.4f} | {100 * (p - meas) / meas:+.1f}% | {pb:.3f} | {mb:.3f} |")
best = min(rows, key=lambda r: r[2])
mine = next(r for r in rows if r[0] == plan["micro_batches"])
print(f"\ndry-run plan: m = {mine[0]}, measured {mine[2]:.4f} s/step at that m; best measured m = {best[0]}: "
      f"{best[2]:.4f} s/step; the dry-run choice is {100 * (mine[2] / best[2] - 1):+.1f}% from the best")
auto = json.load(open(os.path.join(work, "auto.json")))
final = auto["plans"][-1]
under = [s for s in auto["steps"] if s["step"] > final["from_step"]]
measured = sum(s["step_s"] for s in under) / len(under)
history = ", ".join(f"m={p['micro_batches']} {p['schedule']} from step {p['from_step']}" for p in auto["plans"])
print(f"auto run: plans {history}; final plan predicted {final['step_s']:.4f} s/step, measured {measured:.4f} "
      f"({100 * (final['step_s'] - measured) / measured:+.1f}%); {100 * (measured / best[2] - 1):+.1f}% from the best fixed m")
PY
