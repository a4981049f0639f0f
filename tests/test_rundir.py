"""``archpool.rundir``: what each kind of path resolves to, a run's extended model vs its final checkpoint,
the typed run and extension records, and the named errors for paths that are none of these."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from archpool.errors import CheckpointError
from archpool.model import Decoder, ModelConfig
from archpool.model.checkpoint import save_checkpoint
from archpool.rundir import (
    ExtensionRecord,
    RunRecord,
    checkpoint_candidates,
    is_archpool_checkpoint,
    pool_run_dir,
    resolve_target,
    run_dir_final,
)
from archpool.train.config import ExtensionConfig, TrainConfig
from archpool.train.extension_plan import plan_extension

REPO = Path(__file__).resolve().parents[1]
DATA = {"synthetic": {}}


def _cfg() -> ModelConfig:
    return ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32, init_std=0.1)


def _pretrain_record() -> dict:
    return {"kind": "pretrain", "model": _cfg().to_dict(), "data": DATA, "train": {"seq_len": 32}, "extension": []}


def _extension_record(source: Path, length: int = 64) -> dict:
    """A record as ``archpool extend`` writes it: the extension section and the extended model's config."""
    ext = ExtensionConfig.from_dict({"recipe": "ntk", "length": length, "tokens": 256})
    train = TrainConfig.from_dict({"max_steps": 4, "global_batch_tokens": 128, "micro_batch_size": 2})
    plan = plan_extension(_cfg(), train, ext, "final")
    return {
        "kind": "extension",
        "extension": ext.to_dict(),
        "source": str(source),
        "model": plan.model.to_dict(),
        "data": DATA,
        "train": plan.train.to_dict(),
    }


def _run(root: Path, record: dict) -> Path:
    """A run directory with a final checkpoint and ``record`` as its run record."""
    save_checkpoint(Decoder(_cfg(), seed=1), run_dir_final(root))
    (root / "run_config.json").write_text(json.dumps(record))
    return root


def _hf_dir(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    return root


# ---------------------------------------------------------------------------------------------- kinds of path
def test_a_bare_checkpoint_has_no_run(tmp_path):
    save_checkpoint(Decoder(_cfg()), tmp_path / "ckpt")
    t = resolve_target(tmp_path / "ckpt")
    assert (t.kind, t.checkpoint, t.run_dir, t.record) == ("checkpoint", tmp_path / "ckpt", None, None)
    assert t.description == "checkpoint ckpt" and t.data_cfg is None and t.record_path is None


@pytest.mark.parametrize("where", [("milestones", "final"), ("milestones", "step_000002"), ("ckpt", "step_000002")])
def test_a_milestone_or_rolling_checkpoint_finds_its_run_record(tmp_path, where):
    run = _run(tmp_path / "run", _pretrain_record())
    save_checkpoint(Decoder(_cfg()), run.joinpath(*where))
    t = resolve_target(run.joinpath(*where))
    assert (t.kind, t.checkpoint, t.run_dir) == ("checkpoint", run.joinpath(*where), run)
    assert t.record.kind == "pretrain" and t.data_cfg == DATA and t.record_path == run / "run_config.json"
    assert t.description == f"checkpoint {where[1]} of run {run}"


def test_a_run_directory_resolves_to_its_final_checkpoint(tmp_path):
    run = _run(tmp_path / "run", _pretrain_record())
    for extended in (False, True):  # no extension: the same either way
        t = resolve_target(run, extended=extended)
        assert (t.kind, t.path, t.checkpoint, t.run_dir) == ("run", run, run / "milestones" / "final", run)
    assert resolve_target(run).description == "final pretraining milestone"
    assert resolve_target(run, extended=True).description == "final pretraining milestone (no extension found)"


def test_a_run_with_an_extension_resolves_to_it_only_when_extended(tmp_path):
    run = _run(tmp_path / "run", _pretrain_record())
    ext = _run(run / "extend" / "ntk", _extension_record(run_dir_final(run)))
    t = resolve_target(run)  # eval, attention, features: the run they are given
    assert (t.checkpoint, t.run_dir, t.record.kind) == (run / "milestones" / "final", run, "pretrain")
    t = resolve_target(run, extended=True)  # export-hf, archpool.load: the last model trained
    assert (t.kind, t.path, t.checkpoint, t.run_dir) == ("run", run, ext / "milestones" / "final", ext)
    assert t.record.kind == "extension" and t.description == "extended model [ntk to 64 tokens]"
    t = resolve_target(ext)  # the extension's own directory
    assert (t.kind, t.checkpoint, t.run_dir, t.description) == (
        "run",
        run_dir_final(ext),
        ext,
        "extended model [ntk to 64 tokens]",
    )


def test_several_extensions_need_a_name(tmp_path):
    run = _run(tmp_path / "run", _pretrain_record())
    for name, length in (("ntk", 64), ("ntk_128", 128)):
        _run(run / "extend" / name, _extension_record(run_dir_final(run), length))
    with pytest.raises(CheckpointError, match="several extended models"):
        resolve_target(run, extended=True)
    assert resolve_target(run, extended=True, extension="ntk_128").run_dir == run / "extend" / "ntk_128"
    with pytest.raises(CheckpointError, match="no single extension 'yarn'"):
        resolve_target(run, extended=True, extension="yarn")
    (run / "extend" / "ntk" / "milestones" / "final" / "config.json").unlink()  # unfinished: not a candidate
    assert resolve_target(run, extended=True).run_dir == run / "extend" / "ntk_128"


def test_a_pool_run_resolves_through_the_callers_lookup(tmp_path):
    out = tmp_path / "pool"
    pool_run_dir(out, "r1").mkdir(parents=True)
    (out / "plan.json").write_text("{}")
    stage = _run(out / "stages" / "pretrain" / "k1", _pretrain_record())
    seen = []

    def lookup(run_dir: Path) -> tuple[Path, str]:
        seen.append(run_dir)
        return stage, "pool run 'r1', final pretraining milestone (node n1)"

    t = resolve_target(out / "runs" / "r1", extended=True, pool_run=lookup)
    assert seen == [out / "runs" / "r1"]
    assert (t.kind, t.path, t.checkpoint, t.run_dir) == ("run", out / "runs" / "r1", run_dir_final(stage), stage)
    assert t.description == "pool run 'r1', final pretraining milestone (node n1)"
    with pytest.raises(CheckpointError, match="neither a run directory"):  # without a lookup: no target
        resolve_target(out / "runs" / "r1")


def test_a_hugging_face_directory_and_tokenizers(tmp_path):
    hf = _hf_dir(tmp_path / "hf")
    t = resolve_target(hf)
    assert (t.kind, t.checkpoint, t.run_dir, t.tokenizer_file) == ("hf", hf, None, None)
    (hf / "tokenizer.json").write_text("{}")
    assert resolve_target(hf).tokenizer_file == hf / "tokenizer.json"
    run = _run(tmp_path / "run", _pretrain_record())
    (run / "tokenizer.json").write_text("{}")  # beside the run, not the checkpoint
    assert resolve_target(run).tokenizer_file == run / "tokenizer.json"
    assert not is_archpool_checkpoint(hf) and is_archpool_checkpoint(run_dir_final(run))


# ---------------------------------------------------------------------------------------------- errors
def test_paths_that_are_no_target_give_named_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no such run, checkpoint or model directory"):
        resolve_target(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"neither a run directory .* nor a Hugging Face model directory"):
        resolve_target(tmp_path / "empty")
    (tmp_path / "pending").mkdir()
    (tmp_path / "pending" / "run_config.json").write_text(json.dumps(_pretrain_record()))
    with pytest.raises(CheckpointError, match="run has no final checkpoint yet"):
        resolve_target(tmp_path / "pending")
    (tmp_path / "pending" / "run_config.json").write_text("{broken")
    with pytest.raises(CheckpointError, match=r"run_config.json: unreadable run record"):
        resolve_target(tmp_path / "pending")
    (tmp_path / "pending" / "run_config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match=r"unreadable run record \(not a JSON object\)"):
        resolve_target(tmp_path / "pending")


def test_callers_keep_their_error_types(tmp_path):
    from archpool.errors import ConfigError
    from archpool.model.features import features

    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="target: .*neither a run directory"):
        features(str(tmp_path / "empty"))
    with pytest.raises(CheckpointError, match="nor a Hugging Face model directory"):
        import archpool

        archpool.load(tmp_path / "empty")


# ---------------------------------------------------------------------------------------------- records
def test_records_parse_into_typed_dataclasses(tmp_path):
    pre = RunRecord.from_dict(_pretrain_record())
    assert (pre.kind, pre.data, pre.train_seq_len, pre.extension, pre.recipe_label) == ("pretrain", DATA, 32, None, "")
    assert set(pre.config_sections) == {"model", "data", "train", "extension"}
    rec = _extension_record(tmp_path / "src")
    (tmp_path / "run_config.json").write_text(json.dumps(rec))
    ext = RunRecord.from_file(tmp_path / "run_config.json")
    assert ext.kind == "extension" and ext.raw == rec
    assert ext.extension == ExtensionRecord(
        recipe="ntk", name=rec["extension"]["name"], length=64, pretrain_seq_len=32, source=str(tmp_path / "src")
    )
    assert ext.recipe_label == " [ntk to 64 tokens]"
    assert RunRecord.from_dict({}).data is None and RunRecord.from_dict({}).train_seq_len is None


def test_checkpoint_candidates_follow_the_layout(tmp_path):
    assert checkpoint_candidates(tmp_path, "final") == [tmp_path / "milestones" / "final"]
    assert checkpoint_candidates(tmp_path, "step_000004") == [
        tmp_path / "milestones" / "step_000004",
        tmp_path / "ckpt" / "step_000004",
        Path("step_000004"),
        tmp_path / "step_000004",
    ]


def test_rundir_imports_neither_torch_nor_a_stage():
    code = "import sys, archpool.rundir; print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('archpool.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True, timeout=120)
    assert out.stdout.strip() == "['archpool.errors', 'archpool.io', 'archpool.rundir', 'archpool.version']"
