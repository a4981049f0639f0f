"""Synthetic task documents mixed into the pretraining stream (data.tasks), resumable like the rest."""

from __future__ import annotations

import pytest

from archpool.data.section import DataSection
from archpool.errors import ConfigError
from archpool.train.data_stage import build_stream


def _stream(data, **kw):
    return build_stream(
        DataSection.from_dict(data), split="pretrain", vocab_size=512, seq_len=64, sequences_per_step=4, micro_batch_size=2, **kw
    )


def _text(stream, n):
    tok = stream.store.tokenizer
    return [tok.decode(stream.next_batch().inputs[0].tolist()) for _ in range(n)]


def test_task_share_puts_task_documents_into_the_stream_and_resumes_exactly(data_section):
    tasks = {"names": ["kv_recall"], "share": 0.5, "length_range": [48, 64], "mix_unit": 64}
    mixed = _stream({**data_section, "tasks": tasks})
    plain = _stream(data_section)
    mixed_text, plain_text = _text(mixed, 12), _text(plain, 12)
    assert mixed_text != plain_text and "kv:" in " ".join(mixed_text)
    assert not any(w in " ".join(plain_text) for w in ("kv:", "q:"))

    first = _stream({**data_section, "tasks": tasks})
    [first.next_batch() for _ in range(6)]
    state = first.state_dict()
    want = [first.next_batch().inputs for _ in range(4)]
    again = _stream({**data_section, "tasks": tasks})
    again.load_state_dict(state)
    got = [again.next_batch().inputs for _ in range(4)]
    assert all((a == b).all() for a, b in zip(want, got))


def test_bad_task_sections_name_the_field(data_section):
    with pytest.raises(ConfigError, match="data.tasks.names"):
        _stream({**data_section, "tasks": {"share": 0.2}})
    with pytest.raises(ConfigError, match="data.tasks.bogus"):
        _stream({**data_section, "tasks": {"names": ["kv_recall"], "bogus": 1}})
    with pytest.raises(ConfigError, match="data.tasks.names"):
        _stream({**data_section, "tasks": {"names": ["no_such_task"], "share": 0.2}})
