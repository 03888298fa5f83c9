#!/usr/bin/env bash
# The demo: installs, builds, starts two skytraind daemons on this machine (stage 0 and
# stage 1, as if in two clouds), submits a GPT language model on the World English Bible
# and streams its training. Usage: bash deploy/demo.sh [job.json]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
job_template=${1:-deploy/jobs/gpt-web.json}

bash deploy/install-deps.sh
bash deploy/build.sh
demo=$root/build/demo
corpus=$root/build/data/web.txt
deploy/get-corpus.sh "$corpus"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

for i in 0 1; do
  port=$((7100 + 100 * i))
  mkdir -p "$demo/stage$i"
  cat > "$demo/stage$i.json" <<JSON
{"control_endpoint": "tcp://127.0.0.1:$port", "data_endpoint": "tcp://127.0.0.1:$((port + 1))",
 "state_dir": "$demo/stage$i", "insecure": true, "torch_threads": 1}
JSON
  rm -f "$demo/stage$i/endpoints.json"
  build/daemon/skytraind --config "$demo/stage$i.json" > "$demo/stage$i.log" 2>&1 &
  pids+=($!)
done
for i in 0 1; do
  for _ in $(seq 100); do [ -s "$demo/stage$i/endpoints.json" ] && break; sleep 0.1; done
  [ -s "$demo/stage$i/endpoints.json" ] || { cat "$demo/stage$i.log"; echo "demo: daemon $i did not start" >&2; exit 1; }
done
echo "demo: daemons up (logs in $demo/stage*.log)"; grep -h "BLAS" "$demo"/stage*.log | head -1

python3 - "$job_template" "$corpus" "$demo/job.json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["data"]["files"] = [sys.argv[2]]
json.dump(spec, open(sys.argv[3], "w"), indent=2)
PY
build/client/skytrain --daemon tcp://127.0.0.1:7100 submit "$demo/job.json"
