#!/usr/bin/env bash
# `skytrain probe` beside the planner's own link measurement, on the emulated WAN: for each
# link setting, the testbed comes up with two clouds, the CLI in cloud 0 probes cloud 1's
# data port (1 MiB and 4 MiB frames), and a dry run (`skytrain plan`) of a 2-stage job
# prints the link as the coordinator's profiler measured it. Needs root (namespaces).
#
#   sudo bash bench/probe_vs_planner.sh [LINK...]     (default: 100:20 1000:20)
set -euo pipefail
cd "$(dirname "$0")/.."
links=("$@")
[ ${#links[@]} -gt 0 ] || links=(100:20 1000:20)
testbed=deploy/wan/testbed.sh
corpus=$PWD/build/data/web.txt
deploy/get-corpus.sh "$corpus" > /dev/null
for link in "${links[@]}"; do
  echo "== link $link (Mbit/s : one-way ms)"
  "$testbed" run "$link" -- bash -c '
    set -euo pipefail
    one=$($TESTBED control 1)
    for bytes in 1048576 4194304; do
      $TESTBED client probe "$one" --bytes $bytes --json | python3 -c "
import json, sys
r = json.load(sys.stdin)
print(\"probe   %7.2f MB/s  one-way %6.2f ms  overhead %.3f ms  (%.1f MB frame)\" % (r[\"bandwidth_bytes_per_s\"] / 1e6,
      r[\"delay_s\"] * 1e3, r[\"overhead_s\"] * 1e3, r[\"probe_bytes\"] / 1e6))"
    done
    spec=$(mktemp)
    cat > "$spec" <<JSON
{"name": "probe-compare", "seed": 1, "steps": 10, "batch_size": 16, "micro_batches": 4, "schedule": "1f1b",
 "model": {"d_model": 128, "heads": 4, "layers": 4, "d_ff": 512, "seq_len": 128},
 "data": {"files": ["'"$corpus"'"]},
 "stages": [{"daemon": "$($TESTBED control 0)", "layers": [0, 2]}, {"daemon": "$one", "layers": [2, 4]}]}
JSON
    $TESTBED client plan "$spec" | grep -E "link 0->1" | sed "s/^ */planner /"
  '
done
