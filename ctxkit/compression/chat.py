"""Compress a chat history to a token budget, keeping what the next answer needs.

``compress_chat`` takes OpenAI-style ``{"role", "content"}`` messages (with ``tool_calls`` /
``tool_call_id`` / ``name``) or ShareGPT ``{"from", "value"}`` turns and returns messages in the
same format that fit ``budget`` tokens, counted the way chat APIs bill them: every message costs
``per_message`` tokens of framing plus its role, name, content and tool calls, and the reply is
primed with ``reply_priming`` more (OpenAI's published accounting: 3 and 3).

In order:

1. the system prompt (``keep_system``) and the last ``keep_last`` messages stay verbatim (a
   budget too small for them is a ``ValueError``);
2. filler turns ("thanks!", "ok", "got it") and near-duplicate turns (a re-asked question: the
   earlier copy goes, the latest stays) are dropped;
3. the other turns are scored by relevance to the latest user turn (or ``query``) and their
   information per token, as ``compress`` scores units; the best are kept whole while they
   fit, a turn too long for what is left is shortened with ``compress``, the rest dropped.

An assistant message with tool calls and the tool results answering it are one unit: kept or
dropped together, never shortened. Every removed or shortened message is in the ledger.

Example:
    >>> msgs = [{"role": "system", "content": "You are terse."},
    ...         {"role": "user", "content": "My locker code is 4417."},
    ...         {"role": "assistant", "content": "Noted."},
    ...         {"role": "user", "content": "thanks!"},
    ...         {"role": "assistant", "content": "The weather is sunny with a light breeze."},
    ...         {"role": "user", "content": "What is my locker code?"}]
    >>> out = compress_chat(msgs, budget=40, keep_last=1)
    >>> [m["content"] for m in out.messages]
    ['You are terse.', 'My locker code is 4417.', 'What is my locker code?']
    >>> [(c.index, c.reason) for c in out.ledger]
    [(2, 'filler'), (3, 'filler'), (4, 'over budget')]
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ctxkit.compression.density import near_duplicates
from ctxkit.compression.prune import check_budget, compress, unit_scores
from ctxkit.compression.scorers import Scorer, get_scorer
from ctxkit.io.messages import message_format as _format
from ctxkit.io.messages import message_text as _text
from ctxkit.io.messages import raw_role as _role
from ctxkit.io.messages import tool_call_ids as _tool_ids
from ctxkit.io.tokenizers import Tokenizer, resolve_tokenizer

__all__ = ["ChatCompression", "MessageChange", "compress_chat", "count_chat_tokens"]

_SYSTEM = {"system", "developer"}
_USER = {"user", "human"}
_TOOL_CALLERS = {"function_call"}  # ShareGPT's tool call turn
_TOOL_RESULTS = {"tool", "function", "observation"}
_FILLER = re.compile(
    r"^(?:(?:ok(?:ay)?|k|cool|great|nice|awesome|perfect|thanks?|thank\s+you|thx|ty|"
    r"(?:so\s+)?much|a\s+lot|got\s+it|no\s+problem|np|sounds\s+good|"
    r"you'?re\s+welcome|welcome|understood|noted|alright|all\s+right|lol|haha|hi|hello|hey|"
    r"good|very|i\s+see|makes\s+sense|that\s+helps|appreciated?|it|you|much appreciated)"
    r"[\s!.,:;)(\-]*)+$",
    re.IGNORECASE,
)


@dataclass
class MessageChange:
    """One removed or shortened message: ``action`` is ``"dropped"`` or ``"shortened"``."""

    index: int
    role: str
    action: str
    reason: str
    tokens_before: int
    tokens_after: int
    score: float | None = None
    code: str = ""  # ``reason`` as data: filler, duplicate, over_budget or shortened


@dataclass
class ChatCompression:
    """The compressed messages (input format) and the ledger of what changed."""

    messages: list[dict[str, Any]]
    original_tokens: int
    compressed_tokens: int
    budget: int
    kept: list[int]  # input indices of the messages in ``messages``
    ledger: list[MessageChange] = field(default_factory=list)
    format: str = "openai"

    @property
    def ratio(self) -> float:
        return self.compressed_tokens / self.original_tokens if self.original_tokens else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "original_tokens": self.original_tokens,
            "compressed_tokens": self.compressed_tokens,
            "budget": self.budget,
            "ratio": self.ratio,
            "format": self.format,
            "kept": self.kept,
            "ledger": [asdict(c) for c in self.ledger],
            "messages": self.messages,
        }


# ---------------------------------------------------------------------------------------------
# message access


def count_chat_tokens(messages: Sequence[Mapping[str, Any]], tokenizer: str | Tokenizer =
                      "cl100k_base", per_message: int = 3, reply_priming: int = 3) -> int:
    """Tokens a chat API bills for ``messages`` (framing, role, name, content, tool calls).

    Example:
        >>> count_chat_tokens([{"role": "user", "content": "hello world"}])
        9
    """
    tok = resolve_tokenizer(tokenizer)
    _format(messages)
    if not messages:
        return 0
    return sum(_message_tokens(m, i, tok, per_message) for i, m in enumerate(messages)) + \
        reply_priming


def _message_tokens(m: Mapping[str, Any], index: int, tok: Tokenizer, per_message: int) -> int:
    n = per_message + tok.count(_role(m)) + tok.count(_text(m, index))
    if m.get("name"):
        n += 1 + tok.count(str(m["name"]))
    for key in ("tool_calls", "function_call"):
        if m.get(key):
            n += tok.count(json.dumps(m[key], ensure_ascii=False, sort_keys=True))
    return n


def _groups(messages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Message indices grouped so a tool call and the results answering it stay together."""
    groups: list[list[int]] = []
    open_ids: set[str] = set()
    for i, m in enumerate(messages):
        role = _role(m)
        answers = role in _TOOL_RESULTS and groups and (
            (m.get("tool_call_id") is not None and str(m["tool_call_id"]) in open_ids)
            or (m.get("tool_call_id") is None and _is_call(messages[groups[-1][0]])))
        if answers:
            groups[-1].append(i)
            continue
        groups.append([i])
        open_ids = set(_tool_ids(m))
    return groups


def _is_call(m: Mapping[str, Any]) -> bool:
    return bool(m.get("tool_calls") or m.get("function_call")) or _role(m) in _TOOL_CALLERS


# ---------------------------------------------------------------------------------------------


def compress_chat(
    messages: Sequence[Mapping[str, Any]],
    budget: int,
    keep_last: int = 2,
    keep_system: bool = True,
    query: str | None = None,
    tokenizer: str | Tokenizer = "cl100k_base",
    scorer: str | Scorer = "idf",
    *,
    per_message: int = 3,
    reply_priming: int = 3,
    shorten: bool = True,
    min_shortened: int = 24,
    dedup_threshold: float = 0.8,
    query_weight: float = 0.7,
) -> ChatCompression:
    """Fit a chat history into ``budget`` tokens; see the module docstring for the policy.

    ``min_shortened``: a turn is shortened only when at least this many content tokens remain
    for it (a shorter stub rarely helps); otherwise it is dropped.
    """
    check_budget(budget)
    if keep_last < 0:
        raise ValueError(f"keep_last must be >= 0, got {keep_last}")
    fmt = _format(messages)
    tok = resolve_tokenizer(tokenizer)
    texts = [_text(m, i) for i, m in enumerate(messages)]
    roles = [_role(m) for m in messages]
    cost = np.array([_message_tokens(m, i, tok, per_message) for i, m in enumerate(messages)],
                    dtype=np.int64)
    priming = reply_priming if len(messages) else 0
    original = int(cost.sum()) + priming

    def result(keep: np.ndarray, new_text: dict[int, str], ledger: list[MessageChange]
               ) -> ChatCompression:
        out, kept, total = [], [], priming if keep.any() else 0
        for i in np.flatnonzero(keep):
            msg = dict(messages[i])
            if i in new_text:
                msg["content" if fmt == "openai" else "value"] = new_text[i]
            out.append(msg)
            kept.append(int(i))
            total += _message_tokens(msg, int(i), tok, per_message)
        ledger.sort(key=lambda c: c.index)
        return ChatCompression(out, original, total, int(budget), kept, ledger, fmt)

    n = len(messages)
    if original <= budget:
        return result(np.ones(n, dtype=bool), {}, [])

    groups = _groups(messages)
    group_of = np.empty(n, dtype=np.int64)
    for g, members in enumerate(groups):
        group_of[members] = g
    protected = np.zeros(n, dtype=bool)
    if keep_system:
        protected |= np.array([r in _SYSTEM for r in roles], dtype=bool)
    tail = [i for i in range(n) if roles[i] not in _SYSTEM or not keep_system][-keep_last:] \
        if keep_last else []
    for i in tail:
        protected[groups[group_of[i]]] = True
    floor = int(cost[protected].sum()) + (priming if protected.any() else 0)
    if floor > budget:
        raise ValueError(
            f"budget {budget} is too small for the kept messages: the system prompt and the last "
            f"{keep_last} message(s) need {floor} tokens")

    ledger: list[MessageChange] = []
    keep = np.ones(n, dtype=bool)

    def drop(members: Sequence[int], reason: str, score: float | None = None,
             code: str = "over_budget") -> None:
        for i in members:
            keep[i] = False
            ledger.append(MessageChange(int(i), roles[i], "dropped", reason, int(cost[i]), 0,
                                        score, code))

    single = [len(groups[group_of[i]]) == 1 for i in range(n)]
    for i in range(n):
        if not protected[i] and single[i] and _FILLER.match(texts[i].strip() or "ok"):
            drop([i], "filler", code="filler")
    # a re-asked question: keep the latest copy, so look for duplicates from the end
    dup_rev = near_duplicates(texts[::-1], dedup_threshold) if n > 1 else []
    for k, d in enumerate(dup_rev):
        i, j = n - 1 - k, n - 1 - d
        if d >= 0 and keep[i] and not protected[i] and single[i] and roles[i] == roles[j] \
                and texts[i].strip():
            drop([i], f"duplicate of message {j}", code="duplicate")

    if query is None:
        query = next((texts[i] for i in range(n - 1, -1, -1) if roles[i] in _USER), None)
    cands = [g for g, members in enumerate(groups)
             if keep[members].all() and not protected[members].any()]
    cand_text = [" ".join(texts[i] for i in groups[g]) for g in cands]
    sc = get_scorer(scorer)  # one instance: model-backed scorers load and cache once
    scores, _ = unit_scores(cand_text, np.array([cost[groups[g]].sum() for g in cands]),
                            sc, query, query_weight)
    room = budget - floor - (0 if protected.any() else priming)  # priming once, if any kept
    new_text: dict[int, str] = {}
    for rank in np.argsort(-scores, kind="stable"):
        members = groups[cands[rank]]
        need = int(cost[members].sum())
        score = float(scores[rank])
        if need <= room:
            room -= need
            continue
        i = members[0]
        framing = int(cost[i]) - tok.count(texts[i])
        content_room = room - framing
        if shorten and len(members) == 1 and isinstance(messages[i].get(
                "content", messages[i].get("value")), str) and content_room >= min_shortened:
            short = compress(texts[i], content_room, query=query, tokenizer=tok, scorer=sc)
            if short.text.strip():
                new_text[i] = short.text
                after = framing + short.compressed_tokens
                room -= after
                ledger.append(MessageChange(i, roles[i], "shortened",
                                            f"shortened to fit ({len(short.dropped)} of "
                                            f"{len(short.units)} sentences dropped)",
                                            int(cost[i]), after, score, "shortened"))
                continue
        drop(members, "over budget" + (" (tool call and results)" if len(members) > 1 else ""),
             score)
    return result(keep, new_text, ledger)
