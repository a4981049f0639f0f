"""Facts about the running process that several stages ask for."""

from __future__ import annotations

import os


def process_rank() -> int:
    """This process's global rank under torchrun (``RANK``), 0 outside it."""
    return int(os.environ.get("RANK", "0"))
