"""Run a pool: plan it, execute every run's stages (cached, resumable, failure-isolated), then
write ``results.csv`` and the report.

Layout of a pool directory (``out/<pool>`` by default)::

    plan.json               the expanded pool and its stage graph (node ids, configs, content keys)
    events.jsonl            one line per stage start / skip / done / error (progress, status, tests)
    stages/<stage>/<key>/   content-addressed stage outputs; DONE marks a finished one
    runs/<run>/status.json  {"state": "done" | "failed" | "running", "error": ..., "stage": ...}
    runs/<run>/log.txt      the run's log (its worker's stdout and stderr)
    results.csv             one row per run: design columns, state, metrics (analysis contract)
    report/                 the analysis report (report.md)
"""
from __future__ import annotations

import csv
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from archpool.io import atomic_write_json, atomic_write_text
from archpool.pool.graph import (
    Node, format_exception, execute_node, is_done, is_running, log_event, node_dir, read_events, read_result,
)
from archpool.pool.plan import PLAN_FILE, build_plan, read_plan, result_columns, write_plan
from archpool.pool.spec import PoolSpec, feature_count

RESULTS = "results.csv"
DESIGN_COLUMNS = ["run", "arch", "swa", "qk_norm", "norm", "n_kv_heads", "n_heads", "pretrain_ctx", "seed", "init", "fp8",
                  "window", "d_ff", "n_layers", "d_model", "short_ctx", "feature_count", "state", "error"]


def default_out(pool: PoolSpec, size_overridden: bool = False) -> Path:
    root = Path(os.environ.get("ARCHPOOL_OUT", "out"))
    return root / (f"{pool.name}-{pool.size}" if size_overridden else pool.name)


def run_nodes(nodes: list[Node], run: str) -> list[Node]:
    """The run's own nodes plus the pool-level nodes they depend on, in dependency order."""
    by_id = {n.id: n for n in nodes}
    wanted: set[str] = set()

    def visit(i: str) -> None:
        if i not in wanted:
            wanted.add(i)
            for d in by_id[i].deps.values():
                visit(d)

    for n in nodes:
        if n.run == run:
            visit(n.id)
    return [n for n in nodes if n.id in wanted]


# ---------------------------------------------------------------------------------------------
# one run (inside a worker)

def _status_path(out: Path, run: str) -> Path:
    return Path(out) / "runs" / run / "status.json"


def read_status(out: Path, run: str) -> dict[str, Any]:
    p = _status_path(out, run)
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return {"state": "pending"}


def run_job(out: str | Path, run: str, threads: int = 1) -> dict[str, Any]:
    """Execute every stage of ``run`` that is not done. Never raises: the outcome goes to status.json."""
    from archpool.pool.stages import stage_function

    out = Path(out)
    pool, nodes = read_plan(out)
    spec = pool.run(run)
    run_dir = out / "runs" / run
    run_dir.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))  # under torchrun only rank 0 keeps the books
    log_file = open(run_dir / ("log.txt" if rank == 0 else f"log.rank{rank}.txt"), "a", buffering=1)

    def write_status(status: dict[str, Any]) -> None:
        if rank == 0:
            atomic_write_json(_status_path(out, run), status)

    def log(msg: str) -> None:
        log_file.write(f"{time.strftime('%H:%M:%S')} {msg}\n")

    if pool.backend == "real":
        import torch

        torch.set_num_threads(max(1, threads))
    by_id = {n.id: n for n in nodes}
    t0 = time.time()
    current = None
    try:
        for node in run_nodes(nodes, run):
            current = node
            if node.run is not None and not is_done(out, node):
                write_status(dict(state="running", stage=node.stage, node=node.id, since=t0))
            execute_node(out, node, by_id, stage_function(pool.backend, node.stage), pool.to_dict(), spec.to_dict(),
                         threads, log, label=run)
    except BaseException as e:  # isolate: record it, let the other runs go on
        status = dict(state="failed", stage=current.stage if current else None, node=current.id if current else None,
                      error=f"{type(e).__name__}: {e}", traceback=format_exception(e), seconds=round(time.time() - t0, 2))
        log(f"FAILED in {status['node']}: {status['error']}\n{status['traceback']}")
        write_status(status)
        if rank == 0:
            log_event(out, kind="run_failed", run=run, node=status["node"], error=status["error"])
        log_file.close()
        if isinstance(e, KeyboardInterrupt):
            raise
        return status
    status = dict(state="done", seconds=round(time.time() - t0, 2))
    write_status(status)
    if rank == 0:
        log_event(out, kind="run_done", run=run)
    log("run done")
    log_file.close()
    return status


def run_complete(out: Path, nodes: list[Node], run: str) -> bool:
    return all(is_done(out, n) for n in run_nodes(nodes, run))


# ---------------------------------------------------------------------------------------------
# the pool

class Progress:
    """A pool-level bar over the expected cost of the stages still to do, with the ETA; it reads
    the event log the workers append to, so it works for local and SLURM executors alike."""

    def __init__(self, out: Path, nodes: list[Node], enabled: bool = True):
        self.out, self.enabled = Path(out), enabled
        self.cost: dict[str, float] = {}
        for n in nodes:
            self.cost[n.key] = max(self.cost.get(n.key, 0.0), n.cost)
        self.complete = {n.key for n in nodes if is_done(out, n)}
        self.running: dict[str, str] = {}
        self.offset = 0
        self.bar = None
        if enabled:
            from tqdm import tqdm

            total = sum(self.cost.values())
            initial = sum(self.cost[k] for k in self.complete)
            tty = sys.stderr.isatty()
            self.bar = tqdm(total=round(total, 1), initial=round(initial, 1), unit="cost", desc="pool", file=sys.stderr,
                            mininterval=0.5 if tty else 30.0,
                            bar_format="{desc} {percentage:3.0f}%|{bar:24}| {elapsed}<{remaining} {postfix}",
                            dynamic_ncols=True)

    def poll(self) -> None:
        path = self.out / "events.jsonl"
        if not path.is_file():
            return
        with open(path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for line in chunk[:end].splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue
            key = e.get("key")
            if e.get("kind") == "start":
                self.running[key] = (e.get("stage"), e.get("run"))
            elif e.get("kind") in ("done", "skip", "error"):
                self.running.pop(key, None)
                if e["kind"] != "error" and key in self.cost:
                    self.complete.add(key)
        if self.bar is not None:
            n = sum(self.cost[k] for k in self.complete)
            n += sum(self.cost.get(k, 0.0) * _fraction_done(self.out / "stages" / st / k) for k, (st, _) in self.running.items())
            self.bar.update(round(n, 1) - self.bar.n)
            self.bar.set_postfix_str(" ".join(sorted(f"{st}:{r}" for st, r in self.running.values()))[:60], refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _fraction_done(stage_dir: Path) -> float:
    """How far a running training stage is, from its metrics log (0 for other stages)."""
    try:
        record = json.loads((stage_dir / "run_config.json").read_text())
        train = record["train"]
        total = train.get("max_steps") or -(-int(train["max_tokens"]) // int(train["global_batch_tokens"]))
        with open(stage_dir / "metrics.jsonl", "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            last = f.read().splitlines()[-1]
        return min(1.0, json.loads(last)["step"] / total)
    except (OSError, KeyError, ValueError, IndexError, TypeError, ZeroDivisionError):
        return 0.0


def run_pool(
    pool: PoolSpec,
    out: Path,
    jobs: int = 1,
    executor: str = "local",
    only: list[str] | None = None,
    progress: bool = True,
    executor_params: dict[str, Any] | None = None,
    threads: int | None = None,
) -> int:
    """Run the pool; 0 if every selected run finished, 1 if any failed (the rest still ran)."""
    from archpool.pool.executor import LocalExecutor, SubmititExecutor, split_threads
    from archpool.pool.stages import stage_function

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    nodes = build_plan(pool)
    write_plan(out, pool, nodes)
    selected = [pool.run(r).name for r in only] if only else [r.name for r in pool.runs]
    chosen = [n for r in selected for n in run_nodes(nodes, r)]
    chosen = list({n.id: n for n in chosen}.values())
    bar = Progress(out, chosen, enabled=progress)
    log_event(out, kind="pool_start", runs=selected, jobs=jobs, executor=executor)
    t0 = time.time()

    # pool-level inputs (the data) first, once, here: every run needs them
    user_threads, threads = threads, threads or split_threads(1)  # the pool-level nodes run here, alone
    by_id = {n.id: n for n in nodes}
    shared_error = None
    for node in [n for n in chosen if n.run is None]:
        try:
            execute_node(out, node, by_id, stage_function(pool.backend, node.stage), pool.to_dict(), None, threads,
                         lambda m: None, label="pool")
        except Exception as e:
            shared_error = f"stage {node.id} failed: {type(e).__name__}: {e}"
            for r in selected:
                atomic_write_json(_status_path(out, r), dict(state="failed", stage=node.stage, node=node.id,
                                                             error=shared_error, traceback=format_exception(e)))
            break
        bar.poll()

    if shared_error is None:
        todo = [r for r in selected if not (run_complete(out, nodes, r) and read_status(out, r).get("state") == "done")]
        for r in selected:
            if r not in todo:
                log_event(out, kind="run_cached", run=r)
        if executor == "local":
            ex = LocalExecutor(jobs=jobs, threads=user_threads)
        elif executor in ("slurm", "submitit-local", "debug"):
            cluster = {"slurm": "slurm", "submitit-local": "local", "debug": "debug"}[executor]
            ex = SubmititExecutor(cluster=cluster, params=dict(executor_params or {}), threads=user_threads)
        else:
            raise ValueError(f"unknown executor {executor!r}")
        handles = ex.run_all(out, todo, bar.poll) if todo else {}
        for run, h in handles.items():
            if h.error and read_status(out, run).get("state") != "failed":
                atomic_write_json(_status_path(out, run), dict(state="failed", error=h.error, stage=None, node=None))
    bar.poll()
    bar.close()

    report_path = finalize(out, pool, nodes)
    states = {r: read_status(out, r).get("state") for r in selected}
    failed = [r for r, s in states.items() if s != "done"]
    minutes = (time.time() - t0) / 60
    print(f"pool {pool.name}: {len(selected) - len(failed)}/{len(selected)} runs done in {minutes:.1f} min; results: {out / RESULTS}")
    for r in failed:
        print(f"  FAILED {r}: {read_status(out, r).get('error', '?')}  (log: {out / 'runs' / r / 'log.txt'})")
    if report_path:
        print(f"report: {report_path}")
    log_event(out, kind="pool_end", failed=failed, seconds=round(time.time() - t0, 2))
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# results and report

def run_metrics(out: Path, pool: PoolSpec, nodes: list[Node], run: str) -> dict[str, Any]:
    primary = pool.extension[0]["name"] if pool.extension else ""
    metrics: dict[str, Any] = {}
    for n in nodes:
        if n.run != run or not is_done(out, n):
            continue
        result = read_result(out, n)
        if n.stage == "pretrain":
            prefix, suffix = "", ""
        else:
            prefix, suffix = result_columns(n, primary)
        for k, v in (result.get("metrics") or {}).items():
            if isinstance(v, (int, float, str)) or v is None:
                metrics[f"{prefix}{k}{suffix}"] = v
    return metrics


def results_rows(out: Path, pool: PoolSpec | None = None, nodes: list[Node] | None = None) -> list[dict[str, Any]]:
    if pool is None or nodes is None:
        pool, nodes = read_plan(out)
    short = pool.short_ctx
    rows = []
    for spec in pool.runs:
        status = read_status(out, spec.name)
        row = spec.row()
        row["short_ctx"] = short
        row["feature_count"] = feature_count(spec, short)
        row["state"] = status.get("state", "pending")
        row["error"] = status.get("error", "") if row["state"] == "failed" else ""
        row.update(run_metrics(out, pool, nodes, spec.name))
        rows.append(row)
    return rows


def rows_to_csv(rows: list[dict[str, Any]]) -> str:
    columns = [c for c in DESIGN_COLUMNS if any(c in r for r in rows)]
    for r in rows:
        columns += [k for k in r if k not in columns]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _fmt(r.get(k, "")) for k in columns})
    return buf.getvalue()


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return repr(round(v, 10))
    return v


def finalize(out: Path, pool: PoolSpec, nodes: list[Node]) -> Path | None:
    """Write results.csv from whatever finished, then the report (failed runs are listed in it)."""
    from archpool.pool.stages import write_report

    rows = results_rows(out, pool, nodes)
    atomic_write_text(Path(out) / RESULTS, rows_to_csv(rows))
    try:
        return write_report(out, pool, rows)
    except Exception as e:  # the results stay; the report error is shown, not fatal to the pool
        print(f"report failed: {type(e).__name__}: {e}", file=sys.stderr)
        atomic_write_text(Path(out) / "report" / "report_error.txt", format_exception(e))
        return None


# ---------------------------------------------------------------------------------------------
# status

def stage_label(node: Node) -> str:
    """A node's id without its run: ``pretrain``, ``eval:base``, ``extend@0.5:ntk``."""
    parts = node.id.split(":")
    if node.run is None or len(parts) < 2:
        return node.id
    milestone = "@" + parts[1].split("@", 1)[1] if "@" in parts[1] else ""
    return parts[0] + milestone + "".join(":" + p for p in parts[2:])


STAGE_SYMBOL = {"done": "✓", "running": "▶", "partial": "…", "pending": "·", "failed": "✗"}


def pool_status(out: Path) -> list[dict[str, Any]]:
    """Every run and the state of each of its stages."""
    out = Path(out)
    if not (out / PLAN_FILE).is_file():
        raise FileNotFoundError(f"{out}: no {PLAN_FILE}; has this pool been run?")
    pool, nodes = read_plan(out)
    rows = []
    for spec in pool.runs:
        status = read_status(out, spec.name)
        stages = {}
        for n in run_nodes(nodes, spec.name):
            if n.run is None:
                continue
            if is_done(out, n):
                s = "done"
            elif is_running(out, n):
                s = "running"
            elif status.get("state") == "failed" and status.get("node") == n.id:
                s = "failed"
            elif node_dir(out, n).is_dir():
                s = "partial"
            else:
                s = "pending"
            stages[stage_label(n)] = s
        state = status.get("state", "pending")
        if state == "running" and not any(v == "running" for v in stages.values()):
            state = "interrupted"
        if state == "pending" and stages and all(v == "done" for v in stages.values()):
            state = "done"
        rows.append(dict(run=spec.name, state=state, stages=stages, error=status.get("error", "")))
    return rows


def format_status(rows: list[dict[str, Any]]) -> str:
    lines = []
    for r in rows:
        stages = " ".join(f"{k}{STAGE_SYMBOL.get(v, '?')}" for k, v in r["stages"].items())
        line = f"{r['run']:<28} {r['state']:<12} {stages}"
        if r["error"]:
            line += f"\n{'':<28} error: {r['error']}"
        lines.append(line)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    lines.append(", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return "\n".join(lines)


__all__ = ["run_pool", "run_job", "pool_status", "format_status", "results_rows", "finalize", "default_out",
           "read_events"]
