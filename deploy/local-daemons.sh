# Sourced by the scripts that run skytraind daemons on this machine (demo, bench, tests).
#   start_daemon VAR BINARY DIR [CONTROL DATA]   starts one with its state in DIR (default
#       endpoints: ephemeral loopback ports), waits until it serves, appends its pid to
#       $daemon_pids and sets VAR to its control endpoint; exits 1 with its log if it does
#       not start. (No $(...): a subshell would lose the pid.)
#   stop_daemons                             stops every daemon started so far
daemon_pids=()

start_daemon() {
  local var=$1 binary=$2 dir=$3 control=${4:-tcp://127.0.0.1:*} data=${5:-tcp://127.0.0.1:*}
  mkdir -p "$dir"
  rm -f "$dir/endpoints.json"
  cat > "$dir/config.json" <<JSON
{"control_endpoint": "$control", "data_endpoint": "$data",
 "state_dir": "$dir", "insecure": true, "torch_threads": 1}
JSON
  "$binary" --config "$dir/config.json" > "$dir/daemon.log" 2>&1 &
  daemon_pids+=($!)
  for _ in $(seq 100); do [ -s "$dir/endpoints.json" ] && break; sleep 0.1; done
  if [ ! -s "$dir/endpoints.json" ]; then
    cat "$dir/daemon.log" >&2
    echo "skytraind in $dir did not start" >&2
    exit 1
  fi
  printf -v "$var" '%s' "$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['control'])" "$dir/endpoints.json")"
}

stop_daemons() {
  for p in "${daemon_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
