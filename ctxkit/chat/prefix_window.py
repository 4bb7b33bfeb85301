"""Windows that keep a provider's prompt cache warm: a stable prefix, compacted in one step.

Re-selecting a chat window for every question changes it from its first old message on, so a
provider that caches prompt prefixes bills nearly every token at full price every turn
(:mod:`ctxkit.chat.billing` measures it). :class:`PrefixWindow` keeps the window
stable instead:

- **compaction**: when the window would overflow the budget, the whole history is selected
  once down to a low-water mark (``low_water`` of the budget) with ``compress_chat``'s policy
  for the question of that moment; the selected messages become the prefix;
- **growth**: until the next compaction, new messages are appended after the prefix verbatim,
  so consecutive windows share everything up to the newest turns;
- **recall**: the older messages the current question needs, among those the compaction
  evicted, are recalled into one block (at most ``recall`` of the budget) placed just
  before the latest user message, the memory-system pattern (retrieved context, then the
  question). The reply, tool calls and tool results of that turn come after it, so every
  request of one turn repeats the block where the provider cached it: the block misses the
  cache once per user turn, and the new messages only on every request. Its text lists each
  recalled turn as ``role: text`` in conversation order, under a one-line header; it is sent
  as a ``recall_role`` message;
- **summary** (with ``summarize``): each compaction folds the messages it evicts into the
  running summary (:mod:`ctxkit.chat.summary_placement`), one message right after the system
  prompt and inside the prefix, so it changes only at a compaction.

The result is a :class:`~ctxkit.chat.pipeline.CompressChatResult` whose ``kept`` lists every
history message present in the window, whole, shortened or recalled; the ledger has the
compaction's drops and shortenings, and a ``recalled`` entry for each recalled message.

Example:
    >>> from ctxkit.chat.options import ChatOptions
    >>> from ctxkit.chat.features import ChatFeatures
    >>> chat = [{"role": "user" if i % 2 == 0 else "assistant",
    ...          "content": f"Note {i}: crate {i} holds {10 * i} bolts."} for i in range(40)]
    >>> window = PrefixWindow(ChatOptions(keep_last=2), ChatFeatures(scorer="idf"))
    >>> first = window.compress(chat[:30], 200, query="How many bolts in crate 3?")
    >>> second = window.compress(chat[:32], 200, query="How many bolts in crate 5?")
    >>> second.messages[:len(first.messages) - 3] == first.messages[:-3]
    True
    >>> first.compressed_tokens <= 200 and second.compressed_tokens <= 200
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.chat.billing import cache_expired, check_ttl
from ctxkit.chat.features import ChatFeatures
from ctxkit.chat.options import ChatOptions
from ctxkit.chat.result import CompressChatResult, MessageChange
from ctxkit.chat.selection import select, turn_scores
from ctxkit.chat.summary_placement import (
    ChatSummary,
    Summarizer,
    SummaryOptions,
    SummaryState,
    check_summarizer,
    summarized_select,
)
from ctxkit.io.messages import (
    ASSISTANT_ROLES,
    SYSTEM_ROLES,
    TOOL_RESULT_ROLES,
    USER_ROLES,
    latest_user_text,
    message_format,
    message_text,
    raw_role,
)
from ctxkit.options import OptionSet, bad_option, takes_options

__all__ = ["RECALL_HEADER", "PrefixCacheOptions", "PrefixWindow"]

RECALL_HEADER = "Earlier in this conversation (recalled for the current question):"
_RECALLABLE = USER_ROLES | ASSISTANT_ROLES


@dataclass(frozen=True)
class PrefixCacheOptions(OptionSet):
    """How a :class:`PrefixWindow` (``ChatMemory(prefix_cache=...)``) trades cache hits for
    relevance.

    Attributes:
        low_water: share of the budget a compaction fills, in (0, 1): lower means rarer
            compactions, less history kept at each.
        recall: share of the budget the recall block may take, in [0, 1) with
            ``low_water + recall <= 1``; the block misses the cache once per user turn, so
            it is the main price of relevance. 0 turns recall off.
        recall_role: the role the recall block is sent as (``user``, ``system`` or
            ``assistant``): ``user`` suits every provider, ``system`` only those that accept a
            system message inside the conversation.
        ttl: the provider's cache lifetime after its last use, in seconds (300 for OpenAI's
            and Anthropic's default, 3600 for their extended one), or None (unknown). A window
            asked for more than ``ttl`` after the previous one finds the cache expired anyway,
            so the history is compacted afresh for the current question then, at no cache
            cost, and room is made for the turns to come; a warm cache is compacted only
            when the budget forces it.

    Example:
        >>> PrefixCacheOptions(recall=0.2).low_water
        0.6
    """

    _what = "prefix-cache option"

    low_water: float = 0.6
    # the block misses the cache once per user turn, so with a reply per turn it costs per
    # request what a block of half its size re-sent on every request would
    recall: float = 0.2
    recall_role: str = "user"
    ttl: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ttl", check_ttl(self.ttl))
        lw, rc = self.low_water, self.recall
        if isinstance(lw, bool) or not isinstance(lw, (int, float)) or not 0.0 < lw < 1.0:
            raise bad_option("low_water", f" must be in (0, 1), got {lw!r}")
        if isinstance(rc, bool) or not isinstance(rc, (int, float)) or not 0.0 <= rc < 1.0 \
                or lw + rc > 1.0:
            raise bad_option("recall", f" must be in [0, 1) with low_water + recall <= 1, got "
                                       f"{rc!r}")
        if self.recall_role not in ("user", "system", "assistant"):
            raise bad_option("recall_role", f" must be user, system or assistant, got "
                                            f"{self.recall_role!r}")


@dataclass
class _Prefix:
    """The state one compaction leaves: the history length it saw and what it kept."""

    length: int
    messages: list[dict[str, Any]]
    kept: list[int]
    ledger: list[MessageChange] = field(default_factory=list)
    summary: ChatSummary | None = None


class PrefixWindow:
    """Prefix-cache-friendly chat windows over a growing history (see the module docstring).

    ``cache`` (or the keywords ``low_water``, ``recall``, ``recall_role``): a
    :class:`PrefixCacheOptions`. ``compactions`` counts the compactions so far.
    ``summarize`` and ``summary_options``: the summary of evicted turns, rewritten at each
    compaction (:mod:`ctxkit.chat.summary_placement`).
    """

    @takes_options(PrefixCacheOptions, into="cache")
    def __init__(self, options: ChatOptions, features: ChatFeatures, *,
                 cache: PrefixCacheOptions, summarize: Summarizer | None = None,
                 summary_options: SummaryOptions | None = None):
        self.cache = cache
        self.options, self.features = options, features
        check_summarizer(summarize)
        self.summarize = summarize
        self.summary_options = SummaryOptions.resolve(summary_options)
        self.summary_state = SummaryState()
        self._prefix: _Prefix | None = None
        # the last recall: (prefix, query, room, ranked), reused while those stay the same
        self._recalled: tuple | None = None
        self.compactions = 0
        self.idle_compactions = 0  # of them, made because the cache had expired
        self._last_at: float | None = None  # when the last window was sent

    def reset(self) -> None:
        """Forget the prefix: the next window compacts afresh."""
        self._prefix = None

    def peek(self, history: Sequence[Mapping[str, Any]], budget: int,
             query: str | None = None, *, at: float | None = None) -> CompressChatResult:
        """The window :meth:`compress` would return, leaving the prefix as it is (to ask
        what-if questions of a window without sending it)."""
        state = (self._prefix, self.compactions, self.idle_compactions, self.summary_state,
                 self._last_at)
        try:
            return self.compress(history, budget, query, at=at)
        finally:
            (self._prefix, self.compactions, self.idle_compactions, self.summary_state,
             self._last_at) = state

    # -- one window ---------------------------------------------------------------------------

    def compress(self, history: Sequence[Mapping[str, Any]], budget: int,
                 query: str | None = None, *, at: float | None = None) -> CompressChatResult:
        """The window for ``history`` (which only grows between calls) under ``budget``,
        sent at time ``at`` (seconds; with ``ttl``, an idle gap past the cache's lifetime
        compacts afresh).

        Example:
            >>> from ctxkit.chat.options import ChatOptions
            >>> from ctxkit.chat.features import ChatFeatures
            >>> chat = [{"role": "user", "content": f"Note {i}: bin {i} has {i} nails."}
            ...         for i in range(30)]
            >>> w = PrefixWindow(ChatOptions(keep_last=2), ChatFeatures(scorer="idf"), ttl=300)
            >>> _ = w.compress(chat[:20], 150, at=0)
            >>> _ = w.compress(chat[:21], 150, at=60)  # warm: the prefix stays
            >>> _ = w.compress(chat[:22], 150, at=4000)  # expired: compacted afresh
            >>> w.compactions, w.idle_compactions
            (2, 1)
        """
        if at is not None:
            at = validate.finite_number(at, "at")
        expired = cache_expired(self.cache.ttl, self._last_at, at)
        self._last_at = at if at is not None else self._last_at
        fmt = message_format(history)
        opts = self.options
        if query is None:
            query = latest_user_text(history)
        original = self._tokens(history)
        if original <= budget:  # everything fits: the whole history is the best window
            self._prefix = None
            return select(history, budget, opts, self.features, query)
        prefix = self._prefix
        if prefix is not None and expired and prefix.length < len(history):
            self.idle_compactions += 1
            prefix = None
        if prefix is None or prefix.length > len(history) or self._grown_tokens(
                history, prefix) + self._recall_room(budget) > budget:
            prefix = self._compact(history, budget, query)
        room = budget - self._grown_tokens(history, prefix)
        cap = min(room, self._recall_room(budget))
        memo = self._recalled
        if memo is not None and memo[0] is prefix and memo[1:3] == (query, cap):
            ranked = list(memo[3])  # the same question on the same prefix: the same block
        else:
            ranked = self._recall(history, prefix, query, cap)
            self._recalled = (prefix, query, cap, tuple(ranked))
        while True:  # pieces counted apart can merge differently once joined: check the whole
            window = self._window(history, budget, prefix, ranked, fmt, original)
            if window.compressed_tokens <= budget or not ranked:
                return window
            ranked = ranked[:-1]

    def _recall_room(self, budget: int) -> int:
        return int(self.cache.recall * budget)

    def _grown_tokens(self, history: Sequence[Mapping[str, Any]], prefix: _Prefix) -> int:
        """Billed tokens of the prefix plus the messages added since it was made."""
        return self._tokens(prefix.messages + [dict(m) for m in history[prefix.length:]])

    def _tokens(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Billed tokens, as ``select`` counts them, from the feature store's cached counts
        (the prefix is counted again every turn)."""
        if not messages:
            return 0
        opts = self.options
        return sum(self.features.message_tokens(m, raw_role(m), message_text(m, i),
                                                opts.per_message, opts.image_tokens)
                   for i, m in enumerate(messages)) + opts.reply_priming

    def _compact(self, history: Sequence[Mapping[str, Any]], budget: int,
                 query: str | None) -> _Prefix:
        target = max(1, int(self.cache.low_water * budget))
        try:
            sel = self._select(history, target, query)
        except ValueError:  # the kept system prompt and tail need more than the low-water mark
            sel = self._select(history, budget, query)
        self.compactions += 1
        self._prefix = _Prefix(len(history), sel.messages, sel.kept, sel.ledger, sel.summary)
        return self._prefix

    def _select(self, history: Sequence[Mapping[str, Any]], budget: int,
                query: str | None) -> CompressChatResult:
        """The compaction's selection, with the running summary when there is a summarizer
        (rewritten whenever the compaction evicts a message it does not cover yet)."""
        if self.summarize is None:
            return select(history, budget, self.options, self.features, query)
        sel, self.summary_state = summarized_select(
            select, history, budget, self.options, self.features, query, self.summarize,
            self.summary_options, self.summary_state, refresh=0.0)
        return sel

    def _recall(self, history: Sequence[Mapping[str, Any]], prefix: _Prefix,
                query: str | None, room: int) -> list[int]:
        """The evicted messages most relevant to ``query`` that fit ``room`` as one block,
        most relevant first."""
        evicted = [c.index for c in prefix.ledger if c.code in ("over_budget", "summarized")]
        cands = [i for i in evicted if raw_role(history[i]) in _RECALLABLE
                 and not history[i].get("tool_calls") and not history[i].get("function_call")
                 and message_text(history[i], i).strip()]
        left = room - self.options.per_message - self.features.count(self.cache.recall_role) - \
            self.features.count(RECALL_HEADER)
        if not query or not cands or left <= 0:
            return []
        # compress_chat's utility over the history the compaction saw (relevance mixed with
        # information per token, spread to neighbours: an answer rarely repeats its question)
        seen = history[:prefix.length]
        texts = [message_text(m, i) for i, m in enumerate(seen)]
        tokens = np.array([self.features.message_tokens(m, raw_role(m), texts[i],
                                                        self.options.per_message)
                           for i, m in enumerate(seen)], dtype=np.int64)
        # the room tells a model-backed scorer which turns stand a chance (its shortlist)
        rel = turn_scores(self.features, texts, tokens, query, self.options, room=left)[cands]
        chosen = []
        for k in np.argsort(-rel, kind="stable"):
            if rel[k] <= 0:
                break
            need = self.features.count("\n" + self._line(history, cands[k]))
            if need <= left:
                chosen.append(cands[k])
                left -= need
        return chosen

    def _line(self, history: Sequence[Mapping[str, Any]], i: int) -> str:
        """How a recalled message reads in the block: ``user: ...`` or ``assistant: ...``,
        its least informative words dropped as ``compress_chat`` shortens turns."""
        speaker = "user" if raw_role(history[i]) in USER_ROLES else "assistant"
        text = message_text(history[i], i)
        if self.options.shorten:
            short = self.features.pruned(text, self.options.word_keep)[0]
            text = short if short.strip() else text
        return f"{speaker}: {text}"

    def _block(self, history: Sequence[Mapping[str, Any]], recalled: Sequence[int],
               fmt: str) -> dict[str, Any]:
        text = "\n".join([RECALL_HEADER] + [self._line(history, i) for i in sorted(recalled)])
        role = self.cache.recall_role
        if fmt == "openai":
            return {"role": role, "content": text}
        role = {"user": "human", "assistant": "gpt"}.get(role, role)
        return {"from": role, "value": text}

    def _block_position(self, body: Sequence[Mapping[str, Any]]) -> int:
        """Where the recall block goes in ``body``: just before the latest user message, the
        question it was recalled for. The replies, tool calls and tool results that follow the
        question come after the block, so every request of one turn (an agent's tool loop
        included) repeats the same block at the same place and the provider caches it; the
        block changes, and misses the cache, once per user turn. Without a user message it goes
        before the last ``keep_last`` non-system messages, never between a tool call and its
        results."""
        for k in range(len(body) - 1, -1, -1):
            if raw_role(body[k]) in USER_ROLES:
                return k
        start, seen = len(body), 0
        while start > 0 and seen < self.options.keep_last:
            start -= 1
            if raw_role(body[start]) not in SYSTEM_ROLES:
                seen += 1
        while 0 < start < len(body) and raw_role(body[start]) in TOOL_RESULT_ROLES:
            start -= 1
        return start

    def _window(self, history: Sequence[Mapping[str, Any]], budget: int, prefix: _Prefix,
                recalled: list[int], fmt: str, original: int) -> CompressChatResult:
        body = prefix.messages + [dict(m) for m in history[prefix.length:]]
        indices = prefix.kept + list(range(prefix.length, len(history)))
        tail_start = self._block_position(body)
        messages = body if not recalled else (
            body[:tail_start] + [self._block(history, recalled, fmt)] + body[tail_start:])
        tokens = self._tokens(messages)
        recalled_set = set(recalled)
        ledger = [c for c in prefix.ledger if c.index not in recalled_set]
        for i in recalled:
            cost = next(c.tokens_before for c in prefix.ledger if c.index == i)
            ledger.append(MessageChange(i, raw_role(history[i]), "recalled",
                                        "recalled into the block after the cached prefix",
                                        cost, cost, None, "recalled"))
        ledger.sort(key=lambda c: c.index)
        kept = sorted(set(indices) | recalled_set)
        return CompressChatResult(messages, original, tokens, int(budget), kept, ledger, fmt,
                                  summary=prefix.summary)
