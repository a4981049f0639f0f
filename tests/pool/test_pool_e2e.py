"""End to end with the real stages (slow): the shipped smoke pool, and SIGKILL + resume with the
real trainer giving bit-identical results."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from archpool.pool.graph import read_events
from tests.helpers.pool import REPO, child_env, pool_cmd, real_synthetic_pool, run_cli

pytestmark = pytest.mark.slow


def _rows(path):
    return {r["run"]: r for r in csv.DictReader(open(path))}


def test_smoke_pool_runs_every_stage(tmp_path):
    out = tmp_path / "smoke"
    t0 = time.time()
    r = run_cli("run", "smoke", "--jobs", "2", "--out", str(out), "--no-progress", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    t_first_end = max(e["t"] for e in read_events(out))
    rows = _rows(out / "results.csv")
    assert len(rows) >= 3 and all(row["state"] == "done" for row in rows.values())
    stages = {e["stage"] for e in read_events(out) if e["kind"] == "done"}
    assert {"data", "pretrain", "extend", "eval", "attention"} <= stages
    row = next(iter(rows.values()))
    assert row["pretrain_loss"] and row["extension_loss"]
    assert (out / "report" / "report.html").is_file() and (out / "report" / "analysis.json").is_file()
    assert "report:" in r.stdout
    # the report answers first and says how its numbers were made
    page = (out / "report" / "report.html").read_text()
    assert page.index(">Verdict</h2>") < page.index(">Figures</h2>") < page.index('id="reproducibility"')
    for fact in ("<dt>torch</dt><dd>2.13.0", "<dt>pretraining</dt>", "<dt>extension</dt>", "compute time", "name: smoke"):
        assert fact in page, fact
    figures = {p.stem for p in (out / "report" / "figures").glob("*.png")}
    assert {"verdict_effects", "accuracy_by_length", "accuracy_by_distance", "extension_curves", "loss_curves"} <= figures
    # MQAR by distance bucket and chains, before and after extension; attention before extension too
    for col in (
        "mqar_acc@512[d>128]#ext0",
        "mqar_acc@512[d>128]#ext2",
        "mqar_acc@512[d>128]#ladder_mean",
        "mqar_acc@512[d>128]@0.5#ext2",
        "mqar_lp@512[64<d<=128]#ext2",
        "mqar_chain_chain@512#ext2",
        "base_mqar_acc@128",
        "base_mqar_acc@512",
        "kv_recall_lp@512#ext2",
        "attn_sink_rate",
        "base_attn_sink_rate",
    ):
        assert all(row.get(col) not in (None, "") for row in rows.values()), col
    assert 0 <= float(row["mqar_acc@512[d>128]#ladder_mean"]) <= 1
    # every run is judged against the mastery rule at its own length, before extension
    assert all(x["mastered"] in ("0", "1") and 0 <= float(x["mastery_acc"]) <= 1 for x in rows.values())
    assert all(x["mastered"] == "0" or float(x["mastery_acc"]) >= 0.9 for x in rows.values())
    # the remedy extends only the QK-norm run
    assert (
        rows["lqk_post_s0"]["remedy_mqar_acc@512[d>128]#ext2"] != "" and rows["base_s0"]["remedy_mqar_acc@512[d>128]#ext2"] == ""
    )
    # one definition of short context: results.csv, `archpool analyze POOL` (whose default target is the
    # pool's report.target) and the report count the same features
    counts = {run: int(x["feature_count"]) for run, x in rows.items()}
    assert {x["short_ctx"] for x in rows.values()} == {"64"}
    a = subprocess.run(
        [sys.executable, "-m", "archpool.cli", "analyze", str(out), "--json"],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert a.returncode == 0, a.stderr
    an = json.loads(a.stdout)
    assert an["target"] == "mqar_lp@512[d>128]#ladder_mean" and an["short_ctx"] == 64
    # every scored answer beside results.csv, and the analysis's inference rests on them
    assert (out / "items.parquet").is_file() and an["inference"]["source"] == "answers"
    from archpool.analysis.answers import load_answers

    answers = load_answers(out)
    for col in (an["target"], "mqar_acc@512[d>128]#ext2", "base_mqar_acc@128", "kv_recall_ll@512#ext2"):
        v = answers.doc_values(col)
        assert v is not None and v.n_docs == 8, col
        assert all(v.value(run) == pytest.approx(float(x[col]), abs=2e-6) for run, x in rows.items()), col
    assert "<dt>computed on</dt><dd>CPU, torch dispatch" in page
    assert {x["run"]: x["feature_count"] for x in an["runs"]} == counts
    rep = json.loads((out / "report" / "analysis.json").read_text())
    assert {x["run"]: x["feature_count"] for x in rep["runs"]} == counts
    assert any(p["predictor"].startswith("base_attn") for p in an["pre_extension"])
    c = subprocess.run(
        [sys.executable, "-m", "archpool.cli", "analyze", str(out / "results.csv"), "--target", an["target"], "--json"],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert c.returncode == 0, c.stderr
    assert {x["run"]: x["feature_count"] for x in json.loads(c.stdout)["runs"]} == counts
    # one definition of a run's final loss: the pool's column and `archpool eval`'s short metrics agree
    from archpool.eval.short import final_loss
    from archpool.rundir import run_dir_final

    by_run = {
        json.loads((d / "node.json").read_text())["run"]: d
        for d in (out / "stages" / "pretrain").iterdir()
        if (d / "DONE").is_file()
    }
    for run, d in by_run.items():
        assert final_loss(run_dir_final(d)) == pytest.approx(float(rows[run]["pretrain_loss"]), rel=1e-9), run
    print(f"smoke pool: {time.time() - t0:.0f}s")
    # the scored task's difficulty, measured on the same checkpoints (every node cached) by a pool based on the
    # smoke pool with an accuracy target; the rule's verdict is in the report, or, where every run scored the
    # same accuracy (24 steps teach no retrieval), the report says there is nothing to explain
    cal_pool = tmp_path / "calibrated.yaml"
    cal_pool.write_text(
        yaml.safe_dump(
            {
                "base": "smoke",
                "report": {
                    "target": "mqar_acc@512[d>128]#ladder_mean",
                    "findings": ["mqar_lp@512[d>128]#ladder_mean"],
                    "calibrate": {"knob": "pair_every", "values": [8, 16]},
                },
            }
        )
    )
    r = run_cli("run", str(cal_pool), "--jobs", "2", "--out", str(out), "--no-progress", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    retrained = {e["node"] for e in read_events(out) if e["kind"] == "done" and e["t"] > t_first_end and e["stage"] != "eval"}
    assert not {n for n in retrained if n.split(":")[0] in ("pretrain", "extend")}, retrained
    cal = json.loads((out / "calibration" / "calibration.json").read_text())
    assert [p["value"] for p in cal["points"]] == [8, 16] and cal["scored"] == 8
    assert all(len(p["baseline"]) == 1 and set(p) >= {"ok", "words", "all_mastered"} for p in cal["points"])
    accuracies = {float(x["mqar_acc@512[d>128]#ladder_mean"]) for x in _rows(out / "results.csv").values()}
    if len(accuracies) > 1:
        page = (out / "report" / "report.html").read_text()
        assert 'id="calibration"' in page and "Headroom rule" in page
    else:
        assert not (out / "report" / "report.html").exists()
        assert "the target is constant" in (out / "report" / "report.md").read_text()


def test_sigkill_real_trainer_resumes_bit_identical(tmp_path):
    pool = real_synthetic_pool(tmp_path, "killreal", max_steps=24, extension_tokens=8192)
    out, ref = tmp_path / "out", tmp_path / "ref"
    env = child_env()
    proc = subprocess.Popen(
        pool_cmd("run", str(pool), "--out", str(out), "--no-progress"),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline, killed_in = time.time() + 300, None
    while time.time() < deadline and killed_in is None:
        done = {e["key"] for e in read_events(out) if e["kind"] == "done"}
        for e in read_events(out):
            if e["kind"] == "start" and e["stage"] == "pretrain" and e["key"] not in done and done - {None}:
                ckpts = list((out / "stages" / "pretrain" / e["key"] / "ckpt").glob("step_*"))
                if ckpts:
                    killed_in = e["key"]
        time.sleep(0.1)
    assert killed_in, "never saw a second pretraining with a checkpoint"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(1.0)
    before = read_events(out)
    finished = {e["key"] for e in before if e["kind"] == "done"}
    r = run_cli("run", str(pool), "--out", str(out), "--no-progress", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    after = read_events(out)[len(before) :]
    assert not ({e["key"] for e in after if e["kind"] == "start"} & finished)
    assert [e for e in after if e["kind"] == "start" and e["key"] == killed_in][0]["resumed"]
    log = (out / "stages" / "pretrain" / killed_in / "metrics.jsonl").read_text()
    assert log.count('"step": 2,') == 1  # the metrics log was truncated at the resume point, not duplicated
    r = run_cli("run", str(pool), "--out", str(ref), "--no-progress", timeout=300)
    assert r.returncode == 0
    assert (out / "results.csv").read_text() == (ref / "results.csv").read_text()


def test_torchrun_worker_two_ranks(tmp_path):
    """The in-job launch for several GPUs per run, here two CPU ranks with gloo."""
    spec = dict(
        name="ddp",
        seeds=[0],
        data=dict(synthetic=dict(seed=0)),
        train=dict(max_steps=8, global_batch_tokens=2048, micro_batch_size=4, log_every=2, ckpt_every=4, warmup_steps=1),
        extension=[dict(name="ntk", tokens=4096, length_ratio=2)],
        eval=dict(enabled=False),
        attention=dict(enabled=False),
        runs=[dict(name="A")],
    )
    pool = tmp_path / "ddp.yaml"
    pool.write_text(yaml.safe_dump(spec))
    one, two = tmp_path / "one", tmp_path / "two"
    assert run_cli("run", str(pool), "--out", str(one), "--no-progress", timeout=300).returncode == 0
    assert run_cli("run", str(pool), "--out", str(two), "--no-progress", "--only", "A_s0", timeout=300).returncode == 0
    # wipe the run's stages in `two` and redo them under torchrun with 2 ranks
    import shutil

    for stage in ("pretrain", "extend"):
        shutil.rmtree(two / "stages" / stage)
    shutil.rmtree(two / "runs")
    env = child_env()
    torchrun = [
        os.path.join(os.path.dirname(os.sys.executable), "torchrun"),
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "archpool.pool.worker",
        str(two),
        "A_s0",
        "1",
    ]
    p = subprocess.run(torchrun, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((two / "runs" / "A_s0" / "status.json").read_text())["state"] == "done"
    res = lambda d: json.loads(next((d / "stages" / "pretrain").glob("*/DONE")).read_text())["result"]["metrics"]
    assert res(one)["pretrain_loss"] == pytest.approx(res(two)["pretrain_loss"], rel=1e-5)
