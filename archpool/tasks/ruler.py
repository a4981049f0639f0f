"""RULER-style tasks (docs/evaluation.md §1): needle-in-a-haystack variants, variable tracking, common- and
frequent-word extraction and document QA over synthetic fact passages.

Templates and scoring follow RULER for base models (``{task_template}`` + answer prefix). Small-scale
adaptations: held-out text (or pseudo-text) replaces Paul Graham essays; synthetic fact passages
replace SQuAD/HotpotQA; the CWE word counts and the one-shot demos shrink at short lengths; the VT
answer prefix ends without a trailing space (the target starts with one, which BPE prefers).
"""

from __future__ import annotations

import math
import random
import string
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from archpool.errors import ConfigError
from archpool.tasks import words as W
from archpool.tasks.base import Draw, TokenizerLike, insert_at_depths, pick_depths, single_token_strings
from archpool.tasks.haystack import TextHaystack, noise_units
from archpool.tasks.params import SHOTS, Param, SampleConfig, count, param

NIAH_TEMPLATE = (
    "Some special magic {type_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_v} afterwards.\n{context}\n"
    "What are all the special magic {type_v} for {query} mentioned in the provided text?"
)
NIAH_PREFIX = " The special magic {type_v} for {query} mentioned in the provided text are"
NEEDLE = "One of the special magic {type_v} for {key} is: {value}."
TYPE_NAMES = {"numbers": "numbers", "uuids": "uuids", "words": "words", "digits": "numbers"}
VALUE_KINDS = ("numbers", "uuids", "words", "digits", "short")


@dataclass(frozen=True)
class NiahConfig(SampleConfig):
    """Needle in a haystack (every ``niah_*`` task: they differ in defaults)."""

    haystack: str = param("noise", Param("choice", choices=("noise", "corpus", "needle")))
    key_type: str = param("words", Param("choice", choices=VALUE_KINDS))
    value_type: str = param("numbers", Param("choice", choices=VALUE_KINDS))
    num_k: int = param(1, count(1, 100))  # needles (keys); those not queried are distractors
    num_v: int = param(1, count(1, 100))  # values per key
    num_q: int = param(1, count(1, 100))  # queried keys


@dataclass(frozen=True)
class VtConfig(SampleConfig):
    """Variable tracking: one chain of ``num_hops`` hops over names of ``name_len`` capitals."""

    num_hops: int = param(4, count(1, 64))
    name_len: int = param(5, count(1, 16))
    shots: int | None = param(None, SHOTS)

    def validate(self) -> None:
        """The task draws ``num_hops + 1`` distinct names (and distractor chains)."""
        if 26**self.name_len < 4 * (self.num_hops + 1):
            raise ConfigError(f"{self.PATH}.name_len", f"{self.name_len} letters give too few names for {self.num_hops} hops")


@dataclass(frozen=True)
class CweConfig(SampleConfig):
    """Common-words extraction; null counts and frequencies follow the length."""

    num_cw: int | None = param(None, count(1, 30, optional=True))
    freq_cw: int | None = param(None, count(1, 1000, optional=True))
    freq_ucw: int | None = param(None, count(1, 1000, optional=True))
    shots: int | None = param(None, SHOTS)

    def validate(self) -> None:
        """The common words appear more often than the others."""
        if self.freq_cw is not None and self.freq_ucw is not None and self.freq_cw <= self.freq_ucw:
            raise ConfigError(f"{self.PATH}.freq_cw", f"must exceed freq_ucw={self.freq_ucw}, got {self.freq_cw}")


@dataclass(frozen=True)
class FweConfig(SampleConfig):
    """Frequent-words extraction over a Zipf distribution."""

    alpha: float = param(2.0, Param("float", 0.1, 4.0))  # the Zipf exponent: larger ones need 4^alpha words


def join_and(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    if len(items) == 2:
        return f"{items[0]} and {items[1]}"
    return ", ".join(items[:-1]) + f", and {items[-1]}"


def make_value(rng: random.Random, kind: str, tok: TokenizerLike | None = None) -> str:
    if kind == "numbers":
        return str(rng.randint(10**6, 10**7 - 1))
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    if kind == "words":
        return f"{rng.choice(W.ADJECTIVES)}-{rng.choice(W.NOUNS)}"
    if kind == "digits":
        return rng.choice(W.DIGITS)
    if kind == "short":
        return rng.choice(single_token_strings(tok, W.SHORT_KEYS))
    raise ValueError(f"unknown key/value type {kind!r}")


def distinct_values(
    rng: random.Random, kind: str, n: int, exclude: Collection[str] = frozenset(), tok: TokenizerLike | None = None
) -> list[str]:
    out: list[str] = []
    seen = set(exclude)
    for _ in range(100 * n + 100):
        if len(out) == n:
            break
        v = make_value(rng, kind, tok)
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def pick_distractors(rng: random.Random, gold: str, hard: list[str], make: Callable[[], str], n: int) -> list[str]:
    """``n`` distinct alternatives to ``gold``: in-context hard negatives first, then fresh ones."""
    out: list[str] = []
    for h in hard:
        if h != gold and h not in out and len(out) < n:
            out.append(h)
    for _ in range(200 * n + 200):
        if len(out) >= n:
            break
        c = make()
        if c != gold and c not in out:
            out.append(c)
    return out


# ------------------------------------------------------------------------------------- NIAH
def niah(rng: random.Random, index: int, length: int, tok: TokenizerLike, p: NiahConfig) -> Draw:
    """RULER ``niah``: ``num_k`` needles (``num_k - num_q`` of them distractors with other keys),
    ``num_v`` values per key, ``num_q`` queried keys, in a noise / text / needle haystack."""
    haystack, ktype, vtype = p.haystack, p.key_type, p.value_type
    num_q, num_v = p.num_q, p.num_v
    num_k = max(p.num_k, num_q)
    type_v = plural = TYPE_NAMES.get(vtype, vtype)
    keys = distinct_values(rng, ktype, num_k, tok=tok)
    values = [distinct_values(rng, vtype, num_v, tok=tok) for _ in keys]
    needles = [NEEDLE.format(type_v=plural, key=k, value=v) for k, vs in zip(keys, values) for v in vs]
    order = list(range(len(needles)))
    rng.shuffle(order)
    needles = [needles[i] for i in order]
    q_idx = rng.sample(range(num_k), num_q)
    queries = [keys[i] for i in q_idx]
    answers = [v for i in q_idx for v in values[i]]
    query = join_and(queries)
    template, prefix = NIAH_TEMPLATE, NIAH_PREFIX
    if num_q * num_v == 1:  # RULER's singular form
        template = template.replace("Some", "A").replace("are all", "is").replace("are", "is")
        prefix = prefix.replace("are", "is")
        type_v = type_v[:-1] if type_v.endswith("s") else type_v
    depths = pick_depths(rng, len(needles), index)
    text = TextHaystack(p.haystack_texts) if haystack == "corpus" else None
    start = rng.randrange(len(text.sentences)) if text else 0
    hay_seed = rng.getrandbits(32)

    def units(n: int) -> list[str]:
        if haystack == "noise":
            return noise_units(n)
        if text is not None:  # "corpus"
            return text.units(start, n)
        r = random.Random(hay_seed)  # "needle": distractor needles with other keys and values
        out: list[str] = []
        taken = set(keys)
        while len(out) < n:
            k = make_value(r, ktype, tok)
            if k in taken:
                continue
            taken.add(k)
            out.append(NEEDLE.format(type_v=plural, key=k, value=make_value(r, vtype, tok)))
        return out

    sep = "\n" if haystack == "needle" else " "

    def render(n: int) -> tuple[str, dict[str, Any]]:
        placed, where = insert_at_depths(units(n), needles, depths)
        context = sep.join(placed)
        prompt = template.format(type_v=type_v, context=context, query=query) + prefix.format(type_v=type_v, query=query)
        first = min(where)
        needle_char = prompt.index(placed[first])
        return prompt, {"needle_char": needle_char, "depths": depths, "haystack": text.name if text else haystack}

    target = " " + join_and(answers) + "."
    hard = [v for i, vs in enumerate(values) if i not in q_idx for v in vs]

    def alt() -> str:
        vs = distinct_values(rng, vtype, len(answers), tok=tok)
        return " " + join_and(vs) + "."

    hard_targets = []
    if len(answers) == 1:
        hard_targets = [" " + h + "." for h in hard]
    distractors = pick_distractors(rng, target, hard_targets, alt, p.n_choices - 1)
    return Draw(render, answers, target, distractors, {"queries": queries}, step=p.step)


# ------------------------------------------------------------------------------------- VT
VT_TEMPLATE = (
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
    "Question: Find all variables that are assigned the value {query} in the text above."
)
VT_PREFIX = (
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are "
    "assigned the value {query}, they are:"
)


def _var_names(rng: random.Random, n: int, k: int = 5) -> list[str]:
    names: list[str] = []
    while len(names) < n:
        s = "".join(rng.choice(string.ascii_uppercase) for _ in range(k))
        if s not in names:
            names.append(s)
    return names


def variable_tracking(rng: random.Random, index: int, length: int, tok: TokenizerLike, p: VtConfig) -> Draw:
    hops = p.num_hops
    names = _var_names(rng, hops + 1, p.name_len)
    value = str(rng.randint(10000, 99999))
    chain = [f"VAR {names[0]} = {value}"] + [f"VAR {names[j + 1]} = VAR {names[j]}" for j in range(hops)]
    chain = [c + "." for c in chain]
    depths = sorted(rng.sample([d / 100 for d in range(0, 101, 2)], len(chain)))
    demo = ""
    if p.shots:
        dn = _var_names(rng, hops + 1, 3)
        dv = "12345"
        dchain = [f"VAR {dn[0]} = {dv}."] + [f"VAR {dn[j + 1]} = VAR {dn[j]}." for j in range(hops)]
        dctx = " ".join(noise_units(2) + dchain[:2] + noise_units(1) + dchain[2:])
        demo = (
            VT_TEMPLATE.format(context=dctx, query=dv) + VT_PREFIX.format(num_v=hops + 1, query=dv) + " " + " ".join(dn) + "\n\n"
        )

    def render(n: int) -> tuple[str, dict[str, Any]]:
        placed, where = insert_at_depths(noise_units(n), chain, depths)
        prompt = demo + VT_TEMPLATE.format(context=" ".join(placed), query=value) + VT_PREFIX.format(num_v=hops + 1, query=value)
        return prompt, {"needle_char": prompt.index(chain[0], len(demo)), "depths": depths}

    target = " " + " ".join(names)
    distractors = pick_distractors(
        rng, target, [], lambda: " " + " ".join(_var_names(rng, hops + 1, p.name_len)), p.n_choices - 1
    )
    return Draw(render, list(names), target, distractors, {"value": value})


# ------------------------------------------------------------------------------------- CWE
CWE_TEMPLATE = (
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n{context}\nQuestion: What are the {n} most common words in the above list?"
)
CWE_PREFIX = " Answer: The top {n} words that appear most often in the list are:"


def _numbered(ws: list[str]) -> str:
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(ws))


def common_words(rng: random.Random, index: int, length: int, tok: TokenizerLike, p: CweConfig) -> Draw:
    vocab = sorted(set(W.NOUNS) | set(W.ADJECTIVES) | set(W.VERBS))
    rng.shuffle(vocab)
    small = length < 4096
    num_cw = p.num_cw if p.num_cw else (10 if length >= 2048 else max(2, min(10, length // 256)))
    f_cw, f_ucw = (p.freq_cw or (6 if small else 30)), (p.freq_ucw or (1 if small else 3))
    common, rest = vocab[:num_cw], vocab[num_cw:]
    order_seed = rng.getrandbits(32)
    demo = ""
    if p.shots:
        dv = rest[-40:]
        dcw, ducw = dv[:num_cw], dv[num_cw : num_cw + 10]
        dlist = dcw * 3 + ducw
        random.Random(order_seed + 1).shuffle(dlist)
        demo = (
            CWE_TEMPLATE.format(context=_numbered(dlist), n=num_cw) + CWE_PREFIX.format(n=num_cw) + " " + _numbered(dcw) + "\n\n"
        )
        rest = rest[:-40]

    def render(n: int) -> tuple[str, dict[str, Any]]:
        ws = common * f_cw + [w for w in rest[:n] for _ in range(f_ucw)]
        random.Random(order_seed).shuffle(ws)
        prompt = demo + CWE_TEMPLATE.format(context=_numbered(ws), n=num_cw) + CWE_PREFIX.format(n=num_cw)
        return prompt, {"num_uncommon": n}

    target = " " + _numbered(common)

    def alt() -> str:
        k = rng.randint(1, num_cw)
        ws = list(common)
        for j in rng.sample(range(num_cw), k):
            ws[j] = rng.choice(rest)
        return " " + _numbered(ws)

    distractors = pick_distractors(rng, target, [], alt, p.n_choices - 1)
    return Draw(render, list(common), target, distractors, {"num_cw": num_cw}, min_size=0)


# ------------------------------------------------------------------------------------- FWE
FWE_TEMPLATE = (
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently "
    "appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. "
    "What are the three most frequently appeared words in the above coded text?"
)
FWE_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"


def freq_words(rng: random.Random, index: int, length: int, tok: TokenizerLike, p: FweConfig) -> Draw:
    alpha = p.alpha
    n_vocab = max(6, (length - 50) // 50)
    vocab: list[str] = []
    while len(vocab) < n_vocab:
        w = "".join(rng.choice(string.ascii_lowercase) for _ in range(6))
        if w not in vocab:
            vocab.append(w)
    vocab[0] = "...."
    zeta = sum(k**-alpha for k in range(1, 10_000))
    shuffle_seed = rng.getrandbits(32)

    def render(n: int) -> tuple[str, dict[str, Any]]:
        counts = [int(n * (k + 1) ** -alpha / zeta) for k in range(n_vocab)]
        ws = [w for w, c in zip(vocab, counts) for _ in range(c)]
        random.Random(shuffle_seed).shuffle(ws)
        prompt = FWE_TEMPLATE.format(context=" ".join(ws)) + FWE_PREFIX
        return prompt, {"num_words": n}

    answers = vocab[1:4]
    target = " " + " ".join(answers)
    distractors = pick_distractors(rng, target, [], lambda: " " + " ".join(rng.sample(vocab[1:], 3)), p.n_choices - 1)
    # below ~6 x the vocabulary the Zipf counts of the 3 answers tie; require a size where they differ
    min_size = int(math.ceil(zeta * 4**alpha)) + 1
    return Draw(render, answers, target, distractors, {}, min_size=min_size, step=max(1, length // 64))


# ------------------------------------------------------------------------------------- QA
QA_TEMPLATE = (
    "Answer the question based on the given documents. Only give me the answer and do not output any other words.\n\n"
    "The following are given documents.\n\n{context}\n\nAnswer the question based on the given documents. "
    "Only give me the answer and do not output any other words.\n\nQuestion: {query}"
)
QA_PREFIX = " Answer:"
FACT_FIELDS = {
    "city": ("was born in {}", "Where was {} born?"),
    "job": ("works as a {}", "What is the job of {}?"),
    "animal": ("owns a pet {}", "Which pet does {} own?"),
}


def person_facts(rng: random.Random, n: int) -> list[dict[str, str]]:
    people: list[dict[str, str]] = []
    names: set[str] = set()
    while len(people) < n:
        name = f"{rng.choice(W.FIRST_NAMES)} {rng.choice(W.LAST_NAMES)}"
        if name in names:
            continue
        names.add(name)
        people.append({"name": name, "city": rng.choice(W.CITIES), "job": rng.choice(W.JOBS), "animal": rng.choice(W.ANIMALS)})
    return people


def fact_passage(person: dict[str, str]) -> str:
    n = person["name"]
    return (
        f"{n} {FACT_FIELDS['city'][0].format(person['city'])}. {n.split()[0]} {FACT_FIELDS['job'][0].format(person['job'])} "
        f"and {FACT_FIELDS['animal'][0].format(person['animal'])}."
    )


class FactDocs:
    """A gold person passage among distractor person passages; the question asks one field."""

    def __init__(self, rng: random.Random, index: int):
        self.gold = person_facts(rng, 1)[0]
        self.field = rng.choice(list(FACT_FIELDS))
        self.question = FACT_FIELDS[self.field][1].format(self.gold["name"])
        self.answer = self.gold[self.field]
        self.depth = pick_depths(rng, 1, index)[0]
        self.seed = rng.getrandbits(32)

    def docs(self, n: int) -> tuple[list[dict[str, str]], int]:
        r = random.Random(self.seed)
        others = [p for p in person_facts(r, n + 1) if p["name"] != self.gold["name"]][:n]
        at = round(self.depth * n)
        return others[:at] + [self.gold] + others[at:], at

    def options(self) -> list[str]:
        return {"city": W.CITIES, "job": W.JOBS, "animal": W.ANIMALS}[self.field]


def doc_qa(rng: random.Random, index: int, length: int, tok: TokenizerLike, p: SampleConfig) -> Draw:
    facts = FactDocs(rng, index)

    def render(n: int) -> tuple[str, dict[str, Any]]:
        docs, at = facts.docs(n)
        context = "\n\n".join(f"Document {i + 1}:\n{fact_passage(d)}" for i, d in enumerate(docs))
        prompt = QA_TEMPLATE.format(context=context, query=facts.question) + QA_PREFIX
        return prompt, {"needle_char": prompt.index(fact_passage(facts.gold)), "gold_doc": at}

    target = " " + facts.answer
    distractors = pick_distractors(rng, target, [], lambda: " " + rng.choice(facts.options()), p.n_choices - 1)
    return Draw(render, [facts.answer], target, distractors, {"question": facts.question})
