"""Peak memory of ``output_attentions`` (the eager probabilities path): blockwise vs the old dense path.

One fresh process per (path, T): archpool's Decoder at the ``small`` size (olmo3 family, window =
T/8), batch 1, one ``forward_with_attentions`` under ``no_grad``. Reported: peak RSS growth
over the RSS before the forward (``VmHWM`` after resetting it), and the bytes of the returned probabilities (B·H·T² per layer,
float32: what the API must return). The difference is what the path allocates on top of its output.

    nice -n 10 .venv/bin/python -m bench.bench_attention_probs_memory --lengths 1024 2048 4096
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024  # kB


def child(path: str, T: int) -> None:
    import torch

    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder

    torch.set_num_threads(1)
    cfg = ModelConfig.preset("olmo3", size="small", max_seq_len=T, window=T // 8)
    model = Decoder(cfg, seed=0, local_attention=path == "blockwise").eval()
    ids = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.forward_with_attentions(ids[:, :64])  # one-time costs out of the delta
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak (VmHWM) to the current RSS
        before = _status_mb("VmRSS")
        _, probs = model.forward_with_attentions(ids)
    out = sum(p.numel() * p.element_size() for p in probs)
    print(json.dumps({"path": path, "T": T, "peak_delta_mb": _status_mb("VmHWM") - before, "probs_mb": out / 2**20}))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child[0], int(args.child[1]))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    print("| T | path | returned probs MB | peak RSS growth MB | on top of the output MB |\n|---|---|---|---|---|")
    rows = []
    for T in args.lengths:
        for path in ("dense", "blockwise"):
            r = json.loads(
                subprocess.run(
                    [sys.executable, __file__, "--child", path, str(T)], capture_output=True, text=True, check=True, env=env
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            print(
                f"| {T} | {path} | {r['probs_mb']:.0f} | {r['peak_delta_mb']:.0f} | {r['peak_delta_mb'] - r['probs_mb']:.0f} |",
                flush=True,
            )
            rows.append({"T": T, "path": path, **r})
    return {"rows": rows}


NAME = "attention_probs_memory"
DESCRIPTION = "peak memory of output_attentions: the blockwise probabilities path against the dense-mask path"
FULL = ["--lengths", "1024", "2048", "4096"]
QUICK = ["--lengths", "128"]


if __name__ == "__main__":
    main()
