"""archpool's benchmarks: ``python -m bench`` runs the maintained ones (``bench.suite``); one-off
studies that decided a design are in ``bench/studies/`` (its README.md lists them)."""
