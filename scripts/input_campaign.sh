#!/usr/bin/env bash
# The project's adversarial input campaign: each bad input -> exit code and the last line of stderr (a
# markdown table), then one summary line counting named errors (exit 2), tracebacks, silently accepted
# inputs (exit 0) and hangs (killed after CASE_TIMEOUT seconds).
# Usage: bash scripts/input_campaign.sh   (needs .venv: make setup)
#        ARCHPOOL="env PYTHONPATH=$PWD /path/to/venv/bin/archpool" PYTHON=/path/to/venv/bin/python bash scripts/input_campaign.sh
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd); WORK=$(mktemp -d); cd "$WORK"
A=${ARCHPOOL:-"$REPO/.venv/bin/archpool"}
PY=${PYTHON:-"$REPO/.venv/bin/python"}
T=${CASE_TIMEOUT:-60}
export ARCHPOOL_CACHE="$WORK/cache"
N_NAMED=0; N_TRACE=0; N_ACCEPTED=0; N_HANG=0; N_OTHER=0
case_() {
  local label="$1"; shift; timeout -k 5 "$T" "$@" > out.txt 2> err.txt < /dev/null; local rc=$?; local line
  line=$(grep -v '^\s*$' err.txt | grep -v "^encode\|^data: train" | tail -1 | cut -c1-230)
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then N_HANG=$((N_HANG + 1)); line="(killed after ${T} s) $line"
  elif grep -q '^Traceback' err.txt; then N_TRACE=$((N_TRACE + 1))
  elif [ "$rc" = 0 ]; then N_ACCEPTED=$((N_ACCEPTED + 1))
  elif [ "$rc" = 2 ]; then N_NAMED=$((N_NAMED + 1))
  else N_OTHER=$((N_OTHER + 1)); fi
  echo "| $label | $rc | \`${line}\` |"
}
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
pool 'name: x\ntrain: {max_steps: 2}\nextension: [{recipe: rope2}]\nruns: [{name: A}]\n'; case_ 'unknown extension recipe (at validation)' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\neval: {tasks: [niah_single]}\nruns: [{name: A}]\n'; case_ 'unknown eval task (at validation)' $A pool show p.yaml
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

# ---- bounds: parsing and allocation
$PY - <<'P'
lines = ["name: x", "train: {max_steps: 2}", "runs: [{name: A}]", "description:", '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
for i in range(1, 9):
    lines.append(f"  {chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 9) + "]")
open("bomb.yaml", "w").write("\n".join(lines) + "\n")
open("deep.yaml", "w").write("name: x\ntrain: {max_steps: 2}\nruns: [{name: A}]\ndescription: " + "[" * 50000 + "]" * 50000 + "\n")
P
case_ 'YAML alias bomb in a pool' $A pool show bomb.yaml
case_ 'YAML nested 50,000 deep' $A pool show deep.yaml
pool 'name: x\ntrain: {max_steps: 2, lr: 0.1}\nruns: [{name: A}]\ntrain: {max_steps: 9}\n'; case_ 'duplicate YAML key `train`' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nseeds: 1000000000\nruns: [{name: A}]\n'; case_ '`seeds: 1000000000`' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nruns: [{name: A, seeds: 100000000}]\n'; case_ 'run `seeds: 100000000`' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nmodel: {rope: {theta: 1.0e309}}\nruns: [{name: A}]\n'; case_ '`rope.theta: 1.0e309` (inf)' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2, lr: 1e309}\nruns: [{name: A}]\n'; case_ '`lr: 1e309`' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nmodel: {init_std: .nan}\nruns: [{name: A}]\n'; case_ '`init_std: .nan`' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nmodel: {n_layers: 2000000000}\nruns: [{name: A}]\n'; case_ 'pool `n_layers: 2000000000`' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\neval: {lengths: [100000000]}\nruns: [{name: A}]\n'; case_ 'pool `eval.lengths: [100000000]`' $A pool show p.yaml
$PY -c "from archpool.tokenizer import train_tokenizer; train_tokenizer(['the cat sat on the mat'] * 50, 300).save('.')"
case_ '`eval --lengths 100000000`' $A eval run --tokenizer tokenizer.json --lengths 100000000 --suite tiny --n 1 --no-progress
case_ '`eval --longppl-alpha nan`' $A eval run --tokenizer tokenizer.json --longppl-alpha nan --suite longppl --texts tiny.txt --no-progress
case_ '`analyze --short-ctx -5`' $A analyze ok.csv --target score --short-ctx -5
mkfifo fifo.txt
printf 'sources: [{kind: files, path: /dev/zero}]\nvocab_size: 300\n' > dz.yaml; case_ 'data source `/dev/zero`' $A data prepare dz.yaml
printf 'sources: [{kind: files, path: fifo.txt}]\nvocab_size: 300\n' > ff.yaml; case_ 'data source a FIFO' $A data prepare ff.yaml
case_ 'pool file that is a FIFO' $A pool show fifo.txt
# ---- import-hf: config.json bounds, weights, tokenizer
$A export-hf run hf --no-tokenizer > /dev/null 2>&1
hfcase() { rm -rf "$1" && cp -r hf "$1" && $PY - "$1" "$2" <<'P'
import json, sys
d, what = sys.argv[1], sys.argv[2]
c = json.load(open(f"{d}/config.json"))
if what == "layers": c["num_hidden_layers"] = 2000000000
if what == "hidden": c["hidden_size"] = 1e9
if what == "dup": open(f"{d}/config.json", "w").write('{"model_type": "llama", "model_type": "qwen3"}'); sys.exit()
if what == "deep": open(f"{d}/config.json", "w").write("[" * 100000 + "]" * 100000); sys.exit()
if what in ("nan", "int64"):
    from safetensors.torch import load_file, save_file
    s = load_file(f"{d}/model.safetensors"); k = sorted(s)[0]
    s[k] = s[k] * float("nan") if what == "nan" else s[k].long(); save_file(s, f"{d}/model.safetensors")
if what == "tok": open(f"{d}/tokenizer.json", "w").write('{"version": "1.0", "model": {"type": "BPE", "vocab": 5}}')
json.dump(c, open(f"{d}/config.json", "w"))
P
}
hfcase hf_layers layers; case_ 'import-hf `num_hidden_layers: 2e9`' $A import-hf hf_layers imp1
hfcase hf_hidden hidden; case_ 'import-hf `hidden_size: 1e9`' $A import-hf hf_hidden imp2
hfcase hf_dup dup; case_ 'import-hf config.json with a duplicate key' $A import-hf hf_dup imp3
hfcase hf_deep deep; case_ 'import-hf config.json nested 100,000 deep' $A import-hf hf_deep imp4
hfcase hf_nan nan; case_ 'import-hf all-NaN weights' $A import-hf hf_nan imp5
hfcase hf_int int64; case_ 'import-hf int64 weights' $A import-hf hf_int imp6
hfcase hf_tok tok; case_ 'import-hf a malformed tokenizer.json' $A import-hf hf_tok imp7
# ---- silently accepted values
printf 'run,swa,qk_norm,norm,n_kv_heads,n_heads,pretrain_ctx,score\nA,0,none,pre,3,4,128,0.1\nB,1,none,pre,4,4,128,0.5\nC,0,layerwise,pre,4,4,128,0.6\nD,1,layerwise,pre,4,4,128,0.7\n' > kv.csv
case_ '3 KV heads of 4 query heads in a CSV' $A analyze kv.csv --target score
case_ 'the target as its own covariate' $A analyze ok.csv --target score --covariates score
pool 'name: "x\\u202eevil"\ntrain: {max_steps: 2}\nruns: [{name: A}]\n'; case_ 'right-to-left override in a pool name' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nruns: [{name: A, columns: {run: B}}]\n'; case_ 'a run column named `run`' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\neval: {task_params: {mqar: {n_keyz: 3}}}\nruns: [{name: A}]\n'; case_ '`task_params: {mqar: {n_keyz: 3}}`' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\neval: {task_params: {mqqar: {}}}\nruns: [{name: A}]\n'; case_ '`task_params: {mqqar: {}}`' $A pool show p.yaml
printf 'run,swa,qk_norm,norm,n_kv_heads,pretrain_ctx,score\n"=cmd|'"'"' /C calc'"'"'!A0",0,none,pre,4,128,0.1\nB,1,none,pre,4,128,0.5\nC,0,layerwise,pre,4,128,0.6\nD,1,layerwise,pre,4,128,0.7\n' > inj.csv
case_ 'formula run name `=cmd|...` in report tables' bash -c "$A report inj.csv --out rep --target score > /dev/null 2>&1; if grep -rqE '(^|,)\"?[=+@]' rep/tables; then echo 'a table cell starts a formula' >&2; exit 0; fi; echo 'no table cell starts a formula' >&2; exit 2"
# ---- rules checked at validation, before any work
pool 'name: x\ntrain: {max_steps: 2}\nextension: [{name: ntk, length: 64}]\nruns: [{name: A}]\n'; case_ 'extension length <= pretraining context' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nextension: [{name: ntk, budgets: [1], warmup_steps: 5}]\nruns: [{name: A}]\n'; case_ '1-step extension with 5 warmup steps' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nmodel: {vocab_size: 300}\ndata: {vocab_size: 4096}\nruns: [{name: A}]\n'; case_ 'model vocab < tokenizer vocab' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nreport: {target: ruler_ll@99999}\nruns: [{name: A}]\n'; case_ 'report target no stage produces' $A pool show p.yaml
pool "name: x\\ntrain: {max_steps: 2}\\nseeds: [1234567]\\nruns: [{name: $(printf 'A%.0s' $(seq 250))}]\\n"; case_ 'run name too long with its seed suffix' $A pool show p.yaml
# ---- damaged files archpool reads back: checkpoints, HF directories, tokenizers, stores, pool directories, caches
hostile() { $PY - "$@" <<'P'
import json, shutil, struct, sys
from pathlib import Path
what, d = sys.argv[1], Path(sys.argv[2])
deep = "[" * 100000 + "]" * 100000
def header(p):  # (header dict, data bytes) of a safetensors file
    b = p.read_bytes(); n = struct.unpack("<Q", b[:8])[0]; return json.loads(b[8:8 + n]), b[8 + n:]
def write_header(p, h, data):
    raw = json.dumps(h).encode(); raw += b" " * (-len(raw) % 8); p.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
w = d / "model.safetensors"
if what == "config_deep": (d / "config.json").write_text(deep)
if what == "config_list": (d / "config.json").write_text("[1, 2, 3]")
if what == "config_model_str": (d / "config.json").write_text('{"archpool_format": 1, "model": "big"}')
if what == "manifest_deep": (d / "MANIFEST.json").write_text(deep)
if what == "hdr_len": b = w.read_bytes(); w.write_bytes(b"\xff" * 8 + b[8:])
if what == "hdr_json": b = w.read_bytes(); n = struct.unpack("<Q", b[:8])[0]; w.write_bytes(b[:8] + b"\x00\xfe" * (n // 2) + b[8 + n:])
if what in ("hdr_dtype", "hdr_shape"):
    h, data = header(w); k = sorted(k for k in h if k != "__metadata__" and len(h[k]["shape"]) == 2)[0]
    if what == "hdr_dtype": h[k]["dtype"] = "I32"
    else: h[k]["shape"] = h[k]["shape"][::-1] if h[k]["shape"][0] != h[k]["shape"][1] else [h[k]["shape"][0] * 2, h[k]["shape"][1] // 2]
    write_header(w, h, data)
if what == "index_deep": w.unlink(); (d / "model.safetensors.index.json").write_text(deep)
if what == "ours_list": (d / "archpool_config.json").write_text("[]")
if what == "record_deep": (d / "run_config.json").write_text(deep)
if what == "special_bin": (d / "special_tokens_map.json").write_bytes(bytes(range(256)))
if what == "tokcfg_list": (d / "tokenizer_config.json").write_text('["bos_token"]')
if what == "store_deep": (d / "manifest.json").write_text(deep)
if what == "store_counts": m = json.loads((d / "manifest.json").read_text()); m["counts"] = "many"; (d / "manifest.json").write_text(json.dumps(m))
if what == "store_shards": m = json.loads((d / "manifest.json").read_text()); m["shards"] = {"a": 1}; (d / "manifest.json").write_text(json.dumps(m))
if what == "plan_deep": (d / "plan.json").write_text(deep)
if what == "plan_pool_list": (d / "plan.json").write_text('{"pool": [], "nodes": []}')
if what == "plan_bin": (d / "plan.json").write_bytes(bytes(range(256)))
if what == "plan_report_list": p = json.loads((d / "plan.json").read_text()); p["pool"] = ["report"]; (d / "plan.json").write_text(json.dumps(p))
if what == "status_bin": (d / "runs" / "A_s0").mkdir(parents=True, exist_ok=True); (d / "runs" / "A_s0" / "status.json").write_bytes(b"\x80" * 64)
if what == "done_deep":
    for s in sorted((d / "stages").glob("*/*")): (s / "DONE").write_text(deep)
if what == "cache_list":
    for f in Path(sys.argv[3]).rglob("*.json"): f.write_text("[]")
P
}
ck() { rm -rf "$1" && cp -r intact "$1" && rm -f "$1/MANIFEST.json" && hostile "$2" "$1"; }
EV="--tokenizer tokenizer.json --suite tiny --n 1 --lengths 32 --no-progress"
ck ck_cdeep config_deep; case_ 'checkpoint config.json nested 100,000 deep' $A eval ck_cdeep $EV
ck ck_clist config_list; case_ 'checkpoint config.json a JSON list' $A eval ck_clist $EV
ck ck_cstr config_model_str; case_ 'checkpoint config.json `"model": "big"`' $A eval ck_cstr $EV
rm -rf ck_mdeep && cp -r intact ck_mdeep && hostile manifest_deep ck_mdeep; case_ 'checkpoint MANIFEST.json nested 100,000 deep' $A eval ck_mdeep $EV
ck ck_hlen hdr_len; case_ 'safetensors header length 2^64-1' $A eval ck_hlen $EV
ck ck_hjson hdr_json; case_ 'safetensors header not JSON' $A eval ck_hjson $EV
ck ck_hdtype hdr_dtype; case_ 'safetensors header dtype F32 -> I32' $A eval ck_hdtype $EV
ck ck_hshape hdr_shape; case_ 'safetensors header shape transposed' $A eval ck_hshape $EV
ck ck_xdtype hdr_dtype; case_ '`export-hf` a checkpoint whose safetensors header says I32' $A export-hf ck_xdtype hf_xdtype --no-tokenizer
rm -rf run_rdeep && cp -r run run_rdeep && hostile record_deep run_rdeep; case_ 'run_config.json nested 100,000 deep' $A eval run_rdeep $EV
rm -rf hf_hjson && cp -r hf hf_hjson && hostile hdr_json hf_hjson; case_ 'import-hf a non-JSON safetensors header' $A import-hf hf_hjson imp8
head -c 300 /dev/urandom > bin.jsonl; printf '{"text": "a b c"}\n{"txt": "d e f"}\n' > notext.jsonl
case_ '`eval --texts` a binary .jsonl' $A eval run --tokenizer tokenizer.json --suite longppl --texts bin.jsonl --no-progress
case_ '`eval --texts` a .jsonl line without `text`' $A eval run --tokenizer tokenizer.json --suite longppl --texts notext.jsonl --no-progress
rm -rf hf_idx && cp -r hf hf_idx && hostile index_deep hf_idx; case_ 'import-hf shard index nested 100,000 deep' $A import-hf hf_idx imp9
rm -rf hf_ours && cp -r hf hf_ours && hostile ours_list hf_ours; case_ 'eval an HF export whose archpool_config.json is a list' $A eval hf_ours $EV
rm -rf tokd && mkdir tokd && cp tokenizer.json tokd/ && hostile special_bin tokd; case_ 'tokenizer with a binary special_tokens_map.json' $A eval run --tokenizer tokd --suite tiny --n 1 --lengths 32 --no-progress
rm -rf tokl && mkdir tokl && cp tokenizer.json tokl/ && hostile tokcfg_list tokl; case_ 'tokenizer_config.json a JSON list' $A export-hf run hf_tokl --tokenizer tokl
# a store, then its manifest edited
$PY -c "import random; r = random.Random(0); w = 'the cat sat on a mat and dog ran far away'.split(); open('corpus.txt', 'w').write('\n\n\n'.join(' '.join(r.choice(w) for _ in range(400)) for _ in range(40)))"
printf 'sources: [{kind: files, path: corpus.txt}]\nvocab_size: 300\n' > st.yaml
$A data prepare st.yaml > store.txt 2>&1; STORE=$(find "$ARCHPOOL_CACHE/data" -name manifest.json -print -quit | xargs dirname)
st() { rm -rf "$1" && cp -r "$STORE" "$1" && hostile "$2" "$1"; }
st st_deep store_deep; case_ 'store manifest.json nested 100,000 deep' $A data inspect st_deep
st st_counts store_counts; case_ 'store manifest `counts: "many"`' $A data inspect st_counts
st st_shards store_shards; case_ 'store manifest `shards` a mapping' $A data inspect st_shards
# a pool directory (plan written, nothing run), then its records edited
$PY - <<'P'
from pathlib import Path
from archpool.pool.plan import build_plan, write_plan
from archpool.pool.spec import load_pool
pool = load_pool({"name": "x", "train": {"max_steps": 2}, "runs": [{"name": "A"}]})
write_plan(Path("pd0"), pool, build_plan(pool))
P
cp ok.csv pd0/results.csv
pd() { rm -rf "$1" && cp -r pd0 "$1" && hostile "$2" "$1"; }
pd pd_deep plan_deep; case_ 'pool plan.json nested 100,000 deep (`status`)' $A status pd_deep
pd pd_list plan_pool_list; case_ 'pool plan.json `"pool": []` (`status`)' $A status pd_list
pd pd_bin plan_bin; case_ '`analyze` a pool whose plan.json is binary' $A analyze pd_bin
pd pd_rep plan_report_list; case_ '`analyze` a pool whose plan `pool` is a list' $A analyze pd_rep
pd pd_st status_bin; case_ '`analyze` a pool with a binary runs/A_s0/status.json' $A analyze pd_st --target score
rm -rf pd_done && cp -r pd0 pd_done && $PY -c "
from pathlib import Path; from archpool.pool.plan import read_plan; from archpool.pool.graph import node_dir
for n in read_plan(Path('pd_done'))[1]: node_dir(Path('pd_done'), n).mkdir(parents=True, exist_ok=True)" && hostile done_deep pd_done
case_ 'pool DONE markers nested 100,000 deep (exit 2 = read as not done)' bash -c "$A status pd_done > st.txt 2>&1; rc=\$?; cat st.txt >&2; if [ \$rc = 0 ] && grep -q '1 pending' st.txt; then echo 'damaged DONE markers read as not done: the stages are recomputed' >&2; exit 2; fi; exit \$rc"
# ---- results tables with odd types
printf 'run,swa,qk_norm,norm,n_kv_heads,pretrain_ctx,score\nA,0,none,pre,4.5,128,0.1\nB,1,none,pre,4,128,0.5\nC,0,layerwise,pre,4,128,0.6\nD,1,layerwise,pre,4,128,0.7\n' > frac.csv
case_ 'results.csv `n_kv_heads: 4.5`' $A analyze frac.csv --target score
printf 'run,swa,qk_norm,norm,n_kv_heads,pretrain_ctx,score\nA,0,none,pre,4,1e400,0.1\nB,1,none,pre,4,128,0.5\nC,0,layerwise,pre,4,128,0.6\nD,1,layerwise,pre,4,128,0.7\n' > huge.csv
case_ 'results.csv `pretrain_ctx: 1e400`' $A analyze huge.csv --target score
printf 'run,swa,qk_norm,norm,n_kv_heads,pretrain_ctx,score,score\nA,0,none,pre,4,128,0.1,9\nB,1,none,pre,4,128,0.5,9\nC,0,layerwise,pre,4,128,0.6,9\nD,1,layerwise,pre,4,128,0.7,9\n' > dupcol.csv
case_ 'results.csv with the column `score` twice' $A analyze dupcol.csv --target score
printf 'run,swa,qk_norm,norm,n_kv_heads,pretrain_ctx,score\nA,0,none,pre,4,128,0.1\nB,1,none,pre,4,128,0.5\nC,0,layerwise,pre,4,128,0.6\nD,1,layerwise,pre,4,128,"[0.7]"\n' > listcell.csv
case_ 'results.csv score cell `[0.7]`' $A analyze listcell.csv --target score
# ---- caches archpool regenerates: a damaged entry is recomputed (exit 2 here means recovered, as checked)
$A eval run $EV > /dev/null 2>&1
hostile cache_list . "$ARCHPOOL_CACHE/eval"
case_ 'eval cache entries replaced by JSON lists (exit 2 = recomputed)' bash -c "$A eval run $EV > ev.txt 2>&1; rc=\$?; cat ev.txt >&2; if [ \$rc = 0 ] && ! grep -rqx '\[\]' '$ARCHPOOL_CACHE/eval'; then echo 'damaged cache entries recomputed' >&2; exit 2; fi; exit \$rc"
# ---- training health: a diverged or untrained run is a named failure, not a result
sed 's/max_steps: 4,/max_steps: 12, lr: 10,/' run.yaml > lr10.yaml; sed 's/max_steps: 4,/max_steps: 12, lr: 1000000,/' run.yaml > lrhuge.yaml
case_ '`train` at `lr: 10` (the loss diverges)' $A train lr10.yaml --out lr10 --no-progress
case_ '`train` at `lr: 10` re-run on its complete directory' $A train lr10.yaml --out lr10 --no-progress
case_ '`train` at `lr: 1e6` (updates skipped, uniform model)' $A train lrhuge.yaml --out lrhuge --no-progress
case_ '`extend RUN --lr 10` for 10 steps' $A extend run --recipe ntk --name hot --lr 10 --length 128 --tokens 2560 --no-progress
# ---- links and caches: destinations replaced whole, never written through; edited caches recomputed
case_ '`export-hf --replace` over an export whose config.json is a link and which has a stale chat_template.jinja (exit 2 = link target untouched, stale file gone)' bash -c "rm -rf hf_ln && cp -r hf hf_ln && echo '{\"mine\": 1}' > mine.json && rm hf_ln/config.json && ln -s \"\$PWD/mine.json\" hf_ln/config.json && echo stale > hf_ln/chat_template.jinja; $A export-hf run hf_ln --no-tokenizer --replace > /dev/null 2>&1; if [ \"\$(cat mine.json)\" = '{\"mine\": 1}' ] && [ ! -L hf_ln/config.json ] && [ ! -e hf_ln/chat_template.jinja ]; then echo 'link target untouched, stale file gone, export whole' >&2; exit 2; fi; echo 'wrote through the link or kept a stale file' >&2; exit 0"
rm -rf run_imp && cp -r run run_imp; case_ '`import-hf --replace` onto a trained run'"'"'s final checkpoint' $A import-hf hf run_imp/milestones/final --replace
$PY -c "
import json, pathlib, sys
for f in pathlib.Path(sys.argv[1]).rglob('*.json'):
    d = json.loads(f.read_text())
    if isinstance(d, dict) and 'score' in d: d['score'] = 99.0; f.write_text(json.dumps(d))
" "$ARCHPOOL_CACHE/eval"
case_ 'eval cache entries whose score was edited to 99 (exit 2 = recomputed, with a warning)' bash -c "$A eval run $EV > ev2.txt 2>&1; rc=\$?; grep -m1 'content hash' ev2.txt >&2; if [ \$rc = 0 ] && ! grep -rq '\"score\": 99.0' '$ARCHPOOL_CACHE/eval'; then echo 'edited cache entries recomputed' >&2; exit 2; fi; exit \$rc"
OTHER="$ARCHPOOL_CACHE/data/0123456789abcdef0123"; rm -rf "$OTHER" && cp -r "$STORE" "$OTHER"; case_ 'a store directory holding another key'"'"'s manifest' $A data inspect "$OTHER"; rm -rf "$OTHER"
pool 'name: x\ntrain: {max_steps: 2}\ndata: {tasks: {names: [mqar], share: 0.5, params: {mqar: {pair_every: 0}}}}\nruns: [{name: A}]\n'; case_ 'pool `data.tasks.params.mqar.pair_every: 0` (at validation)' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\ndata: {tasks: {names: [kv_recall], share: 0.5, params: {kv_recall: {npairs: 3}}}}\nruns: [{name: A}]\n'; case_ 'pool `data.tasks.params.kv_recall.npairs` typo (at validation)' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2, wandb: {project: x}}\nruns: [{name: A}]\n'; case_ 'pool `train.wandb` without the wandb package (at validation)' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nextension: [{name: ntk}, {name: temp, archs: [B], qk_gain_alpha: 0.1}]\neval: {tasks: [mqar]}\nreport: {target: temp_mqar_acc@128}\nruns: [{name: A}, {name: B, axes: {swa: true}}]\n'; case_ 'pool `report.target` only some runs measure (at validation)' $A pool show p.yaml
# ---- model-config numbers, JSON data shapes, pool records
printf '{"model_type": "qwen2", "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 64, "use_sliding_window": true, "sliding_window": 64, "max_window_layers": 1e400}' > qwen_mwl.json
case_ '`features` a Qwen2 config.json with `max_window_layers: 1e400`' $A features qwen_mwl.json
printf '{"data": null}' > nulldata.json; printf 'sources: [{kind: files, path: nulldata.json}]\nvocab_size: 300\n' > dnull.yaml
case_ 'data source `.json` holding `{"data": null}`' $A data prepare dnull.yaml
case_ '`attention --long-ctx 8` (no retrieval length holds the needle)' $A attention run --long-ctx 8 --text tiny.txt
rm -rf pd_empty && cp -r pd0 pd_empty && $PY -c "
from pathlib import Path; from archpool.pool.plan import read_plan; from archpool.pool.graph import node_dir
out = Path('pd_empty'); (out / 'runs' / 'A_s0').mkdir(parents=True, exist_ok=True); (out / 'runs' / 'A_s0' / 'status.json').write_text('{\"state\": \"done\"}')
for n in read_plan(out)[1]: node_dir(out, n).mkdir(parents=True, exist_ok=True); (node_dir(out, n) / 'DONE').write_text('{}')"
case_ 'pool DONE markers `{}` under a run recorded done (exit 2 = stages not done, run incomplete)' bash -c "$A status pd_empty > st2.txt 2>&1; rc=\$?; cat st2.txt >&2; if [ \$rc = 0 ] && grep -q '1 incomplete' st2.txt; then echo 'markers without key or result read as not done: the run is incomplete' >&2; exit 2; fi; exit \$rc"
# ---- signals and closed outputs (the process boundary)
case_ '`status POOL` into a closed pipe (as `head -0`; exit 2 = quiet exit 141)' bash -c "$PY -c 'import os, subprocess, sys; r, w = os.pipe(); os.close(r); sys.exit(subprocess.run(sys.argv[1:], stdout=w).returncode)' $A status pd0 2> bp.err; rc=\$?; cat bp.err >&2; if [ \$rc = 141 ] && [ ! -s bp.err ]; then echo 'closed stdout: quiet exit 141' >&2; exit 2; fi; exit \$rc"
case_ '`pool list > /dev/full` (exit 2 = one line, exit 1)' bash -c "$A pool list > /dev/full 2> full.err; rc=\$?; cat full.err >&2; if [ \$rc = 1 ] && [ \$(wc -l < full.err) = 1 ] && grep -q 'cannot write to stdout' full.err; then exit 2; fi; exit \$rc"
pool 'name: sig\ndata: {synthetic: {seed: 0}}\ntrain: {max_steps: 5000, global_batch_tokens: 2048, micro_batch_size: 8, ckpt_every: 1000}\neval: {enabled: false}\nattention: {enabled: false}\nfactorial: {axes: {swa: [false, true]}}\n'
case_ 'SIGTERM to `run --jobs 2 --executor submitit-local` mid-pretraining (exit 2 = exit 143, one line, no process left)' bash -c "setsid $A run p.yaml --jobs 2 --executor submitit-local --out sigpool --no-progress > /dev/null 2> sig.err & pid=\$!; for i in \$(seq 400); do [ \$(ls sigpool/stages/pretrain 2>/dev/null | grep -vc lock) -ge 2 ] && break; sleep 0.1; done; sleep 1; kill -TERM \$pid; wait \$pid; rc=\$?; sleep 1; left=\$(ps -o stat= -s \$pid | grep -vc '^Z'); ps -o pid= -s \$pid | xargs -r kill -KILL 2>/dev/null; cat sig.err >&2; if [ \$rc = 143 ] && [ \$left = 0 ] && [ \$(wc -l < sig.err) = 1 ]; then echo \"exit 143 and \$left processes left\" >&2; exit 2; fi; echo \"exit \$rc and \$left processes left\" >&2; exit 1"
# ---- evidence bound to its results; rules inside their meaning; outputs written only where asked
printf 'run,arch,seed,swa,qk_norm,norm,n_kv_heads,pretrain_ctx,score\nA_s0,A,0,0,none,pre,4,128,0.1\nA_s1,A,,0,none,pre,4,128,0.2\nB_s0,B,0,1,none,pre,4,128,0.5\nB_s1,B,1,1,none,pre,4,128,0.6\n' > blankseed.csv
case_ 'results.csv with one blank seed among seeded runs' $A analyze blankseed.csv --target score
mkdir -p ans && cp ok.csv ans/results.csv && mkdir -p ans/items.parquet
case_ 'an `items.parquet` that is a directory' $A analyze ans/results.csv --target score
mkdir -p swap && $PY -c "
import pandas as pd
from archpool.analysis.answers import ANSWER_COLUMNS
rows = [dict(run=r, arch=r, seed=s, recipe='ntk', prefix='', rung='', milestone='', task='mqar', mode='dense', length=128,
             doc=d, query=0, distance=10, hop=1, chain=0, correct=1.0, lp=-0.1) for r, s in (('A', 1), ('B', 0), ('C', 0), ('D', 0)) for d in range(2)]
pd.DataFrame(rows)[list(ANSWER_COLUMNS)].to_parquet('swap/items.parquet')
"
sed 's/^run,/run,seed,/; s/^\([A-D]\),/\1,0,/' ok.csv > swap/results.csv
case_ 'an answers table whose seed labels differ from results.csv' $A analyze swap/results.csv --target score
case_ '`analyze --min-effect 1000` (the pool file refuses it too)' $A analyze ok.csv --target score --min-effect 1000
pool 'name: x\ntrain: {max_steps: 2}\neval: {tasks: [mqar]}\nreport: {target: "mqar_lp@128", headroom: [0.3, 0.8]}\nruns: [{name: A}]\n'; case_ 'pool headroom window on a log-probability target (at validation)' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nextension: [{name: "nt@k"}]\nruns: [{name: A}]\n'; case_ 'extension recipe named `nt@k` (the column grammar)' $A pool show p.yaml
case_ '`run smoke --only` a run the pool lacks (exit 2 = nothing written)' bash -c "$A run smoke --out onlytypo --only base_s9 2> only.err; rc=\$?; cat only.err >&2; if [ \$rc = 2 ] && [ ! -e onlytypo ]; then exit 2; fi; echo 'wrote into the pool directory' >&2; exit 0"
mkdir -p owned && printf '{"schema": 3, "pool": {"name": "someone_else"}, "nodes": []}' > owned/plan.json
case_ '`run smoke --out` a directory another pool owns' $A run smoke --out owned
mkdir -p rep/tables && echo mine > rep/tables/notes.txt
case_ '`report --out` a directory whose tables/ holds a file no report writes (exit 2 = kept)' bash -c "$A report ok.csv --out rep --target score 2> rep.err; rc=\$?; cat rep.err >&2; if [ \$rc = 2 ] && [ \"\$(cat rep/tables/notes.txt)\" = mine ]; then exit 2; fi; exit \$rc"
mkdir -p pubrun/report docs_pub && printf '{"schema": 3, "pool": {"name": "p"}, "nodes": []}' > pubrun/plan.json && echo s > pubrun/report/summary.md && echo r > pubrun/report/report.md && echo theirs > theirs.md && ln -sf "$PWD/theirs.md" docs_pub/p.md
case_ '`publish_results.py` onto a page that is a link (exit 2 = link target untouched)' bash -c "$PY $REPO/scripts/publish_results.py pubrun p --docs docs_pub 2> pub.err; rc=\$?; cat pub.err >&2; if [ \$rc = 2 ] && [ \"\$(cat theirs.md)\" = theirs ]; then exit 2; fi; exit \$rc"
rm -f pubrun/report/report.md && mkdir -p pubrun/report/report.md && rm -f docs_pub/p.md
case_ '`publish_results.py` a half-written report (report.md a directory)' $PY $REPO/scripts/publish_results.py pubrun p --docs docs_pub
# ---- harness backends: inputs checked before a model loads, in a pool before any stage
$A export-hf run hfh --tokenizer tokenizer.json > /dev/null 2>&1
$PY -c "
import json, pathlib
d = pathlib.Path('hd')
def w(p, rows):
    p = d / p; p.parent.mkdir(parents=True, exist_ok=True); p.write_text(''.join(json.dumps(r) + '\n' for r in rows))
for t in ('niah_multikey_2', 'niah_multikey_3', 'niah_multivalue'):
    w(f'ruler/{t}/validation_4096.jsonl', [dict(index=i, context='the cat sat', query='cat', type_needle_v='numbers', outputs=['7']) for i in range(3)])
w('json_kv/test_k50_dep6.jsonl', [dict(context='{\"a\": \"b\"}', question='\"a\"', answer='b', demos=[]) for _ in range(3)])
"
cp -r hd hd_utf && printf '{"context": "x", "question": "\xff\xfe", "answer": "b"}\n' >> hd_utf/json_kv/test_k50_dep6.jsonl
case_ '`eval --suite helmet-data` whose JSON KV file ends in a non-UTF-8 line' $A eval hfh --suite helmet-data --helmet-data hd_utf --helmet-data-categories recall --lengths 256 --no-progress
cp -r hd hd_gold && $PY -c "
import json, pathlib
p = pathlib.Path('hd_gold/ruler/niah_multivalue/validation_4096.jsonl')
rows = [json.loads(x) for x in p.read_text().splitlines()]; rows[1]['outputs'] = ['7', '']
p.write_text(''.join(json.dumps(r) + '\n' for r in rows))"
case_ '`eval --suite helmet-data` with a blank gold among a record'"'"'s answers' $A eval hfh --suite helmet-data --helmet-data hd_gold --helmet-data-categories recall --lengths 256 --no-progress
case_ '`eval --suite lm-eval:ruler,helmet-data` without --helmet-data (exit 2 = nothing written)' bash -c "$A eval hfh --suite lm-eval:ruler,helmet-data --lengths 256 --out ev_two --no-progress; rc=\$?; if [ \$rc = 2 ] && [ ! -e ev_two ]; then exit 2; fi; echo 'a suite ran before the refusal' >&2; exit \$rc"
case_ '`eval --suite lm-eval:ruler,longpl` (a later suite misspelt; exit 2 = nothing written)' bash -c "$A eval hfh --suite lm-eval:ruler,longpl --lengths 256 --out ev_typo --no-progress; rc=\$?; if [ \$rc = 2 ] && [ ! -e ev_typo ]; then exit 2; fi; echo 'a suite ran before the refusal' >&2; exit \$rc"
rm -rf hfh_tok && cp -r hfh hfh_tok && head -c 40 hfh/tokenizer_config.json > hfh_tok/tokenizer_config.json
case_ '`eval --suite lm-eval:ruler` on a model whose tokenizer_config.json is cut short' $A eval hfh_tok --suite lm-eval:ruler --lengths 256 --no-progress
touch hd_file
pool "name: x\ntrain: {max_steps: 2}\neval: {tasks: [mqar], harness: {helmet_data: {path: hd_file}}}\nruns: [{name: A}]\n"; case_ 'pool `eval.harness.helmet_data.path` a file (at validation)' $A pool show p.yaml
pool "name: x\ntrain: {max_steps: 2}\neval: {tasks: [mqar], harness: {helmet_data: {path: $PWD/hd_gold, categories: [recall], lengths: [4096]}}}\nruns: [{name: A}]\n"; case_ 'pool whose HELMET data has a blank gold (at validation)' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\neval: {tasks: [mqar], harness: {ruler: {tasks: [ruler_qa_squad], allow_download: true}}}\nruns: [{name: A}]\n'
case_ '`run` a pool whose RULER task downloads, without --allow-download (exit 2 = nothing written)' bash -c "$A run p.yaml --out dl_pool --no-progress; rc=\$?; if [ \$rc = 2 ] && [ ! -e dl_pool ]; then exit 2; fi; echo 'the pool started' >&2; exit \$rc"
# ---- stage checks run at validation: attention analyses, extension batches, RULER lengths
pool 'name: x\nlong_ctx: 64\ntrain: {max_steps: 2}\nextension: {length: 48}\nruns: [{name: A, model: {max_seq_len: 32}}]\n'; case_ 'pool whose attention analysis length holds no retrieval needle (at validation)' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nattention: {bos_id: 5000}\nruns: [{name: A}]\n'; case_ 'pool `attention.bos_id` outside the model vocabulary (at validation)' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\nextension: {name: ntk, global_batch_tokens: 3072, micro_batch_size: 2}\nruns: [{name: A}]\n'; case_ 'pool extension whose batch does not split into micro-batches (at validation)' $A pool show p.yaml
pool 'name: x\ntrain: {max_steps: 2}\neval: {tasks: [mqar], lengths: [32], base: false, harness: {ruler: {tasks: [niah_single_1]}}}\nruns: [{name: A}]\n'; case_ 'pool RULER at eval lengths below 64 (at validation)' $A pool show p.yaml
pool 'name: x\ndata: {synthetic: {}}\ntrain: {max_steps: 2}\nattention: {enabled: false}\nruns: [{name: A}]\n'; case_ 'pool on the synthetic stream that evaluates (no tokenizer; at validation)' $A pool show p.yaml
# ---- end of cases
echo
echo "summary: $((N_NAMED + N_TRACE + N_ACCEPTED + N_HANG + N_OTHER)) cases: $N_NAMED named errors (exit 2), $N_TRACE tracebacks, $N_ACCEPTED accepted (exit 0), $N_HANG hangs (killed after ${T} s), $N_OTHER other exits"
