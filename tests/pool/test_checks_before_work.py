"""Every pool setting is checked when the pool is parsed, before any data or training: task parameters
(``data.tasks.params``, ``extension_params``, ``eval.task_params``) typed and bounded per task, reserved
task tokens that hold MQAR's vocabulary, optional packages training and lm-eval's RULER ask for, a report
target that every compared run measures, the attention stage's settings as each analysis runs them, the
extension's batches as its trainer splits them, and RULER's lengths as the eval stage asks for them."""

from __future__ import annotations

import copy
import sys
import warnings

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from archpool.errors import ConfigError
from archpool.pool.spec import parse_pool, shipped_pools
from archpool.tasks import TASKS, task_config
from archpool.tasks.params import MAX_LENGTH
from archpool.train.config import RunConfig
from tests.helpers.pool import run_cli

BASE = dict(name="p", runs=[dict(name="A"), dict(name="B", axes=dict(swa=True))], train=dict(max_steps=2))
LADDER = [dict(name="ntk", budgets=[0, 4]), dict(name="temp", archs=["B"], qk_gain_alpha=0.1)]


def _mix(**params):
    return dict(data=dict(tasks=dict(names=sorted(params), share=0.5, params=params)))


CASES = [
    # data.tasks.params: every task's parameters typed and bounded, unknown keys refused with a did-you-mean
    (_mix(mqar=dict(n_keys="32")), "data.tasks.params.mqar.n_keys", "must be an integer"),
    (_mix(mqar=dict(pair_every=0)), "data.tasks.params.mqar.pair_every", ">= 2"),
    (dict(eval=dict(task_params=dict(mqar=dict(pair_every=0)))), "eval.task_params.mqar.pair_every", ">= 2"),
    (dict(eval=dict(task_params=dict(mqar=dict(n_keys="32")))), "eval.task_params.mqar.n_keys", "must be an integer"),
    (_mix(mqar=dict(distractors=-1)), "data.tasks.params.mqar.distractors", ">= 0"),
    (_mix(mqar=dict(n_keys=10**9)), "data.tasks.params.mqar.n_keys", "<= 4096"),
    (_mix(mqar=dict(n_keys=True)), "data.tasks.params.mqar.n_keys", "must be an integer"),
    (_mix(mqar=dict(chains="0.5")), "data.tasks.params.mqar.chains", "must be a number"),
    (_mix(mqar=dict(max_distance=True)), "data.tasks.params.mqar.max_distance", "must be an integer"),
    (_mix(mqar=dict(rebind="yes")), "data.tasks.params.mqar.rebind", "true or false"),
    (_mix(mqar=dict(pairevery=4)), "data.tasks.params.mqar.pairevery", "did you mean 'pair_every'"),
    (_mix(kv_recall=dict(n_pairs="x")), "data.tasks.params.kv_recall.n_pairs", "must be an integer"),
    (_mix(kv_recall=dict(n_pairs=41)), "data.tasks.params.kv_recall.n_pairs", "<= 20"),
    (_mix(kv_recall=dict(npairs=3)), "data.tasks.params.kv_recall.npairs", "did you mean 'n_pairs'"),
    (_mix(kv_recall=dict(haystack="essays")), "data.tasks.params.kv_recall.haystack", "allowed: noise, corpus"),
    (_mix(kv_recall=None), "data.tasks.params.kv_recall", "a mapping"),
    (
        dict(data=dict(tasks=dict(names=["mqar"], share=0.5, extension_params=dict(mqar=dict(min_distance=0))))),
        "data.tasks.extension_params.mqar.min_distance",
        ">= 1",
    ),
    # the mix's MQAR and the evaluated MQAR fit the reserved task tokens
    (dict(data=dict(task_tokens=100, **_mix(mqar={})["data"])), "data.tasks.params.mqar", "need 369 reserved task tokens"),
    (
        dict(data=dict(task_tokens=369), eval=dict(tasks=["mqar"], task_params=dict(mqar=dict(n_keys=64)))),
        "eval.task_params.mqar",
        "need 657 reserved task tokens",
    ),
    # eval.task_params of prompt + answer tasks
    (dict(eval=dict(task_params=dict(kv_recall=dict(n_choices="3")))), "eval.task_params.kv_recall.n_choices", "integer"),
    (dict(eval=dict(task_params=dict(icl=dict(n_labels=0)))), "eval.task_params.icl.n_labels", ">= 2"),
    (dict(eval=dict(task_params=dict(vt=dict(num_hops=-1)))), "eval.task_params.vt.num_hops", ">= 1"),
    (dict(eval=dict(task_params=dict(vt=dict(name_len=1, num_hops=20)))), "eval.task_params.vt.name_len", "too few names"),
    (dict(eval=dict(task_params=dict(fwe=dict(alpha="x")))), "eval.task_params.fwe.alpha", "must be a number"),
    (dict(eval=dict(task_params=dict(cwe=dict(num_cw=1.5)))), "eval.task_params.cwe.num_cw", "must be an integer"),
    (dict(eval=dict(task_params=dict(cwe=dict(freq_cw=2, freq_ucw=3)))), "eval.task_params.cwe.freq_cw", "exceed"),
    (dict(eval=dict(task_params=dict(niah_single_1=dict(haystack="x")))), "eval.task_params.niah_single_1.haystack", "allowed"),
    (dict(eval=dict(task_params=dict(mqar=dict(buckets=[0])))), "eval.task_params.mqar.buckets", "positive integers"),
    # optional packages
    (dict(train=dict(max_steps=2, wandb=dict(project="x"))), "train.wandb", "pip install wandb"),
    # the report target: evaluated, in a mode that makes it, at a bucket and rung that exist, for every run
    (dict(eval=dict(tasks=["mqar"]), report=dict(target="kv_recall_ll@128")), "report.target", "kv_recall is not evaluated"),
    (dict(eval=dict(suites=["tiny"]), report=dict(target="ruler_ll@256")), "report.target", "suite ruler is not evaluated"),
    (dict(eval=dict(tasks=["kv_recall"]), report=dict(target="kv_recall_gen@256")), "report.target", "scored as kv_recall_ll"),
    (
        dict(extension=LADDER, eval=dict(tasks=["mqar"]), report=dict(target="temp_mqar_acc@128")),
        "report.target",
        "1 of 2 runs: A_s0",
    ),
    (
        dict(extension=LADDER, eval=dict(tasks=["mqar"]), report=dict(target="mqar_acc@128#ext5")),
        "report.target",
        "budgets are 0, 4",
    ),
    (dict(extension=LADDER, eval=dict(tasks=["mqar"]), report=dict(target="mqar_acc@128")), "report.target", "name a rung"),
    (
        dict(
            extension=LADDER,
            eval=dict(tasks=["mqar"], task_params=dict(mqar=dict(buckets=[64]))),
            report=dict(target="mqar_acc@256[d>128]#ext4"),
        ),
        "report.target",
        "no distance bucket [d>128]",
    ),
    # the attention stage's settings as its analyses run them, the extension's trainer geometry, RULER's lengths
    (
        dict(long_ctx=64, extension=dict(length=48), runs=[dict(name="A", model=dict(max_seq_len=32))]),
        "attention.long_ctx",
        "cannot hold a 13-token needle",
    ),
    (dict(attention=dict(bos_id=5000)), "attention.bos_id", "outside the model's vocabulary"),
    # the synthetic stream has no tokenizer: nothing to evaluate or analyse
    (dict(data=dict(synthetic=dict(seed=0)), attention=dict(enabled=False)), "eval.enabled", "data.synthetic prepares none"),
    (dict(data=dict(synthetic=dict(seed=0)), eval=dict(enabled=False)), "attention.enabled", "data.synthetic prepares none"),
    (
        dict(extension=dict(name="ntk", global_batch_tokens=3072, micro_batch_size=2)),
        "extension[ntk].micro_batch_size",
        "3 sequences does not split into micro-batches of 2",
    ),
    (
        dict(eval=dict(tasks=["mqar"], lengths=[32], base=False, harness=dict(ruler=dict(tasks=["niah_single_1"])))),
        "eval.harness.ruler.lengths",
        "the eval's lengths after extension",
    ),
]


@pytest.mark.parametrize("over,field,words", CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_settings_checked_late_are_refused_when_the_pool_is_parsed(over, field, words, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    with pytest.raises(ConfigError) as err:
        parse_pool({**copy.deepcopy(BASE), **over})
    assert err.value.field == field, str(err.value)
    assert words in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "over,line",
    [
        (_mix(mqar=dict(n_keys="32")), "data.tasks.params.mqar.n_keys: must be an integer >= 2 and <= 4096, got '32'"),
        (dict(eval=dict(task_params=dict(mqar=dict(pair_every=0)))), "eval.task_params.mqar.pair_every: must be an integer >= 2"),
    ],
)
def test_archpool_run_refuses_a_bad_task_parameter_in_one_line_before_any_work(over, line, tmp_path):
    pool = tmp_path / "p.yaml"
    pool.write_text(yaml.safe_dump({**copy.deepcopy(BASE), **over}))
    r = run_cli("run", str(pool), "--out", str(tmp_path / "out"), "--no-progress")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"archpool run: error: {line}") and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "out").exists()


ACCEPTED = [
    dict(data=dict(synthetic=dict(seed=0)), eval=dict(enabled=False), attention=dict(enabled=False)),
    _mix(mqar=dict(chains=0.2, pair_every=4, rebind=True, buckets=[64])),
    _mix(kv_recall=dict(n_pairs=20, n_queries=3, value_type="letters", haystack="corpus")),
    dict(train=dict(max_steps=2, wandb=dict(mode="disabled"))),
    dict(data=dict(task_tokens=369), eval=dict(tasks=["mqar"])),
    dict(extension=LADDER, eval=dict(tasks=["mqar"]), report=dict(target="mqar_acc@128#ext4")),
    dict(extension=LADDER, eval=dict(tasks=["mqar"]), report=dict(target="mqar_acc@128#ladder_mean")),
    dict(
        extension=LADDER,
        eval=dict(tasks=["mqar"], task_params=dict(mqar=dict(buckets=[64]))),
        report=dict(target="mqar_acc@256[d>64]#ext0"),
    ),
    dict(eval=dict(suites=["tiny"]), report=dict(target="tiny_ll@256")),
    dict(report=dict(target="kv_recall_lp@128")),
    dict(
        long_ctx=64, extension=dict(length=48), attention=dict(retrieval=False), runs=[dict(name="A", model=dict(max_seq_len=32))]
    ),
    dict(
        long_ctx=64, extension=dict(length=48), attention=dict(enabled=False), runs=[dict(name="A", model=dict(max_seq_len=32))]
    ),
    dict(attention=dict(bos_id=4095)),
    dict(extension=dict(name="ntk", global_batch_tokens=4096, micro_batch_size=2)),
    dict(eval=dict(tasks=["mqar"], lengths=[32], base=False, harness=dict(ruler=dict(tasks=["niah_single_1"], lengths=[64])))),
]


@pytest.mark.parametrize("over", ACCEPTED)
def test_valid_neighbours_pass(over):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parse_pool({**copy.deepcopy(BASE), **over})


def test_wandb_installed_passes(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", sys)  # any module stands for it
    parse_pool({**copy.deepcopy(BASE), "train": dict(max_steps=2, wandb=dict(project="x"))})


def test_ruler_without_lm_eval_is_refused_when_the_pool_is_parsed(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "lm_eval" else find_spec(name, *a))
    over = dict(eval=dict(tasks=["mqar"], harness=dict(ruler=dict(tasks=["niah_single_1"]))))
    with pytest.raises(ConfigError, match=r"^eval\.harness\.ruler: lm_eval not installed: pip install 'archpool\[harness\]'"):
        parse_pool({**copy.deepcopy(BASE), **over})


def test_archpool_train_config_refuses_wandb_without_the_package_on_load(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    run = dict(model=dict(preset="llama3", size="tiny"), train=dict(max_steps=2, wandb=dict(project="x")))
    with pytest.raises(ConfigError, match=r"^train\.wandb: .*pip install wandb"):
        RunConfig.from_dict(run)
    RunConfig.from_dict({**run, "train": dict(max_steps=2, wandb=dict(mode="disabled"))})


@pytest.mark.parametrize("name", shipped_pools())
def test_shipped_pools_pass_every_check(name):
    from archpool.pool.spec import load_pool

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_pool(name)


def test_every_task_declares_its_parameters_and_its_defaults_pass_them():
    for name, task in TASKS.items():
        assert set(task.config.specs()) == set(task.config.to_dict()), name
        assert task_config(name, None) is task.config  # built (so checked against its bounds) when registered


def test_bucket_labels_match_the_dense_scorer():
    from archpool.eval.dense import bucket_label, bucket_labels, default_buckets, score_rows

    for length, buckets in ((256, None), (1024, [64, 128, 512]), (100, [200])):
        scored = score_rows([], length, buckets or default_buckets(length))
        assert sorted(bucket_labels(buckets, length)) == sorted({*scored["buckets"], *scored["tails"]}), (length, buckets)
    assert bucket_label(128, None) == "d>128"


def test_task_length_bound_is_the_models():
    from archpool.model.config import MAX_SEQ_LEN

    assert MAX_LENGTH == MAX_SEQ_LEN


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10**10),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(TASKS)),
    st.dictionaries(
        st.sampled_from(
            [
                "n_keys",
                "pair_every",
                "n_pairs",
                "n_labels",
                "alpha",
                "shots",
                "num_hops",
                "n_choices",
                "chains",
                "max_distance",
                "haystack",
                "bogus",
            ]
        ),
        scalars,
        max_size=3,
    ),
)
def test_task_parameters_are_accepted_within_bounds_or_refused_by_name(name, params):
    """Any parameter mapping is either accepted, with every value of its declared type, or refused with
    a ConfigError naming the task's field; never another exception."""
    try:
        p = task_config(name, params)
    except ConfigError as e:
        assert e.field.startswith(f"tasks.{name}"), e.field
        return
    for key, value in params.items():
        spec = p.specs()[key]
        if value is not None and spec.kind == "int":
            assert isinstance(getattr(p, key), int) and not isinstance(getattr(p, key), bool)
