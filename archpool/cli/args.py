"""Typed argparse ``type=`` helpers shared by the CLIs: a bad number is a usage error (exit 2) before any work."""

from __future__ import annotations

import argparse


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (>= 1), got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer (>= 0), got {value}")
    return value


def length(text: str) -> int:
    """A token length: an integer in [1, the longest context a model config accepts]."""
    from archpool.model.config import MAX_SEQ_LEN

    value = positive_int(text)
    if value > MAX_SEQ_LEN:
        raise argparse.ArgumentTypeError(f"{value:,} tokens exceeds the longest length accepted ({MAX_SEQ_LEN:,})")
    return value


def finite_float(text: str) -> float:
    """A real number that is neither NaN nor infinite."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value
