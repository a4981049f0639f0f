#!/usr/bin/env bash
# Bad inputs of issue 13's campaign: each case -> exit code and the last line of stderr (a markdown table).
# Usage: bash scripts/input_campaign.sh   (needs .venv: make setup)
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd); WORK=$(mktemp -d); cd "$WORK"
A="$REPO/.venv/bin/archpool"
export ARCHPOOL_CACHE="$WORK/cache"
case_() { local label="$1"; shift; "$@" > out.txt 2> err.txt; local rc=$?; local line; line=$(grep -v '^\s*$' err.txt | grep -v "^encode\|^data: train" | tail -1 | cut -c1-230); echo "| $label | $rc | \`${line}\` |"; }
pool() { printf "%b" "$1" > p.yaml; }
echo "| case | exit | message |"; echo "|---|---|---|"
pool 'name: x\ntrain: {max_steps: 2}\nmodel: {tie_embeddings: "no"}\nruns: [{name: A}]\n'; case_ 'pool `model: {tie_embeddings: "no"}`' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nextension: [{name: base}]\nruns: [{name: A}]\n'; case_ 'extension named `base`' $A pool show p.yaml
case_ '`run smoke --jobs -1`' $A run smoke --jobs -1
case_ '`run smoke --jobs 0`' $A run smoke --jobs 0
pool 'name: ../../escape\ntrain: {max_steps: 2}\nruns: [{name: A}]\n'; case_ 'pool `name: ../../escape`' $A pool show p.yaml
pool 'name: /abs/pool\ntrain: {max_steps: 2}\nruns: [{name: A}]\n'; case_ 'pool absolute name' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nruns: 5\n'; case_ 'pool `runs: 5`' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nmodel: {d_model: abc}\nruns: [{name: A}]\n'; case_ 'pool `d_model: abc`' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\ndata: {vocab_size: abc}\nruns: [{name: A}]\n'; case_ 'pool `vocab_size: abc`' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nfactorial: {axes: {swa: [true, false]}, name: "{0}_{"}\n'; case_ 'bad factorial name template' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nextension: [{recipe: rope2}]\nruns: [{name: A}]\n'; case_ 'unknown extension recipe (was: after pretraining)' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\neval: {tasks: [niah_single]}\nruns: [{name: A}]\n'; case_ 'unknown eval task (was: after pretraining)' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2, global_batch_tokens: 100}\nruns: [{name: A}]\n'; case_ 'training geometry that cannot run' $A pool show p.yaml
head -c 300 /dev/urandom > bin.csv; cp bin.csv bin.yaml
printf 'run,swa,qk_norm,norm,n_kv_heads,pretrain_ctx,score\nA,0,none,pre,4,128,inf\nB,1,none,pre,4,128,0.5\nC,0,layerwise,pre,4,128,0.6\nD,1,layerwise,pre,4,128,0.7\n' > inf.csv
sed 's/,inf$/,0.1/' inf.csv > ok.csv; touch existing.txt; printf 'model: [1, 2\n' > bad.yaml
case_ '`analyze` a binary CSV' $A analyze bin.csv
case_ '`analyze` with `inf` in the target' $A analyze inf.csv --target score
case_ '`analyze` a target typo' $A analyze ok.csv --target scor
case_ '`report --out` an existing file' $A report ok.csv --out existing.txt --target score
case_ '`features` a binary file' $A features bin.csv
case_ '`features` bad YAML' $A features bad.yaml
case_ '`pool show` a binary file' $A pool show bin.yaml
printf 'hi there you\n' > tiny.txt; printf 'sources: [{kind: files, path: tiny.txt}]\nvocab_size: 300\n' > d.yaml
case_ 'data store from 3 words of text' $A data prepare d.yaml
# a tiny trained run for the checkpoint cases
cat > run.yaml <<'Y'
model: {vocab_size: 300, d_model: 32, n_layers: 2, n_heads: 4, max_seq_len: 64}
data: {synthetic: {}}
train: {max_steps: 4, global_batch_tokens: 256, micro_batch_size: 4}
Y
$A train run.yaml --out run --no-progress > /dev/null 2>&1
case_ '`train` a config with an unknown field' bash -c "sed 's/d_model: 32/d_modl: 32/' run.yaml > r2.yaml; $A train r2.yaml --out run2 --no-progress"
case_ '`extend RUN --name ../../../x`' $A extend run --name ../../../x
case_ '`extend RUN --recipe ntk --name base`' $A extend run --recipe ntk --name base
case_ '`eval --lengths 0`' $A eval run --lengths 0
case_ '`eval --lengths -5`' $A eval run --lengths -5
case_ '`features --short-ctx -1`' $A features olmo3 --short-ctx -1
cp -r run/milestones/final intact && cp -r run/milestones/final corrupt
python3 - <<'P'
p = "corrupt/model.safetensors"; b = bytearray(open(p, "rb").read()); b[-100:-90] = bytes(10); open(p, "wb").write(b)
P
case_ 'eval a checkpoint with flipped weight bytes' $A eval corrupt --suite tiny --n 2 --lengths 32 --no-progress
case_ 'attention on the same corrupt checkpoint' $A attention corrupt --json
case_ 'export-hf of the corrupt checkpoint' $A export-hf corrupt hfout --no-tokenizer
