"""``python -m bench``: every maintained benchmark listed and exposing the suite's interface, and one
quick benchmark run end to end into the results file."""

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.suite import MODULES, benchmarks

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, env=env, capture_output=True, text=True)


def test_every_maintained_module_has_the_suite_interface():
    known = benchmarks()
    assert len(known) == len(MODULES)  # names are unique
    for name, module in known.items():
        assert name == module.NAME and name.isidentifier()
        assert module.DESCRIPTION and "\n" not in module.DESCRIPTION
        assert callable(getattr(module, "run", None)) or (callable(module.main) and isinstance(module.QUICK, list))


def test_list_names_every_maintained_benchmark():
    res = _bench("--list")
    assert res.returncode == 0, res.stderr
    listed = [line.split()[0] for line in res.stdout.splitlines()]
    assert listed == list(benchmarks())


def test_only_refuses_an_unknown_name():
    res = _bench("--only", "no_such_bench")
    assert res.returncode == 2 and "no benchmark named no_such_bench" in res.stderr


def test_quick_run_of_one_benchmark_writes_the_results_file(tmp_path):
    out = tmp_path / "latest.json"
    out.write_text(json.dumps({"benchmarks": {"train": {"result": "kept"}}}))
    res = _bench("--quick", "--only", "head_loss", "--out", str(out))
    assert res.returncode == 0, res.stderr
    entries = json.loads(out.read_text())["benchmarks"]
    assert entries["train"] == {"result": "kept"}  # an --only run keeps the other benchmarks' entries
    entry = entries["head_loss"]
    assert entry["quick"] is True and "error" not in entry
    assert entry["machine"]["cpu_count"] == os.cpu_count() and entry["machine"]["torch"]
    (shape,) = entry["result"]["shapes"]
    assert shape["tokens"] == 1024 and shape["speedup"] > 0


def test_a_failing_benchmark_is_recorded_and_the_others_still_run(tmp_path, monkeypatch):
    from bench import suite

    def boom(quick):
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(suite.benchmarks()["tokenize"], "run", boom, raising=False)
    monkeypatch.setattr(suite.benchmarks()["head_loss"], "run", lambda quick: {"quick": quick}, raising=False)
    out = tmp_path / "r.json"
    results = suite.run_suite(["tokenize", "head_loss"], True, out)
    assert "broken on purpose" in results["tokenize"]["error"] and results["head_loss"]["result"] == {"quick": True}
    assert json.loads(out.read_text())["benchmarks"].keys() == {"tokenize", "head_loss"}
