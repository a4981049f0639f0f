"""The train stage: pretraining and context extension of any pool member (resumable, DDP / FSDP2)."""

from archpool.train.config import ExtensionConfig, RunConfig, TrainConfig

__all__ = ["ExtensionConfig", "RunConfig", "TrainConfig", "extend", "pretrain"]


def pretrain(run_cfg, out):
    from archpool.train.trainer import pretrain as _pretrain

    return _pretrain(run_cfg, out)


def extend(run_dir, ext, run_cfg=None, progress=None, out=None):
    from archpool.train.extend import extend as _extend

    return _extend(run_dir, ext, run_cfg, progress, out)
