"""``EvalRequest``: one validated request per evaluation; the pool's eval stage and ``evaluate`` agree."""

import json
from pathlib import Path

import pytest
import torch

from archpool.errors import ConfigError
from archpool.eval.api import EvalRequest, evaluate
from archpool.model import Decoder, ModelConfig


@pytest.mark.parametrize(
    ("kw", "field", "text"),
    [
        ({"suites": ["rulerr"]}, "suites", "unknown suite 'rulerr'"),
        ({"tasks": ["kv_recal"]}, "tasks", "unknown task 'kv_recal'"),
        ({"lengths": [0, 64]}, "lengths", "must be positive integers, got 0"),
        ({"n_samples": 0}, "n_samples", "must be positive integers"),
        ({"modes": ["both"]}, "modes", "unknown scoring mode 'both'"),
        ({"categories": ["recal"]}, "categories", "unknown HELMET category 'recal'"),
        ({"longppl_k": 0}, "longppl_k", "must be a positive integer"),
    ],
)
def test_request_validation_names_the_field(kw, field, text):
    with pytest.raises(ConfigError, match=f"^{field}: .*{text}") as e:
        EvalRequest(**kw)
    assert e.value.field == field


def test_request_expands_suites_and_normalises_sequences(tmp_path):
    r = EvalRequest(suites="tiny,ruler", tasks=["kv_recall"], lengths=[256, 128], modes="ll", out_dir=str(tmp_path))
    assert r.suites == ("tiny", "ruler") and r.tasks == ("kv_recall",) and r.modes == ("ll",)
    assert r.lengths == (256, 128) and r.out_dir == tmp_path
    assert EvalRequest().suites == ("tiny", "mqar", "ruler", "helmet", "longppl", "short")
    assert EvalRequest(suites=["short"]).suite_tasks() == []


@pytest.fixture(scope="module")
def checkpoint(bpe, tmp_path_factory):
    from archpool.model.checkpoint import save_checkpoint

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=bpe.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=128)
    ckpt = tmp_path_factory.mktemp("evalreq") / "ckpt"
    save_checkpoint(Decoder(cfg, seed=1), ckpt)
    bpe.save(ckpt)
    return ckpt


def _timeless(x):
    """``x`` without wall-clock fields."""
    if isinstance(x, dict):
        return {k: _timeless(v) for k, v in x.items() if k != "wall_s"}
    if isinstance(x, list):
        return [_timeless(v) for v in x]
    return x


def _stage(tmp_path: Path, checkpoint: Path, settings: dict) -> Path:
    from archpool.pool.graph import StageContext
    from archpool.pool.stages import eval as stage

    out = tmp_path / "stage"
    from archpool.pool.nodes import EvalConfig
    from archpool.pool.sections import EvalSettings

    config = EvalConfig(eval=EvalSettings.from_dict(settings), phase="base", seq_len=128, long_ctx=128)
    ctx = StageContext(out, config, {"model": checkpoint}, {}, {}, None, None, 1, print)
    stage.run(ctx)
    return out


SETTINGS = {
    "tasks": ["kv_recall", "mqar"],
    "task_params": {"mqar": {"buckets": [64]}},
    "suites": ["short"],
    "n_samples": 2,
    "base_lengths": [128],
}


def test_evaluate_matches_the_stage(checkpoint, tmp_path):
    from archpool.eval.target import load_target
    from archpool.pool.stages.eval import STAGE_KEYS

    out = _stage(tmp_path, checkpoint, SETTINGS)
    request = EvalRequest(
        suites=SETTINGS["suites"],
        tasks=SETTINGS["tasks"],
        lengths=[128],
        modes=["ll"],
        n_samples=2,
        task_params=SETTINGS["task_params"],
        out_dir=tmp_path / "direct",
    )
    res = evaluate(load_target(checkpoint), request, progress=False)
    staged = json.loads((out / "eval.json").read_text())
    assert set(staged) == {"tasks", "aggregate", "short"}
    assert _timeless(staged) == _timeless(json.loads(json.dumps({k: res[k] for k in STAGE_KEYS if k in res})))
    assert [(r["task"], r["length"], r["mode"]) for r in res["tasks"]] == [("kv_recall", 128, "ll"), ("mqar", 128, "dense")]
    files = sorted(p.relative_to(out / "eval") for p in (out / "eval").rglob("*.json"))
    assert files == sorted(p.relative_to(tmp_path / "direct") for p in (tmp_path / "direct").rglob("*.json"))
    # results.json and report.md hold the suites alone: here no task suite, so no task rows
    assert json.loads((out / "eval" / "results.json").read_text())["tasks"] == []


def test_a_task_list_alone_writes_only_task_files(checkpoint, tmp_path):
    out = _stage(tmp_path, checkpoint, {**SETTINGS, "suites": None, "task_params": {}, "tasks": ["kv_recall"]})
    assert set(json.loads((out / "eval.json").read_text())) == {"tasks", "aggregate"}
    assert not (out / "eval" / "results.json").exists() and not (out / "eval" / "report.md").exists()
    assert (out / "eval" / "tasks" / "kv_recall" / "128_ll.json").is_file()
