"""The training loop: one or more stages of next-token training under one LR schedule.

Pretraining is one stage; YaRN extension is two (half length, then full length). Every optimizer
step sees exactly ``global_batch_tokens`` tokens: this rank's slice of the global batch, in
micro-batches with gradient accumulation. The loss is the mean over *all* target tokens of the
global batch (each rank's token sum is divided by the global token count and DDP's averaging is
undone), so 1 process and N processes compute the same update. Resuming restores weights,
optimizer, RNG, data position and the loss history from the newest valid checkpoint, so a killed
run continues bit for bit. A run that ends diverged, collapsed or untrained fails with a
``TrainingHealthError`` (the rule and its thresholds: ``archpool.train.stability``), also when
re-run on its complete directory. What the run does besides its steps (checkpoints, the metrics log,
TensorBoard, W&B, the progress bar) is done by callbacks (``archpool.train.callbacks``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import random
import shutil
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from archpool.data.section import DataSection
from archpool.errors import CheckpointError, ConfigError, StateError
from archpool.io import atomic_write_json, directory_lock, refuse_symlink, remove_stale_temporaries, sha256_json
from archpool.model.config import ModelConfig
from archpool.model.model import Decoder
from archpool.rundir import RUN_RECORD, checkpoints_dir, milestones_dir, run_dir_final
from archpool.safeload import read_json_file
from archpool.train import checkpoint as ckpt
from archpool.train import distributed as D
from archpool.train.callbacks import (
    Callback,
    CallbackList,
    CheckpointCallback,
    MetricsLogCallback,
    MetricsMeter,
    ProgressCallback,
    Snapshot,
    StepResult,
    TensorBoardCallback,
    WandbCallback,
    require_wandb,
)
from archpool.train.config import Stage, TrainConfig
from archpool.train.data import BatchStream
from archpool.train.data_stage import build_stream
from archpool.train.optim import LRSchedule, build_optimizer, set_lr
from archpool.train.precision import resolve_dtype
from archpool.train.stability import check_health, stability_score

# Settings that may change between a run and its resumption without changing what is computed.
RESUME_TOLERANT = {
    "progress",
    "tensorboard",
    "wandb",
    "log_every",
    "ckpt_every",
    "keep_last",
    "compile",
    "parallel",
    "micro_batch_size",
    "milestones",
    "dtype",
    "attn_impl",
}


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    tokens: int
    final_loss: float
    losses: list[float] = field(default_factory=list)
    stability: dict = field(default_factory=dict)
    resumed_from: int = 0
    already_complete: bool = False
    skipped_steps: int = 0  # steps whose update was skipped for a non-finite gradient norm


def is_complete(run_dir: str | Path) -> bool:
    """Whether the run's final milestone exists and every file matches its manifest (sizes and sha256)."""
    try:
        ckpt.validate(run_dir_final(run_dir))
        return True
    except CheckpointError:
        return False


class Trainer:
    def __init__(  # noqa: PLR0913 — the run's configs, then keyword-only options the pretrain and extension stages set
        self,
        run_dir: str | Path,
        model_cfg: ModelConfig,
        train_cfg: TrainConfig,
        data: DataSection,
        stages: list[Stage] | None = None,
        *,
        init_state: dict[str, torch.Tensor] | None = None,
        record: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        init_seed: int | None = None,
        initial_milestone: bool = False,
        callbacks: Iterable[Callback] = (),
    ):
        self.run_dir = Path(run_dir)
        self.cfg, self.tcfg, self.data = model_cfg, train_cfg, data
        seq_len = train_cfg.resolved_seq_len(model_cfg.max_seq_len)
        self.stages = stages or [Stage("pretrain", seq_len, train_cfg.total_steps())]
        self.total_steps = sum(s.steps for s in self.stages)
        self.init_state = init_state
        self.record = (
            record if record is not None else {"model": model_cfg.to_dict(), "data": data.to_dict(), "train": train_cfg.to_dict()}
        )
        self.metadata = metadata or {}
        self.init_seed = train_cfg.seed if init_seed is None else init_seed
        self.initial_milestone = initial_milestone  # also keep the weights before step 1 (milestones/step_000000)
        self.extra_callbacks = list(callbacks)  # run on every rank, after the built-in ones
        for s in self.stages:
            train_cfg.sequences_per_step(s.seq_len)  # validate the geometry before any work
        if train_cfg.wandb is not None and train_cfg.wandb.enabled:
            require_wandb()  # on every rank, before any work: a ConfigError saying how to install it

    # ------------------------------------------------------------------ setup
    def _check_record(self, info: D.DistInfo) -> None:
        path = self.run_dir / RUN_RECORD
        if info.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if path.is_file() or path.is_symlink():
                old = _read_record(path)
                if _strict(old) != _strict(self.record):
                    raise ConfigError(
                        str(path),
                        "this run directory was started with a different config; resume with the same config or use a new --out",
                    )
            else:
                atomic_write_json(path, self.record)
        D.barrier()

    @staticmethod
    def _autocast(dtype: str, device: torch.device):
        if dtype == "float32":
            return contextlib.nullcontext, False
        return (lambda: torch.autocast(device.type, dtype=torch.bfloat16)), True

    def _stage_at(self, step: int) -> tuple[int, int]:
        """(stage index, first step of that stage) for a 0-based step."""
        start = 0
        for i, s in enumerate(self.stages):
            if step < start + s.steps:
                return i, start
            start += s.steps
        return len(self.stages) - 1, start - self.stages[-1].steps

    def _stream(self, stage: Stage, info: D.DistInfo):
        return build_stream(
            self.data,
            split=stage.split,
            vocab_size=self.cfg.vocab_size,
            seq_len=stage.seq_len,
            sequences_per_step=self.tcfg.sequences_per_step(stage.seq_len),
            micro_batch_size=self.tcfg.micro_batch_size,
            rank=info.rank,
            world_size=info.world_size,
            seed=self.tcfg.seed,
        )

    # ------------------------------------------------------------------ the run
    def run(self) -> TrainResult:
        """Train (or resume) into the run directory, holding its lock: a second writer of the same
        directory gets a ``LockError`` naming this process instead of racing it."""
        info = D.init_distributed()
        with directory_lock(self.run_dir, "run directory") if info.is_main else contextlib.nullcontext():
            return self._run(info)

    def _run(self, info: D.DistInfo) -> TrainResult:
        self._check_record(info)
        if is_complete(self.run_dir):
            return self._complete_result()
        resume = self._find_resume(info)
        model, state = self._build_model(info, resume)
        run = self._prepare(model, info)
        data_state = self._restore(run, state, info)
        callbacks = self._callbacks(run, model, info)
        try:
            callbacks.on_restore(run.start_step)
            if self._resumed_past_end(run, resume, info):
                D.barrier()
                return self._complete_result()
            self._open_stream(run, data_state, info)
            callbacks.on_train_start(run.start_step)
            self._loop(run, callbacks, info)
            callbacks.on_train_end(self.total_steps)
        finally:
            callbacks.close()
        losses = run.losses
        check_health(losses, run.skipped, self.cfg.vocab_size, str(self.run_dir))
        return TrainResult(
            self.run_dir,
            self.total_steps,
            self.total_steps * self.tcfg.global_batch_tokens,
            losses[-1] if losses else float("nan"),
            losses,
            stability_score(losses),
            resumed_from=run.start_step,
            skipped_steps=run.skipped,
        )

    def _callbacks(self, run: _Run, model: Decoder, info: D.DistInfo) -> CallbackList:
        """The metrics log, TensorBoard and W&B (when configured) and the progress bar on the main rank;
        checkpoints on every rank; then the caller's callbacks."""
        tcfg = self.tcfg
        built: list[Callback] = []
        if info.is_main:
            built.append(MetricsLogCallback(self.run_dir))
            if tcfg.tensorboard:
                built.append(TensorBoardCallback(self.run_dir))
            if tcfg.wandb is not None and tcfg.wandb.enabled:
                built.append(WandbCallback(tcfg.wandb, self.run_dir, self.record, job_type=self.metadata.get("stage")))
            if tcfg.progress:
                built.append(ProgressCallback(self.run_dir.name, self.total_steps))
        initial = functools.partial(self._initial_snapshot, model) if self.initial_milestone and info.is_main else None
        snapshot = functools.partial(self._snapshot, run, info)
        built.append(CheckpointCallback(self.run_dir, tcfg, self.total_steps, snapshot, initial))
        return CallbackList([*built, *self.extra_callbacks])

    # ------------------------------------------------------------------ restore
    def _find_resume(self, info: D.DistInfo) -> str | None:
        """The newest checkpoint to resume from (the same on every rank), after clearing what a killed
        run left behind: a damaged final milestone, temporaries."""
        resume = None
        if info.is_main:
            _discard_damaged_final(self.run_dir)
            ckpt.clean_temporaries(checkpoints_dir(self.run_dir))
            ckpt.clean_temporaries(milestones_dir(self.run_dir))
            remove_stale_temporaries(self.run_dir, older_than_s=0.0)
            found = ckpt.latest(checkpoints_dir(self.run_dir))
            resume = str(found) if found else None
        return D.all_gather_object(resume)[0]

    def _build_model(self, info: D.DistInfo, resume: str | None) -> tuple[Decoder, dict[str, Any] | None]:
        """The model on its device, with the resumed (or initial) weights, and the resumed train state."""
        impl = self.tcfg.resolved_attn_impl(info.device.type, self.cfg.swa or self.tcfg.intra_doc_mask)
        model = Decoder(self.cfg, seed=self.init_seed, attn_impl=impl)
        state = None
        if resume:
            _, weights = ckpt.load_weights(resume)
            model.load_state_dict(weights)
            state = ckpt.load_train_state(resume)
        elif self.init_state is not None:
            model.load_state_dict(self.init_state)
        model.to(info.device)
        return model, state

    def _prepare(self, model: Decoder, info: D.DistInfo) -> _Run:
        """Precision, parallel wrapping, optimizer and LR schedule of a fresh run state."""
        tcfg = self.tcfg
        dtype = resolve_dtype(tcfg.dtype, info.device.type, self.cfg.d_model)
        self.metadata = {**self.metadata, "dtype": dtype}  # recorded with every checkpoint
        autocast, bf16 = self._autocast(dtype, info.device)
        mode = D.resolve_mode(tcfg.parallel, info)
        wrapped = D.parallelize(model, mode, info, compile=tcfg.compile, bf16=bf16 and mode == "fsdp")
        optimizer = build_optimizer(
            wrapped, tcfg.lr, tcfg.weight_decay, tcfg.betas, tcfg.eps, tcfg.decay_embeddings, tcfg.decay_norms
        )
        schedule = LRSchedule(
            tcfg.lr, tcfg.lr * tcfg.final_lr_ratio, tcfg.warmup_steps, self.total_steps, tcfg.schedule, tcfg.decay_fraction
        )
        return _Run(wrapped, optimizer, schedule, autocast)

    def _restore(self, run: _Run, state: dict[str, Any] | None, info: D.DistInfo) -> dict[str, Any] | None:
        """Seed every rank, then restore optimizer, step, losses, the skipped-step count and RNG from
        ``state``; returns the saved data position (None for a fresh run)."""
        torch.manual_seed(self.tcfg.seed + info.rank)
        random.seed(self.tcfg.seed + info.rank)
        if state is None:
            return None
        D.load_full_optimizer_state(run.wrapped, run.optimizer, state["optimizer"])
        run.start_step, run.losses = int(state["step"]), list(state["losses"])
        run.skipped = int(state.get("skipped", 0))
        _restore_rng(state["rng"], info)
        return state["data"]

    def _resumed_past_end(self, run: _Run, resume: str | None, info: D.DistInfo) -> bool:
        """Whether the resumed checkpoint is the last step (the final milestone was damaged: rebuilt
        from it here)."""
        past_end = bool(resume) and run.start_step >= self.total_steps
        if info.is_main:
            if run.start_step:
                print(f"[archpool] resuming {self.run_dir} from step {run.start_step} ({resume})", flush=True)
            if past_end:
                assert resume is not None  # past_end: resumed
                ckpt.link_copy(Path(resume), run_dir_final(self.run_dir))
                warnings.warn(f"{run_dir_final(self.run_dir)}: rebuilt from {resume}", stacklevel=3)
        return past_end

    def _open_stream(self, run: _Run, data_state: dict[str, Any] | None, info: D.DistInfo) -> None:
        """The batch stream of the stage holding the first step, at its saved position when resumed."""
        run.stage_idx, _ = self._stage_at(run.start_step)
        run.stream = self._stream(self.stages[run.stage_idx], info)
        if data_state is not None and data_state["stage"] == run.stage_idx:
            streams = data_state["streams"]
            run.stream.load_state_dict(streams[info.rank] if len(streams) == info.world_size else streams[0])

    # ------------------------------------------------------------------ the loop
    def _loop(self, run: _Run, callbacks: Callback, info: D.DistInfo) -> None:
        """Every step from the resumed one to the last: update, then the callbacks (a metrics row every
        ``log_every`` steps and at the last, before the step's checkpoint)."""
        meter = MetricsMeter(self.tcfg.global_batch_tokens)
        for step in range(run.start_step, self.total_steps):
            s = self._step(run, step, info)
            run.losses.append(s.loss)
            run.skipped += s.skipped
            done = step + 1
            meter.add(s)
            if info.is_main and (done % self.tcfg.log_every == 0 or done == self.total_steps):
                callbacks.on_log(done, meter.row(done, s))
            callbacks.on_step_end(done, s)

    def _step(self, run: _Run, step: int, info: D.DistInfo) -> StepResult:
        """One optimizer step over the global batch (micro-batches with gradient accumulation); a
        non-finite gradient norm skips the update."""
        tcfg = self.tcfg
        idx, _ = self._stage_at(step)
        if idx != run.stage_idx:
            _flush_generated(run.stream, info)
            run.stage_idx, run.stream = idx, self._stream(self.stages[idx], info)
        stage = self.stages[run.stage_idx]
        accum = tcfg.accumulation_steps(stage.seq_len, info.world_size)
        lr = run.schedule(step)
        set_lr(run.optimizer, lr)
        micro = [run.stream.next_batch() for _ in range(accum)]
        n_local = sum(int((mb.targets != -100).sum()) for mb in micro)
        n_global = D.all_reduce_sum(torch.tensor(float(n_local), dtype=torch.float64, device=info.device)).item()
        scale = info.world_size / max(n_global, 1.0)
        loss_sum = torch.zeros((), dtype=torch.float64, device=info.device)
        for i, mb in enumerate(micro):
            inputs = mb.inputs.to(info.device, non_blocking=True)
            targets = mb.targets.to(info.device, non_blocking=True)
            doc_ids = mb.doc_ids.to(info.device) if (tcfg.intra_doc_mask and mb.doc_ids is not None) else None
            with D.grad_sync(run.wrapped, i == accum - 1):
                with run.autocast():
                    loss = run.wrapped(inputs, doc_ids=doc_ids, targets=targets)
                (loss * scale).backward()
            loss_sum += loss.detach().double()
        grad_norm = float(D.total_grad_norm(run.wrapped, tcfg.grad_clip))
        skipped = not math.isfinite(grad_norm)
        if skipped:
            warnings.warn(f"step {step + 1}: non-finite gradient norm, update skipped", stacklevel=1)
        else:
            run.optimizer.step()
        run.optimizer.zero_grad(set_to_none=True)
        loss_value = D.all_reduce_sum(loss_sum).item() / max(n_global, 1.0)
        return StepResult(stage, loss_value, grad_norm, lr, skipped)

    # ------------------------------------------------------------------ checkpoints
    def _snapshot(self, run: _Run, info: D.DistInfo, step: int) -> Snapshot | None:
        """The run after ``step`` on the main rank (None elsewhere): weights, optimizer, and the RNG and
        data position of every rank, gathered from all ranks (every rank calls this)."""
        _flush_generated(run.stream, info)
        stream_state = run.stream.state_dict()
        model_state = D.full_model_state(run.wrapped)
        optim_state = D.full_optimizer_state(run.wrapped, run.optimizer)
        rng = D.all_gather_object(_rng_state(info))
        streams = D.all_gather_object(stream_state)
        if not info.is_main:
            return None
        train_state = {
            "step": step,
            "losses": run.losses,
            "skipped": run.skipped,
            "optimizer": optim_state,
            "rng": rng,
            "data": {"stage": run.stage_idx, "streams": streams},
            "schedule": run.schedule.state_dict(),
            "world_size": info.world_size,
            "record_sha256": sha256_json(_strict(self.record)),
        }
        meta = {**self.metadata, "step": step, "tokens": step * self.tcfg.global_batch_tokens}
        return Snapshot(model_state, self.cfg, train_state, meta, run.losses)

    def _initial_snapshot(self, model: Decoder) -> Snapshot:
        """The weights before any step (an extension ladder's rung 0: the RoPE change alone)."""
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        return Snapshot(state, self.cfg, None, {**self.metadata, "step": 0, "tokens": 0})

    def _complete_result(self) -> TrainResult:
        """The result of a complete run, read from its final milestone (held to the health rule again)."""
        state = ckpt.load_train_state(run_dir_final(self.run_dir))
        losses, skipped = list(state["losses"]), int(state.get("skipped", 0))
        check_health(losses, skipped, self.cfg.vocab_size, str(self.run_dir))
        return TrainResult(
            self.run_dir,
            int(state["step"]),
            int(state["step"]) * self.tcfg.global_batch_tokens,
            losses[-1] if losses else float("nan"),
            losses,
            stability_score(losses),
            resumed_from=int(state["step"]),
            already_complete=True,
            skipped_steps=skipped,
        )


@dataclass
class _Run:
    """The state of a run in progress: the wrapped model, its optimizer and schedule, the position."""

    wrapped: Any
    optimizer: torch.optim.Optimizer
    schedule: LRSchedule
    autocast: Any  # a context-manager factory: bf16 autocast, or nothing
    start_step: int = 0
    losses: list[float] = field(default_factory=list)
    skipped: int = 0  # steps whose update was skipped (a non-finite gradient norm)
    stage_idx: int = 0
    stream: Any = None


# ---------------------------------------------------------------------- helpers
def _strict(record: dict[str, Any]) -> str:
    """Hash of what a run computes; logging / layout knobs and (for pretraining) the extension
    sections may change between a run and its resumption."""
    rec = json.loads(json.dumps(record, sort_keys=True, default=str))
    if rec.get("kind") == "pretrain":
        rec.pop("extension", None)
    for section in ("train", "extension"):
        if isinstance(rec.get(section), dict):
            for k in RESUME_TOLERANT:
                rec[section].pop(k, None)
    return sha256_json(rec)


def _flush_generated(stream: BatchStream, info: D.DistInfo) -> None:
    """Write the stream's generated task documents to their cross-run cache (rank 0: all ranks hold the same)."""
    if info.is_main and hasattr(stream, "flush"):
        stream.flush()


def _rng_state(info: D.DistInfo) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if info.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(info.device)
    return state


def _restore_rng(states: list[dict[str, Any]], info: D.DistInfo) -> None:
    if len(states) != info.world_size:
        return  # a different world size: keep the fresh per-rank seeds (the trainer itself draws no randomness)
    s = states[info.rank]
    torch.set_rng_state(s["torch"])
    random.setstate(_as_tuple(s["python"]))
    if "cuda" in s and info.device.type == "cuda":
        torch.cuda.set_rng_state(s["cuda"], info.device)


def _as_tuple(x: Any) -> Any:
    return tuple(_as_tuple(v) for v in x) if isinstance(x, (list, tuple)) else x


def _read_record(path: Path) -> dict[str, Any]:
    """The run's ``run_config.json``; ``StateError`` naming it when it is a link, truncated or not a mapping."""
    try:
        refuse_symlink(path)
        record = read_json_file(path)
    except (OSError, ConfigError) as e:
        reason = e.message if isinstance(e, ConfigError) else type(e).__name__
        raise StateError(
            f"{path}: truncated or corrupt ({reason}); delete it to resume with the current config, or use a new --out"
        ) from None
    if not isinstance(record, dict):
        raise StateError(f"{path}: not a run record (a mapping); delete it to resume with the current config, or use a new --out")
    return record


def _discard_damaged_final(run_dir: Path) -> None:
    """Remove a final milestone that fails verification, so the run resumes from its newest intact
    checkpoint and rebuilds it."""
    final = run_dir_final(run_dir)
    if not (final.exists() or final.is_symlink()):
        return
    try:
        ckpt.validate(final)
    except CheckpointError as e:
        warnings.warn(f"{e}; rebuilding the final milestone from the newest intact checkpoint", stacklevel=2)
        if final.is_symlink() or not final.is_dir():
            final.unlink()
        else:
            shutil.rmtree(final)


def pretrain(run_cfg, out: str | Path) -> TrainResult:
    """Pretrain the run config's model into ``out``; re-running the same call resumes."""
    cfg = run_cfg.model_config()
    record = {"kind": "pretrain", **run_cfg.to_dict(), "model_resolved": cfg.to_dict()}
    return Trainer(out, cfg, run_cfg.train, run_cfg.data, record=record, metadata={"stage": "pretrain"}).run()
