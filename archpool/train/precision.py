"""Which precision a run trains in: ``train.dtype`` (float32 | bfloat16 | auto) resolved for a device
and model size.

``auto`` is bfloat16 autocast on CUDA, and on a CPU only where it was measured to pay: the CPU has
native bfloat16 (AVX512-BF16 or AMX) and the model has ``d_model >= CPU_BF16_MIN_D_MODEL``.
``bench/bench_cpu_bf16.py`` (BENCHMARKS.md) measured, per training step, bf16 vs float32 on an
AVX512-BF16 CPU (1 thread): 0.62x at d_model 64 (slower), 1.16x at 128, 1.50x at 256, 1.98x at 768,
with per-step losses within 0.2% of float32's up to d_model 256 (2% at 768, bf16 lower after 20 steps).
Weights and optimizer state stay float32.
"""

from __future__ import annotations

import torch

CPU_BF16_MIN_D_MODEL = 256


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX tiles)."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def resolve_dtype(dtype: str, device_type: str, d_model: int) -> str:
    """``float32`` or ``bfloat16`` for ``train.dtype`` on ``device_type`` at ``d_model``."""
    if dtype != "auto":
        return dtype
    if device_type == "cuda":
        return "bfloat16"
    if device_type == "cpu" and d_model >= CPU_BF16_MIN_D_MODEL and cpu_has_bf16():
        return "bfloat16"
    return "float32"
