"""One tokenizer per pool: byte-level BPE trained with HF ``tokenizers``, or one the user supplies.

``Tokenizer`` is the wrapper every stage uses. ``encode`` never adds BOS/EOS (the streams add them
explicitly) and treats special-token strings found in the text as ordinary text, so a document can
never inject an EOS. ``hash`` is the sha256 of the canonical ``tokenizer.json`` content: a run
records it, and a run whose store carries another hash refuses to start (``require_tokenizer``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from archpool.errors import DataError
from archpool.io import atomic_write_text
from archpool.safeload import read_json_object, read_text_bounded

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, PAD]  # ids 0, 1, 2 in a tokenizer trained here
TOKENIZER_MAX_BYTES = 512 << 20  # a tokenizer.json; large vocabularies take tens of MB
TASK_TOKEN = re.compile(r"^<\|t(\d+)\|>$")  # reserved task tokens <|t0|>, <|t1|>, ... (synthetic tasks' vocabularies)

# A line break between two non-space characters is always a pre-token boundary of the byte-level
# regex, so encoding the pieces separately yields exactly the tokens of the whole text.
_SAFE_SPLIT = re.compile(r"(?<=\S\n)(?=\S)")


class Tokenizer:
    """A HF ``tokenizers.Tokenizer`` with the pool's BOS/EOS/PAD ids and a content hash."""

    def __init__(self, hf, *, bos: str | None = None, eos: str | None = None, pad: str | None = None):
        self._tok = hf
        self._tok.encode_special_tokens = True  # "<|eos|>" in a document is text, not a control token
        self._json = hf.to_str()
        self.hash = hashlib.sha256(self._json.encode()).hexdigest()
        vocab = hf.get_vocab(with_added_tokens=True)

        def pick(explicit, candidates, what):
            for name in ([explicit] if explicit else []) + candidates:
                if name in vocab:
                    return vocab[name]
            if explicit:
                raise DataError(f"tokenizer: special token {explicit!r} ({what}) is not in the vocabulary")
            return None

        self.bos_id = pick(bos, [BOS, "<s>", "<|begin_of_text|>", "<|endoftext|>", "<bos>"], "BOS")
        self.eos_id = pick(eos, [EOS, "</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"], "EOS")
        self.pad_id = pick(pad, [PAD, "<pad>", "<|padding|>", "[PAD]"], "padding")
        if self.eos_id is None:
            raise DataError("tokenizer: no end-of-document token found (tried <|eos|>, </s>, <|endoftext|>, ...)")
        if self.bos_id is None:
            self.bos_id = self.eos_id
        if self.pad_id is None:
            self.pad_id = self.eos_id

    @property
    def task_ids(self) -> list[int]:
        """Ids of the reserved task tokens ``<|t0|>, <|t1|>, ...`` in index order (empty if none)."""
        found = []
        for name, tid in self._tok.get_vocab(with_added_tokens=True).items():
            m = TASK_TOKEN.match(name)
            if m:
                found.append((int(m.group(1)), tid))
        return [tid for _, tid in sorted(found)]

    def with_task_tokens(self, n: int) -> Tokenizer:
        """A copy with ``n`` reserved task tokens added as special tokens after the vocabulary."""
        from tokenizers import Tokenizer as HFTokenizer

        hf = HFTokenizer.from_str(self._json)
        hf.add_special_tokens([f"<|t{i}|>" for i in range(n)])
        names = {
            "bos": self._tok.id_to_token(self.bos_id),
            "eos": self._tok.id_to_token(self.eos_id),
            "pad": self._tok.id_to_token(self.pad_id),
        }
        return Tokenizer(hf, **names)

    # -- encoding ---------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def encode_documents(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode_batch`` for long documents: pieces split at exact pre-token boundaries are
        encoded in one batch (better parallelism), then re-joined; identical output."""
        pieces: list[str] = []
        counts: list[int] = []
        for t in texts:
            parts = _split_exact(t)
            pieces.extend(parts)
            counts.append(len(parts))
        flat = self.encode_batch(pieces)
        out, i = [], 0
        for c in counts:
            ids: list[int] = []
            for p in flat[i : i + c]:
                ids.extend(p)
            out.append(ids)
            i += c
        return out

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    # -- persistence ------------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike) -> Path:
        path = Path(directory) / "tokenizer.json"
        atomic_write_text(path, self._json)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> Tokenizer:
        """A ``tokenizer.json`` file, or a directory holding one (a HF tokenizer directory)."""
        from tokenizers import Tokenizer as HFTokenizer

        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise DataError(f"{path}: no tokenizer.json here (give a tokenizer.json file or a HF tokenizer directory)")
        try:
            hf = HFTokenizer.from_str(read_text_bounded(p, TOKENIZER_MAX_BYTES))
        except Exception as e:  # tokenizers raises plain Exception subclasses
            raise DataError(f"{p}: not a readable HF tokenizer.json ({e})") from None
        names = _special_names_from_config(p.parent)
        return cls(hf, **names)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, hash={self.hash[:12]})"


def _split_exact(text: str, target: int = 2048) -> list[str]:
    """Split ``text`` into pieces of roughly ``target`` characters at exact pre-token boundaries."""
    if len(text) <= 2 * target:
        return [text]
    parts = _SAFE_SPLIT.split(text)
    out: list[str] = []
    buf: list[str] = []
    n = 0
    for p in parts:
        buf.append(p)
        n += len(p)
        if n >= target:
            out.append("".join(buf))
            buf, n = [], 0
    if buf:
        out.append("".join(buf))
    return out


def _special_names_from_config(directory: Path) -> dict[str, str | None]:
    """BOS/EOS/PAD names from a HF ``tokenizer_config.json`` / ``special_tokens_map.json``, if any;
    ConfigError naming a file that is there but not a JSON object."""
    names: dict[str, str | None] = {}
    for fname in ("special_tokens_map.json", "tokenizer_config.json"):
        f = directory / fname
        if not f.is_file():
            continue
        cfg = read_json_object(f)
        for key, ours in (("bos_token", "bos"), ("eos_token", "eos"), ("pad_token", "pad")):
            v = cfg.get(key)
            if isinstance(v, dict):
                v = v.get("content")
            if isinstance(v, str) and ours not in names:
                names[ours] = v
    return names


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    *,
    min_frequency: int = 2,
    special_tokens: Sequence[str] = tuple(SPECIAL_TOKENS),
    show_progress: bool = False,
) -> Tokenizer:
    """Train a byte-level BPE of ``vocab_size`` (special tokens included) on ``texts``.

    Deterministic for the same texts in the same order. Tiny inputs are fine: the vocabulary then
    simply stops short of ``vocab_size``.
    """
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    if vocab_size < 256 + len(special_tokens):
        raise DataError(
            f"vocab_size: must be at least {256 + len(special_tokens)} (256 bytes + special tokens), got {vocab_size}"
        )
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    hf.train_from_iterator(texts, trainer=trainer)
    return Tokenizer(hf)


def require_tokenizer(expected_hash: str | None, tokenizer_or_hash: Tokenizer | str, where: str = "run") -> None:
    """Refuse to go on when a run recorded ``expected_hash`` and the data now uses another tokenizer."""
    actual = tokenizer_or_hash if isinstance(tokenizer_or_hash, str) else tokenizer_or_hash.hash
    if expected_hash and expected_hash != actual:
        raise DataError(
            f"{where}: tokenizer hash {actual[:16]}… differs from the recorded {expected_hash[:16]}…; "
            "every member of a pool must use the same tokenizer (re-prepare the data or start a new pool)"
        )
