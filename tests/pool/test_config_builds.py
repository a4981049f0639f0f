"""Each typed config is built once where it is read: the pool's sections, its task configs, its runs'
pretraining configs and each phase's evaluation request at parse; in a worker, at the plan's read-back and
nowhere after it (the stages take the node's typed configs; an eval node builds its one request from
them). Counted on a real pool of one trained run (pretraining, an extension ladder, evaluations before and
after), run in this process the way a worker runs it (:func:`archpool.pool.job.run_job`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from archpool import columns
from archpool import config as config_module
from archpool.eval import api
from archpool.pool import spec as spec_module
from archpool.tasks import params

# the pool's own typed configs (ModelConfig, RopeConfig and the extension's derived TrainConfig are also
# read from checkpoints and planned by the extend stage: artefacts, not the pool's settings)
POOL_CONFIGS = ("EvalSettings", "ReportSettings", "Settings", "SourceConfig", "DataConfig", "ExtensionConfig", "TaskMix",
                "MqarConfig", "KvRecallConfig", "EvalRequest", "run_train_config", "target")  # fmt: skip
TARGET = "mqar_acc@256#ladder_mean"  # report.target: parsed once where the pool is read


@pytest.fixture
def builds(monkeypatch):
    """Constructions by class name (``run_train_config``: a run's pretraining config) into ``phase[0]``."""
    counts: Counter[tuple[str, str]] = Counter()
    phase = ["import"]

    def counted(cls: type, attr: str = "__post_init__") -> None:
        real = getattr(cls, attr)

        def wrapped(self, *a, **k):
            counts[phase[0], type(self).__name__] += 1
            return real(self, *a, **k)

        monkeypatch.setattr(cls, attr, wrapped)

    counted(config_module.Config)
    counted(params.TaskConfig)
    counted(api.EvalRequest)
    real_parse = columns.ColumnKey.parse.__func__

    def parse(cls, column):
        if column == TARGET:
            counts[phase[0], "target"] += 1
        return real_parse(cls, column)

    monkeypatch.setattr(columns.ColumnKey, "parse", classmethod(parse))
    real_train = spec_module.run_train_config

    def train(*a, **k):
        counts[phase[0], "run_train_config"] += 1
        return real_train(*a, **k)

    monkeypatch.setattr(spec_module, "run_train_config", train)
    return counts, phase


def _pool(tmp_path: Path) -> Path:
    """One trained run on a small text file with a given tokenizer: MQAR and kv_recall scored before and
    after an extension ladder (two rungs), MQAR's parameters set in the pool file."""
    from tests.helpers.tokenizers import pseudo_bpe, pseudo_texts

    texts = pseudo_texts()
    (tmp_path / "text").mkdir()
    for i, text in enumerate(texts * 4):  # a document per file
        (tmp_path / "text" / f"{i:03d}.txt").write_text(text)
    pseudo_bpe(texts).save(tmp_path)
    spec = dict(
        name="builds",
        long_ctx=256,
        seeds=[0],
        data=dict(sources=[dict(kind="files", path=str(tmp_path / "text"))], tokenizer=str(tmp_path / "tokenizer.json")),
        model=dict(d_model=32, n_layers=2, n_heads=4),
        train=dict(max_steps=2, global_batch_tokens=1024, micro_batch_size=8, log_every=1, ckpt_every=2, warmup_steps=1),
        extension=[dict(name="ntk", budgets=[0, 1], length_ratio=2)],
        eval=dict(tasks=["mqar", "kv_recall"], modes=["ll"], n_samples=2, task_params={"mqar": {"n_keys": 4}}),
        attention=dict(enabled=False),
        report=dict(target=TARGET),
        runs=[dict(name="A")],
    )
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _by_class(counts: Counter[tuple[str, str]], phase: str) -> dict[str, int]:
    return {cls: n for (p, cls), n in counts.items() if p == phase and cls in POOL_CONFIGS}


def test_each_config_is_built_at_parse_and_at_plan_read_only(tmp_path, builds):
    from archpool.pool.job import run_job
    from archpool.pool.plan import build_plan, read_plan, write_plan
    from archpool.pool.run import _run_shared_nodes
    from archpool.pool.spec import load_pool

    counts, phase = builds
    phase[0] = "parse"
    pool = load_pool(_pool(tmp_path))
    parse = _by_class(counts, "parse")
    # every section once (a recipe as written and resolved to the pool's length), the one task with
    # parameters once, the one (context, seed) once
    # the target once, and one evaluation request for the checks of the target and the task list
    assert parse == {"EvalSettings": 1, "ReportSettings": 1, "Settings": 1, "SourceConfig": 1, "ExtensionConfig": 2,
                     "MqarConfig": 1, "run_train_config": 1, "target": 1, "EvalRequest": 1}, parse  # fmt: skip

    phase[0] = "plan"
    nodes = build_plan(pool)
    out = tmp_path / "out"
    write_plan(out, pool, nodes)
    assert _by_class(counts, "plan") == {}  # the plan takes the parsed configs

    phase[0] = "shared"
    _run_shared_nodes(out, pool, nodes, [n for n in nodes if n.run is None], ["A_s0"], 1, _NoBar())

    phase[0] = "read"
    read_plan(out, "A_s0")
    read = _by_class(counts, "read")

    phase[0] = "worker"
    status = run_job(out, "A_s0")
    assert status["state"] == "done", status
    worker = _by_class(counts, "worker")
    evals = sum(1 for n in nodes if n.stage == "eval")
    assert evals == 3  # before extension, and each rung of the ladder
    # the worker reads the plan back once; after that each eval node builds its own request, and gives its
    # text task (kv_recall) the data store's haystack once
    after = {"EvalRequest": read.get("EvalRequest", 0) + evals, "KvRecallConfig": read.get("KvRecallConfig", 0) + evals}
    assert worker == {**read, **after}, (worker, read)
    phase[0] = "results"
    from archpool.pool.results import results_rows

    assert results_rows(out, pool, nodes)[0]["state"] == "done"
    assert _by_class(counts, "results").get("target", 0) == 0  # results.csv's mastery reads the parsed target
    assert read["run_train_config"] == 1 and read["EvalSettings"] == 1 and read["MqarConfig"] == 1 and read["target"] == 1


class _NoBar:
    def poll(self) -> None:
        pass
