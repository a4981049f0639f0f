"""Loss-spike "stability" score (the paper's fig. 12), and the health rule every training run must pass.

Stability score: the baseline at step t is the median of the previous ``window`` losses. A step whose
loss exceeds its baseline by more than ``threshold`` (relative) is spiking; consecutive spiking steps
form one spike, sized by its largest relative excess. The score is the sum of spike sizes (0 = no
spikes), so it counts both how many spikes there were and how large they were.

Health rule (``check_health``): a training run (pretraining or extension) whose model diverged,
collapsed or never learned is a failure of that run (``TrainingHealthError``), never a data point.
Its losses are the per-step global-batch losses, each measured before that step's update, so the
first is the loss of the model the run started from. The run fails when

(a) the last step's loss is not finite;
(b) with at least ``HEALTH_MIN_STEPS`` steps: the end loss (mean of the last ``HEALTH_WINDOW`` steps)
    lies more than ``DIVERGENCE_MARGIN`` nats above the first step's loss (it diverged);
(c) more than ``MAX_SKIPPED_FRACTION`` of its steps skipped their update for a non-finite gradient;
(d) with at least ``HEALTH_MIN_STEPS`` steps: the end loss is within ``UNIFORM_MARGIN`` nats of
    ln(vocab_size) or above it: no better than predicting every token uniformly.

(b) and (d) need enough steps to judge: a run of a few steps (the tests' ``max_steps: 2``, an
extension ladder's short rungs) has not had the time to learn, and an extension may start a little
above its source model's loss. The thresholds were measured on 596 normal runs (the smoke, demo,
study and replica pools and the test suite's tiny configs; 260 pretraining, 334 extension): the end
loss of none rose more than 0.21 nats above its first step (0.13 with 10 steps or more), every
pretraining run of 10 steps or more ended at least 1.25 nats below ln(vocab_size) and at least 1.25
nats below its first step, and none skipped an update. A run at ``lr: 10`` ends tens to hundreds of
nats above its start; a run whose updates turn the weights non-finite skips every later step, with
a loss of exactly ln(vocab_size) or NaN.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from archpool.errors import TrainingHealthError

HEALTH_MIN_STEPS = 10  # (b) and (d) judge a run of at least this many steps
HEALTH_WINDOW = 5  # the end loss: mean of the last this many steps (fewer in a shorter run)
DIVERGENCE_MARGIN = 1.0  # nats above the first step's loss: (b), about 5x the largest rise of a normal run
UNIFORM_MARGIN = 0.1  # nats below ln(vocab_size): (d), an end loss above ln(V) - this learned nothing
MAX_SKIPPED_FRACTION = 0.5  # (c): more than this share of steps skipped for a non-finite gradient
_LOWER_LR = "lower the learning rate or lengthen the warmup"


def stability_score(losses: Sequence[float], window: int = 50, threshold: float = 0.05, min_history: int = 10) -> dict:
    """Spike statistics of a loss curve (one value per optimizer step)."""
    spikes: list[dict] = []
    current: dict | None = None
    nonfinite = 0
    for t, loss in enumerate(losses):
        history = [x for x in losses[max(0, t - window) : t] if math.isfinite(x)]
        if not math.isfinite(loss):
            nonfinite += 1
            excess = math.inf
        elif len(history) < min(min_history, window):
            excess = 0.0
        else:
            base = statistics.median(history)
            excess = (loss - base) / abs(base) if base else 0.0
        if excess > threshold:
            if current is None:
                current = {"start": t, "end": t, "size": excess}
                spikes.append(current)
            else:
                current["end"] = t
                current["size"] = max(current["size"], excess)
        else:
            current = None
    sizes = [s["size"] for s in spikes]
    return {
        "score": float(sum(sizes)),
        "n_spikes": len(spikes),
        "max_spike": float(max(sizes)) if sizes else 0.0,
        "spike_steps": sum(s["end"] - s["start"] + 1 for s in spikes),
        "nonfinite_steps": nonfinite,
        "steps": len(losses),
        "spikes": spikes[:100],
        "window": window,
        "threshold": threshold,
    }


def end_loss(losses: Sequence[float], window: int = HEALTH_WINDOW) -> float:
    """Mean of the finite losses among the last ``window`` steps (NaN when there is none)."""
    tail = [x for x in losses[-window:] if math.isfinite(x)]
    return math.fsum(tail) / len(tail) if tail else float("nan")


def health_problem(losses: Sequence[float], skipped: int, vocab_size: int) -> str | None:
    """What is wrong with a run's loss history under the health rule (module docstring), or None
    when it passes. ``losses``: one per step; ``skipped``: how many steps skipped their update."""
    n = len(losses)
    if n == 0:
        return None  # no step ran (a ladder of budget 0): nothing was trained
    last = float(losses[-1])
    if not math.isfinite(last):
        return f"the loss of the last step ({n}) is {last}: the model's weights or activations are no longer finite ({_LOWER_LR})"
    if skipped > MAX_SKIPPED_FRACTION * n:
        return (
            f"{skipped} of {n} steps skipped their update for a non-finite gradient norm "
            f"(more than {MAX_SKIPPED_FRACTION:.0%}): the model barely trained ({_LOWER_LR})"
        )
    if n < HEALTH_MIN_STEPS:
        return None
    start, end = float(losses[0]), end_loss(losses)
    if math.isfinite(start) and end > start + DIVERGENCE_MARGIN:
        return (
            f"the loss rose from {start:.4g} at step 1 to {end:.4g} (mean of the last {min(HEALTH_WINDOW, n)} steps), "
            f"more than {DIVERGENCE_MARGIN:g} nat above its start: the run diverged ({_LOWER_LR})"
        )
    uniform = math.log(vocab_size)
    if end >= uniform - UNIFORM_MARGIN:
        return (
            f"the loss ended at {end:.4g} (mean of the last {min(HEALTH_WINDOW, n)} steps), no better than a uniform "
            f"prediction over {vocab_size} tokens (ln {vocab_size} = {uniform:.4g}, margin {UNIFORM_MARGIN:g}): "
            "the model did not learn (a learning rate far too high collapses it, one far too low leaves it untrained)"
        )
    return None


def check_health(losses: Sequence[float], skipped: int, vocab_size: int, where: str) -> None:
    """``TrainingHealthError`` naming ``where`` (the run directory) when the run fails the health rule."""
    problem = health_problem(losses, skipped, vocab_size)
    if problem is not None:
        raise TrainingHealthError(
            f"{where}: training failed its health check: {problem}; its checkpoints are kept for inspection"
        )
