"""Facts about the running process that several stages ask for."""

from __future__ import annotations

import os
import sys


def process_rank() -> int:
    """This process's global rank under torchrun (``RANK``), 0 outside it."""
    return int(os.environ.get("RANK", "0"))


def _status_mb(field: str) -> float | None:
    """A ``/proc/self/status`` field in MB (Linux), or None where there is none."""
    try:
        with open("/proc/self/status") as f:
            return next((int(line.split()[1]) / 1024 for line in f if line.startswith(field + ":")), None)
    except OSError:
        return None


def reset_peak_rss() -> float | None:
    """Start a new peak-RSS window for this process (Linux: ``VmHWM`` reset to the current RSS, via
    ``/proc/self/clear_refs``); the current RSS in MB, or None where the peak cannot be reset."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return _status_mb("VmRSS")


def peak_rss_mb() -> float | None:
    """This process's peak RSS in MB since the last ``reset_peak_rss`` (since start where it was never
    reset): ``VmHWM``, else ``ru_maxrss``."""
    hwm = _status_mb("VmHWM")
    if hwm is not None:
        return hwm
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def compute_device() -> str | None:
    """What this process computes on, as torch dispatches it: the GPU's name, or the CPU's vector unit
    (torch's CPU capability: AVX2, AVX512, ...) and its thread count; None when torch is not loaded.
    Runs on one machine are bit-identical; another vector unit rounds differently."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return f"{torch.cuda.get_device_name()} (CUDA)"
    return f"CPU, torch dispatch {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads"
