"""``python -m archpool.pool.worker OUT RUN [THREADS]``: one run's stages in this process.

Used inside a SLURM job with several GPUs per run: ``torchrun --nproc-per-node N -m
archpool.pool.worker OUT RUN``. Every rank runs the training stages (the trainer uses DDP/FSDP
under torchrun); rank 0 alone runs the other stages and writes markers, events and the status.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: python -m archpool.pool.worker OUT RUN [THREADS]", file=sys.stderr)
        return 2
    out, run = argv[0], argv[1]
    threads = int(argv[2]) if len(argv) > 2 else max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    from archpool.pool.job import run_job

    status = run_job(out, run, threads=threads)
    return 0 if status.get("state") == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
