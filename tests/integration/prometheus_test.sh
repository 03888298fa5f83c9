#!/usr/bin/env bash
# A real Prometheus (Debian's) scrapes two real skytraind daemons while a job runs: the
# exposition passes promtool's lint, both targets are up, and the job's series (step,
# losses, bytes per stage and direction, link figures) can be queried through Prometheus's
# HTTP API with the values the job reports, as can every query of the Grafana dashboard.
set -euo pipefail
daemon=$1 cli=$2 corpus=$3
command -v prometheus > /dev/null || { echo "FAIL: prometheus is not installed (deploy/install-deps.sh)" >&2; exit 1; }
work=$(mktemp -d)
source "$(dirname "$0")/../../deploy/local-daemons.sh"
prometheus_pid=
cleanup() {
  [ -z "$prometheus_pid" ] || kill "$prometheus_pid" 2>/dev/null || true
  stop_daemons
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$work/prometheus.log" ] && tail -20 "$work/prometheus.log" >&2; exit 1; }

data_root=$(dirname "$corpus")
make_keys "$work/keys" "$cli" 2
start_daemon A "$daemon" "$work/a"
start_daemon B "$daemon" "$work/b"
export SKYTRAIN_DAEMON=$A

# The exposition as a scraper sees it, linted by Prometheus's own tool.
python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen('http://$A_METRICS/metrics').read().decode())" \
  > "$work/exposition"
promtool check metrics < "$work/exposition" || fail "promtool rejects /metrics"
grep -q '^skytrain_jobs{state="running"} 0' "$work/exposition" || fail "no jobs-by-state series"
grep -q '^process_resident_memory_bytes ' "$work/exposition" || fail "no memory series"

port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
cat > "$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: skytraind
    static_configs:
      - targets: ["$A_METRICS", "$B_METRICS"]
YAML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$port" > "$work/prometheus.log" 2>&1 &
prometheus_pid=$!

cat > "$work/spec.json" <<JSON
{"name": "scraped", "seed": 1, "steps": 40, "batch_size": 8, "micro_batches": 2, "schedule": "1f1b",
 "model": {"d_model": 32, "heads": 4, "layers": 4, "d_ff": 64, "seq_len": 16},
 "compression": {"forward": "fp16", "backward": "int8"},
 "data": {"files": ["$corpus"]}, "eval": {"samples": 8, "interval": 10},
 "stages": [{"daemon": "$A", "layers": [0, 2]}, {"daemon": "$B", "layers": [2, 4]}]}
JSON
"$cli" submit "$work/spec.json" > "$work/submit" || { cat "$work/submit"; fail "the job failed"; }
job=$(awk '/submitted job/ {print $3}' "$work/submit")
[ -n "$job" ] || { cat "$work/submit"; fail "no job id"; }

# query PROMQL: the API's result vector as JSON lines "labels value", once it is not empty
# (within a minute).
query() {
  python3 - "$port" "$1" <<'PY'
import json, sys, time, urllib.parse, urllib.request
port, promql = sys.argv[1:]
for _ in range(60):
    try:
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        reply = json.load(urllib.request.urlopen(url, timeout=5))
        if reply["status"] == "success" and reply["data"]["result"]:
            for r in reply["data"]["result"]:
                print(json.dumps(r["metric"], sort_keys=True), r["value"][1])
            sys.exit(0)
    except OSError:
        pass
    time.sleep(1)
sys.exit(f"no result for {promql}")
PY
}

# (Each query waits, up to a minute, until its filter holds: scrapes run every second.)
query 'sum(up{job="skytraind"}) == 2' > /dev/null || fail "both daemons never up at once: $(query 'up')"
step=$(query "max_over_time(skytrain_job_step{job_id=\"$job\"}[5m]) == 40") ||
  fail "Prometheus never saw step 40 (the last, numbered from 1) of job $job: $(query "skytrain_job_step")"
echo "ok: Prometheus has skytrain_job_step = ${step##* } for job $job"
sent=$(query "skytrain_stage_sent_bytes_total{job_id=\"$job\", stage=\"0\", direction=\"forward\"}") || fail "no bytes series"
raw=$(query "skytrain_stage_sent_raw_bytes_total{job_id=\"$job\", stage=\"0\", direction=\"forward\"}") || fail "no raw series"
python3 -c "import sys; s, r = float(sys.argv[1]), float(sys.argv[2]); assert 0 < s < r * 0.6, (s, r)" "${sent##* }" "${raw##* }" \
  || fail "fp16 forward bytes ${sent##* } are not about half of raw ${raw##* }"
echo "ok: stage 0 forward sent ${sent##* } bytes on the wire for ${raw##* } raw (fp16)"
backward=$(query "skytrain_stage_sent_bytes_total{job_id=\"$job\", stage=\"1\", direction=\"backward\"}") || fail "no backward series"
python3 -c "import sys; assert float(sys.argv[1]) > 0" "${backward##* }" || fail "stage 1 sent no gradients"
query "skytrain_job_validation_loss{job_id=\"$job\", name=\"scraped\"}" > /dev/null || fail "no validation loss"
query "skytrain_link_rtt_seconds{job_id=\"$job\", link=\"0-1\"}" > /dev/null || fail "no link series"
query 'skytrain_jobs{state="succeeded"} == 1' > /dev/null || fail "no succeeded job counted"
echo "ok: Prometheus scraped both daemons during the job"
# Every query of the Grafana dashboard (deploy/grafana/) returns series for this job.
python3 "$(dirname "$0")/grafana_queries.py" "http://127.0.0.1:$port" --var job_id="$job" ||
  fail "a query of deploy/grafana/skytrain-dashboard.json failed or returned nothing"
# A hostile scraper: an oversized request head, a silent connection, a POST and a wrong
# path; the daemon answers or drops each and goes on serving.
python3 - "$A_METRICS" <<'PY' || fail "/metrics misbehaved on hostile requests"
import socket, sys, urllib.request, urllib.error
host, port = sys.argv[1].rsplit(":", 1)
def exchange(data, wait=True):
    s = socket.create_connection((host, int(port)), timeout=10)
    try:
        s.sendall(data)
    except OSError:
        pass
    reply = s.recv(200) if wait else b""
    s.close()
    return reply
exchange(b"GET /" + b"A" * 100000, wait=False)
silent = socket.create_connection((host, int(port)), timeout=10)  # sends nothing: dropped after 2 s
assert exchange(b"POST /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405"), "POST not refused"
assert exchange(b"GET /secret HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404"), "wrong path not refused"
body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
assert "skytrain_refused_total" in body
silent.close()
PY
echo "ok: hostile requests to /metrics refused, still serving"
for p in "${daemon_pids[@]}"; do kill -0 "$p" || fail "a daemon died"; done
