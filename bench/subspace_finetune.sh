#!/usr/bin/env bash
# Fine-tuning a pretrained model in the subspace form against fine-tuning it unconstrained,
# side by side in one run: the demo GPT pretrained on the English Bible (PRE_STEPS steps,
# seed 1, unconstrained) and exported, then fine-tuned on the Spanish one (STEPS steps) over
# SEEDS seeds as it is and converted into the subspace form at each rank k given
# (model.subspace with init_from: detail::adoptPretrained), and, for reference, the subspace
# model at the smallest k trained on Spanish from scratch. Prints bench/seeds.sh's summary
# lines (validation loss with its spread, bytes a step) per configuration.
# Usage (after deploy/build.sh): bash bench/subspace_finetune.sh SEEDS "K..." [STEPS] [PRE_STEPS]
#   e.g. bash bench/subspace_finetune.sh 3 "32 16 8" 300 500
# METHOD=cut: learned codes at the cuts (model.subspace.method) instead of the shared subspace;
# SCRATCH=0: without the two from-scratch rows.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:?usage: subspace_finetune.sh SEEDS "K..." [STEPS] [PRE_STEPS]} ranks=${2:?usage: subspace_finetune.sh SEEDS "K..." [STEPS] [PRE_STEPS]}
steps=${3:-300} pre_steps=${4:-500} method=${METHOD:-shared}
job=deploy/jobs/gpt-web.json
source deploy/local-daemons.sh
bench_workspace
deploy/bilingual-corpus.sh build/data/bilingual > /dev/null
spanish=$PWD/build/data/bilingual/es.txt
pretrained=$work/pretrained-en.safetensors

# Pretraining, unconstrained, on two loopback daemons; exported as safetensors.
data_root=$PWD/build/data
make_keys "$work/keys" "$cli" 2
start_daemon A build/daemon/skytraind "$work/a"
start_daemon B build/daemon/skytraind "$work/b"
python3 - "$job" "$corpus" "$A" "$B" "$pre_steps" "$work/pre.json" <<'PY'
import json, sys
job, corpus, a, b, steps, out = sys.argv[1:]
s = json.load(open(job))
s["data"]["files"] = [corpus]
s["stages"][0]["daemon"], s["stages"][-1]["daemon"] = a, b
s["seed"], s["steps"] = 1, int(steps)
json.dump(s, open(out, "w"))
PY
id=$("$cli" --daemon "$A" submit --detach "$work/pre.json" | awk '{print $3}')
"$cli" --daemon "$A" logs -f "$id" > /dev/null || true
"$cli" --daemon "$A" status --json "$id" | python3 -c "
import json, sys
s = json.load(sys.stdin)
print('pretrained:', s['state'], 'validation loss (English)', s['summary'].get('validation_loss'))"
"$cli" --daemon "$A" export "$id" -o "$pretrained" > /dev/null
stop_daemons
daemon_pids=()

run() {  # run LABEL EDIT...: one configuration over the seeds, its summary lines prefixed
  local label=$1
  shift
  echo "== $label"
  # A configuration that fails says so and the others still run.
  { bash bench/seeds.sh "$job" "$seeds" "s[\"data\"][\"files\"] = [\"$spanish\"]" "s[\"steps\"] = $steps" \
      "s[\"optimizer\"][\"warmup_steps\"] = 10" "$@" 2>&1 || echo "failed: exit $?"; } |
    grep -E "^(seed|train loss|validation loss|bytes sent|succeeded|failed)|rror" | sed "s|^|$label: |"
}
init="s[\"model\"][\"init_from\"] = \"$pretrained\""
run "fine-tuned" "$init"
for k in $ranks; do
  run "fine-tuned k=$k" "$init" "s[\"model\"][\"subspace\"] = {\"rank\": $k, \"method\": \"$method\"}"
done
[ "${SCRATCH:-1}" = 0 ] && exit 0
smallest=$(printf '%s\n' $ranks | sort -n | head -1)
run "from scratch k=$smallest" "s[\"model\"][\"subspace\"] = {\"rank\": $smallest, \"method\": \"$method\"}"
run "from scratch" 's["seed"] += 0'
