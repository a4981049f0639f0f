"""The CLI's front door: --version, did-you-mean, pool arguments (shipped name vs path, options that cannot
apply), pool show/copy/list, lazy start-up, and ``archpool.load`` on run directories."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import archpool
from archpool.cli import main
from archpool.cli.pool import first_sentence
from archpool.model import Decoder, ModelConfig
from archpool.model.checkpoint import save_checkpoint

REPO = Path(__file__).resolve().parents[2]


def _child(*code: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    environ = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run([sys.executable, *code], capture_output=True, text=True, cwd=cwd, env=environ, timeout=120)


# ---------------------------------------------------------------------------------------------- --version
def test_version_names_the_package_version_and_commit_in_a_checkout(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"archpool {archpool.package_version()}")
    if shutil.which("git") and (REPO / ".git").exists():
        assert f"(commit {archpool.git_commit()})" in out and archpool.git_commit()


def test_version_without_git_prints_the_version_alone(tmp_path):
    shutil.copytree(REPO / "archpool", tmp_path / "archpool", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PATH="", GIT_DIR=str(tmp_path / "nowhere"))
    out = subprocess.run(
        [sys.executable, "-m", "archpool", "--version"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"archpool {archpool.package_version()}"


# ---------------------------------------------------------------------------------------------- did you mean
def test_mistyped_subcommand_suggests_the_closest(capsys):
    with pytest.raises(SystemExit) as e:
        main(["trian"])
    assert e.value.code == 2
    assert "did you mean 'train'" in capsys.readouterr().err  # the closest first
    with pytest.raises(SystemExit):
        main(["pool", "shwo"])
    assert "did you mean 'show'?" in capsys.readouterr().err


def test_mistyped_pool_name_suggests_the_shipped_pool(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "dmeo"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'demo'?" in err and err.count("\n") == 1


# ---------------------------------------------------------------------------------------------- pool arguments
def test_bare_shipped_name_wins_over_a_same_named_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smoke").mkdir()
    assert main(["pool", "show", "smoke"]) == 0
    assert "archpool/pools/smoke.yaml" in capsys.readouterr().out
    for arg in ("./smoke", "smoke/"):  # a path means the directory, which is no pool directory
        assert main(["pool", "show", arg]) == 2
        assert "no plan.json" in capsys.readouterr().err


def _pool_dir(tmp_path: Path) -> Path:
    from archpool.pool.plan import build_plan, write_plan
    from archpool.pool.spec import load_pool

    spec = load_pool("smoke")
    out = tmp_path / "pooldir"
    out.mkdir()
    write_plan(out, spec, build_plan(spec))
    return out


def test_options_that_cannot_apply_to_a_pool_directory_are_refused(capsys, tmp_path):
    out = _pool_dir(tmp_path)
    assert main(["run", str(out), "--size", "small", "--seeds", "5"]) == 2
    err = capsys.readouterr().err
    assert "--size" in err and "--seeds" in err and "pool directory" in err and "size tiny" in err
    assert main(["status", str(out)]) == 0  # without the options the directory runs its recorded plan
    assert str(out) in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- pool show / copy / list
def test_pool_show_prints_file_and_settings_and_yaml(capsys):
    assert main(["pool", "show", "demo"]) == 0
    out = capsys.readouterr().out
    assert "file: " in out and "demo.yaml" in out
    assert "train: max_steps=340" in out and "extension ntk:" in out and "eval: tasks=" in out
    assert main(["pool", "show", "demo", "--yaml"]) == 0
    text = capsys.readouterr().out
    first, rest = text.split("\n", 1)
    assert first.startswith("# ") and first.endswith("demo.yaml")
    assert rest.rstrip() == Path(first[2:]).read_text().rstrip()


def test_pool_copy_writes_a_loadable_file_and_refuses_to_overwrite(capsys, tmp_path):
    from archpool.pool.spec import load_pool

    dest = tmp_path / "mine.yaml"
    assert main(["pool", "copy", "demo", str(dest)]) == 0
    assert yaml.safe_load(dest.read_text())["name"] == "demo"
    assert len(load_pool(str(dest)).runs) == len(load_pool("demo").runs)
    assert main(["pool", "copy", "demo", str(dest)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["pool", "copy", "dmeo", str(tmp_path / "x.yaml")]) == 2
    assert "did you mean 'demo'?" in capsys.readouterr().err


def test_pool_list_shows_whole_sentences(capsys):
    assert first_sentence("Runs the\n  demo. Then more. ") == "Runs the demo."
    assert first_sentence("no full stop") == "no full stop"
    assert first_sentence("ratio 0.5 is used. Next") == "ratio 0.5 is used."
    assert main(["pool", "list"]) == 0
    out = capsys.readouterr().out
    from archpool.pool.spec import load_pool, shipped_pools

    flat = " ".join(out.split())
    for name in shipped_pools():
        assert " ".join(first_sentence(load_pool(name).description).split()) in flat


# ---------------------------------------------------------------------------------------------- start-up
@pytest.mark.parametrize("argv", [["features", "olmo3"], ["--help"], ["pool", "list"]])
def test_light_commands_do_not_import_torch(argv):
    code = (
        "import sys; from archpool.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules, file=sys.stderr)"
    )
    out = _child("-c", code, *argv)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "False False"


# ---------------------------------------------------------------------------------------------- archpool.load
def _cfg() -> ModelConfig:
    return ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32, init_std=0.1)


def _run(root: Path, seed: int, kind: str) -> Decoder:
    model = Decoder(_cfg(), seed=seed).eval()
    save_checkpoint(model, root / "milestones" / "final")
    (root / "run_config.json").write_text(json.dumps({"kind": kind, "model": _cfg().to_dict(), "data": {}}))
    return model


def test_load_accepts_run_directories_like_the_cli(tmp_path):
    run = tmp_path / "run"
    pre = _run(run, 1, "pretrain")
    ids = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        assert torch.equal(archpool.load(run)(ids), pre(ids))  # no extension: the final pretraining milestone
        ext = _run(run / "extend" / "ntk", 2, "extension")
        assert torch.equal(archpool.load(run)(ids), ext(ids))  # the extended model, as export-hf picks
        assert torch.equal(archpool.load(run / "extend" / "ntk")(ids), ext(ids))
        assert torch.equal(archpool.load(run / "milestones" / "final")(ids), pre(ids))
    with pytest.raises(archpool.errors.CheckpointError, match="Hugging Face"):
        archpool.load(tmp_path)
    with pytest.raises(archpool.errors.CheckpointError, match="no such"):
        archpool.load(tmp_path / "missing")


# ---------------------------------------------------------------------------------------------- --target typos
def _wide_results(path: Path) -> Path:
    """A results table with ~300 metric columns, as a pool's results.csv has."""
    import pandas as pd

    rows = [
        dict(run=f"r{i}", swa=i % 2, qk_norm="none", norm="pre", n_kv_heads=4, n_heads=4, pretrain_ctx=128, seed=0)
        for i in range(4)
    ]
    df = pd.DataFrame(rows)
    for length in (128, 256, 512, 1024, 2048):
        for task in ("mqar", "mqar_rebind", "kv_recall"):
            for d in ("", "[d>64]", "[d>128]", "[64<d<=128]"):
                for agg in ("", "#ladder_mean", "#b0", "#b1", "#b2"):
                    df[f"{task}_acc@{length}{d}{agg}"] = [0.1 * i for i in range(4)]
    df.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_target_typo_names_a_few_close_metrics_and_the_count(command, tmp_path, capsys):
    csv = _wide_results(tmp_path / "results.csv")
    extra = ["--out", str(tmp_path / "rep")] if command == "report" else []
    assert main([command, str(csv), "--target", "mqar_acc@1024[d>128]#ladder_maen", *extra]) == 2
    err = capsys.readouterr().err
    assert "mqar_acc@1024[d>128]#ladder_mean" in err and "300 metric columns in all" in err
    assert err.count("mqar") <= 6  # the typo and at most five suggestions, not every column
    assert not (tmp_path / "rep").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_version_of_a_copy_inside_another_repository_names_no_commit(tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "-C", str(tmp_path), "commit", "-q", "--allow-empty", "-m", "other"], check=True)
    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "archpool", site / "archpool", ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run(
        [sys.executable, "-m", "archpool", "--version"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(site)),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"archpool {archpool.package_version()}"
