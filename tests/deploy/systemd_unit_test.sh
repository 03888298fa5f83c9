#!/usr/bin/env bash
# systemd-analyze verify passes on the unit (with ExecStart pointed at the built daemon),
# and the example config parses in the real daemon.
set -euo pipefail
unit=$1 daemon=$2 config=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s|/usr/local/bin/skytraind|$daemon|" "$unit" > "$work/skytraind.service"
out=$(systemd-analyze verify "$work/skytraind.service" 2>&1) || { echo "$out"; exit 1; }
# verify prints warnings without failing; treat any about our unit as failures.
if echo "$out" | grep -q "skytraind.service"; then echo "$out"; exit 1; fi
grep -q '^Type=notify' "$unit"
echo "systemd-analyze verify: ok"
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
