"""What a training run does besides its steps: checkpoints, the metrics log, TensorBoard, W&B, the
progress bar. Each is a ``Callback`` whose hooks the ``Trainer`` calls; a caller adds its own with
``Trainer(..., callbacks=[...])``.

The hooks, in the order a run calls them:

- ``on_restore(start_step)``: once the run state is restored: from a checkpoint (``start_step`` is
  its step) or fresh (0). Also when the checkpoint holds the last step and no step follows.
- ``on_train_start(start_step)``: before the first step to run (step ``start_step + 1``).
- per step, with ``step`` the number of steps done (1-based):
  ``on_log(step, metrics)`` on the main rank at every ``log_every``-th step and the last, with the
  row ``metrics.jsonl`` gets; then ``on_step_end(step, result)``.
- ``on_train_end(step)``: after the last step.
- ``close()``: always, last, also when the run stops with an error.

The Trainer installs the metrics log, TensorBoard, W&B and the progress bar on the main rank only,
and ``CheckpointCallback`` on every rank (a save gathers the state of all ranks); a caller's
callbacks run on every rank, after the built-in ones.
"""

from __future__ import annotations

import contextlib
import json
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from archpool.errors import ConfigError
from archpool.io import atomic_write_json, atomic_write_text, disk_error, open_append_text, refuse_symlink
from archpool.model.config import ModelConfig
from archpool.rundir import RUN_METRICS, checkpoints_dir, milestone_dir, run_dir_final
from archpool.safeload import load_json
from archpool.train import checkpoint as ckpt
from archpool.train import distributed as D
from archpool.train.config import Stage, TrainConfig, WandbConfig
from archpool.train.stability import stability_score

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

STABILITY = "stability.json"
TENSORBOARD_SCALARS = ("loss", "grad_norm", "lr", "tokens_per_s")


@dataclass
class StepResult:
    """One optimizer step: its stage, the global-batch mean loss, the gradient norm, the LR, and
    whether the update was skipped (a non-finite gradient norm)."""

    stage: Stage
    loss: float
    grad_norm: float
    lr: float
    skipped: bool


@dataclass
class Snapshot:
    """The run after a step, as a checkpoint holds it: the full weights, the training state (optimizer,
    step, losses, RNG and data position of every rank; None for the weights before the first step)
    and the checkpoint's metadata."""

    weights: dict[str, torch.Tensor]
    model_cfg: ModelConfig
    train_state: dict[str, Any] | None
    metadata: dict[str, Any]
    losses: list[float] = field(default_factory=list)


class Callback:
    """A side concern of a training run; every hook does nothing unless overridden."""

    def on_restore(self, start_step: int) -> None:
        """The run state is restored; ``start_step`` steps are done (0 for a fresh run)."""

    def on_train_start(self, start_step: int) -> None:
        """Steps ``start_step + 1`` to the last follow."""

    def on_log(self, step: int, metrics: dict[str, Any]) -> None:
        """The metrics row of step ``step`` (main rank only)."""

    def on_step_end(self, step: int, result: StepResult) -> None:
        """Step ``step`` (1-based) is done."""

    def on_train_end(self, step: int) -> None:
        """The last step, ``step``, is done."""

    def close(self) -> None:
        """Release files and writers; called once, last, whether or not the run succeeded."""


class CallbackList(Callback):
    """Callbacks called in order; ``close`` reaches every one even when one of them raises."""

    def __init__(self, callbacks: Iterable[Callback]):
        self.callbacks = list(callbacks)

    def on_restore(self, start_step: int) -> None:
        for cb in self.callbacks:
            cb.on_restore(start_step)

    def on_train_start(self, start_step: int) -> None:
        for cb in self.callbacks:
            cb.on_train_start(start_step)

    def on_log(self, step: int, metrics: dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_log(step, metrics)

    def on_step_end(self, step: int, result: StepResult) -> None:
        for cb in self.callbacks:
            cb.on_step_end(step, result)

    def on_train_end(self, step: int) -> None:
        for cb in self.callbacks:
            cb.on_train_end(step)

    def close(self) -> None:
        with contextlib.ExitStack() as stack:
            for cb in reversed(self.callbacks):  # the stack unwinds last-in first: closes in list order
                stack.callback(cb.close)


class CheckpointCallback(Callback):
    """Checkpoints after the last step, every milestone step and every ``ckpt_every`` steps, into
    ``ckpt/step_N`` (the newest ``keep_last`` kept); a milestone and the final milestone
    (``milestones/final``, written last: it marks the run complete) are hard-linked copies, and
    ``stability.json`` is rewritten with each. ``initial`` adds the weights before step 1 as the
    milestone ``step_000000`` (an extension ladder's rung 0).

    ``snapshot(step)`` is called on every rank (it gathers from all of them) and gives the state on
    the main rank, None elsewhere; the main rank writes the files, then every rank waits for it.
    """

    def __init__(
        self,
        run_dir: Path,
        tcfg: TrainConfig,
        total_steps: int,
        snapshot: Callable[[int], Snapshot | None],
        initial: Callable[[], Snapshot] | None = None,
    ):
        self.run_dir, self.root, self.total_steps = run_dir, checkpoints_dir(run_dir), total_steps
        self.every, self.milestones, self.keep_last = tcfg.ckpt_every, set(tcfg.milestones), tcfg.keep_last
        self.snapshot, self.initial = snapshot, initial

    def on_train_start(self, start_step: int) -> None:
        if self.initial is not None and start_step == 0:
            snap = self.initial()
            ckpt.write_checkpoint(
                milestone_dir(self.run_dir, ckpt.step_name(0)), snap.weights, snap.model_cfg, None, snap.metadata
            )

    def on_step_end(self, step: int, result: StepResult) -> None:
        final = step == self.total_steps
        milestone = step in self.milestones
        if final or milestone or step % self.every == 0:
            self.save(step, milestone=milestone, final=final)

    def save(self, step: int, *, milestone: bool = False, final: bool = False) -> None:
        snap = self.snapshot(step)
        if snap is not None:
            path = ckpt.write_checkpoint(
                self.root / ckpt.step_name(step), snap.weights, snap.model_cfg, snap.train_state, snap.metadata
            )
            if milestone:
                ckpt.link_copy(path, milestone_dir(self.run_dir, ckpt.step_name(step)))
            atomic_write_json(self.run_dir / STABILITY, stability_score(snap.losses))
            if final:
                ckpt.link_copy(path, run_dir_final(self.run_dir))  # written last: marks the run complete
            ckpt.prune(self.root, self.keep_last)
        D.barrier()


class MetricsLogCallback(Callback):
    """``metrics.jsonl``: one JSON row per logged step, flushed as written. On restore the log is
    cut back to the restored step, so a resumed run's log reads as one run."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / RUN_METRICS
        self.file = None

    def on_restore(self, start_step: int) -> None:
        truncate_metrics(self.path, start_step)

    def on_train_start(self, start_step: int) -> None:
        self.file = open_append_text(self.path)

    def on_log(self, step: int, metrics: dict[str, Any]) -> None:
        _write_row(self.file, self.path, metrics)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class TensorBoardCallback(Callback):
    """Loss, gradient norm, LR and tokens/s of every metrics row, as ``train/<name>`` scalars under
    ``tb/``; without the tensorboard package, a warning and nothing else."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.writer: SummaryWriter | None = None

    def on_train_start(self, start_step: int) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            warnings.warn("train.tensorboard: tensorboard is not installed; logging to metrics.jsonl only", stacklevel=2)
            return
        self.writer = SummaryWriter(str(self.run_dir / "tb"))

    def on_log(self, step: int, metrics: dict[str, Any]) -> None:
        if self.writer is not None:
            for k in TENSORBOARD_SCALARS:
                self.writer.add_scalar(f"train/{k}", metrics[k], step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def require_wandb() -> Any:
    """The ``wandb`` module, or a ``ConfigError`` on ``train.wandb`` saying how to install it."""
    try:
        import wandb
    except ImportError:
        raise ConfigError(
            "train.wandb",
            "W&B logging needs the wandb package, which is not installed: pip install wandb "
            "(or set train.wandb.mode: disabled, or remove train.wandb)",
        ) from None
    return wandb


class WandbCallback(Callback):
    """Weights & Biases: ``wandb.init`` when training starts (the run's name and config, files under
    ``RUN/wandb/``), ``wandb.log`` of every metrics row's numbers as ``train/<name>`` at its step,
    and ``wandb.finish`` at the end (exit code 1 when the run stopped with an error)."""

    def __init__(self, settings: WandbConfig, run_dir: Path, config: dict[str, Any], job_type: str | None = None):
        self.wandb = require_wandb()
        self.settings, self.run_dir, self.config, self.job_type = settings, run_dir, config, job_type
        self.started = False

    def on_train_start(self, start_step: int) -> None:
        s = self.settings
        self.wandb.init(
            project=s.project,
            entity=s.entity,
            name=s.name or self.run_dir.name,
            mode=s.mode,
            config=self.config,
            dir=str(self.run_dir),
            job_type=self.job_type,
        )
        self.started = True

    def on_log(self, step: int, metrics: dict[str, Any]) -> None:
        scalars = {f"train/{k}": v for k, v in metrics.items() if k != "step" and isinstance(v, (int, float))}
        self.wandb.log(scalars, step=step)

    def on_train_end(self, step: int) -> None:
        self._finish(0)

    def close(self) -> None:
        self._finish(1)

    def _finish(self, exit_code: int) -> None:
        if self.started:
            self.started = False
            self.wandb.finish(exit_code=exit_code)


class ProgressCallback(Callback):
    """A tqdm progress bar over the run's steps, with the loss and LR of the latest step."""

    def __init__(self, desc: str, total_steps: int):
        self.desc, self.total_steps = desc, total_steps
        self.bar = None

    def on_train_start(self, start_step: int) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=self.total_steps, initial=start_step, unit="step", dynamic_ncols=True, desc=self.desc)

    def on_step_end(self, step: int, result: StepResult) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{result.loss:.4f}", lr=f"{result.lr:.2e}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class MetricsMeter:
    """The metrics rows of a run in progress: each row averages the loss over the steps since the
    previous row and measures tokens per second over them."""

    def __init__(self, global_batch_tokens: int):
        self.gbt = global_batch_tokens
        self.t_log, self.tok_log = time.perf_counter(), 0
        self.interval_losses: list[float] = []

    def add(self, result: StepResult) -> None:
        self.interval_losses.append(result.loss)
        self.tok_log += self.gbt

    def row(self, step: int, s: StepResult) -> dict[str, Any]:
        """The row of step ``step`` (its last step's result ``s``); starts the next interval."""
        now = time.perf_counter()
        row = {
            "step": step,
            "stage": s.stage.name,
            "seq_len": s.stage.seq_len,
            "loss": s.loss,
            "loss_avg": sum(self.interval_losses) / len(self.interval_losses),
            "grad_norm": s.grad_norm,
            "lr": s.lr,
            "tokens": step * self.gbt,
            "tokens_per_s": self.tok_log / max(now - self.t_log, 1e-9),
            "skipped": s.skipped,
        }
        self.t_log, self.tok_log, self.interval_losses = now, 0, []
        return row


def truncate_metrics(path: Path, step: int) -> None:
    """Drop metric rows past the resumed step (and a torn last line) so a resumed log reads as one run;
    lines that are not JSON rows (garbage bytes) are dropped with a warning that counts them."""
    if not path.is_file() and not path.is_symlink():
        return
    refuse_symlink(path)
    keep, bad = [], 0
    lines = path.read_bytes().splitlines()
    for i, raw in enumerate(lines):
        try:
            line = raw.decode("utf-8")
            row = load_json(line, str(path))
            if not isinstance(row, dict):
                raise ValueError("not a row")
        except ValueError:  # UnicodeDecodeError and ConfigError are ValueErrors
            bad += i < len(lines) - 1  # a torn last line is the normal trace of a kill
            continue
        if not isinstance(row.get("step", 0), (int, float)) or row.get("step", 0) <= step:
            keep.append(line)
    if bad:
        warnings.warn(f"{path}: dropped {bad} damaged line(s) that were not JSON rows", stacklevel=2)
    atomic_write_text(path, "".join(line + "\n" for line in keep))


def _write_row(f, path: Path, row: dict[str, Any]) -> None:
    """One metrics row, flushed; a full disk is a named error (checkpoints already written stay valid)."""
    try:
        f.write(json.dumps(row) + "\n")
        f.flush()
    except OSError as e:
        raise disk_error(path, e) from None
