"""The training health rule: a diverged, collapsed or untrained run is a named failure of that run."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archpool.cli import main
from archpool.errors import DataError, TrainingHealthError
from archpool.rundir import run_dir_final
from archpool.train.checkpoint import load_train_state
from archpool.train.config import ExtensionConfig, RunConfig
from archpool.train.extend import extend
from archpool.train.stability import (
    DIVERGENCE_MARGIN,
    HEALTH_MIN_STEPS,
    HEALTH_WINDOW,
    MAX_SKIPPED_FRACTION,
    UNIFORM_MARGIN,
    check_health,
    end_loss,
    health_problem,
)
from archpool.train.trainer import pretrain
from tests.helpers.train import tiny_run, write_config

V = 64
LN_V = math.log(V)


def _history(start: float, end: float, n: int = HEALTH_MIN_STEPS) -> list[float]:
    """``n`` losses from ``start`` at step 1 to a last window that averages ``end``."""
    return [start] + [start + (end - start) * i / (n - 1) for i in range(1, n - HEALTH_WINDOW)] + [end] * HEALTH_WINDOW


def test_a_normal_history_passes():
    assert health_problem(_history(LN_V, 2.3), 0, V) is None
    assert health_problem([], 0, V) is None  # no step ran (a ladder of budget 0)


# (a) the final loss is not finite, at any length of run
@pytest.mark.parametrize("last", [math.nan, math.inf, -math.inf])
def test_a_non_finite_last_loss_fails_even_after_two_steps(last):
    assert "last step (2)" in health_problem([4.0, last], 0, V)
    assert health_problem([4.0, 3.9], 0, V) is None
    assert health_problem([4.0, math.nan, 3.9], 0, V) is None  # a NaN step the run recovered from


# (b) the end loss far above the first step's loss
def test_a_loss_that_rose_more_than_the_margin_fails():
    start = 2.0  # an extension: starts well below ln V
    assert health_problem(_history(start, start + DIVERGENCE_MARGIN), 0, V) is None  # at the margin: passes
    problem = health_problem(_history(start, start + DIVERGENCE_MARGIN + 0.01), 0, V)
    assert "diverged" in problem and "rose from 2 at step 1" in problem
    assert health_problem(_history(start, start + 0.2), 0, V) is None  # an extension's normal small rise


def test_divergence_and_uniformity_are_not_judged_on_short_runs():
    short = _history(2.0, 50.0, HEALTH_MIN_STEPS)[-(HEALTH_MIN_STEPS - 1) :]
    assert health_problem(short, 0, V) is None
    assert health_problem([LN_V] * (HEALTH_MIN_STEPS - 1), 0, V) is None
    assert health_problem([LN_V] * HEALTH_MIN_STEPS, 0, V) is not None


def test_the_end_loss_is_the_mean_of_the_last_window():
    losses = [4.0] * 20 + [100.0] + [1.0] * (HEALTH_WINDOW - 1)
    assert end_loss(losses) == pytest.approx((100.0 + HEALTH_WINDOW - 1) / HEALTH_WINDOW)
    assert end_loss([math.nan] * 3) != end_loss([math.nan] * 3)  # NaN: nothing finite to average
    # one spike in the last window: the mean stays under the margin when the rest is low
    spiky = [4.0] * 20 + [4.0 + DIVERGENCE_MARGIN * HEALTH_WINDOW - 1.0] + [0.5] * (HEALTH_WINDOW - 1)
    assert health_problem(spiky, 0, V) is None


# (c) more than half of the steps skipped
def test_more_than_half_of_the_steps_skipped_fails():
    losses = [3.0] * 12
    assert health_problem(losses, int(MAX_SKIPPED_FRACTION * 12), V) is None  # exactly half: passes
    assert "7 of 12 steps skipped" in health_problem(losses, 7, V)
    assert health_problem([3.0, 3.0], 1, V) is None and health_problem([3.0, 3.0], 2, V) is not None


# (d) no better than uniform
def test_an_end_loss_near_ln_v_fails_after_enough_steps():
    assert health_problem(_history(LN_V, LN_V - UNIFORM_MARGIN - 0.001), 0, V) is None
    problem = health_problem(_history(LN_V, LN_V - UNIFORM_MARGIN), 0, V)
    assert "uniform prediction over 64 tokens" in problem and "did not learn" in problem
    assert health_problem(_history(LN_V + 0.2, LN_V + 0.1), 0, V) is not None  # above ln V, though it fell


@given(
    start=st.floats(0.5, 12.0),
    drop=st.floats(0.0, 5.0),
    n=st.integers(1, 200),
    vocab=st.integers(2, 1 << 20),
)
def test_a_falling_loss_below_uniform_always_passes(start, drop, n, vocab):
    """Every run whose loss never rises and whose last steps lie clearly below ln V, with no step skipped, passes."""
    end = min(start - drop, math.log(vocab) - UNIFORM_MARGIN - 1e-6)
    losses = [max(end, start - (start - end) * i / max(n - HEALTH_WINDOW, 1)) for i in range(n)]
    assert health_problem(losses, 0, vocab) is None


def test_the_error_names_the_run_and_is_a_data_error():
    with pytest.raises(TrainingHealthError, match=r"^runs/x: training failed its health check: .*diverged"):
        check_health(_history(2.0, 40.0), 0, V, "runs/x")
    assert issubclass(TrainingHealthError, DataError)  # the CLI boundary's one line and exit 2


# ---------------------------------------------------------------- real tiny trainings
def _quiet_pretrain(cfg: dict, out):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the skipped steps' warnings
        return pretrain(RunConfig.from_dict(cfg), out)


def test_lr_10_diverges_and_fails_also_when_re_run(tmp_path):
    with pytest.raises(TrainingHealthError, match=r"the loss rose from .* the run diverged"):
        _quiet_pretrain(tiny_run(lr=10.0), tmp_path / "run")
    with pytest.raises(TrainingHealthError, match="diverged"):  # the complete directory is no result either
        _quiet_pretrain(tiny_run(lr=10.0), tmp_path / "run")


def test_a_huge_lr_skips_its_steps_and_fails(tmp_path):
    with pytest.raises(TrainingHealthError, match=r"11 of 12 steps skipped their update"):
        _quiet_pretrain(tiny_run(lr=1e6), tmp_path / "run")
    assert load_train_state(run_dir_final(tmp_path / "run"))["skipped"] == 11  # kept with the checkpoint
    with pytest.raises(TrainingHealthError, match=r"11 of 12 steps skipped"):  # so the re-run counts them too
        _quiet_pretrain(tiny_run(lr=1e6), tmp_path / "run")


def test_archpool_train_exits_2_with_one_line(tmp_path, capsys):
    cfg = write_config(tmp_path / "run.yaml", tiny_run(lr=10.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["train", str(cfg), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("archpool train: error: ") and "health check" in err and "diverged" in err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A normal tiny training (12 steps at the tests' usual lr)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    result = _quiet_pretrain(tiny_run(), run)
    assert result.skipped_steps == 0 and len(result.losses) >= HEALTH_MIN_STEPS
    return run


def test_a_normal_tiny_training_passes(trained):
    assert _quiet_pretrain(tiny_run(), trained).already_complete  # and its re-run, which reads the final milestone


def test_health_margins_reads_a_pools_final_training_states(trained, tmp_path, capsys):
    """scripts/health_margins.py (the margins docs/training.md quotes) on a pool laid out with the trained run
    as its one pretraining stage: the rise and the gap below ln V from the run's own losses."""
    import importlib.util
    import shutil

    from archpool.train.stability import HEALTH_WINDOW

    stage = tmp_path / "pool" / "stages" / "pretrain" / "k1"
    shutil.copytree(run_dir_final(trained), stage / "milestones" / "final")
    spec = importlib.util.spec_from_file_location("health_margins", Path(__file__).parents[2] / "scripts" / "health_margins.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main([str(tmp_path / "pool")])
    losses = load_train_state(run_dir_final(trained))["losses"]
    end = sum(losses[-HEALTH_WINDOW:]) / HEALTH_WINDOW
    out = capsys.readouterr().out
    assert "1 training runs of >= 10 steps (1 pretraining)" in out
    assert f"{end - losses[0]:.2f} nats" in out
    assert f"{math.log(tiny_run()['model']['vocab_size']) - end:.2f} nats" in out


@pytest.mark.slow
def test_an_extension_that_diverges_fails(trained, tmp_path):
    """From a trained model: an extension at its usual lr passes, one at lr 10 fails (two runs of 10 steps)."""
    steps = HEALTH_MIN_STEPS
    ok = ExtensionConfig.from_dict({"recipe": "ntk", "length": 64, "tokens": steps * 256, "name": "ok"})
    result = extend(trained, ok, progress=False, out=tmp_path / "ok")
    assert len(result.losses) == steps
    bad = ExtensionConfig.from_dict({"recipe": "ntk", "length": 64, "tokens": steps * 256, "lr": 10.0, "name": "bad"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TrainingHealthError, match=r"bad: training failed its health check"):
            extend(trained, bad, progress=False, out=tmp_path / "bad")


@pytest.mark.slow
def test_a_pool_marks_a_diverged_run_failed_with_the_error(tmp_path):
    """results.csv has the run `failed` with the named error (and no pretrain_loss), the report lists it."""
    import csv

    from tests.helpers.pool import run_cli as pool_cli

    spec = {
        "name": "hp",
        "size": "tiny",
        "seeds": [0],
        "data": {"synthetic": {}},
        "train": {"max_steps": 12, "lr": 10, "global_batch_tokens": 1024, "micro_batch_size": 8, "warmup_steps": 2},
        "eval": {"enabled": False},  # the synthetic stream has no text to evaluate or analyse
        "attention": {"enabled": False},
        "runs": [{"name": "base"}],
    }
    pool = write_config(tmp_path / "hp.yaml", spec)
    r = pool_cli("run", str(pool), "--out", str(tmp_path / "out"), "--no-progress", timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    (row,) = csv.DictReader((tmp_path / "out" / "results.csv").read_text().splitlines())
    assert row["state"] == "failed" and row["error"].startswith("TrainingHealthError: ") and "diverged" in row["error"]
    assert not row.get("pretrain_loss")
    report = (tmp_path / "out" / "report" / "report.md").read_text()
    assert "## Failed runs" in report and "TrainingHealthError" in report
