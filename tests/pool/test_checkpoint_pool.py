"""Checkpoint pools: runs that name existing models. Design columns from their configs, stage keys from
their bytes, no training nodes, Hub names refused without --allow-download, and (slow) a pool of four
locally trained models in archpool and Hugging Face formats run end to end, then cached."""

from __future__ import annotations

import csv
import shutil
import time

import pytest
import yaml

from archpool.errors import ConfigError
from archpool.model.config import ModelConfig
from archpool.pool.checkpoints import CheckpointRunSpec, check_downloads
from archpool.pool.graph import read_events
from archpool.pool.plan import build_plan, read_plan, write_plan
from archpool.pool.spec import load_pool
from tests.helpers.pool import run_cli


def _models(root):
    """Random-init tiny models: an Olmo 3-style archpool checkpoint pretrained at 64 and its NTK
    extension to 256 (the extension record says 64), and a Llama-style HF export with its twin."""
    from archpool.model.checkpoint import save_checkpoint
    from archpool.model.hf import export_hf
    from archpool.model.model import Decoder
    from archpool.train.config import ExtensionConfig, TrainConfig
    from archpool.train.extend import plan_extension

    olmo = ModelConfig.preset("olmo3", size="tiny", max_seq_len=64, window=16)
    train = TrainConfig.from_dict({"seq_len": 64, "max_steps": 10, "global_batch_tokens": 1024})
    olmo_ext = plan_extension(olmo, train, ExtensionConfig.from_dict({"recipe": "ntk", "length": 256}), "final").model
    llama = ModelConfig.preset("llama3", size="tiny", max_seq_len=128)
    paths = {}
    for name, cfg in (("olmo_pre", olmo), ("olmo_ext", olmo_ext)):
        paths[name] = save_checkpoint(Decoder(cfg), root / name)
    paths["llama_pre"] = export_hf(Decoder(llama), root / "llama_pre", require_tokenizer=False)
    paths["llama_ext"] = export_hf(Decoder(llama.replace(max_seq_len=512)), root / "llama_ext", require_tokenizer=False)
    return paths, olmo, llama


def _pool(tmp_path, runs, **over):
    spec = {"name": "ck", "long_ctx": 128, "runs": runs, **over}
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_design_columns_come_from_the_models_configs(tmp_path):
    paths, olmo, llama = _models(tmp_path)
    pool = load_pool(
        _pool(
            tmp_path,
            [
                {"name": "olmo", "checkpoint": str(paths["olmo_ext"]), "pretrained": "olmo_pre"},  # relative to the pool file
                {"name": "llama", "checkpoint": str(paths["llama_ext"]), "pretrained": str(paths["llama_pre"])},
                {"name": "llama_alone", "checkpoint": str(paths["llama_ext"]), "design": {"pretrain_ctx": 128}},
            ],
        )
    )
    rows = {r.name: r.row() for r in pool.runs}
    o, lm = rows["olmo"], rows["llama"]
    assert (o["qk_norm"], o["norm"], o["swa"], o["window"]) == ("layerwise", "post", 1, 16)
    assert (o["n_kv_heads"], o["n_heads"], o["d_ff"], o["n_layers"]) == (olmo.n_kv_heads, olmo.n_heads, olmo.d_ff, olmo.n_layers)
    assert o["pretrain_ctx"] == 64  # the extension record / the twin, not the extended 256
    assert (lm["qk_norm"], lm["norm"], lm["swa"]) == ("none", "pre", 0)
    assert (lm["n_kv_heads"], lm["n_heads"], lm["d_model"]) == (llama.n_kv_heads, llama.n_heads, llama.d_model)
    assert lm["pretrain_ctx"] == 128  # the HF twin's context, not the extended 512
    assert rows["llama_alone"]["pretrain_ctx"] == 128  # overridden in the entry
    assert pool.run("llama").params == llama.num_params()
    short = pool.short_ctx  # 64 of the pool's 128
    assert pool.run("olmo").feature_count(short) == 3  # QK-norm, SWA, short context
    assert pool.run("llama").feature_count(short) == 1  # GQA


def test_design_of_a_plain_hf_directory_comes_from_config_json(tmp_path):
    """Without archpool's own config beside it: the HF config through features, params from the weights."""
    paths, _, llama = _models(tmp_path)
    (paths["llama_pre"] / "archpool_config.json").unlink()
    pool = load_pool(_pool(tmp_path, [{"name": "hf", "checkpoint": str(paths["llama_pre"])}]))
    row = pool.run("hf").row()
    assert (row["qk_norm"], row["norm"], row["n_kv_heads"], row["pretrain_ctx"]) == ("none", "pre", llama.n_kv_heads, 128)
    assert (row["d_ff"], row["d_model"]) == (llama.d_ff, llama.d_model)
    assert pool.run("hf").params == llama.num_params()


def test_plan_has_only_eval_and_attention_nodes_keyed_by_bytes(tmp_path):
    paths, _, _ = _models(tmp_path)
    copy = tmp_path / "elsewhere" / "llama_ext"
    shutil.copytree(paths["llama_ext"], copy)
    runs = [
        {"name": "a", "checkpoint": str(paths["llama_ext"]), "pretrained": str(paths["llama_pre"])},
        {"name": "b", "checkpoint": str(copy), "pretrained": str(paths["llama_pre"])},
    ]
    pool = load_pool(_pool(tmp_path, runs))
    nodes = build_plan(pool)
    assert {n.stage for n in nodes} == {"eval", "attention"}
    assert sorted(n.id for n in nodes if n.run == "a") == ["attention:a", "attention:a:base", "eval:a", "eval:a:base"]
    keys = {n.id: n.key for n in nodes}
    assert keys["eval:a"] == keys["eval:b"]  # same bytes at another path: one cached result
    # one changed byte in the weights: a new key
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    keys2 = {n.id: n.key for n in build_plan(load_pool(_pool(tmp_path, runs)))}
    assert keys2["eval:b"] != keys["eval:b"] and keys2["eval:a"] == keys["eval:a"]
    # plan.json round trip keeps the checkpoint runs
    write_plan(tmp_path / "out", pool, nodes)
    spec, _ = read_plan(tmp_path / "out")
    assert isinstance(spec.run("a"), CheckpointRunSpec) and spec.run("a").row() == pool.run("a").row()


def test_hub_names_need_design_and_allow_download(tmp_path):
    with pytest.raises(ConfigError, match=r"runs\[x\]\.design\.swa"):
        load_pool(_pool(tmp_path, [{"name": "x", "checkpoint": "someorg/model@v1"}]))
    pool = load_pool(
        _pool(tmp_path, [{"name": "x", "checkpoint": "allenai/G_pre_8kv_8k_14k@step1", "published": "G_pre_8kv_8k_14k"}])
    )
    with pytest.raises(ConfigError, match="--allow-download"):
        check_downloads(pool.runs, allow=False)
    check_downloads(pool.runs, allow=True)
    with pytest.raises(ConfigError, match=r"runs\[y\]\.checkpoint"):
        load_pool(_pool(tmp_path, [{"name": "y", "checkpoint": "./no/such/dir"}]))


def test_run_without_allow_download_is_a_one_line_error(tmp_path):
    path = _pool(tmp_path, [{"name": "x", "checkpoint": "allenai/G_pre_8kv_8k_14k@step1", "published": "G_pre_8kv_8k_14k"}])
    for pool in (str(path), "olmpool-released"):
        r = run_cli("run", pool, "--out", str(tmp_path / "out"), "--no-progress")
        assert r.returncode != 0
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "--allow-download" in lines[0], r.stderr
        assert not (tmp_path / "out" / "stages").exists()


def test_olmpool_released_lists_26_models_at_both_revisions_with_published_scores():
    from archpool.paper.table import paper_runs, parse_released_name

    pool = load_pool("olmpool-released")
    assert len(pool.runs) == 26
    published = {r.name: r for r in paper_runs()}
    for run in pool.runs:
        refs = run.refs
        assert refs["final"].repo == refs["pretrained"].repo == f"allenai/{run.name}"
        assert (refs["pretrained"].revision, refs["final"].revision) == ("step34000", "longcontext-step2385")
        paper = published[run.name]
        row = run.row()
        assert row["paper_helmet_32k"] == paper.scores["helmet_32k"]
        assert (row["swa"], row["n_kv_heads"], row["pretrain_ctx"]) == (
            paper.design["swa"],
            paper.design["n_kv_heads"],
            paper.design["pretrain_ctx"],
        )
        assert row["window"] == (4096 if parse_released_name(run.name)["swa"] else 0)
    g = pool.run("G_pre_8kv_4k_14k").row()
    assert "paper_ruler_32k" not in g and g["paper_helmet_32k"] == 50.2  # the known RULER error left out
    nodes = build_plan(pool)
    assert len(nodes) == 26 * 4 and {n.stage for n in nodes} == {"eval", "attention"}


@pytest.mark.slow
def test_checkpoint_pool_of_trained_models_end_to_end_and_cached(tmp_path):
    from tests.helpers.checkpoints import export, train_pair

    models = tmp_path / "models"
    runs = []
    for arch in ("llama", "olmo"):
        pre, ext = train_pair(models, arch)
        runs.append({"name": f"{arch}_archpool", "checkpoint": str(ext), "pretrained": str(pre)})
        hf_pre, hf_ext = export(pre, models / f"{arch}_hf_pre", pretrained=True), export(ext, models / f"{arch}_hf_ext")
        runs.append({"name": f"{arch}_hf", "checkpoint": str(hf_ext), "pretrained": str(hf_pre)})
    texts = sorted((models / "data" / "corpus").glob("doc0*.txt"))[:4]
    spec = dict(
        long_ctx=32,
        texts=[str(t) for t in texts],
        eval=dict(tasks=["kv_recall"], n_samples=4, length_ratios=[2], base_length_ratios=[2]),
        attention=dict(sink_samples=4, long_samples=2, queries=16, retrieval=False),
        report=dict(target="kv_recall_lp@64", short_ctx=16),
    )
    path = _pool(tmp_path, runs, **spec)
    out = tmp_path / "out"
    r = run_cli("run", str(path), "--out", str(out), "--no-progress", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    rows = {row["run"]: row for row in csv.DictReader((out / "results.csv").read_text().splitlines())}
    assert len(rows) == 4 and all(row["state"] == "done" for row in rows.values())
    for arch in ("llama", "olmo"):
        a, h = rows[f"{arch}_archpool"], rows[f"{arch}_hf"]
        assert a["kv_recall_lp@64"] and a["base_kv_recall_lp@64"] and a["attn_sink_rate"] and a["base_attn_sink_rate"]
        assert float(a["kv_recall_lp@64"]) == pytest.approx(float(h["kv_recall_lp@64"]), abs=1e-4)  # one model, two formats
        attn = [k for k in a if k.startswith(("attn_", "base_attn_")) and a[k] not in ("", None)]
        assert len(attn) >= 6 and all(h[k] != "" for k in attn)
        for k in attn:  # one model, two formats, one text: the attention statistics agree
            assert float(a[k]) == pytest.approx(float(h[k]), abs=2e-3), k
        assert a["pretrain_ctx"] == h["pretrain_ctx"] == "32"
    assert rows["olmo_hf"]["qk_norm"] == "layerwise" and rows["llama_hf"]["feature_count"] == "1"
    assert (out / "report" / "report.html").is_file()
    stages = {e["stage"] for e in read_events(out) if e["kind"] == "done"}
    assert stages == {"eval", "attention"}
    t0 = time.time()
    r = run_cli("run", str(path), "--out", str(out), "--no-progress", timeout=600)
    assert r.returncode == 0
    cached = [e for e in read_events(out) if e["kind"] == "run_cached" and e["t"] >= t0]
    assert len(cached) == 4


def _fake_hub_cache(cache, repo: str, revision: str, src) -> None:
    """A Hugging Face cache entry for ``repo@revision`` holding a copy of ``src`` (no network)."""
    org, name = repo.split("/")
    base = cache / f"models--{org}--{name}"
    commit = "0" * 40
    shutil.copytree(src, base / "snapshots" / commit)
    (base / "refs").mkdir(parents=True)
    (base / "refs" / revision).write_text(commit)


@pytest.mark.slow
def test_hub_checkpoint_like_the_released_ones_is_fixed_before_measuring(tmp_path):
    """A Hub model that ships custom code, no sliding window and interleaved q/k rows (the pitfalls reported
    for the released suite), from a local Hub cache: converted to transformers' own code with the window
    from the design and the RoPE layout from the check, it measures exactly as its local original."""
    import json

    from safetensors.torch import load_file, save_file

    from archpool.model.rope_layout import convert_state
    from tests.helpers.checkpoints import export, probe_texts, train_pair

    pre, _ = train_pair(tmp_path / "models", "olmo")
    local = export(pre, tmp_path / "models" / "olmo_hf", pretrained=True)
    released = tmp_path / "released"
    shutil.copytree(local, released)
    (released / "archpool_config.json").unlink()
    config = json.loads((released / "config.json").read_text())
    config.pop("sliding_window"), config.pop("layer_types")
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_olmo.OlmoForCausalLM"}
    (released / "config.json").write_text(json.dumps(config))
    state = load_file(str(released / "model.safetensors"))
    save_file(convert_state(state, config, to_half=False), str(released / "model.safetensors"), metadata={"format": "pt"})
    cache = tmp_path / "hub"
    _fake_hub_cache(cache, "testorg/olmo_tiny", "v1", released)
    design = {"swa": 1, "window": 8, "qk_norm": "layerwise", "norm": "post", "n_kv_heads": 4, "n_heads": 4, "pretrain_ctx": 32}
    text = tmp_path / "probe.txt"
    text.write_text(probe_texts()[0])
    runs = [{"name": "hub", "checkpoint": "testorg/olmo_tiny@v1", "design": design}, {"name": "local", "checkpoint": str(local)}]
    spec = dict(
        long_ctx=32,
        texts=[str(text)],
        eval=dict(tasks=["kv_recall"], n_samples=4, length_ratios=[2]),
        attention=dict(enabled=False),
    )
    path = _pool(tmp_path, runs, **spec)
    out = tmp_path / "out"
    env = {"HF_HUB_CACHE": str(cache)}
    r = run_cli("run", str(path), "--out", str(out), "--no-progress", env=env)
    assert r.returncode != 0 and "--allow-download" in r.stderr
    r = run_cli("run", str(path), "--out", str(out), "--no-progress", "--allow-download", env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    rows = {row["run"]: row for row in csv.DictReader((out / "results.csv").read_text().splitlines())}
    metric = next(k for k in rows["local"] if k.startswith("kv_recall_lp@"))
    assert rows["hub"][metric] == rows["local"][metric]
    prepared = next((out / "stages" / "eval").glob("*/model/config.json"))
    fixed = json.loads(prepared.read_text())
    assert "auto_map" not in fixed and fixed["sliding_window"] == 8 and fixed["rope_layout"] == "half"


def test_a_mixed_pool_plans_training_only_for_its_trained_runs(tmp_path):
    paths, _, _ = _models(tmp_path)
    runs = [{"name": "trained"}, {"name": "ck", "checkpoint": str(paths["llama_ext"]), "pretrained": str(paths["llama_pre"])}]
    pool = load_pool(_pool(tmp_path, runs, backend="toy_backend", extension=[{"name": "ntk", "steps": 2}]))
    nodes = build_plan(pool)
    by_run = {r: sorted(n.id for n in nodes if n.run == r) for r in ("trained_s0", "ck")}
    assert "pretrain:trained_s0" in by_run["trained_s0"] and "extend:trained_s0:ntk" in by_run["trained_s0"]
    assert by_run["ck"] == ["attention:ck", "attention:ck:base", "eval:ck", "eval:ck:base"]
    assert [n.id for n in nodes if n.run is None] == ["data"]
    assert all(not n.deps for n in nodes if n.run == "ck")
