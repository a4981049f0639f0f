"""Typed task configs: each family's defaults, checks named by field, overrides laid over a config, the
serialised sections unchanged (only the keys given), and documents byte-identical to those the
dict-parameter generators made."""

from __future__ import annotations

import hashlib
import json
import math
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from archpool.data.section import DataSection, TaskMix
from archpool.errors import ConfigError
from archpool.eval.api import EvalRequest
from archpool.pool.sections import EvalSettings
from archpool.tasks import (
    TASKS,
    MqarConfig,
    SampleConfig,
    build_sample,
    dense_documents,
    dense_params,
    task_config,
    task_configs,
    training_documents,
)
from archpool.tasks.helmet import IclConfig, ShotsConfig
from archpool.tasks.mqar import TaskVocab, make_document
from archpool.tasks.params import Param
from archpool.tasks.recall import KvRecallConfig
from archpool.tasks.ruler import CweConfig, FweConfig, NiahConfig, VtConfig

COMMON = dict(n_choices=10, haystack_texts=None, max_new_tokens=None, step=1)
DEFAULTS = {
    "mqar": dict(
        n_keys=32,
        n_values=8,
        pair_every=8,
        distance="uniform",
        min_distance=2,
        max_distance=None,
        chains=0.0,
        distractors=0.0,
        rebind=False,
        buckets=None,
    ),
    "mqar_rebind": dict(rebind=True),
    "mqar_chain": dict(chains=1.0),
    "niah_single_1": dict(COMMON, haystack="noise", key_type="words", value_type="numbers", num_k=1, num_v=1, num_q=1),
    "niah_multikey_3": dict(haystack="needle", key_type="uuids", value_type="uuids"),
    "niah_multiquery": dict(haystack="corpus", num_k=4, num_q=4),
    "vt": dict(COMMON, num_hops=4, name_len=5, shots=None),
    "cwe": dict(COMMON, num_cw=None, freq_cw=None, freq_ucw=None, shots=None),
    "fwe": dict(COMMON, alpha=2.0),
    "qa": COMMON,
    "json_kv": dict(COMMON, shots=None),
    "rag": dict(COMMON, shots=None),
    "rerank": COMMON,
    "icl": dict(COMMON, n_labels=6),
    "kv_recall": dict(COMMON, n_pairs=4, n_queries=3, value_type="digits", haystack="noise"),
}
CLASSES = {
    "mqar": MqarConfig,
    "mqar_rebind": MqarConfig,
    "mqar_chain": MqarConfig,
    "niah_single_1": NiahConfig,
    "niah_multikey_3": NiahConfig,
    "niah_multiquery": NiahConfig,
    "vt": VtConfig,
    "cwe": CweConfig,
    "fwe": FweConfig,
    "qa": SampleConfig,
    "json_kv": ShotsConfig,
    "rag": ShotsConfig,
    "rerank": SampleConfig,
    "icl": IclConfig,
    "kv_recall": KvRecallConfig,
}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_each_task_has_its_family_config_with_the_defaults(name):
    config = TASKS[name].config
    assert type(config) is CLASSES[name]
    got = config.to_dict()
    assert {k: got[k] for k in DEFAULTS[name]} == DEFAULTS[name]
    assert list(got) == list(type(config).specs())  # every field declares its bounds, in field order


def test_every_registered_task_has_a_config_of_a_known_family():
    dense = {t.family.config for t in TASKS.values() if t.family is not None}  # a dense family declares its own
    assert {type(t.config) for t in TASKS.values()} <= set(CLASSES.values()) | dense


def test_dense_generator_params_are_the_fields_without_the_scoring_buckets():
    generator = {k: v for k, v in DEFAULTS["mqar"].items() if k != "buckets"}
    assert dense_params("mqar_chain", {"chains": 1}) == {**generator, "chains": 1}
    assert "buckets" not in dense_params("mqar", {"buckets": [64]})
    assert list(dense_params("mqar", None)) == [k for k in DEFAULTS["mqar"] if k != "buckets"]


@pytest.mark.parametrize(
    ("name", "params", "field", "words"),
    [
        ("mqar", {"n_keys": "32"}, "p.mqar.n_keys", "must be an integer >= 2 and <= 4096, got '32'"),
        ("mqar", {"n_keys": True}, "p.mqar.n_keys", "must be an integer"),
        ("mqar", {"pair_every": 0}, "p.mqar.pair_every", "must be an integer >= 2"),
        ("mqar", {"chains": 1.5}, "p.mqar.chains", "<= 1"),
        ("mqar", {"pair_evry": 4}, "p.mqar.pair_evry", "did you mean 'pair_every'?"),
        ("mqar", {"min_distance": 10, "max_distance": 5}, "p.mqar.max_distance", ">= min_distance=10"),
        ("mqar_chain", {"buckets": []}, "p.mqar_chain.buckets", "a non-empty list"),
        ("mqar", [1], "p.mqar", "a mapping of task parameters"),
        ("kv_recall", {"n_pairs": 21}, "p.kv_recall.n_pairs", "<= 20"),
        ("kv_recall", {"haystack": "needle"}, "p.kv_recall.haystack", "allowed: noise, corpus"),
        ("vt", {"name_len": 1, "num_hops": 20}, "p.vt.name_len", "too few names"),
        ("cwe", {"freq_cw": 3, "freq_ucw": 3}, "p.cwe.freq_cw", "must exceed freq_ucw=3"),
        ("icl", {"n_lables": 3}, "p.icl.n_lables", "did you mean 'n_labels'?"),
        ("qa", {"haystack_texts": "text"}, "p.qa.haystack_texts", "a list of texts"),
    ],
)
def test_from_a_mapping_bad_values_and_keys_are_refused_by_field(name, params, field, words):
    with pytest.raises(ConfigError) as e:
        task_config(name, params, f"p.{name}")
    assert e.value.field == field and words in e.value.message, str(e.value)


def test_the_class_checks_its_fields_when_built_directly():
    with pytest.raises(ConfigError, match=r"^mqar\.pair_every: must be an integer >= 2"):
        MqarConfig(pair_every=0)
    with pytest.raises(ConfigError, match=r"^task\.n_labels"):
        IclConfig(n_labels=1)
    with pytest.raises(ConfigError, match=r"^x\.n_keys: must be an integer"):
        MqarConfig.from_dict({"n_keys": "32"}, "x")
    assert MqarConfig.from_dict(None) == MqarConfig()


def test_overrides_lay_over_a_config_and_keep_the_rest():
    pre = task_config("mqar_chain", {"n_keys": 16, "min_distance": 4})
    ext = pre.with_overrides({"max_distance": 64}, "ext.mqar")
    assert (ext.n_keys, ext.min_distance, ext.max_distance, ext.chains) == (16, 4, 64, 1.0)
    assert pre.max_distance is None  # frozen: the pretraining config is unchanged
    assert pre.replace(max_distance=64) == ext
    with pytest.raises(ConfigError) as e:
        pre.with_overrides({"max_distance": 3}, "ext.mqar")
    assert e.value.field == "ext.mqar.max_distance"  # the rule across fields sees the laid-over values
    with pytest.raises(ConfigError, match="did you mean 'rebind'"):
        pre.replace(rebnd=True)


def test_a_generator_refuses_another_familys_config(bpe):
    with pytest.raises(TypeError, match="takes a KvRecallConfig"):
        build_sample("kv_recall", bpe, 256, 0, config=NiahConfig())
    with pytest.raises(ConfigError, match="not a dense task"):
        dense_documents("kv_recall", bpe, 256, 1)


def test_mix_configs_are_parsed_once_per_split_with_extension_params_laid_over():
    mix = TaskMix.from_dict(
        {
            "names": ["mqar", "kv_recall"],
            "share": 0.5,
            "params": {"mqar": {"n_keys": 16}},
            "extension_params": {"mqar": {"max_distance": 32}, "kv_recall": {"n_pairs": 6}},
        }
    )
    pre, ext = mix.configs_for("pretrain"), mix.configs_for("extension")
    assert pre == {"mqar": MqarConfig(n_keys=16), "kv_recall": KvRecallConfig()}
    assert ext == {"mqar": MqarConfig(n_keys=16, max_distance=32), "kv_recall": KvRecallConfig(n_pairs=6)}
    assert TaskMix.keys() == [
        "names",
        "share",
        "extension_share",
        "length_range",
        "params",
        "mix_unit",
        "extension_length_range",
        "extension_mix_unit",
        "fit_context",
        "extension_params",
    ]
    with pytest.raises(ConfigError) as e:
        TaskMix.from_dict({"names": ["mqar"], "share": 0.5, "configs": {}}, "runs[0].data.tasks")
    assert e.value.field == "runs[0].data.tasks.configs"
    with pytest.raises(ConfigError) as e:
        TaskMix.from_dict({"names": ["mqar"], "params": {"mqar": {"n_keys": "32"}}}, "runs[0].data.tasks")
    assert e.value.field == "runs[0].data.tasks.params.mqar.n_keys"


def test_an_eval_request_holds_the_typed_configs_and_refuses_bad_ones():
    request = EvalRequest(suites=(), tasks=("mqar",), task_params={"mqar": {"buckets": [64]}})
    assert request.task_config("mqar") == MqarConfig(buckets=[64]) and request.task_params == {"mqar": {"buckets": [64]}}
    assert request.task_config("kv_recall") is TASKS["kv_recall"].config
    with pytest.raises(ConfigError) as e:
        EvalRequest(suites=(), tasks=("mqar",), task_params={"mqar": {"pair_every": 0}})
    assert e.value.field == "task_params.mqar.pair_every"


# ------------------------------------------------------------------------- round trips of valid mappings
def _values(spec: Param) -> st.SearchStrategy:
    hi = None if spec.hi is None else min(spec.hi, 10**6)
    strategy = {
        "int": lambda: st.integers(int(spec.lo), int(hi)),
        "float": lambda: st.floats(spec.lo, spec.hi, allow_nan=False) | st.integers(math.ceil(spec.lo), int(spec.hi)),
        "bool": st.booleans,
        "choice": lambda: st.sampled_from(spec.choices),
        "texts": lambda: st.lists(st.text(max_size=4), max_size=3),
        "edges": lambda: st.lists(st.integers(int(spec.lo), int(hi)), min_size=1, max_size=3),
    }[spec.kind]()
    return strategy | st.none() if spec.optional else strategy


RELATIONS = {"max_distance", "name_len", "freq_cw"}  # fields the rules across fields name


@st.composite
def _valid(draw):
    name = draw(st.sampled_from(sorted(TASKS)))
    specs = TASKS[name].config.specs()
    keys = draw(st.lists(st.sampled_from(sorted(specs)), unique=True, max_size=4))
    params = {k: draw(_values(specs[k])) for k in keys}
    try:
        task_config(name, params)
    except ConfigError as e:
        assert e.field.rsplit(".", 1)[-1] in RELATIONS, str(e)
        assume(False)
    return name, params


@settings(max_examples=150, deadline=None)
@given(_valid())
def test_valid_mappings_round_trip(case):
    name, params = case
    config = task_config(name, params)
    assert {k: config.to_dict()[k] for k in params} == params
    assert type(config).from_dict(config.to_dict()) == config
    settings_ = EvalSettings.from_dict({"task_params": {name: params}})
    assert settings_.to_dict()["task_params"] == {name: params}  # only the keys given: stage keys unchanged
    assert EvalSettings.from_dict(settings_.to_dict()) == settings_
    section = {"tasks": {"names": [name], "share": 0.5, "params": {name: params}, "extension_params": {name: {}}}}
    data = DataSection.from_dict(section)
    assert data.to_dict() == section and DataSection.from_dict(data.to_dict()).to_dict() == section
    assert data.tasks.configs_for("pretrain")[name] == config == data.tasks.configs_for("extension")[name]


def test_a_mapping_of_task_params_gives_one_config_per_task_named():
    configs = task_configs({"mqar": {"n_keys": 16}, "icl": {}}, "eval.task_params")
    assert configs == {"mqar": MqarConfig(n_keys=16), "icl": IclConfig()}
    with pytest.raises(ConfigError) as e:
        task_configs({"mqr": {}}, "eval.task_params")
    assert e.value.field == "eval.task_params.mqr" and "did you mean 'mqar'" in e.value.message
    with pytest.raises(ConfigError) as e:
        task_configs({"mqar": None}, "eval.task_params")
    assert e.value.field == "eval.task_params.mqar"


# ------------------------------------------------------------------------- byte-identical documents
# digests of the documents and samples the dict-parameter generators made from the same parameters
VOCAB = TaskVocab.from_ids(list(range(10, 400)), n_keys=64, n_values=32, n_hops=32, n_filler=64)
COMPOSITE = TaskVocab.composite_from_ids(list(range(1000, 1369)), list(range(10, 100)), n_keys=32, n_values=8)
MQAR_GOLDEN = [
    (VOCAB, 256, MqarConfig(), "86aaab41323f0d2a"),
    (COMPOSITE, 256, MqarConfig(), "15a2436e200e9963"),
    (COMPOSITE, 1024, MqarConfig(rebind=True, distractors=1.0), "35cdb12ef0bafce2"),
    (
        VOCAB,
        512,
        MqarConfig(chains=0.5, distance="powerlaw", min_distance=10, max_distance=200, distractors=0.5, pair_every=4),
        "2ecf4dfe359c0d36",
    ),
]
SAMPLE_PARAMS = {
    "niah_multikey_1": {"num_k": 3, "step": 2},
    "vt": {"num_hops": 3, "shots": 1},
    "cwe": {"num_cw": 4, "freq_cw": 5, "freq_ucw": 2},
    "fwe": {"alpha": 1.5},
    "icl": {"n_labels": 4},
    "kv_recall": {"n_pairs": 6, "haystack": "corpus"},
    "json_kv": {"shots": 1},
    "rerank": {"n_choices": 5},
    "qa": {"max_new_tokens": 12},
}
SAMPLE_GOLDEN = {
    "niah_single_1": "8bd15eb977117b27",
    "niah_single_2": "646147fc16af960c",
    "niah_single_3": "73a4d453d1e4daa7",
    "niah_multikey_1": "6ee0ffa8b3a170d6",
    "niah_multikey_2": "b47fea8df2da62b7",
    "niah_multikey_3": "de5f73e5b3cd5245",
    "niah_multivalue": "21c3b04e0d4f752d",
    "niah_multiquery": "a3f49d5aa4857b53",
    "vt": "0ca1edcd02bd7295",
    "cwe": "f76771e77e2d78cf",
    "fwe": "c0670c6949baa3de",
    "qa": "cfba7d1970fa572b",
    "json_kv": "325a0db6670771e3",
    "rag": "66dd58451d6aecf8",
    "rerank": "59f954375d8ea6e8",
    "icl": "d5cbd17ec69e75f3",
    "kv_recall": "e04363686c0da669",
}


def _digest(docs) -> str:
    h = hashlib.sha256()
    for d in docs:
        if isinstance(d, str):
            h.update(d.encode())
        else:
            h.update(json.dumps([d.ids, [[a.pos, a.gold, a.distance, a.hop, a.chain] for a in d.answers]]).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize(("vocab", "length", "config", "digest"), MQAR_GOLDEN)
def test_mqar_documents_from_a_typed_config_are_byte_identical(vocab, length, config, digest):
    assert _digest(make_document(random.Random(s), length, vocab, config) for s in range(5)) == digest


def test_dense_and_training_documents_from_typed_configs_are_byte_identical(tiny_tokenizer, bpe):
    chain = task_config("mqar_chain", {"min_distance": 65, "pair_every": 32})
    assert _digest(dense_documents("mqar_chain", tiny_tokenizer, 256, 3, seed=0, config=chain)) == "51bf12d8839e2d79"
    rebind = task_config("mqar_rebind", {"n_keys": 24, "n_values": 16, "buckets": [64]})
    assert _digest(dense_documents("mqar_rebind", tiny_tokenizer, 256, 3, seed=1, config=rebind)) == "c4b134f72ab1b5ab"
    configs = task_configs({"mqar": {"n_keys": 16}, "kv_recall": {"n_pairs": 5}}, "tasks")
    assert _digest(training_documents(["mqar", "kv_recall", "vt"], 8, 5, (96, 160), bpe, configs)) == "2e4419931c3fcec5"


def test_samples_from_typed_configs_are_byte_identical(bpe, texts):
    got = {}
    for name in SAMPLE_GOLDEN:
        params = dict(SAMPLE_PARAMS.get(name, {}))
        if name in ("niah_single_2", "kv_recall"):
            params["haystack_texts"] = texts
        s = build_sample(name, bpe, 768, 2, seed=3, config=task_config(name, params or None))
        got[name] = hashlib.sha256(json.dumps(s.to_dict(with_ids=True), sort_keys=True).encode()).hexdigest()[:16]
    assert got == SAMPLE_GOLDEN
