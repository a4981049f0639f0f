"""The GPU benchmark's FLOP count and a CPU smoke run, so the script works the day a GPU is lent."""

import json

import pytest
import torch

from archpool.model.geometry import type_window
from archpool.model.kernels.local import LocalMask

BENCH_SCRIPT = "bench_gpu"


@pytest.mark.parametrize("swa", [False, True])
def test_attended_keys_count_the_mask(bench, swa):
    T = 48
    cfg = bench.model_config("tiny", T, swa, window_ratio=0.25)
    pos = torch.arange(T)
    for layer_type in set(cfg.layer_types):
        mean_keys = LocalMask(type_window(cfg, layer_type)).allows(pos, pos).sum().item() / T
        assert bench.attended_keys(cfg, layer_type, T) == pytest.approx(mean_keys)
    assert ("sliding_attention" in cfg.layer_types) == swa


def test_flops_per_token_is_six_n_plus_attention(bench):
    cfg = bench.model_config("tiny", 64, False, 0.5)
    n = cfg.num_params(include_embeddings=False) + cfg.vocab_size * cfg.d_model
    attn = 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * (64 + 1) / 2
    assert bench.flops_per_token(cfg, 64) == pytest.approx(6 * n + attn)


def test_cpu_smoke_run(bench, tmp_path, capsys):
    out = tmp_path / "gpu.json"
    args = ["--device", "cpu", "--size", "tiny", "--seq-lens", "32", "--batch-tokens", "64", "--steps", "2", "--warmup", "1"]
    rc = bench.main([*args, "--json", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert len(res["mfu"]) == 2 and all(r["tokens_per_s"] > 0 and r["mfu"] is None for r in res["mfu"])
    assert set(res["bf16_parity"]) == {"full", "swa"}
    assert all(0 <= r["rel_diff"] < 0.05 for r in res["bf16_parity"].values())  # bf16 rounding, not a broken path
    assert "no backward" in res["flex_swa"]["skipped"] and "needs 2 GPUs" in res["ddp"]["skipped"]
    printed = capsys.readouterr().out
    assert "| T=32 swa sdpa |" in printed and "bf16 loss parity (full, sdpa)" in printed


def test_cpu_only_machine_skips_with_a_message(bench, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "gpu.json"
    assert bench.main(["--json", str(out)]) == 0
    assert "no CUDA device" in capsys.readouterr().out
    assert not out.exists()


def test_arguments_default_to_every_check_within_the_budget(bench):
    args = bench.parse_args([])
    assert args.checks == list(bench.CHECKS) and args.seq_lens == "2048,8192" and args.size == "100m"
    assert args.budget_s < 8 * 60 and args.json == bench.RESULTS
    assert bench.parse_args(["--checks", "ddp", "mfu", "--budget-s", "5"]).checks == ["ddp", "mfu"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--checks", "nonsense"])


def test_checks_past_the_budget_are_recorded_as_skipped(bench, tmp_path):
    out = tmp_path / "gpu.json"
    rc = bench.main(["--device", "cpu", "--size", "tiny", "--seq-lens", "32", "--budget-s", "0", "--json", str(out)])
    res = json.loads(out.read_text())
    assert rc == 0 and all("time budget" in r["skipped"] for r in res["mfu"]) and "time budget" in res["bf16_parity"]["skipped"]
