#!/usr/bin/env bash
# systemd-analyze verify passes on the unit (the one CMake generates from
# deploy/systemd/skytraind.service.in, with ExecStart pointed at the built daemon), its
# sandbox scores at most 2.0 in systemd-analyze security, and the example config parses in
# the real daemon.
set -euo pipefail
unit=$1 daemon=$2 config=$3 cli=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s|^ExecStart=[^ ]*/skytraind |ExecStart=$daemon |" "$unit" > "$work/skytraind.service"
grep -q "^ExecStart=$daemon " "$work/skytraind.service" || { echo "unit has no ExecStart=…/skytraind line"; exit 1; }
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
# The example config must be accepted by the daemon: start it with the state dir, keys and
# ports moved to a scratch place, under a notify socket as systemd would, wait for its
# endpoints file, check READY=1 and WATCHDOG=1 arrive and SIGHUP reloads the keys.
mkdir -p "$work/etc"
"$cli" keygen skytraind --dir "$work/etc" > /dev/null
"$cli" keygen admin --dir "$work/etc" > /dev/null
echo "$(cut -d' ' -f1 "$work/etc/admin.pub") admin admin" > "$work/etc/authorized_keys"
sed -e "s|/var/lib/skytrain|$work/state|g" -e "s|/etc/skytrain|$work/etc|g" \
  -e 's|0.0.0.0:7100|127.0.0.1:0|; s|0.0.0.0:7101|127.0.0.1:0|' "$config" > "$work/config.json"
sed -i 's|tcp://127.0.0.1:0|tcp://127.0.0.1:*|g' "$work/config.json"
python3 - "$work/notify.sock" "$work/notify.log" <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1]); s.settimeout(0.2)
end = time.time() + 8
with open(sys.argv[2], "w") as log:
    while time.time() < end:
        try:
            log.write(s.recv(4096).decode() + "\n"); log.flush()
        except socket.timeout:
            pass
PY
listener=$!
for _ in $(seq 50); do [ -S "$work/notify.sock" ] && break; sleep 0.1; done
NOTIFY_SOCKET=$work/notify.sock "$daemon" --config "$work/config.json" > "$work/log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$work/state/endpoints.json" ] && break; sleep 0.1; done
sleep 2.5
kill -HUP "$pid"; sleep 0.5
kill -0 "$pid" || { cat "$work/log"; echo "SIGHUP ended the daemon"; exit 1; }
kill "$pid"; wait "$pid" || true
wait "$listener" || true
[ -s "$work/state/endpoints.json" ] || { cat "$work/log"; exit 1; }
grep -q "BLAS: " "$work/log" || { cat "$work/log"; exit 1; }
grep -q "reloaded 1 authorized keys" "$work/log" || { cat "$work/log"; echo "no reload on SIGHUP"; exit 1; }
grep -q "READY=1" "$work/notify.log" || { cat "$work/notify.log"; echo "no READY=1"; exit 1; }
[ "$(grep -c "WATCHDOG=1" "$work/notify.log")" -ge 2 ] || { cat "$work/notify.log"; echo "no WATCHDOG=1 heartbeats"; exit 1; }
echo "example config: ok (READY=1, $(grep -c WATCHDOG=1 "$work/notify.log") watchdog heartbeats, SIGHUP reload)"
# Insecure mode on a public endpoint refuses to start, with the reason.
python3 -c "import json; json.dump({'insecure': True, 'state_dir': '$work/insecure'}, open('$work/insecure.json', 'w'))"
rc=0; "$daemon" --config "$work/insecure.json" > "$work/insecure.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q 'is not a loopback endpoint' "$work/insecure.log" || { cat "$work/insecure.log"; echo "insecure daemon on 0.0.0.0 started"; exit 1; }
echo "insecure on a public endpoint: refused ($(grep -o '\$.control_endpoint[^;]*' "$work/insecure.log" | head -1))"
