#!/usr/bin/env bash
# Chaos (DESIGN.md "Failure model"), with real skytraind processes on fixed loopback ports:
#   kill   kill -9 the stage-1 daemon at a random step, start it again a second later
#   stop   SIGSTOP the stage-1 daemon for longer than the heartbeat bound, then SIGCONT
#   stop-coord  SIGSTOP the coordinating daemon (it also hosts stage 0) for 6 s: stage 1's
#          daemon frees the job; the coordinator must say so, not call its own stage lost
#   coord  kill -9 the coordinating daemon (it also hosts stage 0), start it again
#   orphan kill -9 the coordinating daemon and leave it down: the stage-1 daemon must free
#          the job within the heartbeat bound (its data link to stage 0 frees it first); then
#          start it again
#   corrupt kill -9 the stage-1 daemon and corrupt its files of the two newest complete
#          checkpoints: the coordinator must fall back to an older one
#   record kill -9 the coordinating daemon and cut its job record (record.json) at a random
#          byte: it must read the previous generation and resume the job
#   record-lost  the same with both generations damaged: the job is rebuilt from job.json
#          and the checkpoints on disk, and resumed
#   disk   the stage-1 daemon cannot write its next three checkpoints (an I/O error, as a full
#          disk gives): training goes on, an event names each; then kill -9 it: the job
#          resumes from the newest checkpoint written
#   partition  stage 1's daemon's data port drops every packet for 6 s (an nftables rule in
#          the test's own network namespace) while its control port, and so its heartbeats,
#          stay up: the data connection must be found dead in seconds, not after
#          peer_timeout_s (run as root only: otherwise skipped)
#   replica  a job with two copies of each stage (stage 1's second copy on a third daemon,
#          C): kill -9 C mid-step and start it again 5 s later. The job heals in place:
#          pipeline 0 carries the whole batch from the last committed step (no restart, no
#          step lost), and once C answers, pipeline 1 rejoins with the state of a healthy
#          copy. The parameters are within the equivalence tolerance of the undisturbed run's
#          (the batch was split otherwise for a few steps), and the copies bit-identical to
#          each other
#   replica-stop  the same job: SIGSTOP C for 6 s (a hung copy, found by the heartbeats; the
#          other copy of its stage, blocked in the all-reduce, is freed by the abort), then
#          SIGCONT: pipeline 1 rejoins as in the replica case
#   replica-away  the same job: kill -9 B, which holds stage 1's first copy, and leave it down
#          to the end: pipeline 1 carries the whole batch, and `skytrain export` reads the
#          final weights from pipeline 1's copies
#   replica-restart  the same with failure.heal false: every copy resumes from the
#          checkpoint, bit-identical to the undisturbed replicated run
#   resume cancel the job, then `skytrain resume` it from its last checkpoint
#   kill-tokens  the kill case, reading a pre-tokenised corpus (`skytrain data prepare`)
#   kill-scaled  the kill case under dynamic loss scaling from 2^127, which overflows and
#          skips steps all run long: the scale and its run of good steps are in checkpoints
# In the coord case `skytrain logs -f` follows the job throughout and must re-attach.
# Each job must succeed with final parameters bit-identical to an undisturbed run's (the
# healed replica cases: within 1e-3, their copies bit-identical to each other). The
# kill case runs four times: without compression, with error-feedback int8 + SVD codecs,
# under the one-step-delayed update (its pending gradients live in the checkpoints), and
# with q13+pred forward, whose tables live at both ends (the receiver's decoder state too).
# Prints detection time, time to resume and work lost per case (docs/BENCHMARKS.md).
# Usage: chaos_test.sh SKYTRAIND SKYTRAIN CORPUS [CASE...]   (default: all cases)
set -euo pipefail
# In a network namespace of its own where it can (root): nothing outside it is touched, and
# the partition case may drop packets there.
if [ -z "${SKYTRAIN_CHAOS_NETNS:-}" ] && [ "$(id -u)" = 0 ] && command -v ip > /dev/null &&
   unshare --net sh -c 'ip link set lo up' 2> /dev/null; then
  exec unshare --net env SKYTRAIN_CHAOS_NETNS=1 bash -c 'ip link set lo up && exec bash "$0" "$@"' "$0" "$@"
fi
daemon=$1 cli=$2 corpus=$3
shift 3
all_cases=(kill kill-ef kill-delayed kill-pred kill-tokens kill-scaled stop stop-coord coord orphan corrupt record record-lost disk partition replica replica-stop replica-away replica-restart resume)
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=("${all_cases[@]}")
for c in "${cases[@]}"; do  # a misspelt case would otherwise run undisturbed and pass
  [[ " ${all_cases[*]} " == *" $c "* ]] || { echo "chaos_test: unknown case \"$c\" (cases: ${all_cases[*]})" >&2; exit 2; }
done
if [ -z "${SKYTRAIN_CHAOS_NETNS:-}" ] || ! command -v nft > /dev/null ||
   ! { nft add table inet chaos-probe && nft delete table inet chaos-probe; } 2> /dev/null; then
  echo "chaos_test: the partition case needs root and nftables in its own network namespace: skipped" >&2
  keep=(); for c in "${cases[@]}"; do [ "$c" = partition ] || keep+=("$c"); done; cases=("${keep[@]}")
fi
work=$(mktemp -d)
source "$(dirname "$0")/../../deploy/local-daemons.sh"
cleanup() { stop_daemons; rm -rf "$tokens"; for p in $(cat "$work"/*.pid 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done; [ -n "${KEEP:-}" ] || rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$work"/*/daemon.log; do echo "== $f"; tail -30 "$f"; done >&2; exit 1; }
now() { python3 -c 'import time; print(f"{time.time():.3f}")'; }
ports=($(python3 -c '
import socket
socks = [socket.socket() for _ in range(6)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))'))
data_root=$(dirname "$corpus")
tokens=$data_root/chaos-tokens-$$  # under the daemons' data_roots
"$cli" data prepare "$corpus" -o "$tokens" --split line --validation 0.01 --no-progress > /dev/null
make_keys "$work/keys" "$cli" 3
export daemon_config_extra=', "private_address": "127.0.0.1"'  # the replica case's Gloo links
start_daemon A "$daemon" "$work/a" "tcp://127.0.0.1:${ports[0]}" "tcp://127.0.0.1:${ports[1]}"
start_daemon B "$daemon" "$work/b" "tcp://127.0.0.1:${ports[2]}" "tcp://127.0.0.1:${ports[3]}"
start_daemon C "$daemon" "$work/c" "tcp://127.0.0.1:${ports[4]}" "tcp://127.0.0.1:${ports[5]}"
unset daemon_config_extra
pid_a=${daemon_pids[0]} pid_b=${daemon_pids[1]} pid_c=${daemon_pids[2]}
export SKYTRAIN_DAEMON=$A

# restart DIR: the daemon of DIR again, same config, ports and state; prints its pid.
restart() {
  "$daemon" --config "$1/config.json" >> "$1/daemon.log" 2>&1 &
  echo $! > "$work/$(basename "$1").pid"
  echo $!
}

spec() {  # spec NAME VARIANT (none, ef, delayed, pred, tokens, scaled or replica) -> path
  python3 - "$A" "$B" "$corpus" "$work/$1.json" "$2" "$tokens" "$C" <<'PY'
import json, sys
a, b, corpus, out, codecs, tokens, c = sys.argv[1:]
s = {"name": out, "seed": 7, "steps": 150, "batch_size": 8, "micro_batches": 2, "schedule": "1f1b",
     "model": {"d_model": 64, "heads": 4, "layers": 2, "d_ff": 256, "seq_len": 64},
     "data": {"files": [corpus]}, "eval": {"samples": 8},
     "checkpoint": {"interval": 5, "keep": 3},
     "stages": [{"daemon": a, "layers": [0, 1]}, {"daemon": b, "layers": [1, 2]}]}
if codecs == "ef":
    s["compression"] = {"forward": "ef(fp16+svd:0.5)", "backward": "ef(int8)"}
if codecs == "delayed":
    s["update"] = "delayed"
if codecs == "pred":
    s["compression"] = {"forward": "q13+pred", "backward": "q13"}
if codecs == "tokens":
    s["data"] = {"format": "tokens", "files": [tokens]}
if codecs == "scaled":
    s["optimizer"] = {"loss_scale": {"init": 2.0 ** 127, "growth_interval": 4}}
if codecs in ("replica", "replica-restart"):
    s["steps"] = 400  # time for pipeline 0 alone, then for the rejoin
    s["stages"][0]["replicas"] = [{"daemon": a}]
    s["stages"][1]["replicas"] = [{"daemon": c}]
if codecs == "replica-restart":
    s["failure"] = {"heal": False}

json.dump(s, open(out, "w"))
print(out)
PY
}

status() { "$cli" status --json "$1" 2>/dev/null || echo '{}'; }
# Polled every 50 ms while a job runs at ~50 steps/s: no interpreter start-up (a Python
# start can take 0.3 s, long enough for the job to pass its target step by 20 or more).
steps_done() {
  local n
  n=$("$cli" status "$1" 2>/dev/null | sed -n 's/.*, step \([0-9]*\)\/.*/\1/p' | head -1)
  echo "${n:--1}"
}
wait_end() {  # wait_end JOB: until it succeeds (fails the test otherwise)
  for _ in $(seq 1200); do
    local state
    state=$(status "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin).get("state", "?"))')
    case "$state" in
      succeeded) return 0 ;;
      failed|cancelled) status "$1" >&2; fail "job $1 $state" ;;
    esac
    sleep 0.1
  done
  fail "job $1 did not end"
}
same_weights() {  # same_weights JOB1 JOB2: every stage's saved parameters, byte for byte
  for f in a/jobs/JOB/stage-0.pt b/jobs/JOB/stage-1.pt; do
    cmp -s "$work/${f/JOB/$1}" "$work/${f/JOB/$2}" || fail "${f/JOB/$2}: parameters differ from the undisturbed run's"
  done
  echo "bit-identical: both stages' parameters equal the undisturbed run's ($(stat -c %s "$work/a/jobs/$2/stage-0.pt") + $(stat -c %s "$work/b/jobs/$2/stage-1.pt") bytes)"
}

# replica_healed REFERENCE JOB STEP_AT_FAULT BACK_AT: the healed job's story and parameters.
replica_healed() {
  status "$2" > "$work/story.json"
  python3 - "$work/story.json" "$3" "$4" <<'PY' >&2 || fail "the replicated job did not heal in place"
import json, re, sys
s = json.load(open(sys.argv[1]))
at, back = int(sys.argv[2]), float(sys.argv[3])
messages = [e["message"] for e in s["events"]]
healed = next(m for m in messages if "healed in place" in m)
assert "pipeline 1 left, pipeline 0 carries the whole batch" in healed, healed
rejoined = next(e for e in s["events"] if "rejoins from step" in e["message"])
assert s["restarts"] == 0, f'{s["restarts"]} restarts'
resumed_after = int(re.search(r"from step (\d+)", healed).group(1)) - 1  # the last step kept
assert resumed_after >= at, f"resumed after step {resumed_after}, but {at} were done at the fault: steps lost"
steps = [r["step"] for r in s["steps"]]
assert steps == list(range(1, 401)), f"step rows missing or repeated: {[x for i, x in enumerate(steps) if x != i + 1][:10]} ({len(steps)} rows)"
assert any(r["micro_batches"] == 4 for r in s["steps"]), "no step ran the whole batch on one pipeline"
print(f"healed: {healed}; {rejoined['message']}, {rejoined['time'] - back:.2f} s after its daemon was back; "
      f"steps lost 0 (fault after step {at}, kept {resumed_after})")
PY
  "${SKYTRAIN_PYTHON:-/usr/bin/python3}" - "$work" "$1" "$2" <<'PY' >&2 || fail "the healed job's parameters are not within tolerance"
import sys, torch
work, ref, job = sys.argv[1:]
worst = 0.0
for d, f in [("a", "stage-0.pt"), ("b", "stage-1.pt")]:
    r = torch.load(f"{work}/{d}/jobs/{ref}/{f}")
    h = torch.load(f"{work}/{d}/jobs/{job}/{f}")
    for name in r:
        worst = max(worst, (r[name] - h[name]).abs().max().item())
# Copies bit-identical to each other after the rejoin: stage 0's two on A, stage 1's on B and C.
pairs = [(f"{work}/a/jobs/{job}/stage-0.pt", f"{work}/a/jobs/{job}/replica-1/stage-0.pt"),
         (f"{work}/b/jobs/{job}/stage-1.pt", f"{work}/c/jobs/{job}/replica-1/stage-1.pt")]
for x, y in pairs:
    tx, ty = torch.load(x), torch.load(y)
    for name in tx:
        assert torch.equal(tx[name], ty[name]), f"{y}: {name} differs from its healthy copy's"
print(f"healed parameters: max |difference| from the undisturbed run {worst:.2e}; the copies bit-identical")
sys.exit(0 if worst < 1e-3 else 1)
PY
}

declare -A reference
for codecs in none ef delayed pred tokens scaled replica; do
  job=$("$cli" submit --detach "$(spec "ref-$codecs" "$codecs")" | awk '{print $3}')
  wait_end "$job"
  reference[$codecs]=$job
done

report() {  # report CASE JOB T_FAULT STEP_AT_FAULT
  status "$2" | python3 -c "
import json, sys
s = json.load(sys.stdin)
fault, at = float('$3'), int('$4')
events = s['events']
lost = next((e for e in events if e.get('failure') or 'lost' in e['message'] or 'restarted' in e['message']), None)
resumed = next((e for e in events if 'resuming from' in e['message'] or 'starting over' in e['message'] or 'healed in place' in e['message']), None)
ckpt = ([e['message'] for e in events if 'resuming from the checkpoint of step' in e['message']] or [''])[-1]  # after any fall-back
import re
m = re.search(r'checkpoint of step (\d+)', ckpt)
from_step = int(m.group(1)) if m else 0
healed = next((e['message'] for e in events if 'healed in place from step' in e['message']), '')
if healed: from_step = int(re.search(r'from step (\d+)', healed).group(1)) - 1
print(f'| $1 | {(lost[\"time\"] - fault) if lost else float(\"nan\"):.2f} s | {(resumed[\"time\"] - fault) if resumed else float(\"nan\"):.2f} s | step {from_step} | {s[\"restarts\"]} |')
for e in events: print('   event:', e['message'], file=sys.stderr)
"
}

echo "| case | detection | fault to resumed attempt | resumed from | restarts |"
echo "|---|---|---|---|---|"
for c in "${cases[@]}"; do
  codecs=none; [ "$c" = kill-ef ] && codecs=ef; [ "$c" = kill-delayed ] && codecs=delayed; [ "$c" = kill-pred ] && codecs=pred
  [ "$c" = kill-tokens ] && codecs=tokens; [ "$c" = kill-scaled ] && codecs=scaled; [ "$c" = replica ] && codecs=replica
  [ "$c" = replica-stop ] && codecs=replica; [ "$c" = replica-away ] && codecs=replica
  variant=$codecs; [ "$c" = replica-restart ] && codecs=replica variant=replica-restart
  job=$("$cli" submit --detach "$(spec "$c" "$variant")" | awk '{print $3}')
  follower=
  if [ "$c" = coord ]; then
    "$cli" logs -f "$job" > "$work/follow.out" 2> "$work/follow.err" &
    follower=$!
  fi
  target=$((12 + RANDOM % 30))
  for _ in $(seq 600); do [ "$(steps_done "$job")" -ge "$target" ] && break; sleep 0.05; done
  at=$(steps_done "$job")
  t=$(now)
  case "$c" in
    kill|kill-ef|kill-delayed|kill-pred|kill-tokens|kill-scaled)
      kill -9 "$pid_b"; wait "$pid_b" 2>/dev/null || true
      sleep 1
      pid_b=$(restart "$work/b") ;;
    stop)
      kill -STOP "$pid_b"; sleep 6; kill -CONT "$pid_b" ;;
    stop-coord)
      kill -STOP "$pid_a"; sleep 6; kill -CONT "$pid_a" ;;
    coord|orphan)
      kill -9 "$pid_a"; wait "$pid_a" 2>/dev/null || true
      if [ "$c" = orphan ]; then
        # Freed by its data link to the dead daemon's stage (reset at once), else by the
        # coordinator's silence (the heartbeat bound).
        for _ in $(seq 100); do grep -qE "job $job stage 1: (aborted|failed: data link)" "$work/b/daemon.log" && break; sleep 0.1; done
        grep -qE "job $job stage 1: (no heartbeat from the coordinator|failed: data link to stage 0)" "$work/b/daemon.log" ||
          fail "stage 1 kept the orphaned job"
        freed=$(python3 -c "import time; print(f'{time.time() - $t:.2f}')")
        echo "orphaned stage freed after $freed s" >&2
        python3 -c "import sys; sys.exit(0 if $freed <= 5 else 1)" || fail "orphaned stage held for $freed s"
      else
        sleep 1
      fi
      pid_a=$(restart "$work/a")
      for _ in $(seq 100); do "$cli" list > /dev/null 2>&1 && break; sleep 0.1; done ;;
    record|record-lost)
      kill -9 "$pid_a"; wait "$pid_a" 2>/dev/null || true
      record=$work/a/jobs/$job/record.json
      size=$(stat -c %s "$record")
      truncate -s $((RANDOM % size)) "$record"
      [ "$c" = record-lost ] && printf '{"id": "%s", "st' "$job" > "$work/a/jobs/$job/record.prev.json"
      pid_a=$(restart "$work/a")
      for _ in $(seq 100); do "$cli" list > /dev/null 2>&1 && break; sleep 0.1; done ;;
    disk)
      # A directory where each of the next three checkpoints' files would be made: the write
      # fails with EISDIR, as one fails with ENOSPC on a full disk.
      first=$(( (at + 20) / 5 * 5 + 4 ))  # far enough ahead that the job has not reached it
      blocked=()
      for s in $first $((first + 5)) $((first + 10)); do
        d=$work/b/jobs/$job/checkpoints/step-$(printf %08d $((s + 1)))/stage-1.safetensors.tmp  # named by number
        mkdir -p "$d"; blocked+=("$d")
      done
      for _ in $(seq 600); do [ "$(steps_done "$job")" -ge $((first + 17)) ] && break; sleep 0.05; done
      rm -rf "${blocked[@]}"
      kill -9 "$pid_b"; wait "$pid_b" 2>/dev/null || true
      sleep 1
      pid_b=$(restart "$work/b") ;;
    corrupt)
      kill -9 "$pid_b"; wait "$pid_b" 2>/dev/null || true
      # The two newest checkpoints the coordinator counts complete (stage 1 may have written
      # newer ones that stage 0 had not confirmed: the restart does not read those). Read
      # once the coordinator has seen the failure, so that no confirmation is still on its way.
      for _ in $(seq 100); do status "$job" | grep -q "attempt 0 failed" && break; sleep 0.1; done
      for s in $(status "$job" | python3 -c 'import json, sys; print(*json.load(sys.stdin)["checkpoints"][-2:])'); do
        printf 'garbage' | dd of="$work/b/jobs/$job/checkpoints/step-$(printf %08d "$s")/stage-1.safetensors" \
          bs=1 seek=100 conv=notrunc 2>/dev/null
      done
      pid_b=$(restart "$work/b") ;;
    replica|replica-restart)
      kill -9 "$pid_c"; wait "$pid_c" 2>/dev/null || true
      sleep 5  # healed by then (found in 3 s at most, then a 1 s ping): pipeline 0 trains alone
      restarted=$(now)
      pid_c=$(restart "$work/c") ;;
    replica-stop)
      kill -STOP "$pid_c"; sleep 6; restarted=$(now); kill -CONT "$pid_c" ;;
    replica-away)
      kill -9 "$pid_b"; wait "$pid_b" 2>/dev/null || true ;;  # back after the job's end
    partition)
      nft add table inet chaos
      nft add chain inet chaos input '{ type filter hook input priority 0; }'
      nft add rule inet chaos input tcp dport "${ports[3]}" drop
      sleep 6
      nft delete table inet chaos ;;
    resume)
      "$cli" cancel "$job" > /dev/null
      for _ in $(seq 100); do grep -q "job $job stage 1: aborted" "$work/b/daemon.log" && break; sleep 0.1; done
      "$cli" resume --detach "$job" | grep -q "resuming job $job after step" || fail "resume refused" ;;
  esac
  wait_end "$job"
  report "$c" "$job" "$t" "$at"
  if [ -n "$follower" ]; then
    wait "$follower" || { cat "$work/follow.out" "$work/follow.err" >&2; fail "logs -f did not follow the job to its end"; }
    # A restart shorter than the request time-out is invisible to it (ZeroMQ reconnects and
    # the restarted daemon answers); a longer one prints "lost contact" and "reattached".
    grep -q "the coordinating daemon restarted" "$work/follow.out" || { cat "$work/follow.out" "$work/follow.err" >&2; fail "logs -f did not follow across the restart"; }
    grep -q "job $job succeeded" "$work/follow.out" || fail "logs -f did not see the job succeed"
    echo "logs -f: $(grep -c '^step ' "$work/follow.out") step lines, followed across the coordinator restart" >&2
  fi
  if [ "$c" = corrupt ]; then
    story=$(status "$job")
    grep -q "falling back to the previous checkpoint" <<< "$story" || fail "no fall-back to an older checkpoint"
    grep -q "does not match its checksum" <<< "$story" || fail "the corrupted file was not named"
  fi
  if [ "$c" = disk ]; then
    story=$(status "$job")
    [ "$(grep -o 'not written' <<< "$story" | wc -l)" -ge 3 ] || fail "the unwritten checkpoints are not each an event"
    find "$work/b/jobs/$job" -name '*.tmp' | grep -q . && fail "a partial checkpoint file was left behind"
  fi
  if [ "$c" = partition ]; then
    story=$(status "$job")
    grep -q "data link to stage 1: the data connection to .* dropped" <<< "$story" || fail "no event says the data connection dropped"
    status "$job" > "$work/story.json"
    python3 - "$t" "$work/story.json" <<'PY' || fail "the partitioned data port was not detected within 5 s"
import json, sys
fault = float(sys.argv[1])
events = json.load(open(sys.argv[2]))["events"]
dropped = next(e for e in events if "dropped" in e["message"])
print(f"data-port partition detected after {dropped['time'] - fault:.2f} s", file=sys.stderr)
sys.exit(0 if dropped["time"] - fault <= 5 else 1)
PY
  fi
  if [ "$c" = stop-coord ]; then
    story=$(status "$job")
    grep -q "stage 0 (.*) lost" <<< "$story" && fail "the stopped coordinator called its own stage lost"
    grep -q "freed: no heartbeat from the coordinator" <<< "$story" || fail "no event says why stage 1 was freed"
    grep -q "restarted and lost the stage" <<< "$story" && fail "a freed stage was taken for one its daemon lost"
  fi
  if [ "$c" = record ] || [ "$c" = record-lost ]; then
    want="restored from the previous generation"; [ "$c" = record-lost ] && want="rebuilt from job.json"
    grep -q "$want" <<< "$(status "$job")" || fail "no event says the record was $want"
  fi
  if [ "$c" = replica ] || [ "$c" = replica-stop ]; then
    replica_healed "${reference[$codecs]}" "$job" "$at" "$restarted"
  elif [ "$c" = replica-away ]; then
    story=$(status "$job")
    grep -q "pipeline 0 left, pipeline 1 carries the whole batch" <<< "$story" || fail "pipeline 1 did not carry the job"
    grep -q "rejoins" <<< "$story" && fail "a pipeline rejoined with its daemon down"
    # export reads pipeline 1's copies: A's second copy of stage 0, C's of stage 1.
    "$cli" export "$job" -o "$work/away.safetensors" >&2 || fail "export of a job that pipeline 0 left"
    pid_b=$(restart "$work/b")  # the reference's weights are on B too
    for _ in $(seq 100); do "$cli" export "${reference[$codecs]}" -o "$work/ref.safetensors" > /dev/null 2>&1 && break; sleep 0.1; done
    [ -s "$work/ref.safetensors" ] || fail "export of the reference"
    "${SKYTRAIN_PYTHON:-/usr/bin/python3}" - "$work/away.safetensors" "$work/ref.safetensors" <<'PY' >&2 || fail "the exported weights are not the healed job's"
import json, struct, sys
import numpy as np
def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    return {k: np.frombuffer(body[v["data_offsets"][0]:v["data_offsets"][1]], dtype=np.float32)
            for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32"}
away, ref = read(sys.argv[1]), read(sys.argv[2])
assert away.keys() == ref.keys(), "the exports hold other tensors"
worst = max(float(np.abs(away[k] - ref[k]).max()) for k in ref)
print(f"export after pipeline 0 left: {len(away)} tensors from pipeline 1's copies, within {worst:.2e} of the undisturbed run's")
sys.exit(0 if worst < 1e-3 else 1)
PY
  else
    same_weights "${reference[$codecs]}" "$job" >&2
  fi
  if [ "$c" = kill-scaled ]; then  # the scaler really skipped steps, before and after the kill
    skipped=$(status "$job" | python3 -c "import json, sys; print(sum(1 for s in json.load(sys.stdin)['steps'] if s.get('skipped')))")
    [ "$skipped" -ge 5 ] || fail "only $skipped steps were skipped under loss scaling from 2^127"
    echo "loss scaling: $skipped of 150 steps skipped on overflow" >&2
  fi
  if [ "$c" = replica-restart ]; then  # the copies on C too: every second copy's parameters
    copies=$(cd "$work/c/jobs/${reference[$codecs]}" && find . -name 'stage-*.pt' | sort)
    [ -n "$copies" ] || fail "no parameters of a copy on daemon C"
    for f in $copies; do
      cmp -s "$work/c/jobs/${reference[$codecs]}/$f" "$work/c/jobs/$job/$f" || fail "copy $f on C differs from the undisturbed run's"
    done
    echo "bit-identical: the copies on C too ($(echo $copies | wc -w) files)" >&2
  fi
done
for p in "$pid_a" "$pid_b" "$pid_c"; do kill -0 "$p" || fail "a daemon died"; done
echo "chaos_test: all passed" >&2
