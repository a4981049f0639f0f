"""What every task shares: the ``Sample`` record, seed namespaces, and the exact token-budget fill.

A task draws the parts of a sample that do not depend on the haystack size (needles, keys, the
question, the gold answer and its distractors), then renders the prompt for any haystack size.
``build_sample`` searches for the largest size whose prompt still fits ``length`` minus the tokens
reserved for the answer, counted with the evaluated model's own tokenizer (RULER's rule: prompt +
generation <= length).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from archpool.errors import ConfigError

# RULER's needle depths: round(linspace(0, 100, 40)) percent.
DEPTHS = [round(100 * i / 39) for i in range(40)]
SEED_SPACES = ("eval", "train")


class TokenizerLike(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...


def sample_seed(space: str, task: str, seed: int, index: int, length: int = 0) -> int:
    """The RNG seed of one sample. Evaluation and training draw from disjoint namespaces."""
    if space not in SEED_SPACES:
        raise ConfigError("seed_space", f"unknown seed space {space!r}; allowed: {', '.join(SEED_SPACES)}")
    digest = hashlib.sha256(f"archpool-tasks|{space}|{task}|{seed}|{length}|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


@dataclass
class Draw:
    """The size-independent part of a sample, and how to render a prompt for a haystack size."""

    render: Callable[[int], tuple[str, dict[str, Any]]]  # size -> (prompt incl. answer prefix, meta)
    answers: list[str]  # gold strings for generation scoring
    target: str  # gold continuation for likelihood scoring (and for training documents)
    distractors: list[str]  # alternative continuations of the same form as ``target``
    meta: dict[str, Any] = field(default_factory=dict)
    min_size: int = 0  # smallest haystack size that makes a valid sample (e.g. enough room for needles)
    step: int = 1  # haystack units per search step (coarse units are cheaper to search)
    # answers / target / distractors that depend on the fitted haystack (re-ranking): meta -> triple
    finalize: Callable[[dict[str, Any]], tuple[list[str], str, list[str]]] | None = None


@dataclass
class Sample:
    task: str
    index: int
    seed: int  # the sample's own RNG seed (from ``sample_seed``)
    length: int  # token budget: prompt + reserved answer tokens <= length
    prompt: str  # text the model sees, answer prefix included
    prompt_ids: list[int]
    answers: list[str]
    target: str
    distractors: list[str]
    metric: str
    max_new_tokens: int  # generation length in generation mode
    reserved: int  # tokens reserved after the prompt: max(max_new_tokens, longest candidate)
    haystack_size: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def candidates(self) -> list[str]:
        """Gold first, then the distractors (likelihood mode ranks these)."""
        return [self.target, *self.distractors]

    def to_dict(self, with_ids: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not with_ids:
            d.pop("prompt_ids")
        return d


def fit_size(count: Callable[[int], int], budget: int, min_size: int = 0, step: int = 1, max_size: int = 1 << 22) -> int:
    """Largest haystack size s >= min_size (multiple of ``step`` above it) with count(s) <= budget.

    Exponential then binary search (RULER searches the haystack size the same way). Token counts are
    monotone in the size up to BPE merges at the seams, so the answer is re-checked and stepped back.
    Raises ``ConfigError`` when even ``min_size`` does not fit.
    """
    if count(min_size) > budget:
        raise ConfigError("length", f"budget {budget} is too short: the smallest prompt takes {count(min_size)} tokens")
    lo, hi = 0, 1  # in units of ``step`` above min_size: lo fits, hi does not
    while count(min_size + hi * step) <= budget:
        lo, hi = hi, hi * 2
        if min_size + hi * step > max_size:
            raise ConfigError("length", f"budget {budget}: haystack would exceed {max_size} units")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(min_size + mid * step) <= budget:
            lo = mid
        else:
            hi = mid
    best = min_size + lo * step
    if step > 1:  # refine inside the last coarse step
        a, b = best, best + step
        while b - a > 1:
            mid = (a + b) // 2
            if count(mid) <= budget:
                a = mid
            else:
                b = mid
        best = a
    while best > min_size and count(best) > budget:
        best -= 1
    return best


def pick_depths(rng: random.Random, n: int, index: int, spread: Sequence[int] | None = None) -> list[float]:
    """Needle depths (fractions): the first cycles through RULER's 40 depths over sample indices
    (so a few samples cover all depths), the others are drawn without replacement."""
    spread = list(spread) if spread is not None else DEPTHS
    first = spread[index % len(spread)]
    rest = rng.sample([d for d in DEPTHS if d != first], n - 1) if n > 1 else []
    return [d / 100 for d in [first, *rest]]


def insert_at_depths(units: list[str], needles: list[str], depths: Sequence[float]) -> tuple[list[str], list[int]]:
    """Insert ``needles`` into ``units`` at fractional ``depths``; return the list and their indices."""
    out = list(units)
    positions = sorted(((round(d * len(units)), i) for i, d in enumerate(depths)), reverse=True)
    for pos, i in positions:  # back to front keeps earlier positions valid
        out.insert(pos, needles[i])
    where = []
    for needle in needles:
        where.append(out.index(needle))
    return out, where


def single_token_strings(tokenizer: TokenizerLike | None, candidates: Sequence[str], prefix: str = " ") -> list[str]:
    """The candidates that are one token after ``prefix`` (tokenizer-aware small task vocabularies);
    all candidates when fewer than half qualify or there is no tokenizer."""
    if tokenizer is None:
        return list(candidates)
    single = [c for c in candidates if len(tokenizer.encode(prefix + c)) == 1]
    return single if len(single) >= max(4, len(candidates) // 2) else list(candidates)
