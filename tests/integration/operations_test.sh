#!/usr/bin/env bash
# The operator's and user's tools on real jobs over two real daemons with CURVE keys:
# `logs` (text, --json, -f with its progress bar on a terminal), `plot` (two jobs; the SVG
# parses and holds their curves), `probe` (through the data port, authenticated; an
# unknown key is refused), `export` (final weights and a checkpoint's, read back in Python
# and compared with the stages' own files; another user is refused), and a daemon logging
# JSON lines (log_format) with syslog priorities under the journal ($JOURNAL_STREAM).
set -euo pipefail
daemon=$1 cli=$2 corpus=$3
python=${SKYTRAIN_PYTHON:-/usr/bin/python3}  # Debian's, with python3-torch and python3-zmq
work=$(mktemp -d)
source "$(dirname "$0")/../../deploy/local-daemons.sh"
cleanup() {
  stop_daemons
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

data_root=$(dirname "$corpus")
make_keys "$work/keys" "$cli" 2
start_daemon A "$daemon" "$work/a"
# Daemon B logs JSON lines, as a log shipper wants them, to a stream it is told is the
# journal (JOURNAL_STREAM names the log file's device and inode, as systemd's would).
mkdir -p "$work/b"
: > "$work/b/daemon.log"
export daemon_config_extra=', "log_format": "json"'
export JOURNAL_STREAM=$(stat -c '%d:%i' "$work/b/daemon.log")
start_daemon B "$daemon" "$work/b"
unset daemon_config_extra JOURNAL_STREAM
export SKYTRAIN_DAEMON=$A

spec() {  # NAME FORWARD STEPS
  cat > "$work/$1.json" <<JSON
{"name": "$1", "seed": 3, "steps": $3, "batch_size": 8, "micro_batches": 2, "schedule": "1f1b",
 "model": {"d_model": 32, "heads": 4, "layers": 4, "d_ff": 64, "seq_len": 16},
 "compression": {"forward": "$2", "backward": "none"},
 "data": {"files": ["$corpus"]}, "eval": {"samples": 8, "interval": 10},
 "checkpoint": {"interval": 10, "keep": 5},
 "stages": [{"daemon": "$A", "layers": [0, 2]}, {"daemon": "$B", "layers": [2, 4]}]}
JSON
}
spec plain none 30
spec halves fp16 20
"$cli" submit "$work/plain.json" > "$work/plain.out" || { cat "$work/plain.out"; fail "job plain failed"; }
"$cli" submit "$work/halves.json" > "$work/halves.out" || { cat "$work/halves.out"; fail "job halves failed"; }
plain=$(awk '/submitted job/ {print $3}' "$work/plain.out")
halves=$(awk '/submitted job/ {print $3}' "$work/halves.out")
grep -q '^step   30/30' "$work/plain.out" || fail "submit to a pipe printed no plain step lines"
grep -q $'\r' "$work/plain.out" && fail "submit to a pipe drew a progress bar"

# logs: text and JSON lines.
"$cli" logs "$plain" > "$work/logs.txt"
[ "$(grep -c '^step ' "$work/logs.txt")" = 30 ] || fail "logs printed $(grep -c '^step ' "$work/logs.txt") step lines, not 30"
grep -q '^validation at step 30: loss' "$work/logs.txt" || fail "logs shows no validation"
"$cli" logs --json "$plain" > "$work/logs.jsonl"
python3 - "$work/logs.jsonl" <<'PY' || fail "logs --json is not one typed object a line"
import collections, json, sys
kinds = collections.Counter()
for line in open(sys.argv[1]):
    record = json.loads(line)
    kinds[record["type"]] += 1
    if record["type"] == "step":
        assert record["loss"] > 0 and record["time"] > 0 and record["tokens_per_s"] > 0, record
assert kinds["step"] == 30 and kinds["plan"] >= 1 and kinds["eval"] == 3, kinds
print("ok: logs --json:", dict(kinds))
PY
"$cli" logs -f --json "$plain" | tail -1 | python3 -c "import json, sys; r = json.load(sys.stdin); assert r['type'] == 'summary' and r['state'] == 'succeeded', r" \
  || fail "logs -f --json does not end with the summary"
# On a terminal (script(1) gives one), logs -f redraws one bar: carriage returns, an ETA.
script -qfec "'$cli' logs -f '$halves'" /dev/null > "$work/tty.out" < /dev/null || fail "logs -f on a terminal failed"
grep -q $'\r' "$work/tty.out" || fail "no progress bar on a terminal"
grep -q 'ETA' "$work/tty.out" || fail "the progress bar has no ETA"
grep -q '20/20 100%' "$work/tty.out" || fail "the bar never reached 20/20"
grep -q "job $halves succeeded" "$work/tty.out" || fail "no summary after the bar"
echo "ok: logs (text, --json, -f --json, -f on a terminal with a bar)"

# One step numbering: the last step and its checkpoint, read from every interface, agree.
"$cli" status --json "$plain" > "$work/status.json"
python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen('http://' + sys.argv[1] + '/metrics', timeout=10).read().decode())" "$A_METRICS" > "$work/metrics.txt" || fail "no /metrics from A"
ls "$work/a/jobs/$plain/checkpoints" > "$work/ckpt_a.txt"
python3 - "$work/plain.out" "$work/logs.txt" "$work/logs.jsonl" "$work/status.json" "$work/metrics.txt" "$work/ckpt_a.txt" "$plain" "$work/b/daemon.log" <<'PY' || fail "the interfaces number steps differently"
import json, re, sys
progress, text, jsonl, status, metrics, ckpt, job, stage_log = sys.argv[1:]
last = {}
last["progress"] = int(re.findall(r"^step +(\d+)/30", open(progress).read(), re.M)[-1])
last["logs"] = int(re.findall(r"^step +(\d+)/30", open(text).read(), re.M)[-1])
rows = [json.loads(l) for l in open(jsonl)]
last["logs --json"] = max(r["step"] for r in rows if r["type"] == "step")
s = json.load(open(status))
last["status steps_done"] = s["steps_done"]
last["status step row"] = s["steps"][-1]["step"]
m = re.search(r'^skytrain_job_step\{[^}]*job_id="%s"[^}]*\} (\S+)' % job, open(metrics).read(), re.M)
last["metrics"] = int(float(m.group(1)))
last["checkpoint dir"] = max(int(n[5:]) for n in open(ckpt).read().split())
last["status checkpoints"] = max(s["checkpoints"])
assert set(last.values()) == {30}, last
evals = {r["step"] for r in rows if r["type"] == "eval"}
validations = {int(v) for v in re.findall(r"^validation at step (\d+):", open(text).read(), re.M)}
assert evals == validations == {10, 20, 30}, (evals, validations)
assert sorted(s["checkpoints"]) == sorted(int(n[5:]) for n in open(ckpt).read().split()) == [10, 20, 30], s["checkpoints"]
assert min(r["step"] for r in rows if r["type"] == "step") == 1
assert s["plans"][0]["from_step"] == 1, s["plans"][0]
# The stage daemon's JSON log lines (daemon B, log_format json) for the job: every "step"
# field counts from 1, within the job's 30.
logged = []
for line in open(stage_log):
    match = re.match(r"<[0-7]>(\{.*\})$", line.rstrip("\n"))
    record = json.loads(match.group(1)) if match else {}
    if record.get("job") != job or "step" not in record:
        continue
    logged.append(record["step"])
    assert 1 <= record["step"] <= 30, record
assert logged, "daemon B logged no line with a step field for job " + job
print("ok: one step numbering: the last step is 30 in", ", ".join(last), "; daemon B's log steps:", sorted(set(logged)))
PY

# plot: two jobs against step and against wall-clock time.
"$cli" plot "$plain" "$halves" -o "$work/plot.svg" > /dev/null || fail "plot failed"
"$cli" plot "$plain" --x time -o "$work/time.svg" > /dev/null || fail "plot --x time failed"
python3 - "$work/plot.svg" "$work/time.svg" "$plain" "$halves" <<'PY' || fail "the plots are not what was asked"
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
svg = ET.parse(sys.argv[1]).getroot()
lines = svg.iter(ns + "polyline")
points = [len(p.get("points").split()) for p in svg.iter(ns + "polyline")]
# 5 curves a job (train loss, validation, tokens/s, wire and raw bytes): 30- and 20-step jobs.
assert sorted(points) == sorted([30, 3, 30, 30, 30, 20, 2, 20, 20, 20]), points
text = " ".join(t.text or "" for t in svg.iter(ns + "text"))
assert sys.argv[3] in text and sys.argv[4] in text, text
time = ET.parse(sys.argv[2]).getroot()
assert "seconds since the first step began" in " ".join(t.text or "" for t in time.iter(ns + "text"))
print("ok: plot: two jobs,", len(points), "curves; against wall-clock too")
PY

# probe: the data port answers an authorized key, with figures the planner would use.
"$cli" probe "$B" --json > "$work/probe.json" || fail "probe failed"
python3 - "$work/probe.json" <<'PY' || fail "probe's figures are not sane"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["bandwidth_bytes_per_s"] > 1e7, r   # loopback: far above 10 MB/s
assert 0 < r["rtt_small_s"] < 0.5 and r["delay_s"] == r["rtt_small_s"] / 2, r
assert r["rtt_big_s"] > r["rtt_small_s"] and r["overhead_s"] >= 0 and r["probe_bytes"] > 1e6, r
print("ok: probe: %.0f MB/s, rtt %.3f ms, overhead %.4f ms" % (r["bandwidth_bytes_per_s"] / 1e6, r["rtt_small_s"] * 1e3, r["overhead_s"] * 1e3))
PY
"$cli" probe "$B" | grep -q 'bandwidth' || fail "probe prints no table"
"$cli" keygen stranger --dir "$work/keys" > /dev/null
if SKYTRAIN_KEY=$work/keys/stranger.key "$cli" --timeout-ms 3000 probe "$B" > "$work/stranger.out" 2>&1; then
  fail "a key no daemon admits could probe"
fi
echo "ok: probe with an unknown key refused: $(head -1 "$work/stranger.out")"

# export: final weights and a checkpoint's, against the stages' own files.
"$cli" export "$plain" -o "$work/final.safetensors" || fail "export failed"
"$cli" export "$plain" --step 20 -o "$work/step20.safetensors" || fail "export --step failed"
# -o never renames over what is not a regular file (run as root, that replaced a device node).
if "$cli" export "$plain" -o /dev/null 2> "$work/devnull.err"; then fail "export -o /dev/null was not refused"; fi
grep -q '"/dev/null" exists and is not a regular file' "$work/devnull.err" || fail "export -o /dev/null: $(cat "$work/devnull.err")"
[ -c /dev/null ] || fail "/dev/null is no longer a device"
jobdir_a=$work/a/jobs/$plain jobdir_b=$work/b/jobs/$plain
"$python" - "$work/final.safetensors" "$work/step20.safetensors" "$jobdir_a" "$jobdir_b" <<'PY' || fail "exported weights differ"
import json, struct, sys, torch
def read(path):  # a safetensors reader: the format's own layout, nothing else assumed
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64,
              "I32": torch.int32, "I8": torch.int8, "U8": torch.uint8}
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + end])
        out[name] = torch.frombuffer(raw, dtype=dtypes[e["dtype"]]).reshape(e["shape"]) if raw else torch.zeros(e["shape"])
    return out, meta
final, meta = read(sys.argv[1])
assert meta["skytrain_step"] == "final", meta
expected = {}
for d, stage in ((sys.argv[3], 0), (sys.argv[4], 1)):
    expected.update(torch.load(f"{d}/stage-{stage}.pt"))
assert set(final) == set(expected), set(final) ^ set(expected)
for name, t in expected.items():
    assert torch.equal(final[name], t), name
assert "block3.mlp.fc.weight" in final or any(k.startswith("block3.") for k in final), sorted(final)[:5]
step20, meta = read(sys.argv[2])
assert meta["skytrain_step"] == "20", meta
checkpoint = {}
for d, stage in ((sys.argv[3], 0), (sys.argv[4], 1)):
    ckpt, _ = read(f"{d}/checkpoints/step-00000020/stage-{stage}.safetensors")
    checkpoint.update({k[len("param/"):]: v for k, v in ckpt.items() if k.startswith("param/")})
assert set(step20) == set(checkpoint) == set(final)
assert all(torch.equal(step20[k], checkpoint[k]) for k in checkpoint)
assert any(not torch.equal(step20[k], final[k]) for k in final), "step 20 equals the final weights"
print("ok: export: %d tensors, final == the stages' .pt files, step 20 == its checkpoint" % len(final))
PY
if SKYTRAIN_KEY=$work/keys/admin.key "$cli" export "$plain" --step 99 -o "$work/x.safetensors" 2> "$work/nostep.err"; then
  fail "export of a step with no checkpoint succeeded"
fi
grep -q "no complete checkpoint after step 99" "$work/nostep.err" || fail "no-checkpoint error unclear: $(cat "$work/nostep.err")"
# Another client may not read the user's weights, even straight from the stage daemon.
"$cli" keygen other --dir "$work/keys" > /dev/null
echo "$(cut -d' ' -f1 "$work/keys/other.pub") client other" >> "$work/keys/authorized_keys"
for p in "${daemon_pids[@]}"; do kill -HUP "$p"; done
sleep 1
# Crafted export requests straight to the stage daemon: a stranger's, and the owner's with a
# step that has no checkpoint, an offset past the end, a stage never hosted, a bad job id.
"$python" - "$B" "$(cut -d' ' -f2 <(grep "^$B " "$work/keys/known_daemons"))" "$work/keys" "$plain" <<'PY' || fail "a crafted export was not refused"
import sys, zmq
endpoint, server_key, keys, job = sys.argv[1:]
ctx = zmq.Context()
def ask(key_name, **request):
    s = ctx.socket(zmq.DEALER)
    secret = next(l.split()[1] for l in open(f"{keys}/{key_name}.key") if l.startswith("secret ")).encode()
    s.curve_secretkey = secret
    s.curve_publickey = zmq.curve_public(secret)
    s.curve_serverkey = server_key.encode()
    s.linger = 0
    s.connect(endpoint)
    s.send_json(dict({"type": "export", "id": 1, "job": job, "stage": 1, "step": -1, "offset": 0}, **request))
    assert s.poll(5000), f"no reply to {request}"
    reply = s.recv_json()
    s.close()
    return reply
reply = ask("other")
assert reply["ok"] is False and "admin role" in reply["error"], reply
print("ok: export by another user refused:", reply["error"][:90])
for request, expected in [({"step": 99}, "no checkpoint after step 100"), ({"offset": 1 << 40}, "past the end"),
                          ({"stage": 7}, "never hosted"), ({"job": "../../etc"}, "job")]:
    reply = ask("user", **request)
    assert reply["ok"] is False and expected in reply["error"], (request, reply)
print("ok: crafted export requests get errors naming the problem")
assert ask("user", offset=0)["ok"] is True  # and the daemon still serves the owner
PY
"$cli" status "$plain" > /dev/null || fail "daemon A stopped answering"
for p in "${daemon_pids[@]}"; do kill -0 "$p" || fail "a daemon died"; done
echo "ok: export (final, checkpoint, refusals); both daemons up"

# Daemon B's log: JSON lines, each with the journal's priority prefix; info and warnings.
python3 - "$work/b/daemon.log" <<'PY' || fail "daemon B's log is not prefixed JSON lines"
import json, re, sys
levels = {}
for line in open(sys.argv[1]):
    m = re.match(r"<([0-7])>(\{.*\})$", line.rstrip("\n"))
    assert m, line
    record = json.loads(m.group(2))
    assert {"time", "level", "message", "thread"} <= set(record), record
    levels[record["level"]] = m.group(1)
assert levels.get("info") == "6", levels
print("ok: daemon log: JSON lines with priorities", levels)
PY
