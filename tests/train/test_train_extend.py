"""Context-extension recipes: RoPE frequencies equal transformers' for the same settings, and the
extended model trains at the longer length and records its recipe."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from archpool.cli import main
from archpool.errors import ConfigError
from archpool.model.checkpoint import load_checkpoint
from archpool.model.config import ModelConfig, RopeConfig
from archpool.model.rope import rope_frequencies
from archpool.train.config import ExtensionConfig, TrainConfig
from archpool.train.extend import extension_rope, plan_extension
from tests.helpers.train import read_losses, tiny_run, write_config

HEAD_DIM, PRE_LEN, LENGTH = 16, 32, 256


def _hf(rope_parameters: dict):
    cfg = LlamaConfig(
        hidden_size=64, num_attention_heads=4, head_dim=HEAD_DIM, max_position_embeddings=LENGTH, rope_parameters=rope_parameters
    )
    kind = rope_parameters["rope_type"]
    if kind == "default":
        return LlamaRotaryEmbedding.compute_default_rope_parameters(cfg, device="cpu")
    return ROPE_INIT_FUNCTIONS[kind](cfg, "cpu")


@pytest.mark.parametrize("recipe", ["ntk", "abf", "pi", "yarn"])
def test_recipe_frequencies_match_transformers(recipe):
    base = RopeConfig(theta=500_000.0)
    rope = extension_rope(base, ExtensionConfig(recipe=recipe), PRE_LEN, LENGTH)
    ours, scale = rope_frequencies(rope, HEAD_DIM)
    if recipe in ("ntk", "abf"):
        assert rope.theta == 8_000_000.0 and rope.type == "default"  # the paper's 500K -> 8M
        ref, ref_scale = _hf({"rope_type": "default", "rope_theta": 8_000_000.0})
    elif recipe == "pi":
        ref, ref_scale = _hf({"rope_type": "linear", "rope_theta": 500_000.0, "factor": LENGTH / PRE_LEN})
    else:
        ref, ref_scale = _hf(
            {
                "rope_type": "yarn",
                "rope_theta": 500_000.0,
                "factor": LENGTH / PRE_LEN,
                "original_max_position_embeddings": PRE_LEN,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
            }
        )
        assert ref_scale > 1.0
    torch.testing.assert_close(ours, ref.float(), rtol=1e-6, atol=0)
    assert scale == pytest.approx(ref_scale)
    before, _ = rope_frequencies(base, HEAD_DIM)
    assert not torch.equal(ours, before)


def test_yarn_on_full_layers_only_leaves_sliding_layers_at_plain_rope():
    rope = extension_rope(
        RopeConfig(theta=10_000.0), ExtensionConfig(recipe="yarn", factor=8.0, full_layers_only=True), 8192, 65536
    )
    assert (rope.factor, rope.original_max_seq_len, rope.beta_fast, rope.beta_slow) == (8.0, 8192, 32.0, 1.0)  # Olmo 3's
    full, full_scale = rope_frequencies(rope, HEAD_DIM, "full_attention")
    sliding, sliding_scale = rope_frequencies(rope, HEAD_DIM, "sliding_attention")
    plain, _ = rope_frequencies(RopeConfig(theta=10_000.0), HEAD_DIM)
    assert torch.equal(sliding, plain) and sliding_scale == 1.0
    assert not torch.equal(full, plain) and full_scale > 1.0


@pytest.mark.parametrize("recipe", ["ntk", "abf"])
def test_theta_raise_on_full_layers_only_matches_a_hand_computation(recipe):
    """Olmo 3's practice: theta x16 on full-attention layers, sliding layers keep the pretraining theta."""
    base = RopeConfig(theta=10_000.0)
    rope = extension_rope(base, ExtensionConfig(recipe=recipe, theta_ratio=16, full_layers_only=True), 128, 512)
    assert (rope.type, rope.theta, rope.full_layers_only, rope.sliding_theta) == ("default", 160_000.0, True, 10_000.0)
    full, full_scale = rope_frequencies(rope, HEAD_DIM, "full_attention")
    sliding, sliding_scale = rope_frequencies(rope, HEAD_DIM, "sliding_attention")
    hand_full = [160_000.0 ** (-2 * i / HEAD_DIM) for i in range(HEAD_DIM // 2)]
    hand_sliding = [10_000.0 ** (-2 * i / HEAD_DIM) for i in range(HEAD_DIM // 2)]
    assert full.tolist() == pytest.approx(hand_full, rel=1e-6) and full_scale == 1.0
    assert sliding.tolist() == pytest.approx(hand_sliding, rel=1e-6) and sliding_scale == 1.0
    # extending an already extended model keeps the sliding layers' original theta
    again = extension_rope(rope, ExtensionConfig(recipe=recipe, theta_ratio=2, full_layers_only=True), 512, 1024)
    assert (again.theta, again.sliding_theta) == (320_000.0, 10_000.0)
    # without the flag every layer is raised
    every = extension_rope(base, ExtensionConfig(recipe=recipe, theta_ratio=16), 128, 512)
    assert torch.equal(rope_frequencies(every, HEAD_DIM, "sliding_attention")[0], full)
    with pytest.raises(ConfigError, match="rope.sliding_theta"):
        RopeConfig(theta=1.0, sliding_theta=2.0).validate()


def test_default_plan_follows_the_paper_ratios():
    model = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=32)
    pre = TrainConfig(global_batch_tokens=256, micro_batch_size=4, max_steps=1000)
    plan = plan_extension(model, pre, ExtensionConfig(recipe="yarn"), "final")
    assert plan.model.max_seq_len == 256 and plan.model.rope.factor == 8.0  # 8x the pretraining context
    assert [s.seq_len for s in plan.stages] == [128, 256] and plan.stages[0].steps == plan.stages[1].steps
    assert plan.tokens == pytest.approx(0.07 * 1000 * 256, rel=0.02)  # 7% of pretraining, as 10B / 140B
    assert plan.train.schedule == "linear" and plan.train.final_lr_ratio == 0.0 and 0 < plan.train.warmup_steps < 10
    assert plan.model.extension["recipe"] == "yarn" and plan.model.extension["pretrain_seq_len"] == 32


def test_extension_trains_at_the_longer_length_and_records_its_recipe(tmp_path):
    cfg = tiny_run(max_steps=8, milestones=[4])
    cfg["model"].update(swa_pattern="olmo3", n_layers=4, window=16, rope={"theta": 500_000.0})
    cfg["extension"] = [
        {"recipe": "ntk", "length": 128, "tokens": 2048},
        {"recipe": "yarn", "length": 128, "tokens": 4096, "full_layers_only": True, "warmup_steps": 2},
    ]
    config = write_config(tmp_path / "run.yaml", cfg)
    assert main(["train", str(config), "--out", str(tmp_path / "run"), "--extend", "--no-progress"]) == 0
    run = tmp_path / "run"
    ntk_rows = [json.loads(x) for x in (run / "extend" / "ntk" / "metrics.jsonl").read_text().splitlines()]
    assert {r["seq_len"] for r in ntk_rows} == {128} and len(ntk_rows) == 8
    assert 0 < ntk_rows[-1]["lr"] < ntk_rows[0]["lr"]  # annealed towards 0, reached one step after the last
    yarn_rows = [json.loads(x) for x in (run / "extend" / "yarn" / "metrics.jsonl").read_text().splitlines()]
    assert [r["seq_len"] for r in yarn_rows] == [64] * 8 + [128] * 8
    lrs = [r["lr"] for r in yarn_rows]
    assert lrs[0] < lrs[1] == lrs[2] == max(lrs) and all(a > b for a, b in zip(lrs[2:], lrs[3:]))  # one anneal, both stages
    assert lrs[-1] == pytest.approx(max(lrs) / 14)  # 14 steps after the warmup: the last still learns

    model = load_checkpoint(run / "extend" / "yarn" / "milestones" / "final")
    assert model.cfg.rope.type == "yarn" and model.cfg.rope.full_layers_only and model.cfg.rope.original_max_seq_len == 32
    assert model.cfg.extension["recipe"] == "yarn" and model.cfg.max_seq_len == 128
    ntk = load_checkpoint(run / "extend" / "ntk" / "milestones" / "final")
    assert ntk.cfg.rope.theta == 8_000_000.0 and ntk.cfg.extension["theta_before"] == 500_000.0
    with torch.no_grad():
        logits = ntk(torch.randint(0, 64, (1, 128)))
    assert torch.isfinite(logits).all()

    # from a milestone, by the extend command; re-running it resumes (here: is already complete)
    args = ["extend", str(run), "--recipe", "pi", "--from", "step_000004", "--length", "64", "--tokens", "1024", "--no-progress"]
    assert main(args) == 0
    pi_run = run / "extend" / "pi_from_step_000004"
    first = read_losses(pi_run)
    assert main(args) == 0 and read_losses(pi_run) == first
    pi = load_checkpoint(pi_run / "milestones" / "final")
    assert pi.cfg.rope.type == "linear" and pi.cfg.rope.factor == 2.0 and pi.cfg.extension["source"] == "step_000004"


def test_extension_rejects_a_length_that_does_not_extend():
    model = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=32)
    with pytest.raises(ConfigError, match="extension.length"):
        plan_extension(model, TrainConfig(max_steps=10, global_batch_tokens=256), ExtensionConfig(length=32), "final")


def _extend_dir(tmp_path, extension: dict, **train) -> tuple:
    cfg = tiny_run(max_steps=6, **train)
    cfg["model"].update(qk_norm="layerwise", norm="post", rope={"theta": 10_000.0})
    cfg["extension"] = [extension]
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = write_config(tmp_path / "run.yaml", cfg)
    assert main(["train", str(config), "--out", str(tmp_path / "run"), "--extend", "--no-progress"]) == 0
    run = tmp_path / "run"
    return run, run / "extend" / extension.get("name", extension["recipe"])


def _weights(path) -> dict:
    from archpool.train.checkpoint import load_weights

    return load_weights(path)[1]


def test_a_one_step_extension_changes_the_weights_at_the_extension_lr(tmp_path):
    run, ext = _extend_dir(tmp_path, {"recipe": "ntk", "length": 64, "budgets": [1]})  # default warmup: none for 1 step
    rows = [json.loads(x) for x in (ext / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["lr"] == pytest.approx(1e-2 / 3)  # the extension lr: a third of the peak
    before, after = _weights(run / "milestones" / "final"), _weights(ext / "milestones" / "final")
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert "layers.0.attn.q_proj.weight" in moved
    # a fresh AdamW's first step moves a weight by about the lr (the update is m / sqrt(v) ~ sign(g))
    delta = (after["layers.0.attn.q_proj.weight"] - before["layers.0.attn.q_proj.weight"]).abs()
    assert delta.max().item() == pytest.approx(1e-2 / 3, rel=0.05)


def test_a_ladder_checkpoints_every_rung_of_one_run(tmp_path):
    run, ext = _extend_dir(tmp_path, {"recipe": "ntk", "length": 64, "budgets": [0, 1, 3, 5], "warmup_steps": 1})
    rows = [json.loads(x) for x in (ext / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["lr"] for r in rows] == pytest.approx([1e-2 / 3] * 5)  # constant after the warmup: a rung is a prefix
    rungs = {b: ext / "milestones" / f"step_{b:06d}" for b in (0, 1, 3, 5)}
    assert all((d / "config.json").is_file() for d in rungs.values())
    zero = load_checkpoint(rungs[0])
    assert zero.cfg.rope.theta == 160_000.0  # rung 0: the RoPE change alone
    source = _weights(run / "milestones" / "final")
    assert all(torch.equal(source[k], v) for k, v in _weights(rungs[0]).items())
    one = _weights(rungs[1])
    assert not torch.equal(one["layers.0.attn.q_proj.weight"], source["layers.0.attn.q_proj.weight"])
    assert all(torch.equal(a, b) for a, b in zip(_weights(rungs[5]).values(), _weights(ext / "milestones" / "final").values()))
    # the rung after 3 steps of the ladder is the same model as a 3-step extension with the same schedule
    _, three = _extend_dir(tmp_path / "b", {"recipe": "ntk", "length": 64, "budgets": [3], "warmup_steps": 1})
    assert all(torch.equal(a, b) for a, b in zip(_weights(rungs[3]).values(), _weights(three / "milestones" / "final").values()))


def test_the_extend_command_takes_a_ladder_and_a_qk_gain(tmp_path):
    run, _ = _extend_dir(tmp_path, {"recipe": "ntk", "length": 64, "budgets": [1]})
    args = ["extend", str(run), "--recipe", "ntk", "--name", "lad", "--length", "64", "--budgets", "0", "2", "--qk-gain", "1.5"]
    assert main([*args, "--no-progress"]) == 0
    lad = run / "extend" / "lad"
    assert {p.name for p in (lad / "milestones").iterdir()} >= {"step_000000", "step_000002", "final"}
    zero, source = _weights(lad / "milestones" / "step_000000"), _weights(run / "milestones" / "final")
    torch.testing.assert_close(zero["layers.1.attn.q_norm.weight"], source["layers.1.attn.q_norm.weight"] * 1.5)


def test_the_remedy_raises_the_qk_norm_gain_by_log_length(tmp_path):
    import math

    run, ext = _extend_dir(tmp_path, {"recipe": "ntk", "name": "remedy", "length": 128, "budgets": [0, 1], "qk_gain_alpha": 0.1})
    source, zero = _weights(run / "milestones" / "final"), _weights(ext / "milestones" / "step_000000")
    gain = 1 + 0.1 * math.log(128 / 32)
    for name, value in source.items():
        expected = value * gain if name.endswith("attn.q_norm.weight") else value
        torch.testing.assert_close(zero[name], expected, rtol=1e-6, atol=0)
    assert load_checkpoint(ext / "milestones" / "step_000000").cfg.extension["qk_gain"] == pytest.approx(gain)


def test_a_one_step_plan_without_a_ladder_runs_its_step_at_the_extension_lr():
    from archpool.train.optim import LRSchedule

    model = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=32)
    pre = TrainConfig(lr=6e-3, global_batch_tokens=256, micro_batch_size=4, max_steps=100)
    plan = plan_extension(model, pre, ExtensionConfig(length=64, tokens=256), "final")
    t = plan.train
    assert (t.max_steps, t.warmup_steps, t.lr) == (1, 0, pytest.approx(2e-3))
    assert LRSchedule(t.lr, t.lr * t.final_lr_ratio, t.warmup_steps, t.max_steps, t.schedule)(0) == pytest.approx(2e-3)


def test_ladder_and_remedy_settings_are_validated():
    with pytest.raises(ConfigError, match="extension.budgets"):
        ExtensionConfig(budgets=[0])
    with pytest.raises(ConfigError, match="extension.budgets"):
        ExtensionConfig(budgets=[2, 2])
    with pytest.raises(ConfigError, match="extension.budgets"):
        ExtensionConfig(budgets=[5], tokens=100)
    with pytest.raises(ConfigError, match="extension.qk_gain"):
        ExtensionConfig(qk_gain=2.0, qk_gain_alpha=0.1)


@pytest.mark.parametrize(
    "fields",
    [
        {"qk_norm": "none"},
        {"qk_norm": "none", "qkv_bias": True, "n_kv_heads": 2},
        {"qk_norm": "layerwise"},
        {"qk_norm": "headwise"},
    ],
    ids=["no-qk-norm", "no-qk-norm-bias-gqa", "layerwise", "headwise"],
)
def test_the_temperature_recipe_multiplies_every_logit_of_a_layer_by_the_gain(fields):
    """softmax(g·s) = softmax(g·log softmax(s)): the scaled layer-0 probabilities follow from the
    unscaled ones exactly when, and only when, every logit was multiplied by g."""
    from archpool.model.model import Decoder
    from archpool.train.extend import raise_qk_gain

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=32, **fields)
    model = Decoder(cfg).eval()
    with torch.no_grad():  # random biases, so the bias scaling is exercised
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_()
    gain = 1.7
    scaled = Decoder(cfg).eval()
    scaled.load_state_dict(raise_qk_gain(cfg, model.state_dict(), gain, full_layers_only=False))
    ids = torch.randint(0, 64, (2, 24))
    with torch.no_grad():
        (_, before), (_, after) = model.forward_with_attentions(ids), scaled.forward_with_attentions(ids)
    causal = torch.ones(24, 24, dtype=torch.bool).tril()
    expected = torch.softmax((gain * before[0].clamp_min(1e-30).log()).masked_fill(~causal, float("-inf")), -1)
    torch.testing.assert_close(after[0], expected, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(after[0], before[0], atol=1e-3)
