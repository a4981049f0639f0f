"""Task generators: exact token budgets, seeds, depths, candidates, training documents."""

import pytest

from archpool.errors import ConfigError
from archpool.tasks import (
    DEPTHS,
    SUITES,
    TASKS,
    build_sample,
    generate,
    sample_seed,
    suite_tasks,
    task_config,
    training_documents,
)

LENGTHS = [256, 1024, 3000]


@pytest.mark.parametrize("task", sorted(t for t, d in TASKS.items() if d.metric != "dense"))
def test_prompt_budget_is_exact_in_the_models_tokens(task, bpe, texts):
    fitted = 0
    for L in LENGTHS:
        try:
            s = build_sample(
                task, bpe, L, index=1, config=task_config(task, {"haystack_texts": texts} if "niah" in task else None)
            )
        except ConfigError as e:
            assert "too short" in str(e) and L < 1024, e
            continue
        fitted += 1
        n = len(s.prompt_ids)
        assert s.prompt_ids == bpe.encode(s.prompt)
        assert n + s.reserved <= L
        assert s.reserved >= s.max_new_tokens
        assert all(len(bpe.encode(c)) <= s.reserved for c in s.candidates)
        # filled, not just fitted: one more haystack unit would overflow the budget
        assert s.meta["next_size_tokens"] + s.reserved > L
        if task not in ("niah_multikey_3", "rag", "rerank", "json_kv", "qa"):  # coarse (multi-sentence) units
            assert L - (n + s.reserved) <= max(0.06 * L, 24), (L, n, s.reserved)
    assert fitted >= 2


def test_samples_are_deterministic_and_distinct(bpe):
    a = build_sample("niah_single_1", bpe, 512, 3)
    b = build_sample("niah_single_1", bpe, 512, 3)
    c = build_sample("niah_single_1", bpe, 512, 4)
    assert a.prompt == b.prompt and a.target == b.target
    assert a.prompt != c.prompt
    assert build_sample("niah_single_1", bpe, 512, 3, seed=7).prompt != a.prompt


def test_needle_is_in_prompt_and_depths_spread_as_ruler(bpe):
    samples = generate("niah_single_1", bpe, 768, n=40)
    depths = sorted(s.meta["depths"][0] for s in samples)
    assert depths == sorted(d / 100 for d in DEPTHS)
    for s in samples:
        assert all(a in s.prompt for a in s.answers)
    near = [s.meta["needle_distance"] for s in samples if s.meta["depths"][0] >= 0.9]
    far = [s.meta["needle_distance"] for s in samples if s.meta["depths"][0] <= 0.1]
    assert max(near) < min(far)


def test_multikey_distractors_are_in_context_hard_negatives(bpe, texts):
    s = build_sample("niah_multikey_1", bpe, 1024, 0, config=task_config("niah_multikey_1", {"haystack_texts": texts}))
    assert s.target not in s.distractors and len(set(s.candidates)) == len(s.candidates) == 10
    in_context = [d for d in s.distractors if d.strip(" .") in s.prompt]
    assert len(in_context) == 3  # the three distractor needles' values


def test_corpus_haystack_uses_the_given_text(bpe):
    held_out = ["Zebras graze quietly on the open plain. " * 30]
    s = build_sample("niah_single_2", bpe, 512, 0, config=task_config("niah_single_2", {"haystack_texts": held_out}))
    assert "Zebras graze quietly" in s.prompt and s.meta["haystack"] == "corpus"


def test_rerank_qrels_and_ideal_ranking(bpe):
    from archpool.eval.metrics import ndcg_at_k, score_generation

    s = build_sample("rerank", bpe, 1024, 2)
    qrels = s.meta["qrels"]
    assert max(qrels.values()) == 3 and sorted(qrels.values()).count(2) >= 2
    ideal = " " + " > ".join(f"ID{i}" for i in s.answers)
    assert score_generation("ndcg", ideal, [], s.meta) == pytest.approx(1.0)
    assert score_generation("ndcg", " " + " > ".join(reversed(s.answers)), [], s.meta) < 0.5
    assert s.target == f" ID{s.answers[0]}"
    assert ndcg_at_k({}, qrels) == 0.0


def test_icl_labels_are_permuted_per_sample(bpe):
    a, b = build_sample("icl", bpe, 1024, 0), build_sample("icl", bpe, 1024, 1)
    assert a.target.strip() in {str(i) for i in range(6)}
    assert a.prompt.count("label:") > 12
    assert a.prompt != b.prompt


def test_kv_recall_uses_single_token_vocabulary(wordtok):
    s = build_sample("kv_recall", wordtok, 128, 0)
    assert all(len(wordtok.encode(c)) == 1 for c in s.candidates)
    assert s.prompt.rstrip().split()[-1] == s.meta["key"]
    assert f"{s.meta['key']} {s.target.strip()}" in s.prompt  # the pair is in the context block


def test_train_and_eval_seed_spaces_are_disjoint(bpe):
    assert sample_seed("eval", "kv_recall", 42, 0, 256) != sample_seed("train", "kv_recall", 42, 0, 0)
    with pytest.raises(ConfigError):
        sample_seed("test", "kv_recall", 0, 0)
    eval_prompts = {s.prompt for L in (128, 192, 256) for s in generate("kv_recall", bpe, L, n=30)}
    docs = list(training_documents(["kv_recall"], 200, seed=42, length_range=(128, 256), tokenizer=bpe))
    assert len(docs) == 200
    assert not any(d[: -len(" 0")] in eval_prompts for d in docs)


def test_training_documents_lengths_and_mix(bpe):
    docs = list(training_documents(["kv_recall", "niah_single_1"], 20, seed=1, length_range=(200, 300), tokenizer=bpe))
    assert len(docs) == 20
    assert 4 <= sum("special magic" in d for d in docs) <= 16
    assert all(len(bpe.encode(d)) <= 300 for d in docs)
    with pytest.raises(ConfigError):
        next(training_documents(["vt"], 1, seed=0, length_range=(20, 30), tokenizer=bpe))


def test_unknown_names_and_parameters_are_config_errors(bpe):
    with pytest.raises(ConfigError, match="unknown task"):
        build_sample("nope", bpe, 256, 0)
    with pytest.raises(ConfigError, match="unknown task parameter"):
        task_config("kv_recall", {"n_pears": 3})
    with pytest.raises(ConfigError, match="dense task"):
        build_sample("mqar", bpe, 256, 0)
    assert suite_tasks("ruler") == SUITES["ruler"] and len(SUITES["ruler"]) == 12
