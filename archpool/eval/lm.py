"""One scoring interface over archpool's ``Decoder`` or a transformers causal LM.

A backend has three primitives: a fresh incremental state (KV cache), ``step`` (append tokens,
return their logits, or with ``last_only`` the last position's alone: the LM head is applied to that one
row) and ``expand`` (copy a state for n continuations). Everything the evaluator
needs is written once on top: chunked prefill (attention is never larger than chunk × context; each chunk
runs the LM head on its last position only, the one whose logits a prefill returns),
log-probabilities of K candidate continuations sharing one prefill, greedy decoding with a KV
cache, and per-token NLL of long documents (batched, chunked).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


class Backend(Protocol):
    vocab_size: int

    def new_state(self) -> Any: ...
    def step(
        self, state: Any, ids: torch.Tensor, last_only: bool = False
    ) -> torch.Tensor: ...  # (B, T) -> (B, T or 1, V), appends to state
    def expand(self, state: Any, n: int) -> Any: ...  # batch-1 state -> n independent copies


class ArchpoolBackend:
    """``Decoder`` with its ``KVCache`` (sliding layers keep only their window)."""

    def __init__(self, model):
        self.model = model.eval()
        self.vocab_size = model.cfg.vocab_size
        self.device = model.embed.weight.device

    def new_state(self):
        return self.model.new_cache()

    @torch.no_grad()
    def step(self, state, ids: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        if not last_only:
            return self.model(ids.to(self.device), kv_cache=state).float()
        h, _ = self.model._trunk(ids.to(self.device), None, state, with_probs=False)
        return self.model.lm_head(h[:, -1:]).float()

    def expand(self, state, n: int):
        new = self.model.new_cache()
        new.seen, new.start = state.seen, list(state.start)
        new.k = [None if k is None else k.expand(n, *k.shape[1:]).contiguous() for k in state.k]
        new.v = [None if v is None else v.expand(n, *v.shape[1:]).contiguous() for v in state.v]
        return new


class HFBackend:
    """A transformers ``*ForCausalLM`` with a ``DynamicCache`` (sliding layers from its config)."""

    def __init__(self, model):
        self.model = model.eval()
        self.vocab_size = model.config.vocab_size
        self.device = next(model.parameters()).device
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.x

    def new_state(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    @torch.no_grad()
    def step(self, state, ids: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        keep = {"logits_to_keep": 1} if last_only else {}
        out = self.model(input_ids=ids.to(self.device), **{self._cache_arg: state}, use_cache=True, **keep)
        return out.logits.float()

    def expand(self, state, n: int):
        new = copy.deepcopy(state)
        if n > 1:
            new.batch_repeat_interleave(n)
        return new


@dataclass
class LM:
    """Scoring API used by every suite. ``prefill_chunk`` bounds attention memory at long lengths;
    ``max_batch`` bounds how many continuations / documents run at once."""

    backend: Backend
    name: str = "model"
    prefill_chunk: int = 512
    max_batch: int = 16
    info: dict[str, Any] = field(default_factory=dict)
    last_only: bool = field(init=False)  # the backend's ``step`` takes ``last_only`` (read once, not per step)

    def __post_init__(self) -> None:
        self.last_only = "last_only" in inspect.signature(self.backend.step).parameters

    # ------------------------------------------------------------------ prefill
    def _step_last(self, state, ids: torch.Tensor) -> torch.Tensor:
        """The logits (B, V) of the last position of ``ids`` appended to ``state``: the LM head on that row
        alone when the backend's ``step`` takes ``last_only`` (archpool's and transformers' backends do)."""
        if self.last_only:
            return self.backend.step(state, ids, last_only=True)[:, -1]
        return self.backend.step(state, ids)[:, -1]

    def prefill(self, ids: Sequence[int] | torch.Tensor, state=None) -> tuple[Any, torch.Tensor]:
        """Feed ``ids`` (one sequence, or a (B, T) tensor) in chunks; return the state and the
        logits of the last position."""
        x = torch.as_tensor(ids, dtype=torch.long)
        if x.dim() == 1:
            x = x[None]
        state = self.backend.new_state() if state is None else state
        last = None
        for s in range(0, x.shape[1], self.prefill_chunk):
            last = self._step_last(state, x[:, s : s + self.prefill_chunk])
        assert last is not None, "prefill of an empty sequence"
        return state, last

    # ------------------------------------------------------------------ likelihood mode
    def continuation_logprobs(self, prompt_ids: Sequence[int], continuations: Sequence[Sequence[int]]) -> list[float]:
        """Sum of log p(continuation | prompt) for each continuation; one prefill shared by all."""
        state, last = self.prefill(prompt_ids)
        first_lp = torch.log_softmax(last[0], -1)
        out: list[float] = []
        for g in range(0, len(continuations), self.max_batch):
            group = [list(c) for c in continuations[g : g + self.max_batch]]
            lens = [len(c) for c in group]
            if min(lens) == 0:
                raise ValueError("empty continuation")
            totals = [float(first_lp[c[0]]) for c in group]
            m = max(lens)
            if m > 1:
                pad = torch.zeros(len(group), m - 1, dtype=torch.long)
                for i, c in enumerate(group):
                    pad[i, : len(c) - 1] = torch.tensor(c[:-1])
                logits = self.backend.step(self.backend.expand(state, len(group)), pad)
                lp = torch.log_softmax(logits, -1)
                for i, c in enumerate(group):
                    for j in range(1, len(c)):
                        totals[i] += float(lp[i, j - 1, c[j]])
            out.extend(totals)
        return out

    # ------------------------------------------------------------------ generation mode
    def greedy_generate(self, prompt_ids: Sequence[int], max_new_tokens: int, stop_ids: set[int] | None = None) -> list[int]:
        """Greedy decoding with the KV cache; stops after a token in ``stop_ids`` (kept in the output)."""
        state, last = self.prefill(prompt_ids)
        out: list[int] = []
        for _ in range(max_new_tokens):
            nxt = int(torch.argmax(last[0]))
            out.append(nxt)
            if stop_ids and nxt in stop_ids:
                break
            if len(out) == max_new_tokens:
                break
            last = self._step_last(state, torch.tensor([[nxt]]))
        return out

    # ------------------------------------------------------------------ perplexity
    def token_nll(self, ids: torch.Tensor) -> torch.Tensor:
        """Per-token NLL (B, T-1) of ``ids`` (B, T) with full causal context, in prefill chunks.
        Rows run ``max_batch`` at a time."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        if ids.dim() == 1:
            ids = ids[None]
        rows = []
        for g in range(0, ids.shape[0], self.max_batch):
            x = ids[g : g + self.max_batch]
            state = self.backend.new_state()
            parts = []
            for s in range(0, x.shape[1] - 1, self.prefill_chunk):
                chunk = x[:, s : min(s + self.prefill_chunk, x.shape[1] - 1)]
                logits = self.backend.step(state, chunk)
                tgt = x[:, s + 1 : s + 1 + chunk.shape[1]]
                parts.append(
                    torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt.to(logits.device), reduction="none").cpu()
                )
            rows.append(torch.cat(parts, 1))
        return torch.cat(rows, 0)


def lm_from_decoder(model, name: str = "archpool", **kw) -> LM:
    return LM(ArchpoolBackend(model), name=name, **kw)


def lm_from_hf(model, name: str = "hf", **kw) -> LM:
    return LM(HFBackend(model), name=name, **kw)


def stop_token_ids(tokenizer, vocab_size: int, text: str = "\n") -> set[int]:
    """Ids whose decoded text contains ``text`` (HELMET's stop-at-newline), plus EOS."""
    out = set()
    for i in range(vocab_size):
        try:
            if text in tokenizer.decode([i]):
                out.add(i)
        except Exception:  # ids beyond the tokenizer's vocabulary (padded embeddings)
            continue
    eos = getattr(tokenizer, "eos_id", None)
    if eos is not None:
        out.add(eos)
    return out
