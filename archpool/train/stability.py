"""Loss-spike "stability" score (the paper's fig. 12): spikes of the loss above a rolling baseline.

The baseline at step t is the median of the previous ``window`` losses. A step whose loss exceeds
its baseline by more than ``threshold`` (relative) is spiking; consecutive spiking steps form one
spike, sized by its largest relative excess. The score is the sum of spike sizes (0 = no spikes),
so it counts both how many spikes there were and how large they were.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


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
