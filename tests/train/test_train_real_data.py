"""The trainer reads the data stage's prepared store and streams, and resumes them exactly."""

from __future__ import annotations

import shutil

import pytest

from archpool.errors import ConfigError
from archpool.train import checkpoint as ckpt
from archpool.train.config import RunConfig
from archpool.train.trainer import pretrain
from tests.helpers.train import read_losses


def _cfg(data, **train):
    return RunConfig.from_dict(
        {
            "model": {"vocab_size": 320, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 32},
            "data": data,
            "train": {
                "lr": 1e-2,
                "warmup_steps": 2,
                "global_batch_tokens": 256,
                "micro_batch_size": 2,
                "max_steps": 8,
                "log_every": 1,
                "ckpt_every": 4,
                "keep_last": 3,
                "progress": False,
                "intra_doc_mask": True,
                **train,
            },
        }
    )


def test_pretraining_on_the_prepared_store_resumes_its_stream_exactly(tmp_path, data_section):
    full = pretrain(_cfg(data_section), tmp_path / "full")
    assert full.losses[-1] < full.losses[0]
    state = ckpt.load_train_state(tmp_path / "full" / "ckpt" / ckpt.step_name(4))
    stream = state["data"]["streams"][0]
    assert stream["kind"] == "pretrain" and stream["tokens"] == 4 * 256 and stream["tokenizer_hash"]

    part = tmp_path / "part"
    shutil.copytree(tmp_path / "full", part)
    shutil.rmtree(part / "ckpt" / ckpt.step_name(8))
    shutil.rmtree(part / "milestones" / "final")
    resumed = pretrain(_cfg(data_section), part)
    assert resumed.resumed_from == 4 and read_losses(part) == full.losses


def test_extension_reads_the_long_document_mix(tmp_path, data_section):
    from archpool.train.config import ExtensionConfig
    from archpool.train.extend import extend

    cfg = _cfg(data_section)
    pretrain(cfg, tmp_path / "run")
    result = extend(tmp_path / "run", ExtensionConfig(recipe="yarn", length=128, tokens=1024, micro_batch_size=1), cfg)
    state = ckpt.load_train_state(tmp_path / "run" / "extend" / "yarn" / "milestones" / "final")
    assert state["data"]["streams"][0]["kind"] == "extension" and state["data"]["streams"][0]["seq_len"] == 128
    assert len(result.losses) == 4


def test_a_model_vocabulary_smaller_than_the_tokenizer_is_refused(tmp_path, data_section):
    cfg = _cfg(data_section)
    cfg.model["vocab_size"] = 128
    with pytest.raises(ConfigError, match="vocab_size"):
        pretrain(cfg, tmp_path / "run")
