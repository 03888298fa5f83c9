#!/usr/bin/env bash
# systemd-analyze verify passes on the unit (with ExecStart pointed at the built daemon), its
# sandbox scores at most 2.0 in systemd-analyze security, and the example config parses in
# the real daemon.
set -euo pipefail
unit=$1 daemon=$2 config=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s|/usr/local/bin/skytraind|$daemon|" "$unit" > "$work/skytraind.service"
out=$(systemd-analyze verify "$work/skytraind.service" 2>&1) || { echo "$out"; exit 1; }
# verify prints warnings without failing; treat any about our unit as failures.
if echo "$out" | grep -q "skytraind.service"; then echo "$out"; exit 1; fi
for line in '^Type=notify' '^WatchdogSec=' '^ExecReload='; do
  grep -q "$line" "$unit" || { echo "unit has no ${line#^} line"; exit 1; }
done
echo "systemd-analyze verify: ok"
# The unit's sandbox must stay tight: overall exposure at most 2.0 (lower is safer).
out=$(systemd-analyze security --no-pager --offline=yes "$work/skytraind.service" 2>&1) || { echo "$out"; exit 1; }
score=$(echo "$out" | sed -nE 's/.*Overall exposure level for [^:]*: ([0-9]+\.[0-9]+).*/\1/p')
if [ -z "$score" ]; then echo "$out"; echo "systemd-analyze security: no overall exposure line"; exit 1; fi
if awk -v s="$score" 'BEGIN { exit !(s > 2.0) }'; then
  echo "$out"; echo "systemd-analyze security: $score > 2.0"; exit 1
fi
echo "systemd-analyze security: $score OK"
# The example config must be accepted by the daemon: start it with the state dir and
# ports moved to a scratch place, wait for its endpoints file, stop it.
sed -e "s|/var/lib/skytrain|$work/state|" -e 's|0.0.0.0:7100|127.0.0.1:0|; s|0.0.0.0:7101|127.0.0.1:0|' \
  "$config" > "$work/config.json"
sed -i 's|tcp://127.0.0.1:0|tcp://127.0.0.1:*|g' "$work/config.json"
"$daemon" --config "$work/config.json" > "$work/log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$work/state/endpoints.json" ] && break; sleep 0.1; done
kill "$pid"; wait "$pid" || true
[ -s "$work/state/endpoints.json" ] || { cat "$work/log"; exit 1; }
grep -q "BLAS: " "$work/log" || { cat "$work/log"; exit 1; }
echo "example config: ok"
