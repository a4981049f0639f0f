"""The registered tasks and the suites that group them.

``ruler``: RULER's 13 tasks (QA as one synthetic task); ``helmet``: four base-model categories;
``tiny``: formats tiny models learn (docs/evaluation.md §6, docs/tiny-scale.md); ``mqar``: the dense
tasks, multi-query associative recall (single-hop, rebound and chained) and key–value recall at
distances from a chosen law, scored by key–query distance. A dense task is one line here:
``register_dense_task(<family module>.FAMILY, name, config, description)``.
"""

from __future__ import annotations

from archpool.tasks import dense_kv, helmet, mqar, recall, ruler
from archpool.tasks.dense_kv import DenseKvConfig
from archpool.tasks.helmet import IclConfig, ShotsConfig
from archpool.tasks.mqar import MqarConfig
from archpool.tasks.params import SampleConfig
from archpool.tasks.recall import KvRecallConfig
from archpool.tasks.registry import TaskDef, register_dense_task, register_suite, register_task
from archpool.tasks.ruler import CweConfig, FweConfig, NiahConfig, VtConfig


def _niah(name: str, haystack: str, k: int, v: int, q: int, kt: str = "words", vt: str = "numbers", desc: str = "") -> None:
    config = NiahConfig(haystack=haystack, key_type=kt, value_type=vt, num_k=k, num_v=v, num_q=q)
    register_task(TaskDef(name, ruler.niah, "match_all", 128, config, description=desc))


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
        VtConfig(),
        description="variable tracking: one chain of 4 hops in noise",
    )
)
register_task(
    TaskDef(
        "cwe",
        ruler.common_words,
        "match_all",
        120,
        CweConfig(),
        description="common-words extraction from a numbered list",
    )
)
register_task(
    TaskDef(
        "fwe",
        ruler.freq_words,
        "match_all",
        50,
        FweConfig(),
        description="frequent coded-words extraction (Zipf)",
    )
)
register_task(
    TaskDef("qa", ruler.doc_qa, "match_part", 32, SampleConfig(), description="document QA over synthetic fact passages")
)
register_task(TaskDef("json_kv", helmet.json_kv, "subem", 64, ShotsConfig(), "recall", "JSON uuid key-value retrieval"))
register_task(TaskDef("rag", helmet.rag, "subem", 20, ShotsConfig(), "rag", "fact-passage RAG with distractor passages"))
register_task(
    TaskDef("rerank", helmet.rerank, "ndcg", 100, SampleConfig(), "rerank", "passage re-ranking, graded relevance, NDCG@10")
)
register_task(
    TaskDef(
        "icl",
        helmet.icl,
        "em",
        8,
        IclConfig(),
        "icl",
        "many-shot ICL, permuted integer labels",
    )
)
register_task(
    TaskDef(
        "kv_recall",
        recall.kv_recall,
        "first_word",
        4,
        KvRecallConfig(),
        description="MQAR-style recall with a small task vocabulary (tiny models)",
    )
)

register_dense_task(
    mqar.FAMILY,
    "mqar",
    MqarConfig(),
    "MQAR: many key-value bindings, each queried once at a uniform distance; every answer scored",
)
register_dense_task(
    mqar.FAMILY,
    "mqar_rebind",
    MqarConfig(rebind=True),
    "MQAR whose keys are bound again after each query: answers grow with length, earlier bindings are hard distractors",
)
register_dense_task(
    mqar.FAMILY,
    "mqar_chain",
    MqarConfig(chains=1.0),
    "two-hop MQAR chains (> k v w): both hops retrieved, min_distance forces them beyond a window",
    max_new_tokens=2,
)
register_dense_task(dense_kv.FAMILY, "dense_kv", DenseKvConfig(), "key-value recall, query distances from a chosen law")

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
register_suite("mqar", ["mqar", "mqar_rebind", "mqar_chain", "dense_kv"])
