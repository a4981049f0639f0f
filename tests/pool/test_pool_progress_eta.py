"""The pool ETA from measured stage costs, on synthetic sequences of node completions."""

from __future__ import annotations

import json

import pytest

from archpool.pool.graph import DONE, Node, node_dir
from archpool.pool.progress import Pending, Progress, StageRates, eta_seconds
from tests.helpers.pool import PlainConfig

# True seconds per unit of planned cost: the plan's costs are right in size, wrong in scale, per kind.
TRUE_RATE = {"data": 0.05, "pretrain": 0.3, "extend": 0.7, "eval": 1.3}


def _plan(runs: int = 4) -> list[Node]:
    nodes = [Node(id="data", stage="data", config=PlainConfig(), cost=20.0, key="k-data")]
    for i in range(runs):
        size = 1.0 + i  # runs of different sizes: costs scale with steps x tokens
        for stage, cost in (("pretrain", 100.0 * size), ("extend", 10.0 * size), ("eval", 25.0 * size)):
            nodes.append(
                Node(id=f"{stage}:r{i}", stage=stage, config=PlainConfig(), run=f"r{i}", cost=cost, key=f"k-{stage}-r{i}")
            )
    return nodes


def _replay(progress: Progress, nodes: list[Node], jobs: int = 1):
    """Run the nodes one after another (jobs=1); yield (node, ETA after it, true seconds left)."""
    seconds = [n.cost * TRUE_RATE[n.stage] for n in nodes]
    t = 0.0
    progress.apply({"kind": "pool_start", "jobs": jobs, "t": t})
    for i, (n, s) in enumerate(zip(nodes, seconds)):
        progress.apply({"kind": "start", "key": n.key, "stage": n.stage, "run": n.run, "t": t})
        t += s
        progress.apply({"kind": "done", "key": n.key, "stage": n.stage, "run": n.run, "seconds": s, "t": t})
        yield n, progress.eta(now=t), sum(seconds[i + 1 :])


def test_eta_is_exact_once_every_stage_kind_is_measured(tmp_path):
    nodes = _plan()
    progress = Progress(tmp_path, nodes, enabled=False)
    seen: set[str] = set()
    for node, eta, left in _replay(progress, nodes):
        seen.add(node.stage)
        if seen >= set(TRUE_RATE):
            assert eta == pytest.approx(left, rel=1e-9, abs=1e-9)
    assert eta == 0.0


def test_eta_beats_the_cost_proportional_estimate_early(tmp_path):
    """After the data and the first run, the old estimate (elapsed x remaining cost / done cost) is far off;
    the measured per-kind rates are exact."""
    nodes = _plan()
    progress = Progress(tmp_path, nodes, enabled=False)
    total = sum(n.cost for n in nodes)
    done_cost = elapsed = 0.0
    for node, eta, left in _replay(progress, nodes):
        done_cost += node.cost
        elapsed += node.cost * TRUE_RATE[node.stage]
        if node.id == "eval:r0":
            old = elapsed * (total - done_cost) / done_cost
            assert abs(old - left) / left > 0.1
            assert eta == pytest.approx(left)
            break


def test_unmeasured_kinds_use_the_run_stages_rate_not_the_data_stage():
    rates = StageRates()
    assert rates.rate("pretrain") == 1.0  # nothing measured: the plan's prior
    rates.observe("data", 20.0, 1.0, shared=True)
    assert rates.rate("pretrain") == 1.0  # the data stage says nothing about training
    rates.observe("pretrain", 100.0, 30.0)
    assert rates.rate("eval") == pytest.approx(0.3)
    assert rates.rate("data") == pytest.approx(0.05)


def test_parallel_runs_share_the_work_and_running_nodes_count_what_is_left():
    rates = StageRates()
    rates.observe("pretrain", 10.0, 20.0)  # 2 s per cost
    pending = [Pending("pretrain", f"r{i}", 10.0) for i in range(4)]
    assert eta_seconds(rates, pending, jobs=1) == pytest.approx(80.0)
    assert eta_seconds(rates, pending, jobs=2) == pytest.approx(40.0)
    assert eta_seconds(rates, pending, jobs=8) == pytest.approx(20.0)  # at most one worker per run
    assert eta_seconds(rates, [Pending("pretrain", "r0", 10.0, running_s=5.0)], jobs=1) == pytest.approx(15.0)
    assert eta_seconds(rates, [Pending("pretrain", "r0", 10.0, fraction=0.75, running_s=1.0)], jobs=1) == pytest.approx(5.0)
    assert eta_seconds(rates, [Pending("data", None, 10.0)] + pending, jobs=4) == pytest.approx(20.0 + 20.0)


def test_a_resumed_pool_measures_rates_from_the_finished_stages_done_files(tmp_path):
    nodes = _plan(runs=2)
    for n in nodes[:4]:  # data and run r0 finished in an earlier invocation
        d = node_dir(tmp_path, n)
        d.mkdir(parents=True)
        marker = {"node": n.id, "stage": n.stage, "key": n.key, "result": {}, "seconds": n.cost * TRUE_RATE[n.stage]}
        (d / DONE).write_text(json.dumps(marker))
    progress = Progress(tmp_path, nodes, enabled=False)
    left = sum(n.cost * TRUE_RATE[n.stage] for n in nodes[4:])
    assert progress.eta(now=0.0) == pytest.approx(left)


def test_eval_phases_are_measured_apart(tmp_path):
    """An eval before extension (short lengths) and after it (up to 16x) cost differently per planned unit."""
    nodes = [Node(id="pretrain:r0", stage="pretrain", config=PlainConfig(), run="r0", cost=100.0, key="p")]
    for i, phase in enumerate(["base", "extended", "extended"]):
        nodes.append(Node(id=f"eval{i}", stage="eval", config=PlainConfig(), phase=phase, run="r0", cost=5.0, key=f"e{i}"))
    seconds = {"p": 30.0, "e0": 1.0, "e1": 9.0, "e2": 9.0}
    progress = Progress(tmp_path, nodes, enabled=False)
    t = 0.0
    for n in nodes[:3]:
        t += seconds[n.key]
        progress.apply({"kind": "done", "key": n.key, "seconds": seconds[n.key], "t": t})
    assert progress.eta(now=t) == pytest.approx(9.0)  # priced at the extended evals' rate, not the base one's
