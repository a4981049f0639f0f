"""Every bad pool input is a one-line named error before any work (scripts/input_campaign.sh's cases, kept as
regression cases), and random mutations of the shipped pools give a valid plan or a ConfigError,
never another exception or a hang (hypothesis)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from archpool.cli import main
from archpool.errors import ConfigError
from archpool.pool.plan import build_plan
from archpool.pool.spec import parse_pool, resolve_pool_path

BASE = dict(name="p", runs=[dict(name="A")], train=dict(max_steps=2))

# (pool overrides, field the error names, words in its message)
CASES = [
    (dict(name="../../escape"), "name", "path separator"),
    (dict(name="/abs"), "name", "absolute path"),
    (dict(name=""), "name", "is empty"),
    (dict(runs=5), "runs", "must be a list of runs"),
    (dict(runs=[dict(name="../x")]), "runs[0].name", "letters, digits"),
    (dict(runs=[dict(name="..")]), "runs[..].name", "contains '..'"),
    (dict(model=dict(d_model="abc")), "runs[A].model.d_model", "expected an integer, got 'abc'"),
    (dict(model=dict(d_model=64.0)), "runs[A].model.d_model", "expected an integer, got 64.0"),
    (dict(model=dict(tie_embeddings="no")), "runs[A].model.tie_embeddings", "expected true/false, got 'no'"),
    (dict(data=dict(vocab_size="abc")), "data.vocab_size", "expected an integer"),
    (dict(data=dict(tasks=dict(names=["nosuch"], share=0.5))), "data.tasks.names", "unknown task 'nosuch'"),
    (dict(data=dict(tasks=dict(names=["mqar"], share=2))), "data.tasks.share", "fraction"),
    (dict(extension=[dict(name="base")]), "extension[0].name", "reserved"),
    (dict(extension=[dict(name="../x")]), "extension[0].name", "path separator"),
    (dict(extension=[dict(recipe="rope2")]), "extension[rope2].recipe", "unknown recipe"),
    (dict(extension=[dict(name="ntk", theta_ratio="big")]), "extension[ntk].theta_ratio", "expected a number"),
    (dict(eval=dict(tasks=["nosuch"])), "eval.tasks", "unknown task"),
    (dict(eval=dict(suites=["rulerr"])), "eval.suites", "unknown suite"),
    (dict(eval=dict(lengths=[0])), "eval.lengths", "positive"),
    (dict(eval=dict(n_samples=0)), "eval.n_samples", ">= 1"),
    (dict(eval=dict(modes=["generate"])), "eval.modes", "unknown mode"),
    (dict(eval=dict(nsamples=3)), "eval.nsamples", "unknown setting"),
    (dict(attention=dict(sink_len="long")), "attention.sink_len", "expected an integer"),
    (dict(attention=dict(enabled="yes")), "attention.enabled", "true/false"),
    (dict(report=dict(target=5)), "report.target", "expected a string"),
    (dict(report=dict(short_ctx=-1)), "report.short_ctx", "positive"),
    (dict(train=dict(max_steps=2, lr="fast")), "train.lr", "expected a number"),
    (dict(train=dict(max_steps=2, global_batch_tokens=100)), "train.global_batch_tokens", "not a multiple"),
    (dict(train=dict()), "train.max_steps", "set a budget"),
    (dict(jobs=0), "jobs", "positive integer"),
    (dict(milestones=[1.5]), "milestones", "strictly between 0 and 1"),
    (dict(factorial=dict(axes=dict(swa=[True, False]), name="{0}")), "factorial.name", "name template"),
    (dict(factorial=dict(axes=dict(swa=[True, False]), name="{nope}")), "factorial.name", "unknown axis"),
    (dict(analysis=dict()), "analysis", "unknown pool field"),
    (dict(backend="not a module"), "backend", "dotted name"),
]


@pytest.mark.parametrize("over,field,words", CASES, ids=[c[1] + "-" + str(i) for i, c in enumerate(CASES)])
def test_bad_pool_inputs_are_named_errors(over, field, words):
    with pytest.raises(ConfigError) as err:
        parse_pool({**copy.deepcopy(BASE), **over})
    assert err.value.field == field, str(err.value)
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_deliberate_acceptances():
    """YAML 1.1 reads ``6e-3`` as a string: a float field takes it as the number it spells."""
    pool = parse_pool({**BASE, "model": {"init_std": "8e-2"}, "train": {"max_steps": 2, "lr": "6e-3"}})
    assert pool.runs[0].model.init_std == 0.08


def test_the_cli_turns_every_pool_error_into_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**BASE, "model": {"d_model": "abc"}}))
    assert main(["pool", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == "archpool pool show: error: runs[A].model.d_model: expected an integer, got 'abc' (str)\n"
    assert main(["run", str(bad), "--out", str(tmp_path / "out"), "--no-progress"]) == 2  # before any work
    assert not (tmp_path / "out").exists()
    for argv in (["run", "smoke", "--jobs", "-1"], ["run", "smoke", "--jobs", "0"], ["run", "smoke", "--threads", "0"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2


# ---------------------------------------------------------------------------------------------- property
def _shipped(name: str) -> dict:
    return yaml.safe_load(Path(resolve_pool_path(name)).read_text())


SHIPPED = {name: _shipped(name) for name in ("demo", "smoke")}


def _paths(d, prefix=()):
    """Every key path into the nested mappings (and list items) of a pool."""
    if isinstance(d, dict):
        for k, v in d.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(d, list):
        for i, v in enumerate(d[:3]):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(-2, 300), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.sampled_from(["yes", "no", "true", "abc", "1e-3", "../x", "base", "", "ntk", "olmo3", "layerwise", "7"]),
)


@st.composite
def mutated_pools(draw):
    name = draw(st.sampled_from(sorted(SHIPPED)))
    pool = copy.deepcopy(SHIPPED[name])
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(pool))
        path = draw(st.sampled_from(paths))
        parent = pool
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            parent.pop(path[-1], None)
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=6))] = draw(values)
        else:
            parent[path[-1]] = draw(values)
    return pool


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_pools())
def test_mutated_pools_plan_or_fail_with_a_named_error(pool):
    try:
        spec = parse_pool(pool)
    except ConfigError as e:
        assert e.field and "\n" not in str(e)
        return
    nodes = build_plan(spec)  # a pool that loads can be planned
    assert nodes and all(n.key for n in nodes)
    for run in spec.runs:  # and its values are the types the stages expect
        assert isinstance(run.model.tie_embeddings, bool) and isinstance(run.model.d_model, int)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
@example("?")  # a null key: {None: None}
@example("?\n1: 2\n")  # keys of mixed types: {None: None, 1: 2}
def test_arbitrary_pool_files_are_shown_or_refused_in_one_line(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "pool.yaml"
    path.write_text(text)
    code = main(["pool", "show", str(path)])
    assert code in (0, 2)
