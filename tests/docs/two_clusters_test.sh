#!/usr/bin/env bash
# docs/operations.md's "Keys for two clusters" and "Checking a new cluster", walked literally
# across three emulated hosts: cloud-a, cloud-b and the laptop; then the one-host setup after
# "Installing from the Debian package" on a fourth, solo. Each host is a network namespace on
# one bridge (10.213.0.1 to .4; /etc/hosts there names cloud-a.example and cloud-b.example), with its own /etc/skytrain and /var/lib/skytrain bind-mounted from a
# folder of its own. Every ```sh block runs unchanged on the host the page says it runs on;
# the commands that cross hosts or manage services are shims on PATH that do the same here:
#   ssh root@HOST CMD     runs CMD on HOST (as root)
#   scp SRC DST           copies, where a HOST:PATH names that host's file
#   sudo CMD              runs CMD (the walk is root already)
#   sudoedit FILE         keeps FILE as it is (the package's example config)
#   journalctl -u skytraind -f
#                         prints the daemon's log so far (and does not follow it)
#   systemctl enable --now skytraind / reload skytraind
#                         starts the unit's ExecStart as the user skytrain (as the unit
#                         says), waits until it listens / sends it SIGHUP
# The job the page submits must succeed. Needs root for the namespaces (skipped, 77, without).
# Usage: two_clusters_test.sh SOURCE_DIR BUILD_DIR CORPUS
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "two_clusters_test: needs root for network and mount namespaces; skipped"; exit 77; }
source_dir=$(cd "$1" && pwd) build_dir=$(cd "$2" && pwd) corpus=$3
work=$(mktemp -d /tmp/skytrain-walk.XXXXXX)
chmod 755 "$work"
hosts=(cloud-a cloud-b laptop solo)
made_dirs=() made_user=0
fail() { echo "FAIL: $*" >&2; exit 1; }

# The hosts' namespaces, with whatever still runs in them (an interrupted run's daemons).
cleanup_stale() {
  for n in skyw-lan skyw-cloud-a skyw-cloud-b skyw-laptop skyw-solo skyw-probe; do
    ip netns pids "$n" 2> /dev/null | xargs -r kill -KILL 2> /dev/null || true
    ip netns del "$n" 2> /dev/null || true
  done
}
cleanup() {
  for h in cloud-a cloud-b solo; do
    local pidfile=$work/hosts/$h/skytraind.pid
    [ -f "$pidfile" ] && kill -TERM "$(cat "$pidfile")" 2> /dev/null || true
  done
  sleep 1
  for h in cloud-a cloud-b solo; do
    local pidfile=$work/hosts/$h/skytraind.pid
    [ -f "$pidfile" ] && kill -KILL "$(cat "$pidfile")" 2> /dev/null || true
  done
  cleanup_stale
  for d in "${made_dirs[@]}"; do rmdir "$d" 2> /dev/null || true; done
  if [ "$made_user" = 1 ]; then userdel skytrain 2> /dev/null || true; groupdel skytrain 2> /dev/null || true; fi
  if [ -n "${KEEP_WALK_WORK:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# The hosts: namespaces on a bridge in another one; nothing outside them is touched.
cleanup_stale
if ! ip netns add skyw-probe 2> /dev/null || ! unshare --mount true 2> /dev/null; then
  echo "two_clusters_test: root, but without network or mount namespaces here; skipped"
  exit 77
fi
ip netns del skyw-probe
ip netns add skyw-lan
ip -n skyw-lan link set lo up
ip -n skyw-lan link add br0 type bridge
ip -n skyw-lan link set br0 up
n=0
for h in "${hosts[@]}"; do
  n=$((n + 1))
  ip netns add "skyw-$h"
  ip -n "skyw-$h" link set lo up
  ip link add "skyw$n" netns "skyw-$h" type veth peer name "port$n" netns skyw-lan
  ip -n skyw-lan link set "port$n" master br0 up
  ip -n "skyw-$h" addr add "10.213.0.$n/24" dev "skyw$n"
  ip -n "skyw-$h" link set "skyw$n" up
  root=$work/hosts/$h
  mkdir -p "$root/etc" "$root/var/data" "$root/home"
  chmod 755 "$root" "$root/home"
  { echo "127.0.0.1 localhost"; echo "10.213.0.1 cloud-a.example"; echo "10.213.0.2 cloud-b.example"
    echo "10.213.0.3 laptop.example"; echo "10.213.0.4 solo.example"; } > "$root/hosts"
done
# What the package makes on a daemon host: the system user skytrain (removed after, if the
# walk made it), and /var/lib/skytrain and its data folder, owned by it.
if ! id skytrain > /dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /var/lib/skytrain --shell /usr/sbin/nologin skytrain
  made_user=1
fi
for h in cloud-a cloud-b solo; do
  chown -R skytrain:skytrain "$work/hosts/$h/var"
  chmod 750 "$work/hosts/$h/var" "$work/hosts/$h/var/data"
done
# The mount points the hosts' own folders go on (made here, and removed after, if absent).
for d in /etc/skytrain /var/lib/skytrain; do
  [ -d "$d" ] || { mkdir -p "$d"; made_dirs+=("$d"); }
done

# The shims, and the binaries under the names the package gives them: copies, which the user
# skytrain can run wherever the build tree is (under /root, say).
bin=$work/bin
mkdir -p "$bin"
cp "$build_dir/client/skytrain" "$build_dir/daemon/skytraind" "$bin/"
cp "$build_dir/daemon/skytraind-sentinel" "$bin/" 2> /dev/null || true
chmod 755 "$bin" "$bin"/*
unit=$build_dir/deploy/systemd/skytraind.service
[ -f "$unit" ] || fail "no configured unit at $unit"

# on HOST CMD...: CMD on HOST, in its network namespace, with its own files mounted.
cat > "$bin/on" <<EOF
#!/usr/bin/env bash
set -euo pipefail
host=\$1; shift
root=$work/hosts/\$host
[ -d "\$root" ] || { echo "on: no host \$host" >&2; exit 2; }
exec ip netns exec "skyw-\$host" unshare --mount --propagation private bash -c '
  mount --bind "\$0/etc" /etc/skytrain
  mount --bind "\$0/var" /var/lib/skytrain
  mount --bind "\$0/hosts" /etc/hosts
  exec env WALK_HOST="\$1" PATH="$bin:\$PATH" "\${@:2}"' "\$root" "\$host" "\$@"
EOF
cat > "$bin/ssh" <<'EOF'
#!/usr/bin/env bash
set -euo pipefail
target=${1#*@}; shift
exec on "${target%.example}" bash -c "$*"
EOF
cat > "$bin/scp" <<EOF
#!/usr/bin/env bash
# scp SRC DST, either one [user@]HOST:PATH; a remote PATH must be under a host's own folders.
set -euo pipefail
[ \$# -eq 2 ] || { echo "scp (walk): SRC DST only" >&2; exit 2; }
resolve() {
  if [[ "\$1" =~ ^([^@:/]+@)?([^:/]+):(.*)\$ ]]; then
    local host=\${BASH_REMATCH[2]%.example} path=\${BASH_REMATCH[3]}
    case "\$path" in
      /etc/skytrain/*) echo "$work/hosts/\$host/etc/\${path#/etc/skytrain/}" ;;
      /var/lib/skytrain/*) echo "$work/hosts/\$host/var/\${path#/var/lib/skytrain/}" ;;
      *) echo "scp (walk): \$path is outside the hosts' emulated folders" >&2; exit 2 ;;
    esac
  else
    echo "\$1"
  fi
}
src=\$(resolve "\$1") dst=\$(resolve "\$2")
exec cp "\$src" "\$dst"
EOF
cat > "$bin/sudo" <<'EOF'
#!/usr/bin/env bash
exec "$@"
EOF
cat > "$bin/sudoedit" <<'EOF'
#!/usr/bin/env bash
[ -f "$1" ] || { echo "sudoedit (walk): no $1" >&2; exit 1; }
EOF
cat > "$bin/journalctl" <<EOF
#!/usr/bin/env bash
[ "\$*" = "-u skytraind -f" ] || { echo "journalctl (walk): only -u skytraind -f" >&2; exit 2; }
cat "$work/hosts/\$WALK_HOST/journal.log"
EOF
cat > "$bin/systemctl" <<EOF
#!/usr/bin/env bash
# The two uses the page makes of systemctl, for the unit skytraind on this host.
set -euo pipefail
root=$work/hosts/\$WALK_HOST
pidfile=\$root/skytraind.pid
case "\$*" in
  "enable --now skytraind")
    exec_start=\$(sed -n 's/^ExecStart=//p' "$unit")
    read -r -a argv <<< "\$exec_start"
    argv[0]=$bin/\$(basename "\${argv[0]}")
    setsid setpriv --reuid skytrain --regid skytrain --init-groups "\${argv[@]}" > "\$root/journal.log" 2>&1 < /dev/null &
    echo \$! > "\$pidfile"
    for _ in \$(seq 150); do  # Type=notify: start returns once the daemon is up
      ss -ltn | grep -q ':7100 ' && exit 0
      kill -0 "\$(cat "\$pidfile")" 2> /dev/null || { cat "\$root/journal.log" >&2; echo "skytraind failed to start" >&2; exit 1; }
      sleep 0.2
    done
    echo "skytraind did not start listening in 30 s" >&2; exit 1 ;;
  "reload skytraind")
    kill -HUP "\$(cat "\$pidfile")" ;;
  *) echo "systemctl (walk): only 'enable --now skytraind' and 'reload skytraind'" >&2; exit 2 ;;
esac
EOF
chmod +x "$bin"/*

# sh_block FILE HEADING: the ```sh blocks under the level-2 HEADING, each ending in a line
# "#--- end of block".
sh_blocks() {
  python3 - "$@" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"^## " + re.escape(sys.argv[2]) + r"\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
if not m:
    sys.exit(f"{sys.argv[1]}: no section '## {sys.argv[2]}'")
for block in re.findall(r"^```sh\n(.*?)^```", m.group(1), re.M | re.S):
    print(block + "#--- end of block")
PY
}
keys=$work/keys-blocks.sh
sh_blocks "$source_dir/docs/operations.md" "Keys for two clusters" > "$keys"
sh_blocks "$source_dir/docs/operations.md" "Checking a new cluster" > "$work/check-blocks.sh"
# block N FILE: the Nth block of FILE (1-based).
block() { awk -v want="$1" 'BEGIN {n = 1} /^#--- end of block$/ {n++; next} n == want' "$2"; }
count=$(grep -c '^#--- end of block$' "$keys")
[ "$count" -eq 6 ] || fail "\"Keys for two clusters\" has $count sh blocks; this walk knows the page's 6 (update both)"

# run HOST SCRIPT_FILE: the script on HOST as root, in /root-like folder of the host, traced.
run() {
  local host=$1 script=$2
  echo "== on $host:"; sed 's/^/   | /' "$script"
  local home=$work/hosts/$host/home
  (cd "$home" && HOME=$home XDG_CONFIG_HOME= SKYTRAIN_KEY= SKYTRAIN_DAEMON= SKYTRAIN_KNOWN_DAEMONS= \
     "$bin/on" "$host" bash -euo pipefail -x "$script") >> "$work/walk.log" 2>&1 ||
    { tail -40 "$work/walk.log"; fail "the block above failed on $host"; }
}
step() {  # step N HOST [SED]: block N on HOST, edited by SED where the page says so
  local file=$work/step-$1-$2.sh
  block "$1" "$keys" | sed -e "${3:-}" > "$file"
  run "$2" "$file"
}
step 1 cloud-a
step 2 cloud-b
block 3 "$keys" | grep -- '# from cloud-a' > "$work/step-3a.sh"; run cloud-a "$work/step-3a.sh"
block 3 "$keys" | grep -- '# from cloud-b' > "$work/step-3b.sh"; run cloud-b "$work/step-3b.sh"
step 4 cloud-a
step 4 cloud-b
step 5 cloud-a
grep -qx 'host=cloud-a' "$work/step-5-cloud-a.sh" || fail "step 4's block no longer starts with host=cloud-a"
step 5 cloud-b 's/^host=cloud-a$/host=cloud-b/'
step 6 laptop
echo "ok: \"Keys for two clusters\" walked on cloud-a, cloud-b and the laptop"

# The laptop has a corpus, as the page assumes.
cp "$corpus" "$work/hosts/laptop/home/web.txt"
block 1 "$work/check-blocks.sh" > "$work/check.sh"
run laptop "$work/check.sh"
grep -q "succeeded" "$work/walk.log" || { tail -40 "$work/walk.log"; fail "the job did not report success"; }
job=$(grep -oE 'job [0-9a-f]{16}' "$work/walk.log" | head -1 | cut -d' ' -f2)
[ -n "$job" ] || fail "no job id in the submit output"
# Each daemon hosted one stage of it, and the coordinator's record says succeeded.
printf 'skytrain --daemon tcp://cloud-a.example:7100 status --json %s > status.json\n' "$job" > "$work/status.sh"
run laptop "$work/status.sh"
python3 - "$work/hosts/laptop/home/status.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["state"] == "succeeded", s["state"]
assert s["steps_done"] == 20, s["steps_done"]
print(f"ok: job {s['id']} {s['state']} after {s['steps_done']} steps")
PY
for h in cloud-a cloud-b; do
  ls "$work/hosts/$h/var/jobs/$job" > /dev/null 2>&1 || fail "$h has no folder for job $job in its state dir"
done
echo "ok: \"Checking a new cluster\" submitted a job across both hosts, and it succeeded"

# One host for yourself, after the package: its example config is in /etc/skytrain, as the
# package leaves it; the page's second block sets up keys and starts the daemon.
# Its data endpoint is advertised under the machine's host name (advertise_host ""), which
# Debian's /etc/hosts names.
cp "$source_dir/deploy/config/skytraind.json" "$work/hosts/solo/etc/skytraind.json"
echo "127.0.1.1 $(hostname)" >> "$work/hosts/solo/hosts"
block 2 <(sh_blocks "$source_dir/docs/operations.md" "Installing from the Debian package") > "$work/solo.sh"
grep -q 'systemctl enable --now skytraind' "$work/solo.sh" || fail "the install section's second block no longer starts the daemon"
USER=operator run solo "$work/solo.sh"
echo 'skytrain list && skytrain probe tcp://127.0.0.1:7100' > "$work/solo-check.sh"
USER=operator run solo "$work/solo-check.sh"
echo "ok: the one-host setup after \"Installing from the Debian package\" walked; the CLI reaches its daemon as admin"
