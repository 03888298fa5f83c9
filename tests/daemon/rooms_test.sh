#!/usr/bin/env bash
# daemon_rooms: every #include of a room of daemon/ points down its arrows (docs: DESIGN's
# Folders): coordinator/ and stage/ use net/, ops/ and protocol/, never each other; coordinator/
# also uses jobs/ (the job records), which uses ops/ and protocol/; net/ uses ops/ and
# protocol/; ops/ uses protocol/; protocol/ nothing else in daemon/. No room includes the root
# (daemon/daemon.h). coordinator/, jobs/, ops/ and protocol/ include neither Torch nor
# stages/ (the models), so they build without it. No room but protocol/ (the spec parser)
# names a model kind. No folder of daemon/ or the other product folders holds more than 18 sources.
#
#   tests/daemon/rooms_test.sh [DAEMON_DIR]   (default: the daemon/ of this source tree)
#
# Prints each include that points the wrong way as "file:line: include (why)"; exits 1 if any.
set -euo pipefail
daemon=${1:-$(dirname "$0")/../../daemon}
cd "$daemon/.."  # so that files print as daemon/<room>/<file>
daemon=$(basename "$daemon")

declare -A allowed=(
  [coordinator]="coordinator jobs net ops protocol"
  [jobs]="jobs ops protocol"
  [stage]="stage net ops protocol"
  [net]="net ops protocol"
  [ops]="ops protocol"
  [protocol]="protocol"
)
torchless=" coordinator jobs ops protocol "

bad=0
checked=0
for room in coordinator jobs stage net ops protocol; do
  if [ ! -d "$daemon/$room" ]; then
    echo "$daemon/$room: no such room"
    bad=1
    continue
  fi
  while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    checked=$((checked + 1))
    file=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    include=${rest#*:}
    why=""
    if [[ $include =~ \"daemon/([^\"]*)\" ]]; then
      path=${BASH_REMATCH[1]}
      target=root
      [[ $path == */* ]] && target=${path%%/*}
      if [[ " ${allowed[$room]} " != *" $target "* ]]; then
        why="$room/ may include only daemon/{${allowed[$room]// /,}}/"
      fi
    elif [[ $torchless == *" $room "* && $include =~ (\<(torch|ATen|c10)/|\"stages/) ]]; then
      why="$room/ builds without Torch and the models"
    fi
    if [ -n "$why" ]; then
      echo "$file:$line: $include ($why)"
      bad=1
    fi
  done < <(grep -rnH --include='*.h' --include='*.cpp' -E '^[[:space:]]*#[[:space:]]*include' "$daemon/$room" || true)
done

# The runner knows no model: what a model kind needs at run time comes through the model
# source and its objective (stages/objective.h). Only the spec parser, at the edge, names kinds.
kinds='"(gpt|gpt2|llama|encoder|classifier|electra|translation|torchscript)"'
while IFS= read -r hit; do
  [ -n "$hit" ] || continue
  echo "$hit (a model kind named outside daemon/protocol/: ask the model source instead)"
  bad=1
done < <(grep -rnHE --include='*.h' --include='*.cpp' "$kinds|stages/models/(electra|translation)\.h|maskTokens|replaceTokens" \
           "$daemon/coordinator" "$daemon/jobs" "$daemon/stage" "$daemon/net" "$daemon/ops" "$daemon"/*.cpp "$daemon"/*.h || true)

# A folder is a concept (STYLE): past about 15 files it wants rooms. No folder of daemon/, nor
# of the other product folders beside it, holds more than 18 sources (.h and .cpp).
while IFS= read -r dir; do
  n=$(find "$dir" -maxdepth 1 -type f \( -name '*.h' -o -name '*.cpp' \) | wc -l)
  if [ "$n" -gt 18 ]; then
    echo "${dir#"$daemon/../"}: $n sources in one folder (at most 18: split it into rooms)"
    bad=1
  fi
done < <(for top in daemon compression stages client scheduler; do find "$daemon/../$top" -type d; done)

if [ "$checked" -eq 0 ]; then
  echo "no #include found under $PWD/$daemon: wrong directory?"
  exit 1
fi
[ "$bad" -eq 0 ] && echo "ok: $checked includes in daemon/{coordinator,jobs,stage,net,ops,protocol} point down"
exit "$bad"
