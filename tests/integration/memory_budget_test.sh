#!/usr/bin/env bash
# A daemon in a real memory cgroup (v2 memory.max or v1 memory.limit_in_bytes, made here)
# takes the cgroup's limit as its budget: it logs the budget and where it came from, refuses
# a stage estimated over it with both numbers and the cgroup's name before allocating, and
# stays up to run a job that fits. A daemon outside it keeps the machine's budget.
# Then an operator's memory_budget_mb over the cgroup's limit lets such a stage in: the
# kernel kills its daemon for memory, and the job fails with the kernel's verdict and what
# admission estimated (from the dead daemon's sentinel), not as a daemon that went silent.
# Needs root and a writable cgroup hierarchy; without them it exits 77 (ctest: skipped).
set -euo pipefail
daemon=$1 cli=$2 corpus=$3
limit_mb=768
work=$(mktemp -d)
source "$(dirname "$0")/../../deploy/local-daemons.sh"

# The cgroup: v2 where the memory controller can be enabled, else v1's memory hierarchy.
name=skytrain-budget-$$
cg= parent_procs= limit_file=
if [ -w /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  echo +memory > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  cg=/sys/fs/cgroup/$name parent_procs=/sys/fs/cgroup/cgroup.procs limit_file=memory.max
elif [ -w /sys/fs/cgroup/memory/cgroup.procs ]; then
  cg=/sys/fs/cgroup/memory/$name parent_procs=/sys/fs/cgroup/memory/cgroup.procs limit_file=memory.limit_in_bytes
fi
if [ -z "$cg" ] || ! mkdir "$cg" 2>/dev/null || [ ! -e "$cg/$limit_file" ]; then
  echo "SKIP: no writable memory cgroup here (needs root and cgroup v1 or v2 with the memory controller)"
  rmdir "$cg" 2>/dev/null || true
  exit 77
fi
cleanup() {
  stop_daemons
  [ -e "$cg/cgroup.procs" ] && while read -r p; do echo "$p" > "$parent_procs" 2>/dev/null || true; done < "$cg/cgroup.procs"
  rmdir "$cg" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for d in a b c; do echo "--- $d" >&2; tail -20 "$work/$d/daemon.log" >&2 || true; done; exit 1; }
echo $((limit_mb * 1024 * 1024)) > "$cg/$limit_file"

data_root=$(dirname "$corpus")
make_keys "$work/keys" "$cli" 3
echo $$ > "$cg/cgroup.procs"  # the daemon started next is born in the cgroup
start_daemon A "$daemon" "$work/a"
echo $$ > "$parent_procs"
start_daemon B "$daemon" "$work/b"
export SKYTRAIN_DAEMON=$A
grep -q "^${daemon_pids[0]}\$" "$cg/cgroup.procs" || fail "daemon A is not in $cg"

grep -q "memory budget $limit_mb MB a stage (cgroup v[12] memory.* of $cg)" "$work/a/daemon.log" \
  || fail "daemon A does not take its cgroup's limit as its budget"
grep "memory budget" "$work/b/daemon.log" | grep -vq "of $cg" || fail "daemon B, outside the cgroup, took its limit"

# Stage 0 (the embedding and 6 blocks of d_model 1024: ~76M parameters, ~1.2 GB with AdamW)
# is over 768 MB: refused before anything is allocated, naming the cgroup.
spec() {
  cat > "$work/$1.json" <<JSON
{"name": "$1", "seed": 1, "steps": $2, "batch_size": 4, "micro_batches": 2, "schedule": "1f1b",
 "model": {"d_model": $3, "heads": 4, "layers": 12, "d_ff": $((4 * $3)), "seq_len": 16},
 "data": {"files": ["$corpus"]}, "eval": {"samples": 4},
 "stages": [{"daemon": "$A", "layers": [0, 6]}, {"daemon": "$B", "layers": [6, 12]}]}
JSON
}
spec big 2 1024
if "$cli" submit "$work/big.json" > "$work/big.out" 2>&1; then fail "a stage over the cgroup's limit was admitted"; fi
grep -q "stage 0 needs an estimated .*, over this daemon's memory budget of $limit_mb.0 MB (cgroup v[12] memory.* of $cg)" \
  "$work/big.out" || { cat "$work/big.out" >&2; fail "the refusal does not give the estimate, the budget and the cgroup"; }
kill -0 "${daemon_pids[0]}" || fail "daemon A died"

# A job that fits runs to the end through the same daemon.
spec small 3 32
"$cli" submit "$work/small.json" > "$work/small.out" 2>&1 || { cat "$work/small.out" >&2; fail "a job within the budget failed"; }

# An operator's budget over the cgroup's limit: admitted, killed by the kernel, reported.
echo $$ > "$cg/cgroup.procs"
daemon_config_extra=', "memory_budget_mb": 4096' start_daemon C "$daemon" "$work/c"
echo $$ > "$parent_procs"
sed -i "s|\"daemon\": \"$A\"|\"daemon\": \"$C\"|; s|\"steps\": 2,|\"steps\": 2, \"failure\": {\"max_restarts\": 0},|" "$work/big.json"
grep -q "$C" "$work/big.json" || fail "could not place stage 0 on daemon C"
if "$cli" --daemon "$B" submit "$work/big.json" > "$work/killed.out" 2>&1; then fail "a stage beyond the cgroup's limit trained"; fi
for _ in $(seq 50); do kill -0 "${daemon_pids[2]}" 2>/dev/null || break; sleep 0.1; done
kill -0 "${daemon_pids[2]}" 2>/dev/null && fail "daemon C was not killed (the test needs the kernel to kill it)"
grep -q "sentinel: skytraind (pid ${daemon_pids[2]}) was killed by the kernel for memory" "$work/c/daemon.log" \
  || fail "C's sentinel did not log the kernel's verdict"
grep -q "stage 0 (.*) lost: skytraind (pid ${daemon_pids[2]}) was killed by the kernel for memory: its cgroup $cg counted oom_kill" \
  "$work/killed.out" || { cat "$work/killed.out" >&2; fail "the job does not fail with the kernel's verdict"; }
grep -q "killed by the kernel for memory.*; admission estimated .* against a budget of 4096.0 MB (memory_budget_mb)" "$work/killed.out" \
  || { cat "$work/killed.out" >&2; fail "the failure does not give admission's estimate and budget"; }
grep -q "no heartbeat answer" "$work/killed.out" && fail "the failure reads as a silent daemon"
[ -s "$work/c/last-exit.json" ] || fail "no verdict left in C's state dir for the next daemon"
# The next daemon on that state dir logs the verdict once; a crafted one is only called unreadable.
"$daemon" --config "$work/c/config.json" > "$work/c/next.log" 2>&1 &
next=$!
for _ in $(seq 100); do grep -q "skytraind: control" "$work/c/next.log" && break; sleep 0.1; done
grep -q "the previous daemon's sentinel reported: skytraind (pid ${daemon_pids[2]}) was killed by the kernel for memory" \
  "$work/c/next.log" || { kill "$next"; fail "the next daemon did not log the verdict"; }
[ -e "$work/c/last-exit.json" ] && { kill "$next"; fail "the verdict was not taken"; }
kill "$next"; wait "$next" 2>/dev/null || true
printf '{"verdict": 3, \x00\xff' > "$work/c/last-exit.json"
"$daemon" --config "$work/c/config.json" > "$work/c/crafted.log" 2>&1 &
next=$!
for _ in $(seq 100); do grep -q "skytraind: control" "$work/c/crafted.log" && break; sleep 0.1; done
grep -q "the previous daemon's sentinel reported: unreadable $work/c/last-exit.json" "$work/c/crafted.log" \
  || { kill "$next"; fail "a crafted last-exit.json was not refused as unreadable"; }
kill -0 "$next" || fail "a crafted last-exit.json took the daemon down"
kill "$next"; wait "$next" 2>/dev/null || true
kill -0 "${daemon_pids[1]}" || fail "the coordinating daemon B died"
echo "PASS: memory budget from the cgroup ($limit_mb MB), over-budget stage refused with the numbers, daemon up;"
echo "      a stage killed for memory failed its job with the kernel's verdict and admission's estimate"
