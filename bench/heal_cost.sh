#!/usr/bin/env bash
# What healing in place costs a replicated job that never fails: each step is applied only on
# the coordinator's commit (one round trip to the coordinating daemon a step). The same job
# (2 stages, 2 copies each, the chaos test's small model: steps of a few tens of ms, where a
# round trip shows most) with failure.heal true and false, alternated over rounds on the same
# three daemons on loopback. Prints the median step time of each run and their ratio.
# Usage: bench/heal_cost.sh [steps] [rounds]     (after deploy/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-200}
rounds=${2:-3}
source deploy/local-daemons.sh
bench_workspace
data_root=$PWD/build/data
make_keys "$work/keys" "$cli" 3
daemon_config_extra=', "private_address": "127.0.0.1"'  # the copies' Gloo links
start_daemon A build/daemon/skytraind "$work/a"
start_daemon B build/daemon/skytraind "$work/b"
start_daemon C build/daemon/skytraind "$work/c"
export SKYTRAIN_DAEMON=$A

run() {  # run HEAL ROUND -> status JSON in $work/HEAL-ROUND.json
  local spec=$work/$1-$2-spec.json id
  /usr/bin/python3 - "$A" "$B" "$C" "$corpus" "$steps" "$1" "$spec" <<'PY'
import json, sys
a, b, c, corpus, steps, heal, out = sys.argv[1:]
s = {"name": "heal-cost", "seed": 7, "steps": int(steps), "batch_size": 8, "micro_batches": 2, "schedule": "1f1b",
     "model": {"d_model": 64, "heads": 4, "layers": 2, "d_ff": 256, "seq_len": 64},
     "data": {"files": [corpus]}, "eval": {"interval": 0, "samples": 8}, "checkpoint": {"interval": 0, "keep": 1},
     "failure": {"heal": heal == "true"},
     "stages": [{"daemon": a, "layers": [0, 1], "replicas": [{"daemon": a}]},
                {"daemon": b, "layers": [1, 2], "replicas": [{"daemon": c}]}]}
json.dump(s, open(out, "w"))
PY
  id=$("$cli" submit --detach "$spec" | awk '{print $3}')
  while ! "$cli" status "$id" | grep -qE ": (succeeded|failed|cancelled)"; do sleep 0.5; done
  "$cli" status --json "$id" > "$work/$1-$2.json"
}

for round in $(seq "$rounds"); do
  run true "$round"
  run false "$round"
done
/usr/bin/python3 - "$work" "$steps" "$rounds" <<'PY'
import json, os, statistics, sys
work, steps, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def median_step(name):
    run = json.load(open(os.path.join(work, name + ".json")))
    if run["state"] != "succeeded":
        sys.exit(f"{name}: {run['state']}: {run['error']}")
    return statistics.median(s["step_s"] for s in run["steps"] if s["step"] > 2)  # the first steps allocate
print(f"{steps} steps, 2 stages x 2 copies, batch 8, m = 2, 1F1B; median step from step 3\n")
print("| round | heal (commit each step) | no heal | ratio |")
print("|---|---:|---:|---:|")
for r in range(1, rounds + 1):
    on, off = median_step(f"true-{r}"), median_step(f"false-{r}")
    print(f"| {r} | {1e3 * on:.1f} ms | {1e3 * off:.1f} ms | {on / off:.3f} |")
PY
