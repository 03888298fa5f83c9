#!/usr/bin/env bash
# Keys as an operator and a user meet them, with real skytraind processes and the CLI:
# keygen, a refused key reported within seconds, an unknown daemon key refused (never
# trusted on first use), another owner's job out of reach for a client and within reach for
# an admin, and a new key admitted after SIGHUP.
set -euo pipefail
daemon=$1 cli=$2 corpus=$3
work=$(mktemp -d)
source "$(dirname "$0")/../../deploy/local-daemons.sh"
cleanup() { stop_daemons; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# keygen: a private secret file, never overwritten.
"$cli" keygen laptop-1 --dir "$work" > "$work/keygen.out"
[ "$(stat -c %a "$work/laptop-1.key")" = 600 ] || fail "secret key file is not mode 600"
grep -q "public key: " "$work/keygen.out" || fail "keygen does not print the public key"
if "$cli" keygen laptop-1 --dir "$work" 2> "$work/err"; then fail "keygen overwrote a key"; fi
grep -q "refusing to overwrite" "$work/err" || fail "keygen refusal not explained"
chmod 644 "$work/laptop-1.key"
rc=0; "$cli" --key "$work/laptop-1.key" --daemon-key "$(cut -d' ' -f1 "$work/laptop-1.pub")" list 2> "$work/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "chmod 600" "$work/err" || fail "a world-readable secret key was used"
chmod 600 "$work/laptop-1.key"

data_root=$(dirname "$corpus")
make_keys "$work/keys" "$cli" 2
"$cli" keygen bob --dir "$work/keys" > /dev/null
start_daemon A "$daemon" "$work/a"
start_daemon B "$daemon" "$work/b"
export SKYTRAIN_DAEMON=$A

# A key the daemon does not list: refused at once, with the key's name.
start=$SECONDS
rc=0; "$cli" --key "$work/laptop-1.key" list 2> "$work/err" || rc=$?
[ "$rc" -eq 2 ] || fail "unknown key: exit $rc"
grep -q "daemon $A refused key 'laptop-1' (not in its authorized keys)" "$work/err" || { cat "$work/err"; fail "unclear refusal"; }
[ $((SECONDS - start)) -le 3 ] || fail "refusal took $((SECONDS - start)) s"
echo "ok: $(cat "$work/err")"
# A daemon whose key is not the one known for it.
rc=0; "$cli" --daemon-key "$(cut -d' ' -f1 "$work/laptop-1.pub")" list 2> "$work/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "its public key is not" "$work/err" || { cat "$work/err"; fail "wrong daemon key accepted"; }
echo "ok: $(cat "$work/err")"
# A daemon with no known key: refused before connecting.
: > "$work/empty"; rc=0; SKYTRAIN_KNOWN_DAEMONS=$work/empty "$cli" list 2> "$work/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "never trusted on first use" "$work/err" || { cat "$work/err"; fail "unknown daemon trusted"; }

# Ownership: the user's job is out of bob's reach until bob's key is listed and even then;
# the admin may cancel it.
python3 - "$A" "$B" "$corpus" "$work/spec.json" <<'PY'
import json, sys
a, b, corpus, out = sys.argv[1:]
json.dump({"name": "owned", "steps": 100000, "batch_size": 4, "micro_batches": 2, "schedule": "1f1b",
           "model": {"d_model": 16, "heads": 2, "layers": 2, "d_ff": 32, "seq_len": 8},
           "data": {"files": [corpus]},
           "stages": [{"daemon": a, "layers": [0, 1]}, {"daemon": b, "layers": [1, 2]}]}, open(out, "w"))
PY
job=$("$cli" submit --detach "$work/spec.json" | awk '{print $3}')
echo "$(cut -d' ' -f1 "$work/keys/bob.pub") client bob" >> "$work/keys/authorized_keys"
rc=0; "$cli" --key "$work/keys/bob.key" list 2> /dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "bob was admitted before the reload"
for p in "${daemon_pids[@]}"; do kill -HUP "$p"; done
sleep 0.5
"$cli" --key "$work/keys/bob.key" list > "$work/bob-list" || fail "bob refused after the reload"
grep -q "$job" "$work/bob-list" && fail "bob sees the user's job"
rc=0; "$cli" --key "$work/keys/bob.key" cancel "$job" 2> "$work/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "needs the admin role: it belongs to 'user'" "$work/err" || { cat "$work/err"; fail "bob cancelled the user's job"; }
echo "ok: $(cat "$work/err")"
"$cli" --key "$work/keys/admin.key" cancel "$job" | grep -q cancelled || fail "admin could not cancel"
"$cli" status "$job" | grep -q cancelled || fail "the owner does not see the cancellation"
for p in "${daemon_pids[@]}"; do kill -0 "$p" || fail "a daemon died"; done
echo "security_cli_test: all passed"
