#!/usr/bin/env bash
# The demo: installs, builds, starts two skytraind daemons on this machine (stage 0 and
# stage 1, as if in two clouds), submits a LLaMA language model on the World English Bible
# and streams its training, then prints what to try next. Usage:
#   bash deploy/demo.sh [--keep] [job.json]
# --keep leaves the two daemons running after the job (stop them with the kill it prints).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
keep=0 job_template=deploy/jobs/llama-web.json
for arg in "$@"; do
  case $arg in
    --keep) keep=1 ;;
    -*) echo "usage: bash deploy/demo.sh [--keep] [job.json]" >&2; exit 2 ;;
    *) job_template=$arg ;;
  esac
done

bash deploy/install-deps.sh
bash deploy/build.sh
demo=$root/build/demo
corpus=$root/build/data/web.txt
deploy/get-corpus.sh "$corpus"

source deploy/local-daemons.sh
[ "$keep" = 1 ] || trap stop_daemons EXIT
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
status=0
build/client/skytrain --daemon tcp://127.0.0.1:7100 submit "$demo/job.json" || status=$?
job=$(build/client/skytrain --daemon tcp://127.0.0.1:7100 list --json |
      python3 -c 'import json, sys; jobs = json.load(sys.stdin); print(jobs[0]["id"] if jobs else "JOB")')
cat <<NEXT

Next, with the demo's keys (in the shell you run them from):
  export PATH=$root/build/client:\$PATH SKYTRAIN_DAEMON=tcp://127.0.0.1:7100 \\
         SKYTRAIN_KEY=$SKYTRAIN_KEY SKYTRAIN_KNOWN_DAEMONS=$SKYTRAIN_KNOWN_DAEMONS
  skytrain status $job               # the summary, the plan, the events
  skytrain plot $job -o curves.svg   # loss, tokens/s and bytes per step
  skytrain export $job -o model.safetensors
NEXT
if [ "$keep" = 1 ]; then
  echo "The daemons keep running (--keep): logs in $demo/stage*/daemon.log; stop them with: kill ${daemon_pids[*]}"
else
  echo "The daemons stop now; bash deploy/demo.sh --keep leaves them running for the commands above."
  echo "Your own daemons and jobs, step by step: docs/quickstart.md"
fi
exit "$status"
