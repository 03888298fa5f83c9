#!/usr/bin/env bash
# Subspace models against the unconstrained model, side by side in one run: validation loss
# over SEEDS seeds (mean, spread) and the bytes a step, for the job as it is and for each
# rank k given (model.subspace), plus each rank with the codec pair FWD/BWD on top.
# Usage (after deploy/build.sh): bash bench/subspace_quality.sh JOB.json SEEDS "K..." [FWD/BWD] [PYTHON-EDIT...]
#   e.g. bash bench/subspace_quality.sh deploy/jobs/gpt-web.json 3 "32 16 8 4" q13/q13
# METHOD=cut: a learned code at each cut (model.subspace.method) instead of the shared subspace.
set -euo pipefail
cd "$(dirname "$0")/.."
job=$1 seeds=$2 ranks=$3 codecs=${4:-} method=${METHOD:-shared}
shift 3
[ $# -gt 0 ] && shift
run() {  # run LABEL EDIT...: one configuration over the seeds, its summary lines prefixed
  local label=$1
  shift
  echo "== $label"
  bash bench/seeds.sh "$job" "$seeds" "$@" 2>&1 | grep -E "^(seed|train loss|validation loss|bytes sent|succeeded)" | sed "s|^|$label: |"
}
run "none" 's["compression"] = {"forward": "none", "backward": "none"}' "$@"
for k in $ranks; do
  run "k=$k" "s[\"model\"][\"subspace\"] = {\"rank\": $k, \"method\": \"$method\"}" 's["compression"] = {"forward": "none", "backward": "none"}' "$@"
  if [ -n "$codecs" ]; then
    run "k=$k+${codecs}" "s[\"model\"][\"subspace\"] = {\"rank\": $k, \"method\": \"$method\"}" \
      "s[\"compression\"] = {\"forward\": \"${codecs%/*}\", \"backward\": \"${codecs#*/}\"}" "$@"
  fi
done
