"""Compress a chat history to a token budget, keeping what the next answer needs.

``compress_chat`` takes a conversation in any format :mod:`ctxkit.io.formats` reads (OpenAI,
Anthropic with its system prompt given apart, ShareGPT, LangChain ``BaseMessage``s, LlamaIndex
``ChatMessage``s) and returns the kept messages in the same format and types (an untouched
message is the very object it came as) that fit ``budget`` tokens, counted the way chat APIs
bill them: every message costs ``per_message`` tokens of framing plus its role, name, content
(tool results included), tool calls (names and arguments) and ``image_tokens`` per image, and
the reply is primed with ``reply_priming`` more (OpenAI's published accounting: 3 and 3).

In order:

1. the system prompt (``keep_system``) and the last ``keep_last`` messages stay verbatim (a
   budget too small for them is a ``ValueError``);
2. filler turns ("thanks!", "ok", "got it") and re-asked questions (word 3-gram Jaccard at
   least ``dedup_threshold`` with a later turn of the same role: the latest copy stays) go;
3. the other turns are ranked by relevance to the latest user turn (or ``query``; the
   default ``embedding`` scorer fuses MiniLM and BM25) mixed with information per token as
   ``compress`` scores units, each turn then gaining a share (``neighbors``) of its better
   neighbour's score (an answer rarely repeats its question's words);
4. coarse to fine, after LongLLMLingua: the best turns are kept whole in ``whole_share`` of the
   free room; the next ones are kept shortened to about ``word_keep`` of their tokens (their
   least informative words dropped, numbers and names kept) while they fit; a turn too long
   even so is cut to the last of the room with ``compress``, the rest dropped; room left at
   the end gives shortened turns their whole text back, most relevant first;
5. a tool result whose call is gone is dropped; with ``alternate=True`` user and assistant
   turns are kept alternating.

An assistant message with tool calls and every tool result answering it (parallel calls
included; in Anthropic's format the next user turn's ``tool_result`` blocks) are one unit: kept
or dropped together, never shortened, so the window never starts with a tool result. Every
removed or shortened message is in the ledger.
Per-message features (tokens, bits, shingles, embeddings, shortened forms) come from a
:class:`~ctxkit.chat.features.ChatFeatures` store: fresh per call here, kept across
turns by :class:`~ctxkit.chat.memory.ChatMemory`, which returns the same results.

Example:
    >>> msgs = [{"role": "system", "content": "You are terse."},
    ...         {"role": "user", "content": "My locker code is 4417."},
    ...         {"role": "assistant", "content": "Noted."},
    ...         {"role": "user", "content": "thanks!"},
    ...         {"role": "assistant", "content": "The weather is sunny with a light breeze."},
    ...         {"role": "user", "content": "What is my locker code?"}]
    >>> out = compress_chat(msgs, budget=36, keep_last=1)
    >>> [m["content"] for m in out.messages]
    ['You are terse.', 'My locker code is 4417.', 'What is my locker code?']
    >>> [(c.index, c.reason) for c in out.ledger]
    [(2, 'filler'), (3, 'filler'), (4, 'over budget')]
    >>> [m["content"] for m in compress_chat(msgs, budget=44, keep_last=1).messages[1:3]]
    ['My locker code is 4417.', 'weather sunny with light breeze']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.chat.features import ChatFeatures, billed_tokens
from ctxkit.chat.options import ChatOptions
from ctxkit.chat.summary_placement import (
    ChatSummary,
    Summarizer,
    SummaryOptions,
    check_summarizer,
    summarized_select,
    summary_message,
)
from ctxkit.compression.budgeted import BudgetedResult
from ctxkit.compression.options import check_budget
from ctxkit.compression.scoring.lexical import spread_to_neighbors
from ctxkit.compression.scoring.registry import check_scorer
from ctxkit.compression.text.pipeline import compress
from ctxkit.io.formats import IMAGE_TOKENS, Conversation, read_conversation
from ctxkit.io.messages import answered_ids, check_tool_results, is_courtesy
from ctxkit.io.messages import message_format as _format
from ctxkit.io.messages import message_text as _text
from ctxkit.io.messages import raw_role as _role
from ctxkit.io.messages import tool_call_ids as _tool_ids
from ctxkit.io.tokenizers import Tokenizer, resolve_tokenizer
from ctxkit.options import takes_options

__all__ = ["CompressChatResult", "MessageChange", "compress_chat", "count_chat_tokens"]

_SYSTEM = {"system", "developer"}
_USER = {"user", "human"}
_TOOL_CALLERS = {"function_call"}  # ShareGPT's tool call turn
_TOOL_RESULTS = {"tool", "function", "observation"}


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
    # ``reason`` as data: filler, duplicate, over_budget, shortened, orphaned_tool_result or
    # alternation
    code: str = ""


@dataclass
class CompressChatResult(BudgetedResult):
    """The compressed messages (input format and types) and the ledger of what changed;
    ``system`` is the system prompt given apart (always kept), else ``None``; ``summary`` the
    summary of evicted turns in ``messages`` (:mod:`ctxkit.chat.summary_placement`), else
    ``None``."""

    messages: list[Any]
    original_tokens: int
    compressed_tokens: int
    budget: int
    kept: list[int]  # input indices of the messages in ``messages``
    ledger: list[MessageChange] = field(default_factory=list)
    format: str = "openai"
    system: Any = None
    summary: ChatSummary | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            **self._counts(),
            "format": self.format,
            "kept": self.kept,
            "ledger": [asdict(c) for c in self.ledger],
            # LangChain and LlamaIndex messages as their own JSON-ready dump
            "messages": [m.model_dump() if hasattr(m, "model_dump") else m
                         for m in self.messages],
        }
        if self.system is not None:
            out["system"] = self.system
        if self.summary is not None:
            out["summary"] = self.summary.to_dict()
        return out


# ---------------------------------------------------------------------------------------------
# message access


def count_chat_tokens(messages: Sequence[Any], *, system: Any = None,
                      tokenizer: str | Tokenizer = "cl100k_base", per_message: int = 3,
                      reply_priming: int = 3, image_tokens: int = IMAGE_TOKENS) -> int:
    """Tokens a chat API bills for ``messages`` in any format (and a ``system`` prompt given
    apart): framing, role, name, content, tool calls and results, ``image_tokens`` per image.

    Example:
        >>> count_chat_tokens([{"role": "user", "content": "hello world"}])
        9
    """
    validate.non_negative_int(per_message, "per_message")
    validate.non_negative_int(reply_priming, "reply_priming")
    validate.non_negative_int(image_tokens, "image_tokens")
    tok = resolve_tokenizer(tokenizer)
    internal = read_conversation(messages, system=system).internal
    if not internal:
        return 0
    return sum(billed_tokens(m, _role(m), _text(m, i), per_message, tok.count, image_tokens)
               for i, m in enumerate(internal)) + reply_priming


def _groups(messages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Message indices grouped so a tool call and every result answering it stay together:
    a result joins the group of the call its id names (parallel results too, even after
    other turns); one without an id joins the call right before it."""
    groups: list[list[int]] = []
    owner: dict[str, int] = {}  # call id -> its group
    for i, m in enumerate(messages):
        ids = answered_ids(m)
        if _role(m) in _TOOL_RESULTS and groups:
            g = owner.get(ids[0]) if ids else (
                len(groups) - 1 if _is_call(messages[groups[-1][0]]) else None)
            if g is not None:
                groups[g].append(i)
                continue
        groups.append([i])
        owner.update(dict.fromkeys(_tool_ids(m), len(groups) - 1))
    return groups


def _is_call(m: Mapping[str, Any]) -> bool:
    return bool(m.get("tool_calls") or m.get("function_call")) or _role(m) in _TOOL_CALLERS




@takes_options(ChatOptions)
def compress_chat(
    messages: Sequence[Mapping[str, Any]],
    budget: int,
    *,
    query: str | None = None,
    options: ChatOptions,
    system: Any = None,
    summarize: Summarizer | None = None,
    summary_options: SummaryOptions | None = None,
) -> CompressChatResult:
    """Fit a chat history into ``budget`` tokens; see the module docstring for the policy.

    ``neighbors``: with a query, each turn's score gains this share of its better neighbour's
    (:func:`~ctxkit.compression.scoring.lexical.spread_to_neighbors`: the question a kept answer
    replies to). ``whole_share``: share of the free room given to the most relevant
    turns kept whole; the rest holds the next turns shortened to ``word_keep`` of their tokens
    (their least informative words dropped), so more of the history survives. ``shorten=False``
    keeps turns whole or drops them. ``min_shortened``: a turn is cut to fit the last of the
    room only when at least this many content tokens remain for it. ``alternate``: keep
    user/assistant turns alternating (two user turns in a row break many chat templates) by
    dropping the weaker of two same-side turns that a removal made adjacent, and never start
    with an assistant turn. A tool result whose call is not kept is never kept.
    ``system``: a system prompt sent apart from the messages (Anthropic's top-level
    ``system``: text or text blocks), counted in the budget, always kept and returned as
    ``result.system``. ``image_tokens``: tokens billed per image.
    ``options``: a :class:`~ctxkit.chat.options.ChatOptions`; every option keyword given
    applies on top of it.
    ``summarize``: a callable ``(evicted_messages, previous_summary) -> str``
    (:mod:`ctxkit.chat.summarizers` has three); the summary of the evicted turns is
    one more message after the system prompt, within the budget, placed and sized as
    ``summary_options`` (a :class:`~ctxkit.chat.summary_placement.SummaryOptions`) says.
    """
    validate.positive_int(budget, "budget")
    validate.optional_text(query, "query")
    validate.messages_list(messages)
    opts = options
    check_scorer(opts.scorer)
    check_summarizer(summarize)
    conv = read_conversation(messages, system=system)
    if conv.system is not None:
        opts = replace(opts, keep_system=True)
    features = ChatFeatures(opts.tokenizer, opts.scorer)
    if summarize is None:
        res = select(conv.internal, budget, opts, features, query)
    else:
        res = summarized_select(select, conv.internal, budget, opts, features, query, summarize,
                                SummaryOptions.resolve(summary_options))[0]
    return _in_input_format(conv, res)


def _in_input_format(conv: Conversation, res: CompressChatResult) -> CompressChatResult:
    """``res`` (on the internal form) with input indices and the input's messages."""
    off = conv.offset
    short = {c.index for c in res.ledger if c.action == "shortened"}
    summary, history = res.summary, list(res.messages)
    if summary is not None:  # not a history message: restored apart, in the input's format
        del history[summary.position]
    new_text = {k - off: _text(m, k) for k, m in zip(res.kept, history) if k in short}
    kept = [k - off for k in res.kept if k >= off]
    out = conv.restore(kept, new_text)
    if summary is not None:
        pos = sum(k >= off for k in res.kept[:summary.position])
        out.insert(pos, summary_message(summary.text, _role(res.messages[summary.position]),
                                        conv.format))
        summary = replace(summary, position=pos, covers=[k - off for k in summary.covers])
    return CompressChatResult(
        out, res.original_tokens, res.compressed_tokens, res.budget, kept,
        [replace(c, index=c.index - off) for c in res.ledger], conv.format, conv.system,
        summary)


def select(messages: Sequence[Mapping[str, Any]], budget: int, opts: ChatOptions,
           features: ChatFeatures, query: str | None = None) -> CompressChatResult:
    """``compress_chat`` with its options and a feature store given (``ChatMemory`` keeps one
    store for a whole conversation; the result is the same as with a fresh one)."""
    check_budget(budget)
    fmt = _format(messages)
    check_tool_results(messages)
    n = len(messages)
    texts = [_text(m, i) for i, m in enumerate(messages)]
    roles = [_role(m) for m in messages]
    cost = np.array([features.message_tokens(m, roles[i], texts[i], opts.per_message,
                                             opts.image_tokens)
                     for i, m in enumerate(messages)], dtype=np.int64)
    priming = opts.reply_priming if n else 0
    original = int(cost.sum()) + priming
    new_text: dict[int, str] = {}
    ledger: list[MessageChange] = []
    keep = np.ones(n, dtype=bool)

    def result() -> CompressChatResult:
        out, kept, total = [], [], priming if keep.any() else 0
        for i in np.flatnonzero(keep):
            msg = dict(messages[i])
            if i in new_text:
                msg["content" if fmt == "openai" else "value"] = new_text[i]
                total += int(cost[i]) - features.count(texts[i]) + features.count(new_text[i])
            else:
                total += int(cost[i])
            out.append(msg)
            kept.append(int(i))
        ledger.sort(key=lambda c: c.index)
        return CompressChatResult(out, original, total, int(budget), kept, ledger, fmt)

    if original <= budget:
        return result()

    groups = _groups(messages)
    group_of = np.empty(n, dtype=np.int64)
    for g, members in enumerate(groups):
        group_of[members] = g
    protected = np.zeros(n, dtype=bool)
    if opts.keep_system:
        protected |= np.array([r in _SYSTEM for r in roles], dtype=bool)
    keep_last = opts.keep_last
    tail = [i for i in range(n) if roles[i] not in _SYSTEM or not opts.keep_system][-keep_last:] \
        if keep_last else []
    for i in tail:
        protected[groups[group_of[i]]] = True
    floor = int(cost[protected].sum()) + (priming if protected.any() else 0)
    if floor > budget:
        raise ValueError(
            f"budget {budget} is too small for the kept messages: the system prompt and the last "
            f"{keep_last} message(s) need {floor} tokens")

    def drop(members: Sequence[int], reason: str, score: float | None = None,
             code: str = "over_budget") -> None:
        for i in members:
            keep[i] = False
            if new_text.pop(i, None) is not None:  # shortened first, dropped later
                ledger[:] = [c for c in ledger if c.index != i]
            ledger.append(MessageChange(int(i), roles[i], "dropped", reason, int(cost[i]), 0,
                                        score, code))

    single = [len(groups[group_of[i]]) == 1 for i in range(n)]
    for i in range(n):
        if not protected[i] and single[i] and not _is_call(messages[i]) and (
                not texts[i].strip() or is_courtesy(texts[i])):
            drop([i], "filler", code="filler")
    # a re-asked question: the latest copy stays
    for i, j in enumerate(features.near_duplicates(texts, roles, opts.dedup_threshold)):
        if j >= 0 and keep[i] and not protected[i] and single[i] and texts[i].strip():
            drop([i], f"duplicate of message {j}", code="duplicate")

    if query is None:
        query = next((texts[i] for i in range(n - 1, -1, -1) if roles[i] in _USER), None)
    cands = [g for g, members in enumerate(groups)
             if keep[members].all() and not protected[members].any()]
    room = budget - floor - (0 if protected.any() else priming)  # priming once, if any kept
    scores = _scores(features, [" ".join(texts[i] for i in groups[g]) for g in cands],
                     np.array([cost[groups[g]].sum() for g in cands], dtype=np.int64),
                     query, opts, room)
    order = np.argsort(-scores, kind="stable")
    # coarse: the most relevant turns whole, in whole_share of the room
    whole_room = int(room * opts.whole_share) if opts.shorten else room
    whole = np.zeros(len(cands), dtype=bool)
    for rank in order:
        need = int(cost[groups[cands[rank]]].sum())
        if need <= whole_room:
            whole[rank] = True
            whole_room -= need
            room -= need
    # fine: the next turns pruned to word_keep of their tokens, while they fit
    pruned: list[tuple[int, int]] = []  # (message, tokens its whole text would add)
    for rank in order:
        if whole[rank]:
            continue
        members = groups[cands[rank]]
        score = float(scores[rank])
        need = int(cost[members].sum())
        if not opts.shorten and need <= room:
            room -= need
            continue
        i = members[0]
        framing = int(cost[i]) - features.count(texts[i])
        # room for the framing alone fits no shortened turn: skip the pruning work
        if opts.shorten and len(members) == 1 and room > framing and isinstance(
                messages[i].get("content", messages[i].get("value")), str):
            short, short_tokens = features.pruned(texts[i], opts.word_keep)
            if short == texts[i] and need <= room:
                room -= need
                continue
            if short.strip() and framing + short_tokens <= room:
                room -= framing + short_tokens
                _shortened(i, short, short_tokens, framing, score, "low-information words "
                           "dropped", new_text, ledger, roles, cost)
                pruned.append((i, int(cost[i]) - framing - short_tokens))
                continue
            content_room = room - framing
            if content_room >= opts.min_shortened:
                cut = compress(texts[i], content_room, query=query, tokenizer=features.tok,
                               scorer=features.scorer)
                if cut.text.strip():
                    room -= framing + cut.compressed_tokens
                    _shortened(i, cut.text, cut.compressed_tokens, framing, score,
                               f"shortened to fit ({len(cut.dropped)} of {len(cut.units)} "
                               f"sentences dropped)", new_text, ledger, roles, cost)
                    continue
        drop(members, "over budget" + (" (tool call and results)" if len(members) > 1 else ""),
             score)
    # room left over: shortened turns get their whole text back, most relevant first
    for i, extra in pruned:
        if extra <= room and i in new_text:
            room -= extra
            del new_text[i]
            ledger[:] = [c for c in ledger if c.index != i]
    _fix_structure(messages, roles, groups, group_of, keep, protected, cands, scores,
                   opts.alternate, drop)
    return result()


def _shortened(i: int, text: str, tokens: int, framing: int, score: float, reason: str,
               new_text: dict[int, str], ledger: list[MessageChange], roles: list[str],
               cost: np.ndarray) -> None:
    new_text[i] = text
    ledger.append(MessageChange(i, roles[i], "shortened", reason, int(cost[i]),
                                framing + tokens, score, "shortened"))


def _scores(features: ChatFeatures, units: list[str], tokens: np.ndarray, query: str | None,
            opts: ChatOptions, room: int | None = None) -> np.ndarray:
    """Utility of each candidate turn: relevance to ``query`` mixed with information per token,
    as ``compress`` scores units, then spread to neighbouring turns. ``room``: the tokens the
    selection can keep, which lets a model-backed scorer embed only the turns that stand a
    chance (:mod:`ctxkit.compression.scoring.shortlist`)."""
    if not units:
        return np.zeros(0)
    info = features.information(units) / np.maximum(tokens, 1)
    info = info / info.max() if info.max() > 0 else info
    if not query:
        return info
    rel = features.relevance(units, query, tokens=tokens, room=room, neighbors=opts.neighbors)
    rel = rel / rel.max() if rel.max() > 0 else rel
    scores = (1.0 - opts.query_weight) * info + opts.query_weight * rel
    # a fact's question or reply sits beside it: turns borrow from their better neighbour
    return spread_to_neighbors(scores, opts.neighbors)


def _fix_structure(messages: Sequence[Mapping[str, Any]], roles: list[str],
                   groups: list[list[int]], group_of: np.ndarray, keep: np.ndarray,
                   protected: np.ndarray, cands: list[int], scores: np.ndarray,
                   alternate: bool, drop) -> None:
    """Drop kept tool results whose call is gone and, with ``alternate``, the weaker of two
    same-side turns that removals made adjacent."""
    for i in np.flatnonzero(keep):
        head = groups[group_of[i]][0]
        if roles[i] in _TOOL_RESULTS and not protected[i] and (
                head == i or not keep[head]):
            drop([int(i)], "orphaned tool result", code="orphaned_tool_result")
    if not alternate:
        return
    score_of = {g: float(s) for g, s in zip(cands, scores)}

    def side(i: int) -> str:
        return "user" if roles[i] in _USER else "assistant"

    while True:
        seq = [int(i) for i in np.flatnonzero(keep) if roles[i] not in _SYSTEM]
        bad = None
        if seq and side(seq[0]) != "user" and not protected[seq[0]]:
            bad = [seq[0]]
        for a, b in zip(seq, seq[1:]):
            if bad:
                break
            # adjacent in the input (assistant -> tool -> assistant) is the input's own shape
            if b != a + 1 and side(a) == side(b) and group_of[a] != group_of[b]:
                weak = [g for g in (int(group_of[a]), int(group_of[b]))
                        if not protected[groups[g]].any()]
                if weak:
                    bad = groups[min(weak, key=lambda g: (score_of.get(g, 0.0), -g))]
        if not bad:
            return
        drop([i for i in bad if keep[i]], "alternation", code="alternation")
