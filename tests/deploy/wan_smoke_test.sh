#!/usr/bin/env bash
# The emulated WAN comes up, a job trains across it, the coordinator measures the link's
# configured delay; when the link slows down under a running job, the coordinator re-plans;
# and everything comes down again. Needs root (CI has it); skips (77)
# without it.
set -euo pipefail
testbed=$1 corpus=$2
[ "$(id -u)" -eq 0 ] || { echo "wan_smoke_test: needs root; skipped"; exit 77; }
export SKYTRAIN_WAN_STATE=$(mktemp -d)
fail() { echo "FAIL: $*" >&2; exit 1; }
# Polls job $job's status (into status.json) every 0.2 s, at most TRIES times, until the
# Python condition COND on `s`, the status, holds.
await_status() {
  local tries=$1 cond=$2
  for _ in $(seq "$tries"); do
    "$TESTBED" client status --json "$job" > "$SKYTRAIN_WAN_STATE/status.json"
    python3 -c "import json, sys; s = json.load(open('$SKYTRAIN_WAN_STATE/status.json')); sys.exit(0 if $cond else 1)" && return 0
    sleep 0.2
  done
}
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
  # A job with 256 kB of activations a step: after 8 steps the link drops from 40 to
  # 10 Mbit/s, the steps take 2-4x the prediction, and the coordinator must re-plan. The
  # job is long (150 steps of ~0.1 s) so that the re-plan does not race its end on a slow
  # machine; once the re-plan is seen the link is restored and the job ends quickly.
  python3 - "$SKYTRAIN_WAN_STATE/job.json" "$SKYTRAIN_WAN_STATE/slow.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s.update({"name": "wan-replan", "steps": 150, "batch_size": 16})
s["model"].update({"d_model": 64, "seq_len": 64})
json.dump(s, open(sys.argv[2], "w"))
PY
  job=$("$TESTBED" client submit --detach "$SKYTRAIN_WAN_STATE/slow.json" | awk '{print $3}')
  await_status 300 "s['steps_done'] >= 8" || true
  "$TESTBED" shape 0 10
  await_status 300 "len(s['plans']) >= 2 or s['state'] != 'running'" || true
  "$TESTBED" shape 0 40
  await_status 600 "s['state'] in ('succeeded', 'failed', 'cancelled')" || true
  "$TESTBED" client status "$job"
  python3 - "$SKYTRAIN_WAN_STATE/status.json" <<'PY'
import json, sys
status = json.load(open(sys.argv[1]))
assert status["state"] == "succeeded", status["error"]
plans = status["plans"]
assert len(plans) >= 2, "no re-plan after the link slowed down"
before, after = plans[0]["links"][0]["bandwidth_bytes_per_s"], plans[1]["links"][0]["bandwidth_bytes_per_s"]
print(f"re-plan at step {plans[1]['from_step']}: {plans[1]['reason']}; link {before * 8 / 1e6:.0f} -> {after * 8 / 1e6:.0f} Mbit/s")
assert plans[1]["reason"].startswith("re-plan: measured"), plans[1]["reason"]
assert plans[1]["from_step"] > 8
assert after < before / 2, "the new profile did not see the slower link"
PY
}
export -f check fail await_status
export corpus
bash "$testbed" run 40:15 -- bash -c check
if ip netns list | grep -q '^skyt'; then fail "namespaces left behind"; fi
if pgrep -f "$SKYTRAIN_WAN_STATE" >/dev/null; then fail "processes left behind"; fi
rm -rf "$SKYTRAIN_WAN_STATE"
echo "wan_smoke_test: passed"
