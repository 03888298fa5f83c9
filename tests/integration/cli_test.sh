#!/usr/bin/env bash
# Two real skytraind processes and the skytrain CLI: bad specs are refused with the JSON
# path and value within seconds, the daemons stay up, a valid job trains to the end, and
# cancel is idempotent.
set -euo pipefail
daemon=$1 cli=$2 corpus=$3
work=$(mktemp -d)
source "$(dirname "$0")/../../deploy/local-daemons.sh"
cleanup() { stop_daemons; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

data_root=$(dirname "$corpus")
make_keys "$work/keys" "$cli" 2
start_daemon A "$daemon" "$work/a"
start_daemon B "$daemon" "$work/b"
[ "${#daemon_pids[@]}" -eq 2 ] || fail "expected two daemon pids"
export SKYTRAIN_DAEMON=$A

# spec KEY=PYTHON-EXPRESSION... : writes a variant of the valid spec, prints its path.
spec() {
  local out="$work/spec$RANDOM.json"
  python3 - "$out" "$A" "$B" "$corpus" "$@" <<'PY'
import json, sys
out, a, b, corpus, *edits = sys.argv[1:]
s = {"name": "cli", "seed": 1, "steps": 6, "batch_size": 8, "micro_batches": 2, "schedule": "1f1b",
     "model": {"d_model": 32, "heads": 4, "layers": 4, "d_ff": 64, "seq_len": 16},
     "data": {"files": [corpus]}, "eval": {"samples": 8},
     "stages": [{"daemon": a, "layers": [0, 2]}, {"daemon": b, "layers": [2, 4]}]}
for e in edits:
    exec(e, {"s": s})
json.dump(s, open(out, "w"))
print(out)
PY
}

# expect_refused DESCRIPTION EXPECTED-EXIT NEEDLE... -- SPEC
expect_refused() {
  local what=$1 code=$2; shift 2
  local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  local start=$SECONDS rc=0
  "$cli" submit "$1" > "$work/out" 2> "$work/err" || rc=$?
  [ "$rc" -eq "$code" ] || { cat "$work/out" "$work/err"; fail "$what: exit $rc, expected $code"; }
  for n in "${needles[@]}"; do
    grep -qF -- "$n" "$work/out" "$work/err" || { cat "$work/out" "$work/err"; fail "$what: no \"$n\" in the output"; }
  done
  [ $((SECONDS - start)) -le 10 ] || fail "$what: took $((SECONDS - start)) s"
  echo "ok: $what -> $(cat "$work/err" "$work/out" | grep -m1 -E 'error|failed')"
}

expect_refused "unknown key" 2 '$.model.widht' "unknown field" -- "$(spec 's["model"]["widht"] = 3')"
expect_refused "misspelt key" 2 '$.model.d_modle' 'unknown field; did you mean "d_model"?' -- "$(spec 's["model"]["d_modle"] = 32')"
expect_refused "wrong type" 2 '$.steps' '"ten"' -- "$(spec 's["steps"] = "ten"')"
expect_refused "negative steps" 2 '$.steps' "-5" -- "$(spec 's["steps"] = -5')"
expect_refused "overlapping layers" 2 '$.stages[1].layers' "overlaps" -- "$(spec 's["stages"][1]["layers"] = [1, 4]')"
expect_refused "gap in layers" 2 '$.stages[1].layers' "gap" -- "$(spec 's["stages"][1]["layers"] = [3, 4]')"
expect_refused "unknown codec" 2 '$.compression.forward' "valid: bf16, ef, fp16" -- "$(spec 's["compression"] = {"forward": "lz4"}')"
expect_refused "not JSON" 2 "not valid JSON" -- "$(echo '{"steps": ' > "$work/broken.json"; echo "$work/broken.json")"
some_key=$(cut -d' ' -f1 "$work/keys/admin.pub")
expect_refused "stage daemon of unknown key" 2 '$.stages[1].key' "no public key is known for daemon tcp://127.0.0.1:9" -- \
  "$(spec 's["stages"][1]["daemon"] = "tcp://127.0.0.1:9"')"
expect_refused "unreachable stage daemon" 1 "stage 1 (tcp://127.0.0.1:9)" "no reply" -- \
  "$(spec 's["stages"][1]["daemon"] = "tcp://127.0.0.1:9"' "s['stages'][1]['key'] = '$some_key'")"
expect_refused "missing data file" 1 "/nonexistent/corpus.txt" -- "$(spec 's["data"]["files"] = ["/nonexistent/corpus.txt"]')"
SKYTRAIN_DAEMON=tcp://127.0.0.1:9 expect_refused "coordinator of unknown key" 2 "no public key is known for daemon tcp://127.0.0.1:9" -- "$(spec)"
SKYTRAIN_DAEMON=tcp://127.0.0.1:9 SKYTRAIN_DAEMON_KEY=$some_key expect_refused "unreachable coordinator" 2 "no reply from tcp://127.0.0.1:9" -- "$(spec)"
# An empty variable is an unset one (a user's `export SKYTRAIN_DAEMON=`): the default endpoint.
SKYTRAIN_DAEMON= expect_refused "empty SKYTRAIN_DAEMON" 2 "no public key is known for daemon tcp://127.0.0.1:7100" -- "$(spec)"

for p in "${daemon_pids[@]}"; do kill -0 "$p" || fail "a daemon died on bad input"; done

# The daemons still serve: a valid job, m and schedule chosen by the planner, trains to the
# end with falling loss, showing its plan and predicted vs measured step time.
"$cli" submit "$(spec 's["micro_batches"] = "auto"; s["schedule"] = "auto"')" > "$work/good" || { cat "$work/good"; fail "valid job failed"; }
cat "$work/good"
grep -q "succeeded" "$work/good" || fail "no success line"
grep -q "validation loss" "$work/good" || fail "no summary"
[ "$(grep -c '^step ' "$work/good")" -eq 6 ] || fail "expected 6 progress lines"
grep -q "<- chosen" "$work/good" || fail "no plan table in the progress"
grep -q "step time predicted" "$work/good" || fail "no predicted vs measured in the summary"
good_job=$(awk '/submitted job/ {print $3}' "$work/good")
"$cli" status "$good_job" > "$work/good-status" || fail "status failed"
grep -q "<- chosen" "$work/good-status" || { cat "$work/good-status"; fail "status does not show the plan table"; }

# plan: a dry run prints the table of m and exits 0 without training.
"$cli" plan "$(spec 's["micro_batches"] = "auto"')" > "$work/plan" || { cat "$work/plan"; fail "plan failed"; }
cat "$work/plan"
grep -q "link 0->1" "$work/plan" || fail "plan shows no link"
for m in 1 2 4 8; do grep -qE "^ +$m +1f1b " "$work/plan" || fail "plan table lacks m=$m"; done
[ "$(grep -c '<- chosen' "$work/plan")" -eq 1 ] || fail "plan must mark one choice"
# A plan is not a job: no stage daemon keeps a folder (or an owner's claim) for it.
plan_id=$(awk '/^profiling job/ {print $3}' "$work/plan")
[ -n "$plan_id" ] || fail "plan names no job id"
for dir in "$work/a" "$work/b"; do
  [ ! -e "$dir/jobs/$plan_id" ] || fail "plan left $dir/jobs/$plan_id: $(ls "$dir/jobs/$plan_id")"
done
python3 - "$work/good" <<'PY' || fail "loss did not fall"
import re, sys
losses = [float(m.group(1)) for m in re.finditer(r"loss (\d+\.\d+)", open(sys.argv[1]).read())]
sys.exit(0 if losses[-1] < losses[0] else 1)
PY

# cancel is idempotent; status and list see the cancelled job.
job=$("$cli" submit --detach "$(spec 's["steps"] = 100000')" | awk '{print $3}')
sleep 1
"$cli" cancel "$job" | grep -q cancelled || fail "cancel did not cancel"
"$cli" cancel "$job" | grep -q cancelled || fail "second cancel was not idempotent"
"$cli" status "$job" | grep -q "cancelled" || fail "status does not show cancelled"
"$cli" list | grep -q "$job" || fail "list does not show the job"
rc=0; "$cli" status 0000000000000000 > "$work/unknown" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q "unknown job" "$work/unknown" || fail "unknown job not reported (exit $rc)"
sleep 1
grep -q "stage 0: aborted" "$work/a/daemon.log" || { cat "$work/a/daemon.log"; fail "stage 0 was not aborted"; }

# Conventions: a mistyped command exits 2 and names the nearest; a dry run is not a job;
# list is newest first, as JSON too, filtered by state; a unique id prefix names a job.
rc=0; "$cli" sumbit x.json > "$work/typo" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q 'did you mean "submit"' "$work/typo" || { cat "$work/typo"; fail "a typo: exit $rc"; }
rc=0; "$cli" status > "$work/usage" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { cat "$work/usage"; fail "a missing argument: exit $rc, not 2"; }
rc=0; "$cli" data prepar x.txt -o y > "$work/typo" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q 'did you mean "data prepare"' "$work/typo" || { cat "$work/typo"; fail "a nested typo: exit $rc"; }
rc=0; "$cli" list --stat running > "$work/typo" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q 'did you mean "--state"' "$work/typo" || { cat "$work/typo"; fail "a mistyped option: exit $rc"; }
# A bare public key that starts with '-' (one in 85) reads as an option: the error says so, and
# "--" before it admits it.
dash_key='-vPpD6Gq0K7qi[jJ^K9u+rL?Q3/^x7<1Fx@o%G*t'
rc=0; "$cli" authorize "$dash_key" --role client --name dash --file "$work/dash_keys" > "$work/typo" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -qF "is a public key starting with '-'" "$work/typo" || { cat "$work/typo"; fail "a key starting with '-': exit $rc"; }
"$cli" authorize --role client --name dash --file "$work/dash_keys" -- "$dash_key" > /dev/null
grep -qxF -- "$dash_key client dash" "$work/dash_keys" || { cat "$work/dash_keys"; fail "-- KEY was not admitted"; }
rc=0; "$daemon" --confg x.json > "$work/typo" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { cat "$work/typo"; fail "skytraind's usage error: exit $rc, not 2"; }
"$cli" validate "$(spec)" | grep -q "a valid job spec" || fail "validate refused a valid spec"
rc=0; "$cli" validate "$(spec 's["stpes"] = 3')" > "$work/invalid" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q 'did you mean "steps"' "$work/invalid" || { cat "$work/invalid"; fail "validate: exit $rc"; }
# A file error carries the OS reason.
rc=0; "$cli" validate "$work/missing.json" > /dev/null 2> "$work/missing" || rc=$?
[ "$rc" -eq 2 ] && grep -qF "\"$work/missing.json\" cannot be opened: No such file or directory" "$work/missing" ||
  { cat "$work/missing"; fail "a missing spec file: exit $rc, or no OS reason"; }
# $XDG_CONFIG_HOME: trust without --file (and without $SKYTRAIN_KNOWN_DAEMONS) writes
# $XDG_CONFIG_HOME/skytrain/known_daemons, creating its folder.
env -u SKYTRAIN_KNOWN_DAEMONS XDG_CONFIG_HOME="$work/xdg" "$cli" trust tcp://127.0.0.1:9 "@$work/keys/daemon1.pub" \
  > "$work/trust" 2>&1 || { cat "$work/trust"; fail "trust without --file failed"; }
grep -qF "added to $work/xdg/skytrain/known_daemons" "$work/trust" || { cat "$work/trust"; fail "trust names another file"; }
[ "$(cat "$work/xdg/skytrain/known_daemons" 2> /dev/null)" = "tcp://127.0.0.1:9 $(cut -d' ' -f1 "$work/keys/daemon1.pub")" ] ||
  fail "trust did not write the line to \$XDG_CONFIG_HOME/skytrain/known_daemons"
"$cli" list --json > "$work/list.json"
python3 - "$work/list.json" "$job" "$good_job" <<'PY' || fail "list --json is not newest first, or shows a dry run"
import json, sys
jobs = json.load(open(sys.argv[1]))
times = [j["created_at"] for j in jobs]
assert times == sorted(times, reverse=True), times
assert not any(j["dry_run"] for j in jobs), "a plan (dry run) is listed as a job"
assert jobs[0]["id"] == sys.argv[2] and sys.argv[3] in [j["id"] for j in jobs], jobs
PY
"$cli" list --state cancelled | grep -q "$job" || fail "list --state cancelled lacks the cancelled job"
"$cli" list --state succeeded | grep -q "$job" && fail "list --state succeeded shows the cancelled job"
"$cli" status "${job:0:6}" | grep -q "job $job " || fail "status by a 6-digit prefix"
rc=0; "$cli" status "zz" > "$work/badid" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q "is not a job id" "$work/badid" || { cat "$work/badid"; fail "a non-hex id: exit $rc"; }
# Ctrl-C on an attached submit: the CLI says the job keeps running, and it does.
"$cli" submit "$(spec 's["steps"] = 100000')" > "$work/sigint.out" 2> "$work/sigint.err" &
submitter=$!
for _ in $(seq 100); do grep -q "submitted job" "$work/sigint.out" 2> /dev/null && break; sleep 0.1; done
kill -INT "$submitter"
rc=0; wait "$submitter" || rc=$?
[ "$rc" -eq 130 ] && grep -q "keeps running" "$work/sigint.err" || { cat "$work/sigint.err"; fail "Ctrl-C: exit $rc"; }
running=$(awk '/submitted job/ {print $3}' "$work/sigint.out")
sleep 0.5
"$cli" status "$running" | grep -qE ": (preparing|running)," || fail "the job did not keep running after Ctrl-C"
"$cli" cancel "$running" > /dev/null
# Ctrl-C with --cancel-on-interrupt: the CLI cancels the job and says so.
"$cli" submit --cancel-on-interrupt "$(spec 's["steps"] = 100000')" > "$work/sigint2.out" 2> "$work/sigint2.err" &
submitter=$!
for _ in $(seq 100); do grep -q "submitted job" "$work/sigint2.out" 2> /dev/null && break; sleep 0.1; done
kill -INT "$submitter"
rc=0; wait "$submitter" || rc=$?
interrupted=$(awk '/submitted job/ {print $3}' "$work/sigint2.out")
[ "$rc" -eq 130 ] && grep -qF "interrupted: job $interrupted cancelled (--cancel-on-interrupt)" "$work/sigint2.err" ||
  { cat "$work/sigint2.err"; fail "Ctrl-C with --cancel-on-interrupt: exit $rc"; }
grep -q "keeps running" "$work/sigint2.err" && fail "--cancel-on-interrupt says the job keeps running"
state=
for _ in $(seq 50); do "$cli" status "$interrupted" | grep -q '": cancelled, step ' && { state=cancelled; break; }; sleep 0.1; done
[ "$state" = cancelled ] || { "$cli" status "$interrupted"; fail "Ctrl-C with --cancel-on-interrupt left the job running"; }
echo "ok: conventions (typo and usage exit 2, validate, OS reasons, \$XDG_CONFIG_HOME, list --json/--state, id prefixes, Ctrl-C, --cancel-on-interrupt)"

for p in "${daemon_pids[@]}"; do kill -0 "$p" || fail "a daemon died"; done
echo "cli_test: all passed"
