"""The registered tasks and the suites that group them.

``ruler``: RULER's 13 tasks (QA as one synthetic task); ``helmet``: four base-model categories;
``tiny``: formats tiny models learn (docs/evaluation.md §6, docs/tiny-scale.md); ``mqar``: dense
multi-query associative recall, single-hop and chained, scored by key–query distance.
"""

from __future__ import annotations

from typing import Any

from archpool.errors import ConfigError
from archpool.tasks import helmet, mqar, recall, ruler
from archpool.tasks.params import Param, count
from archpool.tasks.registry import TaskDef, register_suite, register_task

# every parameter of every task, typed and bounded (archpool.tasks.params); the ranges keep one
# sample's generator finite: the word lists hold 188 nouns and 40 short keys
SHOTS = count(0, 16, optional=True)  # demonstrations before the question (null: the length decides)
VALUE_KINDS = ("numbers", "uuids", "words", "digits", "short")
NIAH_PARAMS = dict(
    haystack=Param("choice", choices=("noise", "corpus", "needle")),
    key_type=Param("choice", choices=VALUE_KINDS),
    value_type=Param("choice", choices=VALUE_KINDS),
    num_k=count(1, 100),
    num_v=count(1, 100),
    num_q=count(1, 100),
)
VT_PARAMS = dict(num_hops=count(1, 64), name_len=count(1, 16), shots=SHOTS)
CWE_PARAMS = dict(
    num_cw=count(1, 30, optional=True), freq_cw=count(1, 1000, optional=True), freq_ucw=count(1, 1000, optional=True), shots=SHOTS
)
KV_RECALL_PARAMS = dict(
    n_pairs=count(1, 20),  # distinct keys of a document: at least 20 of the 40 short keys are usable with any tokenizer
    n_queries=count(1, 20),
    value_type=Param("choice", choices=("digits", "letters")),
    haystack=Param("choice", choices=("noise", "corpus")),
)


def _vt_names(p: dict[str, Any], prefix: str) -> None:
    """Variable tracking draws ``num_hops + 1`` distinct names of ``name_len`` capitals (and distractor chains)."""
    if 26 ** p["name_len"] < 4 * (p["num_hops"] + 1):
        raise ConfigError(f"{prefix}.name_len", f"{p['name_len']} letters give too few names for {p['num_hops']} hops")


def _cwe_frequencies(p: dict[str, Any], prefix: str) -> None:
    """The common words appear more often than the others."""
    if p["freq_cw"] is not None and p["freq_ucw"] is not None and p["freq_cw"] <= p["freq_ucw"]:
        raise ConfigError(f"{prefix}.freq_cw", f"must exceed freq_ucw={p['freq_ucw']}, got {p['freq_cw']}")


def _niah(name, haystack, k, v, q, kt="words", vt="numbers", desc=""):
    register_task(
        TaskDef(
            name,
            ruler.niah,
            "match_all",
            128,
            dict(haystack=haystack, key_type=kt, value_type=vt, num_k=k, num_v=v, num_q=q),
            description=desc,
            params=NIAH_PARAMS,
        )
    )


_niah("niah_single_1", "noise", 1, 1, 1, desc="one word-key/number needle in noise sentences")
_niah("niah_single_2", "corpus", 1, 1, 1, desc="one needle in held-out text")
_niah("niah_single_3", "corpus", 1, 1, 1, vt="uuids", desc="one uuid-valued needle in held-out text")
_niah("niah_multikey_1", "corpus", 4, 1, 1, desc="needle + 3 distractor needles in held-out text")
_niah("niah_multikey_2", "needle", 1, 1, 1, desc="needle in a haystack of distractor needles")
_niah("niah_multikey_3", "needle", 1, 1, 1, kt="uuids", vt="uuids", desc="uuid needle among uuid distractor needles")
_niah("niah_multivalue", "corpus", 1, 4, 1, desc="one key with 4 values")
_niah("niah_multiquery", "corpus", 4, 1, 4, desc="4 keys queried at once")
register_task(
    TaskDef(
        "vt",
        ruler.variable_tracking,
        "match_all",
        30,
        dict(num_hops=4, name_len=5, shots=None),
        description="variable tracking: one chain of 4 hops in noise",
        params=VT_PARAMS,
        relate=_vt_names,
    )
)
register_task(
    TaskDef(
        "cwe",
        ruler.common_words,
        "match_all",
        120,
        dict(num_cw=None, freq_cw=None, freq_ucw=None, shots=None),
        description="common-words extraction from a numbered list",
        params=CWE_PARAMS,
        relate=_cwe_frequencies,
    )
)
register_task(
    TaskDef(
        "fwe",
        ruler.freq_words,
        "match_all",
        50,
        dict(alpha=2.0),
        description="frequent coded-words extraction (Zipf)",
        params=dict(alpha=Param("float", 0.1, 4.0)),  # the Zipf exponent: larger ones need 4^alpha words
    )
)
register_task(TaskDef("qa", ruler.doc_qa, "match_part", 32, {}, description="document QA over synthetic fact passages"))
register_task(
    TaskDef(
        "json_kv", helmet.json_kv, "subem", 64, dict(shots=None), "recall", "JSON uuid key-value retrieval", dict(shots=SHOTS)
    )
)
register_task(
    TaskDef(
        "rag", helmet.rag, "subem", 20, dict(shots=None), "rag", "fact-passage RAG with distractor passages", dict(shots=SHOTS)
    )
)
register_task(TaskDef("rerank", helmet.rerank, "ndcg", 100, {}, "rerank", "passage re-ranking, graded relevance, NDCG@10"))
register_task(
    TaskDef(
        "icl",
        helmet.icl,
        "em",
        8,
        dict(n_labels=6),
        "icl",
        "many-shot ICL, permuted integer labels",
        dict(n_labels=count(2, 40)),  # each label's signature takes 4 of the 188 nouns
    )
)
register_task(
    TaskDef(
        "kv_recall",
        recall.kv_recall,
        "first_word",
        4,
        dict(n_pairs=4, n_queries=3, value_type="digits", haystack="noise"),
        description="MQAR-style recall with a small task vocabulary (tiny models)",
        params=KV_RECALL_PARAMS,
    )
)

register_task(
    TaskDef(
        "mqar",
        mqar.make_document,
        "dense",
        1,
        dict(mqar.DEFAULT_PARAMS),
        description="MQAR: many key-value bindings, each queried once at a uniform distance; every answer scored",
        params=mqar.PARAMS,
    )
)
register_task(
    TaskDef(
        "mqar_rebind",
        mqar.make_document,
        "dense",
        1,
        dict(mqar.DEFAULT_PARAMS, rebind=True),
        description="MQAR whose keys are bound again after each query: answers grow with length, earlier bindings are hard distractors",
        params=mqar.PARAMS,
    )
)
register_task(
    TaskDef(
        "mqar_chain",
        mqar.make_document,
        "dense",
        2,
        dict(mqar.DEFAULT_PARAMS, chains=1.0),
        description="two-hop MQAR chains (> k v w): both hops retrieved, min_distance forces them beyond a window",
        params=mqar.PARAMS,
    )
)

RULER_TASKS = [
    "niah_single_1",
    "niah_single_2",
    "niah_single_3",
    "niah_multikey_1",
    "niah_multikey_2",
    "niah_multikey_3",
    "niah_multivalue",
    "niah_multiquery",
    "vt",
    "cwe",
    "fwe",
    "qa",
]
HELMET_CATEGORIES: dict[str, list[str]] = {
    "recall": ["niah_multikey_2", "niah_multikey_3", "niah_multivalue", "json_kv"],
    "rag": ["rag"],
    "rerank": ["rerank"],
    "icl": ["icl"],
}
register_suite("ruler", RULER_TASKS)
register_suite("helmet", sorted({t for ts in HELMET_CATEGORIES.values() for t in ts}))
register_suite("tiny", ["kv_recall", "niah_single_1", "icl"])
register_suite("mqar", ["mqar", "mqar_rebind", "mqar_chain"])
