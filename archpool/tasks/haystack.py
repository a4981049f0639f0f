"""Haystacks: RULER's noise sentences, sentences of held-out text, or generated pseudo-text."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from archpool.tasks import words as W

NOISE = ["The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again."]
_SENT = re.compile(r"(?<=[.!?])\s+")


def noise_units(n: int) -> list[str]:
    return [NOISE[i % len(NOISE)] for i in range(n)]


class TextHaystack:
    """Sentences of held-out documents, read cyclically from a seeded offset (RULER reads essays the
    same way: the first N words, repeated when short)."""

    def __init__(self, texts: Sequence[str] | None, name: str = "corpus"):
        sentences: list[str] = []
        for t in texts or []:
            for s in _SENT.split(" ".join(t.split())):
                if s:
                    sentences.append(s)
        self.name = name if sentences else "pseudo_text"
        self.sentences = sentences or pseudo_sentences(random.Random(0), 2000)

    def units(self, start: int, n: int) -> list[str]:
        m = len(self.sentences)
        return [self.sentences[(start + i) % m] for i in range(n)]


def pseudo_sentences(rng: random.Random, n: int) -> list[str]:
    """Grammatical filler from the vendored word lists (used when no held-out text is given)."""
    out = []
    for _ in range(n):
        a, b = rng.choice(W.ADJECTIVES), rng.choice(W.ADJECTIVES)
        s = f"The {a} {rng.choice(W.NOUNS)} will {rng.choice(W.VERBS)} the {b} {rng.choice(W.NOUNS)}."
        out.append(s)
    return out
