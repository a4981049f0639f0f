"""The maintained benchmarks as one suite: each is a module of this package exposing ``NAME``,
``DESCRIPTION`` (one line) and either ``run(quick: bool) -> dict`` or a ``main(argv) -> dict`` run
with its ``QUICK`` / ``FULL`` arguments (``FULL`` defaults to none); ``run_suite`` runs a selection
of them and writes one results file."""

from __future__ import annotations

import datetime
import importlib
import json
import os
import platform
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

RESULTS = Path(__file__).resolve().parent / "results"
LATEST = RESULTS / "latest.json"
LATEST_QUICK = RESULTS / "latest-quick.json"

MODULES = (
    "bench_train",
    "bench_head_loss",
    "bench_cpu_bf16",
    "bench_cpu_ceilings",
    "bench_local_attention",
    "bench_cpu_flash_kernel",
    "bench_attention_probs_memory",
    "bench_eval",
    "bench_smollm2",
    "bench_tokenize",
    "bench_mqar_generator",
    "bench_task_cache",
    "bench_gpu",
)


def benchmarks() -> dict[str, ModuleType]:
    """Every maintained benchmark, by its ``NAME``, in suite order."""
    modules = [importlib.import_module(f"bench.{m}") for m in MODULES]
    return {m.NAME: m for m in modules}


def machine() -> dict:
    """The facts a timing depends on: CPUs, torch and its threads, the Python, the date."""
    import torch

    return {
        "date": datetime.date.today().isoformat(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def results_from_json(main: Callable[[list[str]], object], argv: list[str]) -> dict:
    """Run a benchmark's ``main(argv)`` with ``--json`` pointed at a temporary file and return what it wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "result.json"
        main([*argv, "--json", str(path)])
        return json.loads(path.read_text())


def run_module(module: ModuleType, quick: bool) -> dict:
    """A benchmark's result: its own ``run(quick)``, else its ``main`` with its ``QUICK`` / ``FULL`` arguments."""
    if hasattr(module, "run"):
        return module.run(quick)
    return module.main(module.QUICK if quick else getattr(module, "FULL", []))


def run_one(module: ModuleType, quick: bool) -> dict:
    """One benchmark's entry for the results file: its result, or the error that stopped it."""
    t0 = time.perf_counter()
    entry: dict = {"description": module.DESCRIPTION, "quick": quick, "machine": machine()}
    try:
        entry["result"] = run_module(module, quick)
    except Exception as e:  # one failing benchmark must not lose the others' results
        entry["error"] = f"{type(e).__name__}: {e}"
        entry["traceback"] = traceback.format_exc()[-4000:]
    entry["seconds"] = round(time.perf_counter() - t0, 2)
    return entry


def run_suite(names: list[str], quick: bool, out: Path) -> dict:
    """Run ``names`` in suite order and merge their entries into the results file ``out`` (entries of
    benchmarks not run are kept from its last contents)."""
    known = benchmarks()
    previous = json.loads(out.read_text()) if out.exists() else {}
    results = dict(previous.get("benchmarks", {}))
    for name in (n for n in known if n in names):
        print(f"== {name}: {known[name].DESCRIPTION}", flush=True)
        results[name] = run_one(known[name], quick)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"benchmarks": results}, indent=1, default=str) + "\n")  # kept after an interrupt
    return results
