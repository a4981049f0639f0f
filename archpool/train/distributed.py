"""Parallelism applied to an unmodified Decoder (torchtitan's separation): torchrun init, DDP or
FSDP2 (``fully_shard``) wrapping, gradient-sync control, and full (world-size independent) state
dicts for checkpoints."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from archpool.runtime import process_rank


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str | None = None) -> DistInfo:
    """Read torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK); NCCL on CUDA, gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = process_rank()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device is None else device.startswith("cuda")
    dev = torch.device("cuda", local) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", device_id=dev if use_cuda else None)
    return DistInfo(rank, world, local, dev)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def all_gather_object(obj: Any) -> list[Any]:
    if not dist.is_initialized():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def resolve_mode(mode: str, info: DistInfo) -> str:
    """``auto`` is DDP under torchrun and no wrapping in a single process."""
    if not info.distributed:
        return "none"
    if mode == "none":
        from archpool.errors import ConfigError

        raise ConfigError(
            "train.parallel",
            f"'none' under torchrun with {info.world_size} ranks would train {info.world_size} separate models; use ddp or fsdp",
        )
    return "ddp" if mode == "auto" else mode


def parallelize(model: nn.Module, mode: str, info: DistInfo, compile: bool = False, bf16: bool = False) -> nn.Module:
    """Compile (per block, in place so parameter names are unchanged) and wrap for ``mode``:
    ``none``, ``ddp`` or ``fsdp`` (FSDP2: each block sharded, then the root)."""
    if compile:
        for block in cast(nn.ModuleList, model.layers):
            block.compile()
    if mode == "none":
        return model
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [info.device.index] if info.device.type == "cuda" else None
        return DDP(model, device_ids=ids)
    if mode == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(info.device.type, (info.world_size,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
        for block in cast(nn.ModuleList, model.layers):
            fully_shard(block, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        return model
    raise ValueError(f"parallel: unknown mode {mode!r}")


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if hasattr(model, "module") and isinstance(model.module, nn.Module) else model


@contextlib.contextmanager
def grad_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """Skip the gradient all-reduce / reduce-scatter on all but the last micro-batch."""
    set_sync = getattr(model, "set_requires_gradient_sync", None)  # FSDP2
    if enabled:
        if set_sync is not None:
            set_sync(True)
        yield
        return
    no_sync = getattr(model, "no_sync", None)  # DDP
    if no_sync is not None:
        with no_sync():
            yield
    elif set_sync is not None:
        set_sync(False)
        yield
    else:
        yield


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Unsharded CPU state dict under the Decoder's own parameter names (collective under FSDP)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(unwrap(model), options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return cast(dict[str, torch.Tensor], state)  # full_state_dict: whole tensors, not shards


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Optimizer state keyed by parameter name, unsharded, on CPU: loadable at any world size."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(unwrap(model), optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(unwrap(model), optimizer, state, options=StateDictOptions(full_state_dict=True))


def total_grad_norm(model: nn.Module, max_norm: float | None) -> torch.Tensor:
    """Clip (when ``max_norm``) and return the global gradient norm, DTensor-aware."""
    params = [p for p in model.parameters() if p.grad is not None]
    if max_norm is None:
        norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    else:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return norm
