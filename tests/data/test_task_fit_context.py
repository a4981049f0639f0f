"""``data.tasks.fit_context``: pretraining task documents sized to each run's own sequence length."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from archpool.data.section import DataSection, TaskMix
from archpool.errors import ConfigError
from archpool.tasks import task_configs, task_vocab, training_documents
from archpool.tasks.mqar import Answer, Document, answer_errors
from archpool.train.data_stage import build_stream, task_mix
from tests.helpers.corpus import tiny_config

PARAMS = {"mqar": {"n_keys": 8, "n_values": 4, "rebind": True}}
CONFIGS = task_configs(PARAMS, "tasks")
TASKS = {"names": ["mqar"], "share": 0.5, "length_range": [40, 200], "mix_unit": 48, "params": PARAMS}


def _section(store, docs_dir, tmp_path, **tasks):
    cfg = tiny_config(docs_dir, tmp_path / "cache").to_dict()
    return DataSection.from_dict({**cfg, "store": str(store.path), "tasks": {**TASKS, **tasks}})


def _rows(section, seq_len, n_batches=6):
    stream = build_stream(section, split="pretrain", vocab_size=512, seq_len=seq_len, sequences_per_step=4, micro_batch_size=4)
    out = []
    for _ in range(n_batches):
        b = stream.next_batch()
        out += [(b.inputs[i].numpy(), b.targets[i].numpy(), b.doc_ids[i].numpy()) for i in range(b.inputs.shape[0])]
    return stream, out


@pytest.mark.parametrize("seq_len", [64, 128])
def test_each_task_row_is_one_whole_document_of_the_runs_length(tiny_store, docs_dir, tmp_path, seq_len):
    stream, rows = _rows(_section(tiny_store, docs_dir, tmp_path, fit_context=True), seq_len)
    tok = tiny_store.tokenizer
    vocab = task_vocab(tok, CONFIGS["mqar"])
    made = list(training_documents(["mqar"], 60, 1000, (seq_len - 1, seq_len - 1), tok, CONFIGS))
    by_ids = {tuple(d.ids): d for d in made}
    is_task = [(r[2] >> 48) == 1 for r in rows]  # the task component's document ids
    assert all(t.all() or not t.any() for t in is_task), "a row is all task document or none of it"
    task_rows = [r for r, t in zip(rows, is_task) if t.all()]
    assert len(task_rows) >= 4
    for inputs, labels, doc_ids in task_rows:
        assert len(set(doc_ids.tolist())) == 1, "one document per row: every query sees its binding"
        assert inputs[-1] == tok.eos_id
        doc = by_ids[tuple(inputs[:-1].tolist())]  # exactly one generated document
        assert answer_errors(doc, vocab) == []
        scored = np.flatnonzero(labels[:-1] != -100)  # (the EOS's target is the next row's first token)
        assert sorted(scored.tolist()) == sorted(a.pos for a in doc.answers)
        # the row alone answers every query: most recent binding in the row, same value
        answers = sorted(doc.answers, key=lambda a: a.pos)
        row_doc = Document(
            inputs[:-1].tolist(), [Answer(int(p), int(labels[p]), a.distance, 1, -1) for p, a in zip(scored, answers)]
        )
        assert answer_errors(row_doc, vocab) == []
    assert stream.stream.state()["mix_unit"] == seq_len


def test_each_context_has_its_own_cache_entry(tiny_store, docs_dir, tmp_path):
    section = _section(tiny_store, docs_dir, tmp_path, fit_context=True)
    for seq_len in (64, 128):
        stream, _ = _rows(section, seq_len, n_batches=2)
        stream.flush()
    files = sorted(p.name for p in (tiny_store.path / "generated").glob("*.npz"))
    assert len(files) == 2 and len({f.split("-")[0] for f in files}) == 2


def test_without_fit_context_the_stream_is_unchanged(tiny_store, docs_dir, tmp_path):
    _, off = _rows(_section(tiny_store, docs_dir, tmp_path, fit_context=False), 64, 3)
    _, absent = _rows(_section(tiny_store, docs_dir, tmp_path), 64, 3)
    assert all((a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(off, absent))
    mix = TaskMix.from_dict(TASKS)
    assert mix.for_split("pretrain", 64) == (0.5, (40, 200), 48)


def test_fit_context_applies_to_pretraining_only_and_is_validated():
    mix = TaskMix.from_dict({**TASKS, "fit_context": True, "extension_length_range": [300, 400], "extension_mix_unit": 512})
    assert mix.fit_context
    assert mix.for_split("pretrain", 64) == (0.5, (63, 63), 64)
    assert mix.for_split("pretrain", 128) == (0.5, (127, 127), 128)
    assert mix.for_split("extension", 64) == (0.5, (300, 400), 512)
    with pytest.raises(ConfigError, match="data.tasks.fit_context"):
        mix.for_split("pretrain")
    with pytest.raises(ConfigError, match="data.tasks.fit_context"):
        TaskMix.from_dict({**TASKS, "fit_context": "yes"})


def test_fit_context_round_trips_through_the_section(tiny_store, docs_dir, tmp_path):
    section = _section(tiny_store, docs_dir, tmp_path, fit_context=True)
    assert section.tasks.fit_context and section.to_dict()["tasks"]["fit_context"] is True
    assert DataSection.from_dict(section.to_dict()) == section


def test_extension_params_bound_the_extension_mix_only(tiny_store, docs_dir, tmp_path):
    """``extension_params`` lay over ``params`` in the extension stream: its MQAR documents keep every
    query within ``max_distance`` of its binding while the pretraining stream's do not."""
    section = _section(
        tiny_store, docs_dir, tmp_path, length_range=[200, 200], mix_unit=256, extension_params={"mqar": {"max_distance": 16}}
    )
    mix = section.tasks
    assert mix.params_for("pretrain") == PARAMS
    assert mix.params_for("extension") == {"mqar": {**PARAMS["mqar"], "max_distance": 16}}
    assert mix.configs_for("pretrain") == CONFIGS
    assert mix.configs_for("extension") == {"mqar": CONFIGS["mqar"].replace(max_distance=16)}
    tok = tiny_store.tokenizer
    far = [
        a.distance for d in training_documents(["mqar"], 8, 3, (200, 200), tok, mix.configs_for("pretrain")) for a in d.answers
    ]
    near = [
        a.distance for d in training_documents(["mqar"], 8, 3, (200, 200), tok, mix.configs_for("extension")) for a in d.answers
    ]
    assert max(far) > 16 >= max(near)
    [(source, _)], _ = task_mix(section, "extension", tok)
    source_distances = [a.distance for d in itertools.islice(source.documents(3), 8) for a in d.answers]
    assert source_distances == near, "the extension stream's task source is the bounded generator"
    [(pre_source, _)], _ = task_mix(section, "pretrain", tok)
    assert pre_source.cache_key != source.cache_key


@pytest.mark.parametrize(
    ("extension_params", "field"),
    [
        ({"mqar": {"max_distance": 1}}, "data.tasks.extension_params.mqar.max_distance"),
        ({"ruler": {"max_distance": 8}}, "data.tasks.extension_params.ruler"),
        ({"mqar": 5}, "data.tasks.extension_params.mqar"),
        ([1, 2], "data.tasks.extension_params"),
    ],
)
def test_extension_params_errors_name_the_field(extension_params, field):
    with pytest.raises(ConfigError) as e:
        TaskMix.from_dict({**TASKS, "extension_params": extension_params})
    assert e.value.field == field
