#!/usr/bin/env bash
# The cost of encryption, side by side in one run (docs/BENCHMARKS.md):
#  1. link goodput, CURVE vs plaintext (bench/curve_bench), on loopback and on the emulated
#     1 Gbit/s and 100 Mbit/s links (tbf-shaped veth between namespaces; needs root);
#  2. job step time of the demo model on loopback, CURVE daemons vs insecure ones, alternating.
# Usage (after deploy/build.sh): bash bench/curve_bench.sh [MB per round] [job steps]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mb=${1:-256}
steps=${2:-60}
bench=$root/build/bench/curve_bench
work=$(mktemp -d)
sinks=()
cleanup() {
  for p in "${sinks[@]}"; do kill "$p" 2>/dev/null || true; done
  stop_daemons 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

goodput() {  # goodput LABEL NS_SINK NS_SOURCE HOST MB
  local label=$1 nss=$2 nsc=$3 host=$4 size=$5 port=$((7300 + ${#sinks[@]} * 2))
  ${nss:+ip netns exec $nss} "$bench" sink "$host" "$port" "$work" > "$work/sink.log" 2>&1 &
  sinks+=($!)
  sleep 1
  echo "### $label ($size MB a round)"
  ${nsc:+ip netns exec $nsc} "$bench" source "$host" "$port" "$work" "$size" 5
  echo
}

goodput "loopback" "" "" 127.0.0.1 "$mb"
if [ "$(id -u)" -eq 0 ]; then
  export SKYTRAIN_WAN_STATE=$work/wan
  bash deploy/wan/testbed.sh up 1000:1,100:1 > /dev/null
  trap 'cleanup; bash deploy/wan/testbed.sh down' EXIT
  goodput "emulated 1 Gbit/s link" skyt1 skyt0 10.211.0.2 $((mb / 2))
  goodput "emulated 100 Mbit/s link" skyt2 skyt1 10.211.1.2 $((mb / 8))
  bash deploy/wan/testbed.sh down
else
  echo "(not root: the emulated links are skipped)"
fi

# Job step time: the demo model, m and schedule fixed, CURVE and insecure daemon pairs.
source deploy/local-daemons.sh
corpus=$root/build/data/web.txt
deploy/get-corpus.sh "$corpus" > /dev/null
data_root=$root/build/data
make_keys "$work/keys" build/client/skytrain 4
start_daemon CA build/daemon/skytraind "$work/ca"
start_daemon CB build/daemon/skytraind "$work/cb"
insecure_daemons=1 start_daemon PA build/daemon/skytraind "$work/pa"
insecure_daemons=1 start_daemon PB build/daemon/skytraind "$work/pb"
run_job() {  # run_job A B [CLI FLAGS...] -> mean step time of steps 2.. (seconds)
  local a=$1 b=$2; shift 2
  python3 - deploy/jobs/gpt-web.json "$corpus" "$a" "$b" "$steps" "$work/job.json" <<'PY'
import json, sys
job, corpus, a, b, steps, out = sys.argv[1:]
s = json.load(open(job))
s["data"]["files"] = [corpus]
s["stages"][0]["daemon"], s["stages"][1]["daemon"] = a, b
s.update({"steps": int(steps), "micro_batches": 4, "schedule": "1f1b", "eval": {"samples": 8}})
json.dump(s, open(out, "w"))
PY
  local job
  job=$(build/client/skytrain --daemon "$a" "$@" submit "$work/job.json" | awk '/submitted job/ {print $3}')
  build/client/skytrain --daemon "$a" "$@" status --json "$job" | python3 -c "
import json, sys
steps = json.load(sys.stdin)['steps'][1:]
print(sum(s['step_s'] for s in steps) / len(steps))"
}
echo "### job step time, loopback, demo model (m=4, 1f1b, $steps steps; mean of steps 2..)"
echo "| round | insecure (s) | CURVE (s) | ratio |"
echo "|---|---|---|---|"
for r in 1 2 3; do
  p=$(run_job "$PA" "$PB" --insecure)
  c=$(run_job "$CA" "$CB")
  python3 -c "print(f'| $r | {$p:.4f} | {$c:.4f} | {$c / $p:.3f} |')"
done
