#!/usr/bin/env bash
# An emulated multi-cloud WAN on one machine: N clouds as network namespaces in a chain,
# each link a veth pair shaped by `tc tbf` (rate) with a user-space delay relay on each
# end (this kernel has no netem), one skytraind per cloud. Needs root.
#
#   testbed.sh up LINKS          LINKS: one RATE:DELAY per link, comma-separated, e.g.
#                                "100:20,1000:20" (Mbit/s : one-way ms) makes 3 clouds;
#                                RATE "inf" leaves a link unshaped
#   testbed.sh client ARGS...    the skytrain CLI inside cloud 0 (coordinator: cloud 0)
#   testbed.sh control K         cloud K's control endpoint, for job specs
#   testbed.sh shape LINK RATE   changes a link's rate (Mbit/s, or inf) while jobs run
#   testbed.sh down              stops everything, removes the namespaces
#   testbed.sh run LINKS -- CMD  up, run CMD (with $TESTBED = this script), down on exit
#
# Layout: cloud k is namespace skyt<k>; link i joins skyt<i> (10.211.i.1, dev stl<i>a) and
# skyt<i+1> (10.211.i.2, dev stl<i>b). Control endpoints bind 0.0.0.0:7100, unshaped
# routes reach every cloud. Data endpoints bind 127.0.0.1:7101 and are advertised as
# skyt<k>-data:7101, which each namespace's /etc/netns/<ns>/hosts resolves to the relay on
# the link towards k: data crosses exactly one shaped, delayed link per hop.
#
# Keys as in production: $state/keys holds a key pair per cloud daemon (cloud<k>) and for
# the user, authorized_keys admitting them, and known_daemons naming every control
# endpoint's key. Data files must be under $SKYTRAIN_WAN_DATA (default: build/data).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${SKYTRAIN_BUILD:-$root/build}
state=${SKYTRAIN_WAN_STATE:-/tmp/skytrain-wan}
data_root=${SKYTRAIN_WAN_DATA:-$build/data}
daemon=$build/daemon/skytraind
relay=$build/deploy/wan/delay_relay
client=$build/client/skytrain

die() { echo "testbed: $*" >&2; exit 1; }
ns() { echo "skyt$1"; }

clouds() { cat "$state/clouds" 2>/dev/null || echo 0; }

control() {  # control endpoint of cloud $1, reachable from every cloud
  local k=$1
  if [ "$k" -eq 0 ]; then echo "tcp://10.211.0.1:7100"; else echo "tcp://10.211.$((k - 1)).2:7100"; fi
}

down() {
  local pids=()
  for f in "$state"/*.pid; do
    [ -e "$f" ] || continue
    pids+=("$(cat "$f")")
    kill "${pids[-1]}" 2>/dev/null || true
  done
  for _ in $(seq 30); do  # up to 3 s for a clean shutdown
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.1
  done
  for f in "$state"/*.pid; do
    [ -e "$f" ] || continue
    kill -9 "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  for n in $(ip netns list 2>/dev/null | awk '/^skyt[0-9]+/ {print $1}'); do
    ip netns del "$n" 2>/dev/null || true
    rm -rf "/etc/netns/$n"
  done
  rm -f "$state/clouds"
}

shape() {  # shape LINK RATE: (re)sets the tbf of both ends of a link
  local i=$1 rate=$2
  [[ "$rate" =~ ^([0-9]+|inf)$ ]] || die "rate \"$rate\" is not Mbit/s or inf"
  [ "$i" -ge 0 ] && [ "$i" -lt $(( $(clouds) - 1 )) ] || die "no link $i"
  for end in "$(ns "$i") stl${i}a" "$(ns $((i + 1))) stl${i}b"; do
    set -- $end
    if [ "$rate" = "inf" ]; then
      ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null || true
    else
      # burst: 10 ms at the rate, at least 64 kB (GSO segments on veth are up to 64 kB).
      local burst=$(( rate * 1000000 / 8 / 100 ))
      [ "$burst" -ge 65536 ] || burst=65536
      ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "${rate}mbit" burst "$burst" latency 2000ms
    fi
  done
}

start() {  # start NAME NS CMD... : background process in a namespace, pid in $state/NAME.pid
  local name=$1 n=$2
  shift 2
  ip netns exec "$n" "$@" > "$state/$name.log" 2>&1 &
  echo $! > "$state/$name.pid"
}

up() {
  local spec=$1
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, tc)"
  [ -x "$daemon" ] && [ -x "$relay" ] || die "build first: bash deploy/build.sh (looked in $build)"
  IFS=',' read -r -a links <<< "$spec"
  local n=$(( ${#links[@]} + 1 ))
  down
  mkdir -p "$state"
  echo "$n" > "$state/clouds"
  local cpus
  cpus=$(nproc)
  for ((k = 0; k < n; k++)); do
    ip netns add "$(ns "$k")"
    ip netns exec "$(ns "$k")" ip link set lo up
    ip netns exec "$(ns "$k")" sysctl -qw net.ipv4.ip_forward=1
  done
  for ((i = 0; i < n - 1; i++)); do
    local rate=${links[$i]%%:*} delay=${links[$i]##*:}
    [[ "$rate" =~ ^([0-9]+|inf)$ ]] && [[ "$delay" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "link $i: \"${links[$i]}\" is not RATE:DELAY"
    ip link add "stl${i}a" type veth peer name "stl${i}b"
    ip link set "stl${i}a" netns "$(ns "$i")"
    ip link set "stl${i}b" netns "$(ns $((i + 1)))"
    ip netns exec "$(ns "$i")" ip addr add "10.211.$i.1/24" dev "stl${i}a"
    ip netns exec "$(ns $((i + 1)))" ip addr add "10.211.$i.2/24" dev "stl${i}b"
    ip netns exec "$(ns "$i")" ip link set "stl${i}a" up
    ip netns exec "$(ns $((i + 1)))" ip link set "stl${i}b" up
    shape "$i" "$rate"
    echo "link $i: skyt$i <-> skyt$((i + 1)), rate ${rate} Mbit/s, delay ${delay} ms one way" >> "$state/links"
    start "relay$i-a" "$(ns "$i")" "$relay" "10.211.$i.1:7101" "127.0.0.1:7101" "$delay"
    start "relay$i-b" "$(ns $((i + 1)))" "$relay" "10.211.$i.2:7101" "127.0.0.1:7101" "$delay"
  done
  rm -rf "$state/keys"
  mkdir -p "$state/keys"
  for ((k = 0; k < n; k++)); do
    "$client" keygen "cloud$k" --dir "$state/keys" > /dev/null
    echo "$(cut -d' ' -f1 "$state/keys/cloud$k.pub") daemon cloud$k" >> "$state/keys/authorized_keys"
    echo "$(control "$k") $(cut -d' ' -f1 "$state/keys/cloud$k.pub")" >> "$state/keys/known_daemons"
  done
  "$client" keygen user --dir "$state/keys" > /dev/null
  echo "$(cut -d' ' -f1 "$state/keys/user.pub") client user" >> "$state/keys/authorized_keys"
  for ((k = 0; k < n; k++)); do  # routes to every link, hosts files for the data endpoints
    for ((i = 0; i < n - 1; i++)); do
      if [ "$i" -lt $((k - 1)) ]; then ip netns exec "$(ns "$k")" ip route add "10.211.$i.0/24" via "10.211.$((k - 1)).1"; fi
      if [ "$i" -gt "$k" ]; then ip netns exec "$(ns "$k")" ip route add "10.211.$i.0/24" via "10.211.$k.2"; fi
    done
    mkdir -p "/etc/netns/$(ns "$k")"
    {
      echo "127.0.0.1 localhost $(ns "$k")-data"
      [ "$k" -gt 0 ] && echo "10.211.$((k - 1)).1 $(ns $((k - 1)))-data"
      [ "$k" -lt $((n - 1)) ] && echo "10.211.$k.2 $(ns $((k + 1)))-data"
      true
    } > "/etc/netns/$(ns "$k")/hosts"
    mkdir -p "$state/cloud$k"
    rm -f "$state/cloud$k/endpoints.json"
    cat > "$state/cloud$k.json" <<JSON
{"control_endpoint": "tcp://0.0.0.0:7100", "data_endpoint": "tcp://127.0.0.1:7101",
 "advertise_host": "$(control "$k" | sed 's|tcp://||; s|:7100||')",
 "advertise_data_endpoint": "tcp://$(ns "$k")-data:7101",
 "secret_key_file": "$state/keys/cloud$k.key", "authorized_keys": "$state/keys/authorized_keys",
 "known_daemons": "$state/keys/known_daemons", "data_roots": ["$data_root"],
 "state_dir": "$state/cloud$k", "torch_threads": 1}
JSON
    # Each daemon on its own core where there are enough (three share two here).
    start "daemon$k" "$(ns "$k")" taskset -c "$((k % cpus))" "$daemon" --config "$state/cloud$k.json"
  done
  for ((k = 0; k < n; k++)); do
    for _ in $(seq 100); do [ -s "$state/cloud$k/endpoints.json" ] && break; sleep 0.1; done
    [ -s "$state/cloud$k/endpoints.json" ] || { cat "$state/daemon$k.log"; die "daemon $k did not start"; }
  done
  echo "testbed: $n clouds up ($state)"
  cat "$state/links"
}

cmd=${1:-}
case "$cmd" in
  up) trap down ERR; up "${2:?links, e.g. 100:20}" ;;
  down) down ;;
  control) control "${2:?cloud}" ;;
  shape) shape "${2:?link}" "${3:?rate}" ;;
  client)
    shift
    SKYTRAIN_KEY=$state/keys/user.key SKYTRAIN_KNOWN_DAEMONS=$state/keys/known_daemons \
      ip netns exec "$(ns 0)" "$client" --daemon "$(control 0)" "$@" ;;
  run)
    links=${2:?links}
    [ "${3:-}" = "--" ] || die "usage: testbed.sh run LINKS -- CMD..."
    shift 3
    trap down EXIT
    up "$links"
    TESTBED="$here/testbed.sh" "$@"
    ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
