#!/usr/bin/env bash
# `deploy/demo.sh --keep`, as a newcomer runs it (with a 5-step job): the job succeeds, the
# daemons keep running, and the commands the demo prints next work when pasted literally:
# the export line, status, plot and export; then its printed kill stops both daemons.
# Needs root for the demo's install step (skipped, 77, without), and ports 7100 and 7200 free.
# Usage: demo_keep_test.sh SOURCE_DIR
set -euo pipefail
source_dir=$(cd "$1" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "demo_keep_test: the demo installs packages, which needs root; skipped"; exit 77; }
if ss -ltn | grep -qE ':(7100|7101|7200|7201) '; then
  echo "demo_keep_test: a port the demo uses (7100, 7101, 7200, 7201) is taken; skipped"; exit 77
fi
work=$(mktemp -d)
fail() { echo "FAIL: $*" >&2; exit 1; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  # A demo that failed after starting its daemons printed no kill line: its daemons by config.
  pkill -f "$source_dir/build/demo/stage[01]/config.json" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

python3 - "$source_dir/deploy/jobs/llama-web.json" "$work/job.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["steps"] = 5
s["optimizer"]["warmup_steps"] = 1
s["eval"] = {"samples": 16}
json.dump(s, open(sys.argv[2], "w"))
PY
(cd "$work" && bash "$source_dir/deploy/demo.sh" --keep "$work/job.json") > "$work/demo.log" 2>&1 ||
  { tail -40 "$work/demo.log"; fail "deploy/demo.sh --keep failed"; }
grep -q "succeeded" "$work/demo.log" || { tail -40 "$work/demo.log"; fail "the demo's job did not succeed"; }
kill_line=$(grep -o 'stop them with: kill .*' "$work/demo.log" | sed 's/stop them with: //')
[ -n "$kill_line" ] || { tail -20 "$work/demo.log"; fail "--keep printed no kill command"; }
read -r -a pids <<< "${kill_line#kill }"
[ "${#pids[@]}" -eq 2 ] || fail "expected two daemon pids in '$kill_line'"
for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null || fail "daemon $p is not running after --keep"; done
echo "ok: the demo's job succeeded and both daemons keep running (${pids[*]})"

# The "Next" block, pasted as printed: its export line (two lines, joined by the backslash)
# and its three commands, in a fresh shell in an empty folder.
awk '/^Next, with the demo.s keys/ {on = 1; next} on && /^  / {sub(/^  /, ""); print; next} on {exit}' \
  "$work/demo.log" | sed 's/ *#.*$//' > "$work/next.sh"
grep -q '^skytrain status ' "$work/next.sh" || { cat "$work/next.sh"; fail "the demo printed no status command"; }
mkdir "$work/paste"
(cd "$work/paste" && env -u SKYTRAIN_DAEMON -u SKYTRAIN_KEY -u SKYTRAIN_KNOWN_DAEMONS HOME="$work" \
   bash -euo pipefail -x "$work/next.sh") > "$work/next.log" 2>&1 ||
  { cat "$work/next.log"; fail "the demo's next commands, pasted, failed"; }
grep -q "succeeded" "$work/next.log" || { cat "$work/next.log"; fail "status does not say succeeded"; }
[ -s "$work/paste/curves.svg" ] || fail "plot wrote no curves.svg"
[ -s "$work/paste/model.safetensors" ] || fail "export wrote no model.safetensors"
echo "ok: the printed next commands work as pasted (status, plot, export)"

bash -c "$kill_line"
for _ in $(seq 50); do
  alive=0
  for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && alive=1; done
  [ "$alive" = 0 ] && break
  sleep 0.1
done
[ "$alive" = 0 ] || fail "the printed kill left a daemon running"
pids=()
echo "ok: the printed kill stops both daemons"
