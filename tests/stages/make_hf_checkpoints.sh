#!/bin/sh
# Small random Hugging Face checkpoints and their reference logits, written by the
# independent reference (hf_reference.py) for hf_checkpoint_test. Usage: PYTHON SCRIPT OUT
set -eu
python=$1 script=$2 out=$3
rm -rf "$out" && mkdir -p "$out"
tokens="3,17,5,90,41,0,63,12,88,7,7,21,95,30,2,55;60,1,44,9,18,72,33,80,5,5,91,14,26,38,71,11"
make() { name=$1; shift; "$python" "$script" make --out "$out/$name" --vocab 96 --hidden 32 --layers 3 --heads 4 --intermediate 48 --max-pos 64 "$@"; }
make llama --family llama --seed 1 --kv-heads 2 --shards 3
make llama-tied-bf16 --family llama --seed 2 --kv-heads 4 --tie --dtype bfloat16
make gpt2 --family gpt2 --seed 3 --shards 2
make gpt2-bare --family gpt2 --seed 4 --bare-names
make bert --family bert --seed 5 --shards 2
make bert-pooler-bf16 --family bert --seed 6 --pooler --dtype bfloat16
for dir in llama llama-tied-bf16 gpt2 gpt2-bare bert bert-pooler-bf16; do
  "$python" "$script" logits --dir "$out/$dir" --tokens "$tokens" --out "$out/$dir.logits.safetensors"
done
