"""An eval node's key holds only what its scores depend on, and its cells live in the pool's ``cells/``,
shared by every eval node and keyed by the whole model and each cell's own settings: in a finished pool,
an edit of one task's settings re-keys the eval node, which scores that task's cells again and reads every
other cell back; an edit that reaches every task (the phase's lengths) scores them all again.

The pools here are real: a checkpoint run (a random archpool checkpoint with its tokenizer) evaluated by the
real eval stage, run in this process the way a worker runs it (:func:`archpool.pool.job.run_job`), with the
scoring function of each backend counted."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml

from archpool.pool.graph import is_done, node_dir
from archpool.pool.plan import build_plan, write_plan
from archpool.pool.spec import load_pool
from archpool.rundir import pool_cells_dir
from archpool.study import EVAL_SEED

LENGTH = 512  # the phase's length: archpool's tasks, lm-eval's RULER and HELMET's data
SHORT = 256  # the phase's length after the edit that reaches every task
TASKS = ("kv_recall", "niah_single_1")  # archpool's
HELMET_RECALL = ("ruler_niah_mk_2", "ruler_niah_mk_3", "ruler_niah_mv", "json_kv")  # HELMET's recall category


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A random archpool checkpoint (2 layers, d 32, context 1024) with a pseudo-BPE tokenizer beside it."""
    from archpool.model.checkpoint import save_checkpoint
    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder
    from tests.helpers.tokenizers import pseudo_bpe, pseudo_texts

    tok = pseudo_bpe(pseudo_texts())
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=1024)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("keys") / "ck"
    save_checkpoint(Decoder(cfg, seed=3), path)
    tok.save(path)
    return path


def _pool(tmp_path: Path, checkpoint: Path, **eval_over) -> Path:
    """A checkpoint pool of one run: archpool's two tasks and HELMET's recall category at the phase's length."""
    from tests.eval.test_helmet_data import make_data

    for length in (LENGTH, SHORT):
        make_data(tmp_path, length=length)  # HELMET's layout, at both lengths
    settings = {
        "tasks": list(TASKS),
        "n_samples": 2,
        "modes": ["ll"],
        "length_ratios": [1],
        "harness": _helmet(limit=1),
        **eval_over,
    }
    spec = dict(name="keys", long_ctx=LENGTH, runs=[dict(name="a", checkpoint=str(checkpoint))], eval=settings,
                attention=dict(enabled=False))  # fmt: skip
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _edit(path: Path, **eval_over) -> None:
    """Change the pool file's ``eval:`` section (a mapping value replaces the whole entry)."""
    spec = yaml.safe_load(path.read_text())
    spec["eval"].update(eval_over)
    path.write_text(yaml.safe_dump(spec))


def _helmet(limit: int) -> dict:
    return dict(helmet_data=dict(path="data", categories=["recall"], limit=limit, shots=1))


@pytest.fixture
def counted(monkeypatch):
    """Each cell a backend scores, as ``<backend>:<task>@<length>``: archpool's tasks, HELMET's datasets and
    lm-eval's RULER."""
    from archpool.eval import harness, helmet_data, runner

    calls: Counter[str] = Counter()

    def count(module, name, label):
        real = getattr(module, name)

        def wrapped(*a, **k):
            calls[label(*a)] += 1
            return real(*a, **k)

        monkeypatch.setattr(module, name, wrapped)

    count(runner, "run_task", lambda lm, tok, task, length, *a: f"task:{task}@{length}")
    count(helmet_data, "_cell", lambda model, ds, length, *a: f"helmet:{ds.name}@{length}")
    count(harness, "run_lm_eval", lambda lm, task, length, *a: f"lm-eval:{task}@{length}")
    return calls


def _run(path: Path, out: Path, calls: Counter[str]) -> tuple[Counter[str], Path]:
    """Plan the pool and run its one run as a worker does: the cells it scored and its eval node's directory."""
    from archpool.pool.job import run_job

    calls.clear()
    pool = load_pool(path)
    nodes = build_plan(pool)
    write_plan(out, pool, nodes)
    status = run_job(out, "a")
    assert status["state"] == "done", status
    (node,) = [n for n in nodes if n.stage == "eval"]
    assert is_done(out, node)
    return Counter(calls), node_dir(out, node)


def _cells(*names: str, length: int = LENGTH) -> Counter[str]:
    return Counter({f"{n}@{length}": 1 for n in names})


def _metrics(d: Path) -> dict:
    return json.loads((d / "DONE").read_text())["result"]["metrics"]


ALL = (*(f"task:{t}" for t in TASKS), *(f"helmet:{ds}" for ds in HELMET_RECALL))


def test_one_tasks_settings_rescore_that_task_alone(tmp_path, checkpoint, counted):
    path, out = _pool(tmp_path, checkpoint), tmp_path / "out"
    first, d1 = _run(path, out, counted)
    assert first == _cells(*ALL)
    assert len(list(pool_cells_dir(out).glob("*.json"))) == len(ALL) and not (d1 / "cells").exists()

    again, d = _run(path, out, counted)
    assert not again and d == d1  # nothing changed: the node is done

    _edit(path, task_params={"kv_recall": {"n_choices": 5}})  # one of archpool's tasks
    calls, d2 = _run(path, out, counted)
    assert d2 != d1 and calls == _cells("task:kv_recall")
    tasks = {p.parent.name: json.loads(p.read_text()) for p in (d2 / "eval" / "tasks").glob(f"*/{LENGTH}_ll.json")}
    assert not tasks["kv_recall"].get("cached") and tasks["niah_single_1"]["cached"]
    assert all(c["cached"] for c in json.loads((d2 / "helmet_data" / "results.json").read_text())["cells"])
    kept = {k: v for k, v in _metrics(d1).items() if not k.startswith("kv_recall")}
    assert any(k.startswith("helmet_data") for k in kept) and all(_metrics(d2)[k] == v for k, v in kept.items())

    _edit(path, harness=_helmet(limit=2))  # HELMET's settings
    calls, d3 = _run(path, out, counted)
    assert d3 not in (d1, d2) and calls == _cells(*(f"helmet:{ds}" for ds in HELMET_RECALL))

    _edit(path, seed=EVAL_SEED + 1)  # archpool's tasks' seed, not HELMET's
    calls, _ = _run(path, out, counted)
    assert calls == _cells(*(f"task:{t}" for t in TASKS))

    _edit(path, length_ratios=[SHORT / LENGTH])  # the phase's lengths: every task's
    calls, _ = _run(path, out, counted)
    assert calls == _cells(*ALL, length=SHORT)

    _edit(path, length_ratios=[1], seed=EVAL_SEED, task_params={}, harness=_helmet(limit=1))
    calls, d = _run(path, out, counted)
    assert not calls and d == d1  # the first settings again: the first node, done


@pytest.mark.slow  # lm-eval: two cells and two model loads (about 40 s on two shared cores)
def test_the_harness_limit_rescores_the_harness_cells_alone(tmp_path, checkpoint, counted):
    """``eval.harness.ruler.limit`` changed in a finished pool: lm-eval's RULER cells are scored again,
    archpool's tasks and HELMET's data are read back (the archpool checkpoint is exported once, into the
    pool's ``hf/``, for both external backends of every eval node of that model)."""
    pytest.importorskip("lm_eval")
    ruler = dict(tasks=["niah_single_1"], limit=1)
    path, out = _pool(tmp_path, checkpoint, tasks=["kv_recall"]), tmp_path / "out"
    _edit(path, harness={**_helmet(limit=1), "ruler": ruler})
    first, d1 = _run(path, out, counted)
    assert first == _cells("task:kv_recall", "lm-eval:niah_single_1", *(f"helmet:{ds}" for ds in HELMET_RECALL))

    _edit(path, harness={**_helmet(limit=1), "ruler": {**ruler, "limit": 2}})
    calls, d2 = _run(path, out, counted)
    assert d2 != d1 and calls == _cells("lm-eval:niah_single_1")
    harness = json.loads((d2 / "harness" / "results.json").read_text())
    assert harness["limit"] == 2 and not harness["cells"][0].get("cached") and harness["cells"][0]["n"] == 2
    assert json.loads((d2 / "eval" / "tasks" / "kv_recall" / f"{LENGTH}_ll.json").read_text())["cached"]


def test_a_phase_is_keyed_by_its_own_lengths_and_no_planning_field(tmp_path):
    """A trained run's base eval (before extension) and extended eval: each phase's lengths key that phase's
    node alone, the same lengths written in tokens or as ratios are one key, and ``eval.base`` (whether the
    base node exists) keys neither; no data, training or extension key depends on ``eval:``."""
    spec = dict(
        name="phases",
        seeds=[0],
        data=dict(vocab_size=1024),  # the embedded corpus (planned here, never prepared)
        train=dict(max_steps=4, global_batch_tokens=2048, micro_batch_size=8),
        extension=[dict(name="ntk", tokens=4096, length_ratio=2)],
        eval=dict(tasks=["kv_recall"], length_ratios=[1], base_length_ratios=[1]),
        attention=dict(enabled=False),
        factorial=dict(axes=dict(swa=[False])),
    )
    path = tmp_path / "pool.yaml"

    def keys(**eval_over) -> dict[str, str]:
        path.write_text(yaml.safe_dump({**spec, "eval": {**spec["eval"], **eval_over}}))
        nodes = build_plan(load_pool(path))
        return {"base" if n.phase == "base" else "extended" if n.stage == "eval" else n.id: n.key for n in nodes}

    first = keys()
    long_ctx = load_pool(path).long_ctx
    base_only = keys(base_length_ratios=[0.5])
    assert base_only["base"] != first["base"] and base_only["extended"] == first["extended"]
    extended_only = keys(length_ratios=[1, 2])
    assert extended_only["extended"] != first["extended"] and extended_only["base"] == first["base"]
    assert keys(length_ratios=None, lengths=[long_ctx]) == first  # the same lengths, in tokens
    no_base = keys(base=False)
    assert "base" not in no_base and no_base["extended"] == first["extended"]
    harness = keys(harness=dict(ruler=dict(limit=2)))
    assert harness["extended"] != first["extended"] and harness["base"] != first["base"]
    assert all(harness[k] == v for k, v in first.items() if k not in ("base", "extended"))


def test_a_tasks_own_haystack_texts_key_its_cells(tmp_path, checkpoint):
    """A task given its own ``haystack_texts`` is keyed by their hash: one cache never serves a cell scored
    on other texts."""
    from archpool.eval.api import EvalRequest, evaluate
    from archpool.eval.target import load_target
    from tests.helpers.tokenizers import pseudo_texts

    target = load_target(checkpoint)
    texts = pseudo_texts()

    def score(haystack: list[str]) -> dict:
        params = {"kv_recall": {"haystack": "corpus", "haystack_texts": haystack}}
        request = EvalRequest(suites=(), tasks=["kv_recall"], lengths=[SHORT], modes=["ll"], n_samples=1,
                              task_params=params, cache_dir=tmp_path / "cells")  # fmt: skip
        (res,) = evaluate(target, request, progress=False)["tasks"]
        return res

    first = score(texts[:4])
    assert not score(texts[4:8]).get("cached")
    assert score(texts[:4])["cache_key"] == first["cache_key"] and score(texts[:4]).get("cached")


def test_cells_an_eval_node_holds_in_its_own_directory_join_the_pools(tmp_path):
    """Cell files in an eval node directory's own ``cells/`` move into the pool's ``cells/`` when an eval node
    starts (an entry the pool has is kept), the emptied directory goes, and a link is left alone; a stage
    directory outside a pool's layout keeps its cells in its own ``cells/``."""
    import types

    from archpool.pool.stages.eval import CELLS, cells_dir

    out = tmp_path / "out"
    old = out / "stages" / "eval" / "old" / CELLS
    old.mkdir(parents=True)
    (old / "a.json").write_text('{"cell": "a"}')
    (old / "b.json").write_text('{"cell": "b, the node\'s"}')
    pool_cells_dir(out).joinpath("b.json").write_text('{"cell": "b"}')
    linked = out / "stages" / "eval" / "linked" / CELLS
    linked.mkdir(parents=True)
    (linked / "c.json").symlink_to(tmp_path / "elsewhere.json")

    cells = cells_dir(types.SimpleNamespace(out_dir=out / "stages" / "eval" / "new"))
    assert cells == pool_cells_dir(out) == out / "cells"
    assert sorted(p.name for p in cells.iterdir()) == ["a.json", "b.json"] and not old.exists()
    assert (cells / "a.json").read_text() == '{"cell": "a"}' and (cells / "b.json").read_text() == '{"cell": "b"}'
    assert (linked / "c.json").is_symlink()
    assert cells_dir(types.SimpleNamespace(out_dir=tmp_path / "alone")) == tmp_path / "alone" / CELLS
