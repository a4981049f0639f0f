"""The Trainer's callbacks: the hooks a caller's callback receives, TensorBoard and W&B logging (with
stand-in modules: neither package is needed), and the ``train.wandb`` option."""

from __future__ import annotations

import json
import shutil
import sys
import types
import warnings
from typing import ClassVar

import pytest

from archpool.errors import ConfigError
from archpool.rundir import RUN_METRICS, RUN_RECORD, run_dir_final
from archpool.train import checkpoint as ckpt
from archpool.train.callbacks import Callback, StepResult
from archpool.train.config import RunConfig, TrainConfig, WandbConfig
from archpool.train.trainer import Trainer, pretrain
from tests.helpers.train import tiny_run


class Recorder(Callback):
    """Every hook call, in order: (hook, step)."""

    def __init__(self, run_dir=None):
        self.run_dir, self.calls, self.rows, self.results, self.saved = run_dir, [], [], [], []

    def on_restore(self, start_step):
        self.calls.append(("restore", start_step))

    def on_train_start(self, start_step):
        self.calls.append(("start", start_step))

    def on_log(self, step, metrics):
        self.calls.append(("log", step))
        self.rows.append(metrics)

    def on_step_end(self, step, result):
        self.calls.append(("step", step))
        self.results.append(result)
        if self.run_dir is not None and (self.run_dir / "ckpt" / ckpt.step_name(step)).is_dir():
            self.saved.append(step)

    def on_train_end(self, step):
        self.calls.append(("end", step))

    def close(self):
        self.calls.append(("close", None))


def _train(run_dir, callbacks=(), **train):
    rc = RunConfig.from_dict(tiny_run(**train))
    return Trainer(run_dir, rc.model_config(), rc.train, rc.data, callbacks=callbacks).run()


def _rows(run_dir):
    return [json.loads(line) for line in (run_dir / RUN_METRICS).read_text().splitlines()]


def test_a_callback_receives_every_hook_in_order_with_the_step_numbers(tmp_path):
    run = tmp_path / "run"
    train = {"max_steps": 6, "log_every": 2, "ckpt_every": 4, "keep_last": 3}
    rec = Recorder(run)
    result = _train(run, [rec], **train)
    steps = [c for i in range(1, 7) for c in ([("log", i)] if i % 2 == 0 else []) + [("step", i)]]
    assert rec.calls == [("restore", 0), ("start", 0), *steps, ("end", 6), ("close", None)]
    assert rec.rows == _rows(run)  # the rows metrics.jsonl holds, as they were written
    assert all(isinstance(r, StepResult) for r in rec.results) and [r.loss for r in rec.results] == result.losses
    assert rec.saved == [4, 6]  # a caller's callback runs after the step's checkpoint is written

    # resumed from step 4: the hooks start there; the metrics log was cut back to step 4 first
    shutil.rmtree(run_dir_final(run))
    shutil.rmtree(run / "ckpt" / ckpt.step_name(6))
    rec = Recorder()
    _train(run, [rec], **train)
    assert rec.calls == [("restore", 4), ("start", 4), ("step", 5), ("log", 6), ("step", 6), ("end", 6), ("close", None)]
    assert [r["step"] for r in _rows(run)] == [2, 4, 6]

    # the last step already checkpointed (a damaged final milestone): restored, rebuilt, no step
    shutil.rmtree(run_dir_final(run))
    rec = Recorder()
    with pytest.warns(UserWarning, match="rebuilt from"):
        again = _train(run, [rec], **train)
    assert again.already_complete and rec.calls == [("restore", 6), ("close", None)]

    rec = Recorder()
    assert _train(run, [rec], **train).already_complete and rec.calls == []  # a complete run calls no hook


def test_a_failing_callback_stops_the_run_and_every_callback_is_closed(tmp_path):
    class Fails(Callback):
        def on_step_end(self, step, result):
            if step == 2:
                raise RuntimeError("callback failed")

    rec = Recorder()
    with pytest.raises(RuntimeError, match="callback failed"):
        _train(tmp_path / "run", [Fails(), rec], max_steps=4)
    assert rec.calls == [("restore", 0), ("start", 0), ("log", 1), ("step", 1), ("log", 2), ("close", None)]


class _StubWandb(types.ModuleType):
    """A ``wandb`` module that records init / log / finish."""

    def __init__(self):
        super().__init__("wandb")
        self.inits, self.logs, self.finishes = [], [], []

    def init(self, **kwargs):
        self.inits.append(kwargs)

    def log(self, data, step=None):
        self.logs.append((step, data))

    def finish(self, exit_code=None):
        self.finishes.append(exit_code)


def test_wandb_logs_the_metrics_rows_with_the_run_name_and_config(tmp_path, monkeypatch):
    stub = _StubWandb()
    monkeypatch.setitem(sys.modules, "wandb", stub)
    run = tmp_path / "run"
    train = {"max_steps": 5, "log_every": 2, "ckpt_every": 3}
    wandb = {"project": "archpool-tests", "name": "tiny", "mode": "offline"}
    pretrain(RunConfig.from_dict(tiny_run(**train, wandb=wandb)), run)

    record = json.loads((run / RUN_RECORD).read_text())
    assert record["train"]["wandb"] == {"project": "archpool-tests", "entity": None, "name": "tiny", "mode": "offline"}
    assert stub.inits == [
        {
            "project": "archpool-tests",
            "entity": None,
            "name": "tiny",
            "mode": "offline",
            "config": record,
            "dir": str(run),
            "job_type": "pretrain",
        }
    ]
    rows = _rows(run)
    assert [step for step, _ in stub.logs] == [r["step"] for r in rows] == [2, 4, 5]
    for (_, data), row in zip(stub.logs, rows):
        numbers = ("seq_len", "loss", "loss_avg", "grad_norm", "lr", "tokens", "tokens_per_s", "skipped")
        assert data == {f"train/{k}": row[k] for k in numbers}
    assert stub.finishes == [0]

    # resumed with other W&B settings (a logging knob): a new W&B run, named after the run directory,
    # logs the steps after the resumed one
    shutil.rmtree(run_dir_final(run))
    shutil.rmtree(run / "ckpt" / ckpt.step_name(5))
    stub = _StubWandb()
    monkeypatch.setitem(sys.modules, "wandb", stub)
    pretrain(RunConfig.from_dict(tiny_run(**train, wandb={"mode": "online"})), run)
    assert [(i["project"], i["name"], i["mode"]) for i in stub.inits] == [("archpool", "run", "online")]
    assert [step for step, _ in stub.logs] == [4, 5] and stub.finishes == [0]


def test_a_run_that_fails_finishes_its_wandb_run_with_an_error_code(tmp_path, monkeypatch):
    class Fails(Callback):
        def on_step_end(self, step, result):
            raise RuntimeError("callback failed")

    stub = _StubWandb()
    monkeypatch.setitem(sys.modules, "wandb", stub)
    with pytest.raises(RuntimeError, match="callback failed"):
        _train(tmp_path / "run", [Fails()], max_steps=3, wandb={"mode": "offline"})
    assert len(stub.inits) == 1 and [s for s, _ in stub.logs] == [1] and stub.finishes == [1]


def test_wandb_without_the_package_is_a_config_error_saying_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(ConfigError, match=r"^train\.wandb: .*not installed: pip install wandb"):
        pretrain(RunConfig.from_dict(tiny_run(max_steps=2, wandb={"project": "x"})), tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before any work
    # mode: disabled needs no package and logs nothing
    result = pretrain(RunConfig.from_dict(tiny_run(max_steps=2, wandb={"mode": "disabled"})), tmp_path / "off")
    assert result.steps == 2 and len(_rows(tmp_path / "off")) == 2


def test_the_wandb_option_is_validated_and_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"^train\.wandb\.mode: unknown mode 'cloud'; allowed: online, offline, disabled"):
        TrainConfig.from_dict({"max_steps": 1, "wandb": {"mode": "cloud"}})
    with pytest.raises(ConfigError, match=r"^train\.wandb\.projet: unknown field; did you mean 'project'"):
        TrainConfig.from_dict({"max_steps": 1, "wandb": {"projet": "x"}})
    for project in ("", "  ", "team/run", "a:b"):
        with pytest.raises(ConfigError, match=r"^train\.wandb\.project: a non-empty name"):
            TrainConfig.from_dict({"max_steps": 1, "wandb": {"project": project}})
    with pytest.raises(ConfigError, match=r"^train\.wandb\.project: expected a string"):
        TrainConfig.from_dict({"max_steps": 1, "wandb": {"project": 3}})
    with pytest.raises(ConfigError, match=r"^train\.wandb\.name: must be a non-empty string"):
        TrainConfig.from_dict({"max_steps": 1, "wandb": {"name": ""}})
    with pytest.raises(ConfigError, match=r"^train\.wandb: expected a mapping or null, got True"):
        TrainConfig.from_dict({"max_steps": 1, "wandb": True})
    with pytest.raises(ConfigError, match=r"^train\.wandb\.entity"):
        RunConfig.from_dict(tiny_run(wandb={"entity": ""}))

    cfg = TrainConfig.from_dict({"max_steps": 1, "wandb": {"project": "p", "mode": "offline"}})
    assert cfg.wandb == WandbConfig(project="p", mode="offline") and cfg.wandb.enabled
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert not WandbConfig(mode="disabled").enabled
    assert "wandb" not in TrainConfig(max_steps=1).to_dict()  # unset: no key, so no change to content hashes


class _StubWriter:
    instances: ClassVar[list] = []

    def __init__(self, log_dir):
        self.log_dir, self.scalars, self.closed = log_dir, [], False
        _StubWriter.instances.append(self)

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))

    def close(self):
        self.closed = True


def test_tensorboard_logs_when_installed_warns_when_not_and_is_off_by_default(tmp_path, monkeypatch):
    train = {"max_steps": 4, "log_every": 2}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pretrain(RunConfig.from_dict(tiny_run(**train)), tmp_path / "off")
    assert not (tmp_path / "off" / "tb").exists() and not [w for w in caught if "tensorboard" in str(w.message)]

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # not installed
    with pytest.warns(UserWarning, match="train.tensorboard: tensorboard is not installed; logging to metrics.jsonl only"):
        pretrain(RunConfig.from_dict(tiny_run(**train, tensorboard=True)), tmp_path / "missing")
    assert not (tmp_path / "missing" / "tb").exists() and len(_rows(tmp_path / "missing")) == 2

    stub = types.ModuleType("torch.utils.tensorboard")
    stub.SummaryWriter = _StubWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", stub)
    _StubWriter.instances = []
    pretrain(RunConfig.from_dict(tiny_run(**train, tensorboard=True)), tmp_path / "on")
    [writer] = _StubWriter.instances
    expected = [
        (f"train/{k}", r[k], r["step"]) for r in _rows(tmp_path / "on") for k in ("loss", "grad_norm", "lr", "tokens_per_s")
    ]
    assert writer.log_dir == str(tmp_path / "on" / "tb") and writer.scalars == expected and writer.closed
