"""Pool validation refuses, before any work, every value a stage would reject late or accept wrongly:
unknown task names and parameters, extensions that cannot run, a model vocabulary smaller than the
data's, a report target no stage measures, reserved result columns, bounds on counts and names."""

from __future__ import annotations

import copy

import pytest

from archpool.errors import ConfigError
from archpool.pool.spec import MAX_RUNS, MAX_SEEDS, parse_pool

BASE = dict(name="p", runs=[dict(name="A")], train=dict(max_steps=2))

# (pool overrides, field the error names, words in its message)
CASES = [
    # task_params: unknown task names and parameters, with did-you-mean
    (dict(eval=dict(task_params=dict(mqar=dict(n_keyz=3)))), "eval.task_params.mqar.n_keyz", "did you mean 'n_keys'"),
    (dict(eval=dict(task_params=dict(mqqar=dict()))), "eval.task_params.mqqar", "did you mean 'mqar'"),
    (dict(eval=dict(task_params=dict(kv_recall=dict(n_pairz=3)))), "eval.task_params.kv_recall.n_pairz", "unknown"),
    (dict(eval=dict(task_params=dict(mqar=dict(n_keys=1)))), "eval.task_params.mqar.n_keys", ">= 2"),
    (dict(eval=dict(task_params=dict(mqar=dict(buckets=[0])))), "eval.task_params.mqar.buckets", "positive integers"),
    (dict(eval=dict(task_params=dict(mqar=5))), "eval.task_params.mqar", "a mapping"),
    # bounds on counts and lengths
    (dict(seeds=10**9), "seeds", "cap"),
    (dict(seeds=list(range(MAX_SEEDS + 1))), "seeds", "cap"),
    (dict(seeds=[2**40]), "seeds", "[0, 4294967295]"),
    (dict(runs=[dict(name="A", seeds=10**6)]), "runs[A].seeds", "cap"),
    (dict(eval=dict(lengths=[100_000_000])), "eval.lengths", "longest length"),
    (dict(eval=dict(n_samples=10**9)), "eval.n_samples", "cap"),
    (dict(eval=dict(length_ratios=[1e6])), "eval.length_ratios", "cap"),
    (dict(factorial=dict(axes={"swa": [True, False] * 200, "qk_norm": ["none"] * 200})), "factorial.axes", "cap"),
    # non-finite and huge numbers
    (dict(model=dict(rope=dict(theta="1e309"))), "runs[A].model.rope.theta", "finite"),
    (dict(model=dict(rope=dict(theta=float("inf")))), "runs[A].model.rope.theta", "finite"),
    (dict(model=dict(init_std=float("nan"))), "runs[A].model.init_std", "finite"),
    (dict(train=dict(max_steps=2, lr="1e309")), "train.lr", "finite"),
    (dict(model=dict(n_layers=2_000_000_000)), "runs[A].model.n_layers", "exceeds"),
    (dict(model=dict(d_model=2**70)), "runs[A].model.d_model", "64-bit"),
    (dict(model=dict(d_model=1 << 16, n_layers=1 << 10)), "runs[A].model.n_layers", "parameter budget"),
    # validation before work: what the extend stage and data stage would refuse later
    (dict(extension=[dict(name="ntk", length=64)]), "extension[ntk].length", "must exceed the pretraining context"),
    (
        dict(extension=[dict(name="ntk", budgets=[1], warmup_steps=5)]),
        "extension[ntk].warmup_steps",
        "exceed the 1-step extension",
    ),
    (dict(model=dict(vocab_size=300), data=dict(vocab_size=4096)), "runs[A].model.vocab_size", "smaller than the data"),
    (dict(model=dict(vocab_size=300), data=dict(synthetic=dict(vocab_size=500))), "runs[A].model.vocab_size", "smaller"),
    (dict(report=dict(target="ruler_ll@99999")), "report.target", "no stage measures length 99999"),
    (dict(report=dict(target="base_mqar_acc@99999[d>64]")), "report.target", "before extension"),
    (dict(report=dict(target="swa")), "report.target", "design column"),
    (dict(report=dict(target="ruler_ll@512", covariates=["ruler_ll@512"])), "report.covariates", "cannot explain itself"),
    (dict(runs=[dict(name="A" * 250)], seeds=[1234567]), "runs[" + "A" * 250 + "].name", "seed suffix"),
    # silently accepted names and columns
    (dict(name="pool\u202eevil"), "name", "control character"),
    (dict(name="zero\u200bwidth"), "name", "control character"),
    (dict(runs=[dict(name="A", columns=dict(run="x"))]), "runs[A].columns.run", "writes itself"),
    (dict(runs=[dict(name="A", columns=dict(pretrain_loss=1))]), "runs[A].columns.pretrain_loss", "writes itself"),
    (dict(runs=[dict(name="A", columns={"ruler_ll@512": 1})]), "runs[A].columns.ruler_ll@512", "writes itself"),
    (dict(runs=[dict(name="A", columns=dict(note=[1, 2]))]), "runs[A].columns.note", "one value"),
    (dict(runs=[dict(name="A", columns={5: "x"})]), "runs[A].columns", "printable string"),
]


@pytest.mark.parametrize("over,field,words", CASES, ids=[f"{i}-{c[1][:40]}" for i, c in enumerate(CASES)])
def test_bounds_and_late_errors_fail_at_validation(over, field, words):
    with pytest.raises(ConfigError) as err:
        parse_pool({**copy.deepcopy(BASE), **over})
    assert err.value.field == field, str(err.value)
    assert words in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_valid_neighbours_still_pass():
    """The checks refuse only what cannot work: nearby valid values pass."""
    pool = parse_pool(
        {
            **BASE,
            "seeds": 3,
            "eval": {"task_params": {"mqar": {"n_keys": 8, "buckets": [64]}, "kv_recall": {}}, "lengths": [512]},
            "extension": [{"name": "ntk", "budgets": [2], "warmup_steps": 1}],
            "report": {"target": "tiny_ll@512#ext2", "covariates": ["init"]},
            "runs": [{"name": "A", "columns": {"paper": "-7B", "note": "=1+1"}}],
        }
    )
    assert len(pool.runs) == 3
    assert pool.runs[0].columns == {"paper": "-7B", "note": "=1+1"}


def test_run_cap_constant_is_enforced_on_expansion():
    seeds = list(range(MAX_SEEDS))
    runs = [dict(name=f"A{i}") for i in range(MAX_RUNS // MAX_SEEDS + 1)]
    with pytest.raises(ConfigError, match="runs exceed the cap"):
        parse_pool({**BASE, "seeds": seeds, "runs": runs})


@pytest.mark.parametrize(
    "over,field",
    [
        (dict(train=dict(max_steps=2, micro_batch_size=10**9)), "train.micro_batch_size"),
        (dict(train=dict(max_steps=2, global_batch_tokens=2**40)), "train.global_batch_tokens"),
        (dict(extension=[dict(name="ntk", length=2**30)]), "extension[ntk].length"),
        (dict(extension=[dict(name="ntk", budgets=list(range(1, 20_000)))]), "extension[ntk].budgets"),
    ],
)
def test_training_sizes_are_capped(over, field):
    with pytest.raises(ConfigError, match="exceed") as err:
        parse_pool({**copy.deepcopy(BASE), **over})
    assert err.value.field == field


def test_train_config_sequence_length_is_capped():
    from archpool.train.config import TrainConfig

    with pytest.raises(ConfigError, match="train.seq_len: 1,073,741,824 exceeds"):
        TrainConfig(max_steps=2, seq_len=2**30)
