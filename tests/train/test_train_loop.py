"""The training loop, optimizer groups, LR schedules, configs and the stability score."""

from __future__ import annotations

import math

import pytest

from archpool.errors import ConfigError
from archpool.model.config import ModelConfig
from archpool.model.model import Decoder
from archpool.train.config import RunConfig, TrainConfig
from archpool.train.optim import LRSchedule, param_groups
from archpool.train.stability import stability_score
from archpool.train.trainer import pretrain
from tests.helpers.train import read_losses, tiny_run


def test_loss_decreases_on_a_tiny_model(tmp_path):
    result = pretrain(RunConfig.from_dict(tiny_run(max_steps=30, ckpt_every=100)), tmp_path / "run")
    losses = read_losses(tmp_path / "run")
    assert len(losses) == 30 and losses == result.losses
    assert math.log(64) - 0.3 < losses[0] < math.log(64) + 0.3  # starts near uniform
    assert sum(losses[-5:]) / 5 < 0.6 * losses[0]
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1]
    for key in ("loss", "grad_norm", "lr", "tokens", "tokens_per_s"):
        assert key in metrics
    assert (tmp_path / "run" / "stability.json").is_file()


def test_gradient_accumulation_and_intra_doc_mask_keep_the_global_batch_mean(tmp_path):
    """Micro-batches of 1, 2 or 8 sequences give the same update: the loss is a mean over the global batch."""
    runs = {}
    for mb in (1, 2, 8):
        runs[mb] = pretrain(
            RunConfig.from_dict(tiny_run(micro_batch_size=mb, max_steps=5, intra_doc_mask=True)), tmp_path / f"mb{mb}"
        ).losses
    for mb in (1, 2):
        assert runs[mb] == pytest.approx(runs[8], rel=1e-5)
    plain = pretrain(RunConfig.from_dict(tiny_run(max_steps=5)), tmp_path / "plain").losses
    assert plain[1:] != pytest.approx(runs[8][1:], rel=1e-6)  # the doc mask does change the model's inputs


def test_schedules_warm_up_then_decay_towards_the_final_lr():
    for kind in ("cosine", "linear", "wsd"):
        s = LRSchedule(peak=1.0, final=0.1, warmup=10, total=100, kind=kind, decay_fraction=0.2)
        lrs = [s(i) for i in range(100)]
        assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0) and lrs[10] == pytest.approx(1.0)
        assert 0.1 < lrs[-1] < 0.2  # the final lr is reached one step after the last: the last step still learns
        assert all(a >= b - 1e-12 for a, b in zip(lrs[9:], lrs[10:]))  # monotone after warmup
    wsd = LRSchedule(1.0, 0.0, 10, 100, "wsd", 0.2)
    assert wsd(80) == 1.0 and wsd(81) < 1.0 and wsd(99) == pytest.approx(1 / 20)
    cos = LRSchedule(1.0, 0.0, 0, 101, "cosine")
    assert cos(50) == pytest.approx(0.5, abs=0.02)
    const = LRSchedule(1.0, 0.0, 2, 50, "constant")
    assert [const(i) for i in range(4)] == [0.5, 1.0, 1.0, 1.0] and const(49) == 1.0


def test_every_step_of_a_linear_schedule_to_zero_learns():
    """N steps are N effective steps: no step runs at lr 0, and one step without warmup runs at the peak."""
    for total in (1, 2, 5, 50):
        s = LRSchedule(peak=2e-3, final=0.0, warmup=0, total=total, kind="linear")
        lrs = [s(i) for i in range(total)]
        assert lrs[0] == pytest.approx(2e-3) and min(lrs) > 0
        assert lrs[-1] == pytest.approx(2e-3 / total)


def test_no_weight_decay_on_norms_and_embeddings_unless_configured():
    model = Decoder(ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, qk_norm="headwise", max_seq_len=32))
    names = {id(p): n for n, p in model.named_parameters()}
    decay, no_decay = param_groups(model, 0.1)
    assert {names[id(p)] for p in no_decay["params"]} == {
        n for n, p in model.named_parameters() if "norm" in n or n == "embed.weight"
    }
    assert "lm_head.weight" in {names[id(p)] for p in decay["params"]}
    groups = param_groups(model, 0.1, decay_embeddings=True, decay_norms=True)
    assert len(groups) == 1 and len(groups[0]["params"]) == len(list(model.parameters()))


def test_bad_train_configs_name_the_field():
    with pytest.raises(ConfigError, match="train.schedule"):
        TrainConfig(schedule="step", max_steps=1)
    with pytest.raises(ConfigError, match="train.max_steps"):
        TrainConfig()
    with pytest.raises(ConfigError, match="train.bogus"):
        TrainConfig.from_dict({"bogus": 1, "max_steps": 1})
    with pytest.raises(ConfigError, match="global_batch_tokens"):
        TrainConfig(global_batch_tokens=100, max_steps=1).sequences_per_step(32)
    with pytest.raises(ConfigError, match="micro_batch_size"):
        TrainConfig(global_batch_tokens=256, micro_batch_size=3, max_steps=1).accumulation_steps(32, 1)
    with pytest.raises(ConfigError, match="extension.recipe"):
        RunConfig.from_dict({**tiny_run(), "extension": {"recipe": "rope2"}})
    assert TrainConfig(max_tokens=1000, global_batch_tokens=256).total_steps() == 4
    with pytest.raises(ConfigError, match="train.attn_impl"):
        TrainConfig(attn_impl="flash3", max_steps=1)
    with pytest.raises(ConfigError, match="train.attn_impl"):
        TrainConfig(attn_impl="flex", max_steps=1).resolved_attn_impl("cpu", masked=True)


def test_attention_kernel_choice():
    auto = TrainConfig(max_steps=1)
    assert auto.resolved_attn_impl("cpu", masked=True) == "sdpa"  # flex has no CPU backward
    assert auto.resolved_attn_impl("cuda", masked=True) == "flex"  # only the allowed blocks of SWA / doc masks
    assert auto.resolved_attn_impl("cuda", masked=False) == "sdpa"  # plain causal: the flash kernel
    assert TrainConfig(max_steps=1, attn_impl="sdpa").resolved_attn_impl("cuda", masked=True) == "sdpa"


def test_run_directory_refuses_a_different_config(tmp_path):
    pretrain(RunConfig.from_dict(tiny_run(max_steps=2)), tmp_path / "run")
    with pytest.raises(ConfigError, match="different config"):
        pretrain(RunConfig.from_dict(tiny_run(max_steps=2, lr=5e-3)), tmp_path / "run")
    again = pretrain(RunConfig.from_dict(tiny_run(max_steps=2, log_every=2)), tmp_path / "run")  # logging knobs may change
    assert again.already_complete


def test_stability_score_counts_and_sizes_spikes():
    smooth = [3.0 * math.exp(-i / 200) + 1.0 for i in range(300)]
    assert stability_score(smooth)["n_spikes"] == 0 and stability_score(smooth)["score"] == 0.0
    spiky = [2.0] * 300
    for at, size in ((100, 0.5), (200, 1.5)):
        spiky[at] *= 1 + size
        spiky[at + 1] *= 1 + size / 2
    s = stability_score(spiky)
    assert s["n_spikes"] == 2 and s["spike_steps"] == 4
    assert s["max_spike"] == pytest.approx(1.5, rel=0.05)
    assert s["score"] == pytest.approx(2.0, rel=0.05)
    assert stability_score(smooth[:50] + [float("nan")] + smooth[50:])["nonfinite_steps"] == 1
