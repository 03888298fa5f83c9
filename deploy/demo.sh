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

source deploy/local-daemons.sh
trap stop_daemons EXIT
# Keys as in production: a key pair per daemon and for the user, each daemon admitting the
# others (authorized_keys) and knowing them by endpoint (known_daemons).
rm -rf "$demo/keys"
data_root=$root/build/data
make_keys "$demo/keys" build/client/skytrain 2
# Stage 0 on 7100/7101, stage 1 on 7200/7201, as if in two clouds.
for i in 0 1; do
  port=$((7100 + 100 * i))
  start_daemon control build/daemon/skytraind "$demo/stage$i" "tcp://127.0.0.1:$port" "tcp://127.0.0.1:$((port + 1))"
done
echo "demo: daemons up (logs in $demo/stage*/daemon.log)"; grep -h "BLAS" "$demo"/stage*/daemon.log | head -1

python3 - "$job_template" "$corpus" "$demo/job.json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["data"]["files"] = [sys.argv[2]]
json.dump(spec, open(sys.argv[3], "w"), indent=2)
PY
build/client/skytrain --daemon tcp://127.0.0.1:7100 submit "$demo/job.json"
