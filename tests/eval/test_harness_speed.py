"""What keeps lm-eval's RULER and archpool's own suites near the cost of a forward on CPU, each without changing
what is scored: lm-eval's generators asked for the scored documents alone build those same documents; the
needle tasks decode as far as their answers reach (a prefix of what lm-eval's 128-token budget decodes), under
another cache key; lm-eval reports no environment (no subprocess) in a cell; a prefill applies the LM head to the
one position whose logits it returns. Tiny random models and a 700-token BPE; no network."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("lm_eval")
pytest.importorskip("wonderwords")

from archpool.errors import ConfigError
from archpool.eval import harness as H
from tests.eval.test_harness import _export

LENGTH = 512


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return _export(tmp_path_factory.mktemp("speed"))[0]


def _build(task: str, length: int, tokenizer_dir, cap: int | None) -> list[dict]:
    """The documents lm-eval's task function builds after simple_evaluate's seeding, all 500 or up to ``cap``."""
    import random

    import numpy as np
    from lm_eval.tasks.ruler import common_utils, cwe_utils, fwe_utils, niah_utils

    functions = {
        "niah_single_1": niah_utils.niah_single_1,
        "niah_multikey_2": niah_utils.niah_multikey_2,
        "ruler_fwe": fwe_utils.fwe_download,
        "ruler_cwe": cwe_utils.get_cw_dataset,
    }
    common_utils.get_tokenizer.cache_clear()
    if task == "ruler_cwe":
        H.reset_cwe_rng()
    random.seed(0)
    np.random.seed(1234)
    with H.offline():
        if cap is None:
            return list(functions[task](max_seq_lengths=[length], tokenizer=str(tokenizer_dir))["test"])
        with H.documents_up_to(cap):
            return list(functions[task](max_seq_lengths=[length], tokenizer=str(tokenizer_dir))["test"])


@pytest.mark.parametrize(
    ("task", "length"), [("niah_single_1", 512), ("niah_multikey_2", 512), ("ruler_fwe", 512), ("ruler_cwe", 2048)]
)
def test_generators_asked_for_the_scored_documents_build_the_same_documents(export, task, length):
    capped = _build(task, length, export, 3)
    assert len(capped) == 3
    assert capped == _build(task, length, export, None)[:3]  # lm-eval's 500, of which it scores the first three
    from lm_eval.tasks.ruler import niah_utils, prepare_niah

    assert niah_utils.generate_samples is prepare_niah.generate_samples  # restored after the block


def test_the_answer_budget_covers_every_answer_and_leaves_other_tasks_their_own():
    from types import SimpleNamespace

    from tests.helpers.tokenizers import pseudo_bpe, pseudo_texts

    bpe = pseudo_bpe(pseudo_texts())

    def tok(text, add_special_tokens=False):  # called as the harness calls a transformers tokenizer
        return SimpleNamespace(input_ids=bpe.encode(text))

    one, four = ["1234567"], ["1234567", "7654321", "1111111", "2222222"]
    size = len(bpe.encode(" 1234567"))
    assert H.answer_budget("niah_single_1", [one, one], tok, 128) == size + H.ANSWER_ITEM_SLACK + H.ANSWER_SLACK
    need = sum(len(bpe.encode(" " + a)) for a in four) + 4 * H.ANSWER_ITEM_SLACK + H.ANSWER_SLACK
    assert H.answer_budget("niah_multikey_2", [one, four], tok, 128) == min(128, need)  # the longest document's
    assert H.answer_budget("niah_multikey_2", [four], tok, 10) == 10  # never beyond the task's own budget
    assert H.answer_budget("ruler_cwe", [one], tok, 120) == 120  # word lists keep lm-eval's budget
    assert H.answer_budget("niah_single_1", [[]], tok, 128) == 128  # no answer known: lm-eval's budget
    assert set(H.BOUNDED_TASKS) == {t for t in H.RULER_TASKS if t.startswith("niah_")}


def test_bounded_answers_are_prefixes_of_lm_evals_full_budget(export, tmp_path):
    runs = {}
    for generation in H.GENERATION:
        request = H.HarnessRequest(
            tasks=["niah_single_1"], lengths=[LENGTH], limit=2, generation=generation, out_dir=tmp_path / generation,
            cache_dir=tmp_path / "cache",
        )  # fmt: skip
        runs[generation] = H.run_ruler(export, request)
    bounded, full = (runs[g]["cells"][0] for g in H.GENERATION)
    assert full["max_gen_toks"] == 128 and 1 <= bounded["max_gen_toks"] < 64
    assert not bounded.get("cached") and not full.get("cached")  # another budget is another cell
    import json

    rows = {g: [json.loads(x) for x in (tmp_path / g / "samples.jsonl").read_text().splitlines()] for g in H.GENERATION}
    for short, long in zip(rows["answer"], rows["task"]):
        assert short["prompt"] == long["prompt"]
        assert long["answer"].startswith(short["answer"].rstrip()), (short["answer"], long["answer"])


@pytest.mark.parametrize(
    ("over", "field"), [({"generation": "all"}, "harness.generation"), ({"batch_size": 0}, "harness.batch_size")]
)
def test_generation_settings_are_checked_when_built(over, field):
    with pytest.raises(ConfigError) as e:
        H.HarnessRequest(lengths=[LENGTH], **over)
    assert e.value.field == field
    with pytest.raises(ConfigError) as e:
        H.RulerSettings.from_dict(over)
    assert e.value.field == "eval.harness.ruler." + field.split(".")[1]


def _head_rows(lm_head) -> list[int]:
    rows: list[int] = []
    lm_head.register_forward_hook(lambda m, args, out: rows.append(args[0].shape[1]))
    return rows


@pytest.mark.parametrize("backend", ["hf", "archpool"])
def test_a_prefill_applies_the_lm_head_to_the_last_position_alone(backend):
    from archpool.eval.lm import LM, ArchpoolBackend, HFBackend
    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder

    torch.manual_seed(0)
    if backend == "hf":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, max_position_embeddings=256)  # fmt: skip
        model = LlamaForCausalLM(cfg).eval()
        head = model.lm_head
        lm = LM(HFBackend(model), prefill_chunk=16)
    else:
        model = Decoder(ModelConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=4, max_seq_len=256)).eval()
        head = model.lm_head
        lm = LM(ArchpoolBackend(model), prefill_chunk=16)
    ids = torch.randint(0, 97, (1, 50))
    with torch.no_grad():
        full = model(ids).logits if backend == "hf" else model(ids)
    rows = _head_rows(head)
    _, last = lm.prefill(ids[0])
    assert rows == [1, 1, 1, 1]  # 4 chunks of up to 16 tokens, one row of the head each
    torch.testing.assert_close(last, full[:, -1].float(), rtol=1e-5, atol=1e-5)
    rows.clear()
    out = lm.greedy_generate(ids[0].tolist(), 3)
    assert rows == [1, 1, 1, 1, 1, 1] and len(out) == 3  # the prefill's 4 chunks, then one row per decoded token


def test_a_cell_spawns_no_process_for_lm_evals_environment_report(export, monkeypatch):
    import subprocess

    from lm_eval import evaluator

    spawned: list = []

    def refuse(self, args, *a, **k):
        spawned.append(args)
        raise FileNotFoundError(args)

    real = evaluator.add_env_info
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    (cell,) = H.run_ruler(export, H.HarnessRequest(tasks=["niah_single_1"], lengths=[LENGTH], limit=1))["cells"]
    assert cell["n"] == 1 and spawned == []
    assert evaluator.add_env_info is real  # restored after the cell
