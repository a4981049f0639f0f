"""HELMET-style base-model tasks (docs/evaluation.md §2), fully synthetic: JSON key-value retrieval, RAG over
fact passages with distractors, passage re-ranking with graded relevance, and many-shot ICL with
randomly permuted integer labels. Demos shrink to zero below 2,048 tokens (they would not fit)."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from typing import Any

from archpool.tasks import words as W
from archpool.tasks.base import Draw, TokenizerLike, pick_depths
from archpool.tasks.params import SHOTS, SampleConfig, count, param
from archpool.tasks.ruler import FactDocs, fact_passage, pick_distractors


@dataclass(frozen=True)
class ShotsConfig(SampleConfig):
    """A task with demonstrations before the question (``json_kv``, ``rag``)."""

    shots: int | None = param(None, SHOTS)


@dataclass(frozen=True)
class IclConfig(SampleConfig):
    """Many-shot ICL over ``n_labels`` permuted integer labels."""

    n_labels: int = param(6, count(2, 40))  # each label's signature takes 4 of the 188 nouns


def _shots(p: ShotsConfig, length: int) -> int:
    return p.shots if p.shots is not None else (2 if length >= 2048 else 0)


# ------------------------------------------------------------------------------------- JSON KV
def json_kv(rng: random.Random, index: int, length: int, tok: TokenizerLike, p: ShotsConfig) -> Draw:
    def u() -> str:
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    gold_k, gold_v = u(), u()
    depth = pick_depths(rng, 1, index)[0]
    pair_seed = rng.getrandbits(32)
    demos = "".join(f'Key: "{u()}"\nCorresponding value: "{u()}"\n\n' for _ in range(_shots(p, length)))

    def render(n: int) -> tuple[str, dict[str, Any]]:
        r = random.Random(pair_seed)
        pairs = [
            (str(uuid.UUID(int=r.getrandbits(128), version=4)), str(uuid.UUID(int=r.getrandbits(128), version=4)))
            for _ in range(n)
        ]
        at = round(depth * n)
        pairs.insert(at, (gold_k, gold_v))
        context = "JSON data:\n" + json.dumps(dict(pairs), indent=1)
        prompt = (
            f"{context}\n\nExtract the value corresponding to the specified key in the JSON object below.\n\n"
            f'{demos}Key: "{gold_k}"\nCorresponding value:'
        )
        return prompt, {"needle_char": prompt.index(gold_k), "gold_index": at, "num_kvs": n + 1}

    target = f' "{gold_v}"'
    distractors = pick_distractors(rng, target, [], lambda: f' "{u()}"', p.n_choices - 1)
    return Draw(render, [gold_v], target, distractors, {})


# ------------------------------------------------------------------------------------- RAG
def rag(rng: random.Random, index: int, length: int, tok: TokenizerLike, p: ShotsConfig) -> Draw:
    facts = FactDocs(rng, index)
    demos = ""
    for _ in range(_shots(p, length)):
        f = FactDocs(rng, rng.randrange(40))
        docs, _ = f.docs(2)
        ctx = "\n\n".join(f"Document (Title: {d['name']}): {fact_passage(d)}" for d in docs)
        demos += f"{ctx}\n\nQuestion: {f.question}\nAnswer: {f.answer}\n\n"

    def render(n: int) -> tuple[str, dict[str, Any]]:
        docs, at = facts.docs(n)
        context = "\n\n".join(f"Document (Title: {d['name']}): {fact_passage(d)}" for d in docs)
        prompt = (
            "Use the given documents to write a concise and short answer to the question. "
            "Write your answer in the following format:\nAnswer: [answer]\n\n"
            f"{demos}{context}\n\nQuestion: {facts.question}\nAnswer:"
        )
        return prompt, {"needle_char": prompt.index(fact_passage(facts.gold)), "gold_doc": at, "num_docs": n + 1}

    target = " " + facts.answer
    distractors = pick_distractors(rng, target, [], lambda: " " + rng.choice(facts.options()), p.n_choices - 1)
    return Draw(render, [facts.answer], target, distractors, {"question": facts.question})


# ------------------------------------------------------------------------------------- re-rank
RERANK_INSTR = (
    "You are provided with a list of documents, each indicated by their ID. Rank each document based on their "
    "relevance to the question in descending order from most relevant to least relevant texts. Include all "
    "documents in the rankings. Write your answer using the unique IDs, with the following format:\n"
    "Ranking: ID3 > ID1 > ID2\n\n"
)


def rerank(rng: random.Random, index: int, length: int, tok: TokenizerLike, p: SampleConfig) -> Draw:
    """Query = (color, animal, city); a passage's relevance is how many of the three it matches
    (0-3). One passage matches all three, two match two, the rest are drawn at random."""
    q = (rng.choice(W.COLORS), rng.choice(W.ANIMALS), rng.choice(W.CITIES))
    query = f"Which document is about a {q[0]} {q[1]} in {q[2]}?"
    doc_seed = rng.getrandbits(32)
    fixed_depths = [pick_depths(rng, 1, index)[0], rng.random(), rng.random()]

    def passage(attrs: tuple[str, str, str]) -> str:
        return f"A {attrs[0]} {attrs[1]} lives in {attrs[2]}."

    def corrupt(r: random.Random, keep: int) -> tuple[str, str, str]:
        pools = (W.COLORS, W.ANIMALS, W.CITIES)
        keep_idx = set(r.sample(range(3), keep))
        color, animal, city = (q[i] if i in keep_idx else r.choice([x for x in pools[i] if x != q[i]]) for i in range(3))
        return color, animal, city

    def docs(n: int) -> list[tuple[str, tuple[str, str, str], int]]:
        r = random.Random(doc_seed)
        ids = r.sample(range(10, 10 + max(100, 4 * (n + 3))), n + 3)
        rest = [corrupt(r, r.choice([0, 0, 1, 1, 2])) for _ in range(n)]
        special = [q, corrupt(r, 2), corrupt(r, 2)]
        items = list(rest)
        for attrs, d in sorted(zip(special, fixed_depths), key=lambda x: -x[1]):
            items.insert(round(d * len(items)), attrs)
        out = []
        for i, attrs in zip(ids, items):
            rel = sum(a == b for a, b in zip(attrs, q))
            out.append((str(i), attrs, rel))
        return out

    def render(n: int) -> tuple[str, dict[str, Any]]:
        ds = docs(n)
        context = "\n".join(f"[ID: {i}] Document (Title: {a[1]} {i}): {passage(a)}" for i, a, _ in ds)
        prompt = f"{RERANK_INSTR}Query: {query}\nDocuments:\n{context}\n\nQuery: {query}\nRanking:"
        qrels = {i: rel for i, _, rel in ds}
        best = max(ds, key=lambda d: d[2])[0]
        return prompt, {"qrels": qrels, "best": best, "needle_char": prompt.index(f"[ID: {best}]"), "num_docs": n + 3}

    n_choices = p.n_choices
    fin_seed = rng.getrandbits(32)

    def finalize(meta: dict[str, Any]) -> tuple[list[str], str, list[str]]:
        qrels, best = meta["qrels"], meta["best"]
        ranked = sorted(qrels, key=lambda i: (-qrels[i], i))
        hard = [i for i in ranked if i != best]
        random.Random(fin_seed).shuffle(hard)
        hard.sort(key=lambda i: -qrels[i])  # stable: graded passages first, random within a grade
        return ranked, f" ID{best}", [f" ID{i}" for i in hard[: n_choices - 1]]

    # generation mode scores the full ranking (NDCG@10 against ``qrels``), likelihood mode the top-1 id
    return Draw(render, [], "", [], {"query": query}, finalize=finalize)


# ------------------------------------------------------------------------------------- ICL
ICL_INSTR = 'Use the provided mapping from the text to label to assign a label to the text. Only output "label: {label}" and nothing else. \n\n'


def icl(rng: random.Random, index: int, length: int, tok: TokenizerLike, p: IclConfig) -> Draw:
    """Texts from class-conditional word distributions; labels are a fresh random permutation of
    0..n-1 per sample, so the task is pure in-context label mapping (HELMET's default)."""
    n_labels = p.n_labels
    nouns = list(W.NOUNS)
    rng.shuffle(nouns)
    signature = [nouns[4 * c : 4 * c + 4] for c in range(n_labels)]
    perm = list(range(n_labels))
    rng.shuffle(perm)
    demo_seed = rng.getrandbits(32)

    def text(r: random.Random, c: int) -> str:
        ws = r.sample(signature[c], 3) + r.sample(W.VERBS, 2)
        r.shuffle(ws)
        return " ".join(ws)

    qc = rng.randrange(n_labels)
    qtext = text(rng, qc)

    def render(n: int) -> tuple[str, dict[str, Any]]:
        r = random.Random(demo_seed)
        demos: list[tuple[str, int]] = []
        rounds = 0
        while len(demos) < n:
            order = list(range(n_labels))
            r.shuffle(order)
            demos += [(text(r, c), perm[c]) for c in order]
            rounds += 1
        demos = demos[:n]
        context = "\n\n".join(f"{t}\nlabel: {lab}" for t, lab in demos)
        prompt = f"{ICL_INSTR}{context}\n\n{qtext}\nlabel:"
        return prompt, {"num_demos": n}

    gold = str(perm[qc])
    target = " " + gold
    others = [" " + str(x) for x in range(n_labels) if str(x) != gold]
    rng.shuffle(others)
    return Draw(render, [gold], target, others[: p.n_choices - 1], {"n_labels": n_labels}, min_size=n_labels)
