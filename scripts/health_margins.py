"""How far normal runs sit from the training health rule's thresholds (archpool/train/stability.py).

Reads the final training state of every pretraining and extension stage of the given pool directories and
prints, over the runs of at least ``HEALTH_MIN_STEPS`` steps, the largest rise of the end loss (mean of
the last ``HEALTH_WINDOW`` steps) above the first step's loss, and the smallest gap of a pretraining
run's end loss below ln(vocab size).

Usage: .venv/bin/python scripts/health_margins.py POOL_DIR [POOL_DIR ...]
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from archpool.errors import CheckpointError
from archpool.train import checkpoint as ckpt
from archpool.train.stability import HEALTH_MIN_STEPS, HEALTH_WINDOW


def main(pools: list[str]) -> None:
    rises: list[float] = []
    gaps: list[float] = []
    for pool in pools:
        for final in sorted(Path(pool).glob("stages/*/*/milestones/final")):
            try:
                losses = [float(x) for x in ckpt.load_train_state(final).get("losses", [])]
            except CheckpointError:
                continue
            if len(losses) < HEALTH_MIN_STEPS:
                continue
            end = sum(losses[-HEALTH_WINDOW:]) / HEALTH_WINDOW
            rises.append(end - losses[0])
            if final.parts[-4] == "pretrain":
                vocab = json.loads((final / "config.json").read_text())["model"]["vocab_size"]
                gaps.append(math.log(vocab) - end)
    if not rises:
        sys.exit("no finished training stage of at least the rule's minimum steps")
    print(f"{len(rises)} training runs of >= {HEALTH_MIN_STEPS} steps ({len(gaps)} pretraining)")
    print(f"largest rise of the end loss above the first step's: {max(rises):.2f} nats")
    if gaps:
        print(f"smallest gap of a pretraining end loss below ln(vocab size): {min(gaps):.2f} nats")


if __name__ == "__main__":
    main(sys.argv[1:])
