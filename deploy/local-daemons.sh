# Sourced by the scripts that run skytraind daemons on this machine (demo, bench, tests).
# Every daemon runs with CURVE keys, as in production:
#   make_keys DIR CLI N   writes keys for N daemons (daemon0..), a client "user" and an
#       admin "admin" under DIR, an authorized_keys file admitting them all and an empty
#       known_daemons file; exports SKYTRAIN_KEY (the client) and SKYTRAIN_KNOWN_DAEMONS.
#   start_daemon VAR BINARY DIR [CONTROL DATA]   starts the next daemon (key daemon<k>, k
#       counting calls) with its state in DIR (default endpoints: ephemeral loopback ports)
#       and data_roots $data_root, waits until it serves, records its endpoint and public
#       key in known_daemons, appends its pid to $daemon_pids, sets VAR to its control
#       endpoint and VAR_METRICS to its /metrics address (host:port, a free loopback port);
#       exits 1 with its log if it does not start. (No $(...): a subshell would
#       lose the pid.)
#   start_demo_pair WORK   from the repository root: the demo corpus (build/data), keys, and
#       two daemons whose control endpoints it puts in $A and $B (with demo_daemons=3 a
#       third in $C); sets $corpus
#   bench_workspace                          $work, $cli and $corpus for a benchmark
#   stop_daemons                             stops every daemon started so far
# With insecure_daemons=1 the daemons run without keys (plaintext; loopback only), for
# benchmarks that compare the two. $daemon_config_extra (', "key": value, ...') is added
# to a keyed daemon's config.
daemon_pids=()
key_dir=
data_root=${data_root:-/}
daemons_started=0

make_keys() {
  local dir=$1 cli=$2 n=$3
  key_dir=$dir
  mkdir -p "$dir"
  : > "$dir/authorized_keys"
  : > "$dir/known_daemons"
  local i
  for i in $(seq 0 $((n - 1))); do
    "$cli" keygen "daemon$i" --dir "$dir" > /dev/null
    echo "$(cut -d' ' -f1 "$dir/daemon$i.pub") daemon daemon$i" >> "$dir/authorized_keys"
  done
  "$cli" keygen user --dir "$dir" > /dev/null
  "$cli" keygen admin --dir "$dir" > /dev/null
  echo "$(cut -d' ' -f1 "$dir/user.pub") client user" >> "$dir/authorized_keys"
  echo "$(cut -d' ' -f1 "$dir/admin.pub") admin admin" >> "$dir/authorized_keys"
  export SKYTRAIN_KEY=$dir/user.key SKYTRAIN_KNOWN_DAEMONS=$dir/known_daemons
}

start_daemon() {
  local var=$1 binary=$2 dir=$3 control=${4:-tcp://127.0.0.1:*} data=${5:-tcp://127.0.0.1:*}
  [ -n "$key_dir" ] || { echo "start_daemon: call make_keys first" >&2; exit 1; }
  mkdir -p "$dir"
  rm -f "$dir/endpoints.json"
  if [ "${insecure_daemons:-0}" = 1 ]; then
    cat > "$dir/config.json" <<JSON
{"control_endpoint": "$control", "data_endpoint": "$data", "insecure": true, "data_roots": ["$data_root"],
 "state_dir": "$dir", "torch_threads": 1, "metrics_address": "127.0.0.1:0"}
JSON
  else
    cat > "$dir/config.json" <<JSON
{"control_endpoint": "$control", "data_endpoint": "$data",
 "secret_key_file": "$key_dir/daemon$daemons_started.key", "authorized_keys": "$key_dir/authorized_keys",
 "known_daemons": "$key_dir/known_daemons", "data_roots": ["$data_root"],
 "state_dir": "$dir", "torch_threads": 1, "metrics_address": "127.0.0.1:0"${daemon_config_extra:-}}
JSON
  fi
  daemons_started=$((daemons_started + 1))
  "$binary" --config "$dir/config.json" > "$dir/daemon.log" 2>&1 &
  daemon_pids+=($!)
  for _ in $(seq 100); do [ -s "$dir/endpoints.json" ] && break; sleep 0.1; done
  if [ ! -s "$dir/endpoints.json" ]; then
    cat "$dir/daemon.log" >&2
    echo "skytraind in $dir did not start" >&2
    exit 1
  fi
  local line
  line=$(python3 -c "import json, sys; e = json.load(open(sys.argv[1])); print(e['control'], e.get('public_key', ''))" "$dir/endpoints.json")
  [ "${insecure_daemons:-0}" = 1 ] || echo "$line" >> "$key_dir/known_daemons"
  printf -v "$var" '%s' "${line%% *}"
  printf -v "${var}_METRICS" '127.0.0.1:%s' \
    "$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['metrics_port'])" "$dir/endpoints.json")"
}

start_demo_pair() {
  corpus=$PWD/build/data/web.txt
  deploy/get-corpus.sh "$corpus" > /dev/null
  data_root=$PWD/build/data
  make_keys "$1/keys" build/client/skytrain "${demo_daemons:-2}"
  start_daemon A build/daemon/skytraind "$1/a"
  start_daemon B build/daemon/skytraind "$1/b"
  C=
  [ "${demo_daemons:-2}" = 3 ] && start_daemon C build/daemon/skytraind "$1/c"
  return 0
}

# bench_workspace: for a benchmark run from the repository root: $work (removed at exit, the
# daemons stopped), $cli, and the demo corpus in $corpus.
bench_workspace() {
  work=$(mktemp -d -p "$PWD/build/data")
  trap 'stop_daemons; rm -rf "$work"' EXIT
  cli=build/client/skytrain
  corpus=$PWD/build/data/web.txt
  deploy/get-corpus.sh "$corpus" > /dev/null
}

stop_daemons() {
  for p in "${daemon_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
