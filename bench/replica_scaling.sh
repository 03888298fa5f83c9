#!/usr/bin/env bash
# Data-parallel stage replicas on this machine: the same job (deploy/jobs/gpt-web.json, a
# fixed batch) with 1 and with 2 copies of every stage, each daemon one torch thread, copies
# averaging gradients over c10d Gloo on loopback. Two layouts:
#   1 stage:  1 copy (1 thread) vs 2 copies (2 threads): does a second core help?
#   2 stages: 1 copy each (2 threads) vs 2 copies each (4 threads on the 2 cores).
# Prints tokens/s, the ratio, the measured all-reduce and the final training loss.
# Usage: bench/replica_scaling.sh [steps] [batch]     (after deploy/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-40}
batch=${2:-32}
work=$(mktemp -d)
source deploy/local-daemons.sh
cleanup() { stop_daemons; rm -rf "$work"; }
trap cleanup EXIT
corpus=$PWD/build/data/web.txt
deploy/get-corpus.sh "$corpus" > /dev/null
data_root=$PWD/build/data
make_keys "$work/keys" build/client/skytrain 4
daemon_config_extra=', "private_address": "127.0.0.1"'
start_daemon A build/daemon/skytraind "$work/d0"
start_daemon B build/daemon/skytraind "$work/d1"
start_daemon C build/daemon/skytraind "$work/d2"
start_daemon D build/daemon/skytraind "$work/d3"
export SKYTRAIN_DAEMON=$A

run() {  # run NAME STAGES REPLICAS -> status JSON in $work/NAME.json
  local spec=$work/$1-spec.json
  /usr/bin/python3 - deploy/jobs/gpt-web.json "$corpus" "$steps" "$batch" "$2" "$3" "$A" "$B" "$C" "$D" "$spec" <<'PY'
import json, sys
job, corpus, steps, batch, stages, replicas, a, b, c, d, out = sys.argv[1:]
s = json.load(open(job))
s["data"]["files"] = [corpus]
s["steps"], s["batch_size"] = int(steps), int(batch)
s["eval"] = {"samples": 8}
s["checkpoint"] = {"interval": 0, "keep": 1}
layers = s["model"]["layers"]
if stages == "1":
    s["stages"] = [{"daemon": a, "layers": [0, layers]}]
    if replicas == "2":
        s["stages"][0]["replicas"] = [{"daemon": b}]
else:
    s["stages"] = [{"daemon": a, "layers": [0, layers // 2]}, {"daemon": b, "layers": [layers // 2, layers]}]
    if replicas == "2":
        s["stages"][0]["replicas"] = [{"daemon": c}]
        s["stages"][1]["replicas"] = [{"daemon": d}]
json.dump(s, open(out, "w"))
PY
  local id
  id=$(build/client/skytrain submit --detach "$spec" | awk '{print $3}')
  while ! build/client/skytrain status "$id" | grep -qE ": (succeeded|failed|cancelled)"; do sleep 0.5; done
  build/client/skytrain status --json "$id" > "$work/$1.json"
}

run one-1 1 1
run one-2 1 2
run two-1 2 1
run two-2 2 2
/usr/bin/python3 - "$work" "$steps" "$batch" <<'PY'
import json, os, sys
work, steps, batch = sys.argv[1:]
def load(name):
    run = json.load(open(os.path.join(work, name + ".json")))
    if run["state"] != "succeeded":
        sys.exit(f"{name}: {run['state']}: {run['error']}")
    rows = [s for s in run["steps"] if s["step"] >= 2]  # the first steps allocate
    tokens = sum(s["tokens_per_s"] for s in rows) / len(rows)
    plan = run["plans"][-1]
    allreduce = max(st.get("allreduce_s", 0) for st in plan["stages"])
    loss = sum(s["loss"] for s in run["steps"][-5:]) / 5
    return tokens, allreduce, plan, loss
print(f"{steps} steps of batch {batch} (gpt-web model), one torch thread per daemon, 2 cores; "
      "tokens/s averaged from step 2\n")
print("| layout | copies per stage | threads | tokens/s | ratio to 1 copy | all-reduce (ms) | plan m, schedule | loss (last 5 steps) |")
print("|---|---:|---:|---:|---:|---:|---|---:|")
for stages, label in (("one", "1 stage"), ("two", "2 stages")):
    base = None
    for copies in (1, 2):
        tokens, allreduce, plan, loss = load(f"{stages}-{copies}")
        base = base or tokens
        threads = (1 if stages == "one" else 2) * copies
        print(f"| {label} | {copies} | {threads} | {tokens:.0f} | {tokens / base:.2f} | {1e3 * allreduce:.1f} | "
              f"m={plan['micro_batches']} {plan['schedule']} | {loss:.4f} |")
PY
