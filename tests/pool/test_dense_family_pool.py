"""A pool can use any registered dense family: a ``dense_kv`` training mix, its evaluation, a target on one of
its distance buckets and a calibration of its knob are checked when the pool is parsed, as MQAR's are."""

from __future__ import annotations

import copy
import warnings

import pytest

from archpool.errors import ConfigError
from archpool.pool.spec import parse_pool

BASE = dict(name="p", runs=[dict(name="A"), dict(name="B", axes=dict(swa=True))], train=dict(max_steps=2))
MIX = dict(names=["dense_kv"], share=0.5, params=dict(dense_kv=dict(law="powerlaw", alpha=1.5, max_distance=128)))
EVAL = dict(tasks=["dense_kv"], task_params=dict(dense_kv=dict(law="powerlaw", alpha=1.5, buckets=[64])))


def _parse(**over):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse_pool({**copy.deepcopy(BASE), **over})


def test_a_pool_trains_and_is_scored_on_the_family():
    pool = _parse(
        data=dict(task_tokens=369, tasks=MIX),
        eval=EVAL,
        report=dict(target="dense_kv_acc@256[d>64]", calibrate=dict(knob="alpha", values=[0.5, 1.0, 2.0])),
    )
    assert pool.report.target == "dense_kv_acc@256[d>64]"


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        (dict(data=dict(tasks={**MIX, "params": dict(dense_kv=dict(law="zipf"))})), "data.tasks.params.dense_kv.law", "allowed"),
        (dict(data=dict(task_tokens=100, tasks=MIX)), "data.tasks.params.dense_kv", "need 369 reserved task tokens"),
        (
            dict(data=dict(task_tokens=369), eval=dict(tasks=["dense_kv"], task_params=dict(dense_kv=dict(n_keys=64)))),
            "eval.task_params.dense_kv",
            "need 657 reserved task tokens",
        ),
        (dict(eval=EVAL, report=dict(target="dense_kv_acc@256[d>128]")), "report.target", "no distance bucket [d>128]"),
        (dict(eval=dict(tasks=["mqar"]), report=dict(target="dense_kv_acc@256")), "report.target", "dense_kv is not evaluated"),
        (dict(eval=EVAL, report=dict(target="dense_kv_chain@256")), "report.target", "scored as dense_kv_acc, dense_kv_lp"),
        (
            dict(eval=EVAL, report=dict(target="dense_kv_acc@256", calibrate=dict(knob="chains", values=[0.5]))),
            "report.calibrate.knob",
            "not a parameter of dense_kv",
        ),
    ],
)
def test_its_settings_are_refused_by_field_before_any_work(over, field, words):
    with pytest.raises(ConfigError) as err:
        _parse(**over)
    assert err.value.field == field and words in str(err.value), str(err.value)
