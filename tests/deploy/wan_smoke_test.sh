#!/usr/bin/env bash
# The emulated WAN comes up, a job trains across it, the coordinator measures the link's
# configured delay, and everything comes down again. Needs root (CI has it); skips (77)
# without it.
set -euo pipefail
testbed=$1 corpus=$2
[ "$(id -u)" -eq 0 ] || { echo "wan_smoke_test: needs root; skipped"; exit 77; }
export SKYTRAIN_WAN_STATE=$(mktemp -d)
fail() { echo "FAIL: $*" >&2; exit 1; }
check() {
  cat > "$SKYTRAIN_WAN_STATE/job.json" <<JSON
{"name": "wan-smoke", "seed": 1, "steps": 4, "batch_size": 8, "micro_batches": "auto",
 "model": {"d_model": 32, "heads": 4, "layers": 2, "d_ff": 64, "seq_len": 16},
 "data": {"files": ["$corpus"]}, "eval": {"samples": 8},
 "stages": [{"daemon": "$($TESTBED control 0)", "layers": [0, 1]},
            {"daemon": "$($TESTBED control 1)", "layers": [1, 2]}]}
JSON
  "$TESTBED" client submit "$SKYTRAIN_WAN_STATE/job.json" > "$SKYTRAIN_WAN_STATE/out" 2>&1 || { cat "$SKYTRAIN_WAN_STATE/out"; fail "job failed"; }
  cat "$SKYTRAIN_WAN_STATE/out"
  job=$(awk '/submitted job/ {print $3}' "$SKYTRAIN_WAN_STATE/out")
  "$TESTBED" client status --json "$job" > "$SKYTRAIN_WAN_STATE/status.json"
  python3 - "$SKYTRAIN_WAN_STATE/status.json" <<'PY'
import json, sys
link = json.load(open(sys.argv[1]))["plans"][0]["links"][0]
delay, bandwidth = link["delay_s"], link["bandwidth_bytes_per_s"]
print(f"measured one-way delay {delay * 1e3:.1f} ms (configured 15), bandwidth {bandwidth * 8 / 1e6:.0f} Mbit/s (configured 40)")
assert 0.014 <= delay <= 0.040, "delay not what the testbed set"
assert 10e6 / 8 <= bandwidth <= 80e6 / 8, "bandwidth not what the testbed set"
PY
}
export -f check fail
export corpus
bash "$testbed" run 40:15 -- bash -c check
if ip netns list | grep -q '^skyt'; then fail "namespaces left behind"; fi
if pgrep -f "$SKYTRAIN_WAN_STATE" >/dev/null; then fail "processes left behind"; fi
rm -rf "$SKYTRAIN_WAN_STATE"
echo "wan_smoke_test: passed"
