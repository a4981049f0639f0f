"""Where the trainer's batches come from: a small stream protocol, rank slicing, and its sources.

The trainer consumes ``BatchStream``s: ``next_batch()`` returns this rank's next micro-batch of
``micro_batch_size`` sequences of ``seq_len + 1`` tokens; ``state_dict()`` / ``load_state_dict()``
make the position resumable. Positions are counted in *global* sequences consumed, and each
optimizer step takes the next ``sequences_per_step`` sequences of the global order, rank ``r``
taking the ``r``-th contiguous slice; so the set of sequences in a step does not depend on the world
size, and a checkpoint written at one world size resumes at another.

Sources: the data stage's prepared store and streams (``archpool.data``; see ``data_stage.py``) for real runs, and a deterministic
synthetic token source (``data: {synthetic: {...}}``) for tests and benchmarks.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from archpool.errors import ConfigError


@dataclass
class Batch:
    inputs: torch.Tensor  # (B, T) int64 token ids
    targets: torch.Tensor  # (B, T) int64 next tokens; -100 = not scored
    doc_ids: torch.Tensor | None = None  # (B, T) document of each input token, for intra-document masking


class BatchStream(Protocol):
    def next_batch(self) -> Batch: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class SequenceSource(Protocol):
    """Random access to a fixed global order of training sequences."""

    def sequence(self, index: int) -> tuple[torch.Tensor, torch.Tensor | None]: ...


class RankSlicedStream:
    """Micro-batches of this rank's slice of each global step, from a random-access source."""

    def __init__(
        self, source: SequenceSource, sequences_per_step: int, micro_batch_size: int, rank: int = 0, world_size: int = 1
    ):
        if sequences_per_step % (micro_batch_size * world_size):
            raise ConfigError(
                "micro_batch_size", f"{sequences_per_step} sequences per step do not split into {world_size} x {micro_batch_size}"
            )
        self.source = source
        self.per_step, self.micro = sequences_per_step, micro_batch_size
        self.rank, self.world = rank, world_size
        self.per_rank = sequences_per_step // world_size
        self.consumed = 0  # global sequences of completed steps
        self._offset = 0  # sequences of the current step this rank has read

    def next_batch(self) -> Batch:
        start = self.consumed + self.rank * self.per_rank + self._offset
        rows = [self.source.sequence(start + j) for j in range(self.micro)]
        self._offset += self.micro
        if self._offset == self.per_rank:
            self.consumed += self.per_step
            self._offset = 0
        tokens = torch.stack([r[0] for r in rows])
        docs = None if rows[0][1] is None else torch.stack([r[1][:-1] for r in rows])  # type: ignore[index]
        return Batch(tokens[:, :-1], tokens[:, 1:], docs)

    def state_dict(self) -> dict[str, Any]:
        if self._offset:
            raise RuntimeError("data position is only checkpointed at step boundaries")
        return {"global_sequences": self.consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.consumed, self._offset = int(state["global_sequences"]), 0


class SyntheticSource:
    """Deterministic token sequences with learnable structure: documents that follow a fixed random
    bigram table (``noise`` of the tokens are uniform), separated by token 0. Sequence ``i`` depends
    only on (seed, split, i)."""

    def __init__(
        self, vocab_size: int, seq_len: int, seed: int = 0, split: str = "pretrain", mean_doc_len: int = 48, noise: float = 0.1
    ):
        self.vocab, self.seq_len, self.noise = vocab_size, seq_len, noise
        self.salt = f"{seed}|{split}"
        self.mean_doc_len = max(2, mean_doc_len)
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randint(1, vocab_size, (vocab_size,), generator=g)

    def sequence(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        digest = hashlib.sha256(f"{self.salt}|{index}".encode()).digest()
        g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
        n = self.seq_len + 1
        uniform = torch.randint(1, self.vocab, (n,), generator=g).tolist()
        noisy = (torch.rand(n, generator=g) < self.noise).tolist()
        boundary = (torch.rand(n, generator=g) < 1.0 / self.mean_doc_len).tolist()
        table = self.table.tolist()
        tokens, docs, doc, prev = [], [], 0, 0
        for i in range(n):
            if boundary[i] and i > 0:
                tok, doc = 0, doc + 1
            elif prev == 0 or noisy[i]:
                tok = uniform[i]
            else:
                tok = table[prev]
            tokens.append(tok)
            docs.append(doc)
            prev = tok
        return torch.tensor(tokens, dtype=torch.long), torch.tensor(docs, dtype=torch.long)
