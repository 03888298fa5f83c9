#!/usr/bin/env bash
# skytrain against a hand-written PyTorch pipeline (bench/torch_pipeline.py: torch.distributed
# Gloo send/recv), side by side in one run (docs/BENCHMARKS.md, "PyTorch pipeline peer").
# Both train the demo GPT (deploy/jobs/gpt-web.json: d_model 128, 4 heads, 4 blocks, d_ff
# 512, seq 128, batch 16, AdamW, warm-up + cosine, clip 1.0) in two stages (blocks [0,2) and
# [2,4)), fp32, uncompressed, with the same m and schedule, the same steps, on the same
# corpus and sequences, one torch thread (and one OpenBLAS thread) a process; for each setting
# and schedule skytrain runs first, then the peer twice: "tuned" (every receive of a step
# posted at its start, the clipping norms exchanged point to point) and "naive" (dist.recv when
# the schedule needs it, dist.all_reduce for the norm); see bench/torch_pipeline.py --comm.
#
# Settings: "loopback" (two keyed daemons on 127.0.0.1, deploy/local-daemons.sh; the two torch
# ranks on 127.0.0.1) and RATE:DELAY links of the emulated WAN (deploy/wan/testbed.sh, root):
# rank k runs in namespace skyt<k>, pinned to core k like the testbed's daemon k, and Gloo
# binds the veth, so the tbf rate shapes its traffic. The testbed's delay relays carry only
# skytrain's data port, so the peer gets its own: an nftables REDIRECT in each namespace sends
# every other TCP connection towards the other cloud to a relay (a copy of delay_relay's
# logic in Python, below) that holds each byte DELAY ms in each direction and forwards it
# over the veth to the original destination (SO_ORIGINAL_DST). `nft` is Debian's nftables
# (apt-get install nftables; deploy/install-deps.sh does not install it): without it the
# peer runs on the shaped links with no delay, and its rows say so.
#
# Usage (root for the WAN rows; binaries in build/):
#   bash bench/peer_compare.sh [STEPS] [M] [SETTING...]
#   defaults: 30 steps, m = 4, settings loopback 1000:20 100:20; schedules gpipe and 1f1b
#   (SCHEDULES="1f1b" to change; PEER_COMM="tuned" runs one peer variant). Throughput:
#   batch x seq_len over the mean step time of the steps after the first 5, a step's time
#   being the longest stage's (as in skytrain's status rows).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
steps=${1:-30}
m=${2:-4}
shift $(( $# < 2 ? $# : 2 ))
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=(loopback 1000:20 100:20)
schedules=(${SCHEDULES:-gpipe 1f1b})
peer_comms=(${PEER_COMM:-tuned naive})  # bench/torch_pipeline.py --comm
warmup=5
py=/usr/bin/python3  # Debian's python3-torch
cli=$root/build/client/skytrain
corpus=$root/build/data/web.txt
master_port=29511
relay_port=29600
relay_mark=0x5354

"$py" -c "import torch.distributed as d; assert d.is_gloo_available()" \
  || { echo "peer_compare: $py has no torch with Gloo (apt-get install python3-torch)" >&2; exit 1; }
[ -x "$cli" ] && [ -x "$root/build/daemon/skytraind" ] || { echo "peer_compare: build first (deploy/build.sh)" >&2; exit 1; }
deploy/get-corpus.sh "$corpus" > /dev/null

work=$(mktemp -d)
export SKYTRAIN_WAN_STATE=$work/wan
relays=()
testbed_up=0
source deploy/local-daemons.sh
cleanup() {
  for p in "${relays[@]}"; do kill "$p" 2>/dev/null || true; done
  stop_daemons 2>/dev/null || true
  [ "$testbed_up" = 0 ] || bash deploy/wan/testbed.sh down > /dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The peer's delay relay: delay_relay's logic (deploy/wan/delay_relay.cpp) for connections
# redirected by nftables, forwarded to their original destination.
cat > "$work/relay.py" <<'PY'
import collections, select, socket, struct, sys, time
port, delay, mark = int(sys.argv[1]), float(sys.argv[2]) / 1000.0, int(sys.argv[3], 0)
CHUNK, MAX_QUEUED = 256 * 1024, 64 << 20
SO_ORIGINAL_DST = 80
ep = select.epoll()
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port)); listener.listen(64); listener.setblocking(False)
ep.register(listener.fileno(), select.EPOLLIN)

class Pipe:
    def __init__(self, src, dst):
        self.src, self.dst, self.queue, self.queued, self.closed, self.done = src, dst, collections.deque(), 0, False, False

socks, reading, writing = {}, {}, {}  # fd -> socket; fd -> the pipe it feeds / is fed by

def interest(s):
    fd = s.fileno()
    p_in, p_out = reading[fd], writing[fd]
    ev = 0
    if not p_in.closed and p_in.queued < MAX_QUEUED: ev |= select.EPOLLIN
    if p_out.queue and p_out.queue[0][0] <= time.monotonic(): ev |= select.EPOLLOUT
    ep.modify(fd, ev)

def accept():
    while True:
        try:
            c, _ = listener.accept()
        except BlockingIOError:
            return
        raw = c.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
        dport, dip = struct.unpack("!2xH4s8x", raw)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)  # not redirected again
        try:
            s.connect((socket.inet_ntoa(dip), dport))
        except OSError as e:
            print("relay: cannot reach", socket.inet_ntoa(dip), dport, e, file=sys.stderr); c.close(); s.close(); continue
        for x in (c, s):
            x.setblocking(False); x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks[x.fileno()] = x
        up, down = Pipe(c, s), Pipe(s, c)
        reading[c.fileno()], writing[s.fileno()] = up, up
        reading[s.fileno()], writing[c.fileno()] = down, down
        for x in (c, s): ep.register(x.fileno(), select.EPOLLIN)

def pump(p):
    while not p.closed and p.queued < MAX_QUEUED:
        try:
            data = p.src.recv(CHUNK)
        except BlockingIOError:
            break
        except OSError:
            data = b""
        if not data:
            p.closed = True; break
        p.queued += len(data)
        p.queue.append([time.monotonic() + delay, memoryview(data)])

def flush(p):
    now = time.monotonic()
    while p.queue and p.queue[0][0] <= now:
        chunk = p.queue[0]
        try:
            n = p.dst.send(chunk[1])
        except BlockingIOError:
            break
        except OSError:
            p.queue.clear(); p.queued = 0; p.closed = True; break
        p.queued -= n
        if n < len(chunk[1]):
            chunk[1] = chunk[1][n:]; break
        p.queue.popleft()
    if p.closed and not p.queue and not p.done:
        p.done = True
        try: p.dst.shutdown(socket.SHUT_WR)
        except OSError: pass

while True:
    timeout = 0.1
    now = time.monotonic()
    for p in set(reading.values()):
        if p.queue: timeout = min(timeout, max(0.0, p.queue[0][0] - now))
    for fd, ev in ep.poll(timeout):
        if fd == listener.fileno(): accept(); continue
        if fd not in socks: continue
        if ev & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR): pump(reading[fd])
    for p in set(reading.values()): flush(p)
    for fd in list(socks):
        if fd not in socks: continue
        a, b = reading[fd], writing[fd]
        if a.done and b.done:
            other = b.src.fileno()
            for f in (fd, other):
                ep.unregister(f); socks.pop(f).close(); reading.pop(f); writing.pop(f)
    for fd, s in socks.items(): interest(s)
PY

results=$work/results.tsv
: > "$results"

skytrain_spec() {  # skytrain_spec OUT SCHEDULE ENDPOINT0 ENDPOINT1
  "$py" - deploy/jobs/gpt-web.json "$corpus" "$steps" "$m" "$@" <<'PY'
import json, sys
job, corpus, steps, m, out, schedule, a, b = sys.argv[1:]
s = json.load(open(job))
s.update(name="peer-compare", steps=int(steps), micro_batches=int(m), schedule=schedule)
s["data"]["files"] = [corpus]
s["compression"] = {"forward": "none", "backward": "none"}
s["eval"] = {"interval": 0, "samples": 16}
s["stages"][0]["daemon"], s["stages"][1]["daemon"] = a, b
json.dump(s, open(out, "w"), indent=1)
PY
}

steady() {  # steady STATUS.json -> "tokens/s m schedule state compute0/compute1"
  "$py" - "$1" "$warmup" <<'PY'
import json, sys
s, w = json.load(open(sys.argv[1])), int(sys.argv[2])
if s["state"] != "succeeded":
    print("nan 0 - " + s["state"] + " -"); sys.exit()
rows = [r for r in s["steps"] if r["step"] >= w] or s["steps"]
mean = sum(r["step_s"] for r in rows) / len(rows)
plan = s["plans"][-1]
compute = [sum(r["compute_s"][k] for r in rows) / len(rows) for k in range(len(rows[0]["compute_s"]))]
print(f'{16 * 128 / mean:.1f} '
      f'{plan["micro_batches"]} {plan["schedule"]} {s["state"]} {"/".join(f"{c:.3f}" for c in compute)}')
PY
}

# run_skytrain LABEL SCHEDULE CLI... : submits, waits, appends the steady throughput
run_skytrain() {
  local label=$1 schedule=$2; shift 2
  local out id
  out=$("$@" submit "$work/job.json" 2>&1) || true
  id=$(awk '/^submitted job/ {print $3; exit}' <<< "$out")
  [ -n "$id" ] || { echo "$out" | tail -5 >&2; echo "skytrain $label $schedule: no job" >&2; echo "skytrain	$label	$schedule	nan	-" >> "$results"; return; }
  "$@" status --json "$id" > "$work/status.json"
  local r
  r=$(steady "$work/status.json")
  read -r tps pm ps state comp <<< "$r"
  echo "  skytrain $label $schedule: $tps tok/s (plan m=$pm $ps, $state; compute s/step per stage $comp; job $id)"
  echo "skytrain	$label	$schedule	${r%% *}	${r##* }" >> "$results"
}

# run_torch LABEL SCHEDULE COMM NS0 NS1 ADDR IF0 IF1 NOTE
run_torch() {
  local label=$1 schedule=$2 comm=$3 ns0=$4 ns1=$5 addr=$6 if0=$7 if1=$8 note=$9
  local args=(--comm "$comm" --world-size 2 --master-addr "$addr" --master-port "$master_port" --schedule "$schedule"
              --micro-batches "$m" --batch 16 --steps "$steps" --warmup "$warmup" --threads 1 --data "$corpus"
              --warmup-lr-steps 30 --seed 2026)
  local pin0=() pin1=()
  [ -z "$ns0" ] || pin0=(ip netns exec "$ns0" taskset -c 0)
  [ -z "$ns1" ] || pin1=(ip netns exec "$ns1" taskset -c $((1 % $(nproc))))
  "${pin1[@]}" "$py" bench/torch_pipeline.py --rank 1 --ifname "$if1" "${args[@]}" 2> "$work/torch1.log" &
  local p1=$!
  local ok=1
  "${pin0[@]}" "$py" bench/torch_pipeline.py --rank 0 --ifname "$if0" "${args[@]}" > "$work/torch0.out" 2> "$work/torch0.log" || ok=0
  wait "$p1" || ok=0
  master_port=$((master_port + 1))
  local tps="nan -"
  if [ "$ok" = 1 ]; then
    tps=$(tail -1 "$work/torch0.out" | "$py" -c "import json, sys; r = json.load(sys.stdin)
print(f\"{r['tokens_per_s']:.1f}\", '/'.join(f'{c:.3f}' for c in r['compute_s_per_stage']))")
  else
    tail -5 "$work/torch0.log" "$work/torch1.log" >&2
  fi
  echo "  torch    $label $schedule, $comm: ${tps%% *} tok/s (compute s/step per stage ${tps##* })${note:+ ($note)}"
  echo "torch-$comm	$label	$schedule	${tps%% *}	${tps##* }	$note" >> "$results"
}

echo "peer_compare: $steps steps, m = $m, schedules ${schedules[*]}, settings ${settings[*]}; $(nproc) cores; $(date -u +%F)"
for setting in "${settings[@]}"; do
  if [ "$setting" = loopback ]; then
    start_demo_pair "$work/loop"
    for schedule in "${schedules[@]}"; do
      skytrain_spec "$work/job.json" "$schedule" "$A" "$B"
      run_skytrain loopback "$schedule" "$cli" --daemon "$A"
      for comm in "${peer_comms[@]}"; do
        run_torch loopback "$schedule" "$comm" "" "" 127.0.0.1 lo lo ""
      done
    done
    stop_daemons
    daemon_pids=()
    continue
  fi
  [ "$(id -u)" -eq 0 ] || { echo "peer_compare: $setting needs root (network namespaces); skipped" >&2; continue; }
  rate=${setting%%:*} delay=${setting##*:}
  bash deploy/wan/testbed.sh up "$setting" > "$work/testbed.log"
  testbed_up=1
  note=""
  if command -v nft > /dev/null; then
    for k in 0 1; do
      other=10.211.0.$((2 - k))
      ip netns exec "skyt$k" nft -f - <<NFT
table ip peer_delay {
  chain out {
    type nat hook output priority -100; policy accept;
    meta mark $relay_mark return
    ip daddr $other tcp dport != { 7100, 7101, $master_port-$((master_port + 40)) } redirect to :$relay_port
  }
}
NFT
      ip netns exec "skyt$k" "$py" "$work/relay.py" "$relay_port" "$delay" "$relay_mark" 2> "$work/relay$k.log" &
      relays+=($!)
    done
    note="Gloo via the peer's ${delay} ms relay"
  elif [ "$delay" != 0 ]; then
    note="no delay: nft missing"
  fi
  for schedule in "${schedules[@]}"; do
    skytrain_spec "$work/job.json" "$schedule" "$(bash deploy/wan/testbed.sh control 0)" "$(bash deploy/wan/testbed.sh control 1)"
    run_skytrain "$setting" "$schedule" bash deploy/wan/testbed.sh client
    for comm in "${peer_comms[@]}"; do
      run_torch "$setting" "$schedule" "$comm" skyt0 skyt1 10.211.0.1 stl0a stl0b "$note"
    done
  done
  for p in "${relays[@]}"; do kill "$p" 2>/dev/null || true; done
  relays=()
  bash deploy/wan/testbed.sh down > /dev/null
  testbed_up=0
done

echo
"$py" - "$results" "$m" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
m = sys.argv[2]
by = {(r[0], r[1], r[2]): r for r in rows}
variants = [v for v in ("torch-tuned", "torch-naive") if any(r[0] == v for r in rows)]
names = {"torch-tuned": "torch tuned", "torch-naive": "torch naive"}
head = "| setting | schedule, m | skytrain tok/s |" + "".join(f" {names[v]}: tok/s | skytrain / it |" for v in variants)
head += " compute s/step, stage 0/1: skytrain | torch |"
print(head)
print("|---|---|---:|" + "---:|---:|" * len(variants) + "---|---|")
seen, footnotes = [], []
for r in rows:
    if (r[1], r[2]) not in seen:
        seen.append((r[1], r[2]))
for setting, schedule in seen:
    sky = by.get(("skytrain", setting, schedule))
    s = float(sky[3]) if sky else float("nan")
    label = "loopback" if setting == "loopback" else "{} Mbit/s, {} ms".format(*setting.split(":"))
    line, notes, tcomp = f"| {label} | {schedule}, {m} | {s:.0f} |", set(), "-"
    for v in variants:
        t = by.get((v, setting, schedule))
        tv = float(t[3]) if t else float("nan")
        line += f" {tv:.0f} | {s / tv:.2f} |"
        if t and len(t) > 5 and t[5]:
            notes.add(t[5])
        if t and v == variants[0]:
            tcomp = t[4]
    line += f" {sky[4] if sky else '-'} | {tcomp} |"
    print(line)
    footnotes += [f"{label}: {n}" for n in sorted(notes) if f"{label}: {n}" not in footnotes]
if footnotes:
    print("\nThe peer's Gloo traffic: " + "; ".join(footnotes))
PY
