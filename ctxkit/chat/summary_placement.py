"""Summaries of evicted turns: one message, counted in the budget, that folds in what a chat
window had to drop.

``compress_chat(summarize=...)`` and ``ChatMemory(summarize=...)`` take a summarizer: any
callable ``summarize(evicted_messages, previous_summary) -> str`` that folds the newly evicted
messages (dicts in conversation order) into the previous summary text (``None`` for the first)
and returns the new summary, as LangChain's summary-buffer memory and LlamaIndex's
``ChatSummaryMemoryBuffer`` do. ctxkit ships three in :mod:`ctxkit.chat.summarizers`:
extractive (no model), SmolLM2 (offline, the ``[lm]`` extra) and any OpenAI-compatible endpoint.

How the summary enters the window (:func:`summarized_select`):

- **room**: the selection runs at ``budget - share * budget``; the summary gets what is left
  (at least that reserve). A summary longer than its room is cut at a word boundary to fit,
  and one that cannot keep ``MIN_SUMMARY_TOKENS`` of text is left out; either way the ledger
  says so, and the window never exceeds the budget;
- **place**: right after the system prompt (the leading system messages), before the oldest
  kept turn, so the prompt a provider caches is the system prompt, then the summary, then the
  history; the summary changes only when it is rewritten (in prefix-cache mode only at a
  compaction), so between rewrites it stays in the cached prefix;
- **role**: ``role`` of :class:`SummaryOptions`, ``user`` by default. Every provider accepts a
  user message anywhere in the conversation; a ``system`` message after the first is refused by
  Anthropic's and Gemini's APIs (they take the system prompt apart) and by many open chat
  templates, OpenAI accepts it. The text starts with :data:`SUMMARY_HEADER`;
- **ledger**: every evicted message the summary covers has its entry turned from ``dropped``
  into ``summarized`` (code ``summarized``); ``result.summary`` (:class:`ChatSummary`) lists
  the covered message indices. ``kept`` does not list the summary: it is not a history message.

A stateful caller (``ChatMemory``) keeps a :class:`SummaryState` between calls and rewrites the
summary only when newly evicted messages are worth it (``refresh``), so the summarizer is not
called every turn.

Example:
    >>> from ctxkit.chat.pipeline import compress_chat
    >>> msgs = [{"role": "user", "content": f"Crate {i} holds {10 * i} bolts."} for i in range(12)]
    >>> out = compress_chat(msgs, 100, scorer="idf", keep_last=1,
    ...                     summarize=lambda evicted, prev: f"{len(evicted)} turns on crates.",
    ...                     summary_options=SummaryOptions(share=0.25))
    >>> out.messages[0]["content"].splitlines(), out.compressed_tokens <= 100
    (['Summary of earlier turns of this conversation:', '4 turns on crates.'], True)
    >>> out.summary.covers == [c.index for c in out.ledger if c.action == "summarized"]
    True
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ctxkit.errors import InputError
from ctxkit.io.messages import SYSTEM_ROLES, message_text, raw_role
from ctxkit.options import OptionSet, bad_option

__all__ = [
    "MIN_SUMMARY_TOKENS",
    "SUMMARY_HEADER",
    "ChatSummary",
    "Summarizer",
    "SummaryOptions",
    "SummaryState",
    "summarized_select",
]

SUMMARY_HEADER = "Summary of earlier turns of this conversation:"
MIN_SUMMARY_TOKENS = 8  # a summary cut below this says nothing: it is left out instead
Summarizer = Callable[[list[dict[str, Any]], "str | None"], str]
# drops that lose what a turn said (fillers and re-asked questions lose nothing)
_LOSSY = {"over_budget", "alternation", "orphaned_tool_result", "summarized"}


@dataclass(frozen=True)
class SummaryOptions(OptionSet):
    """Where the summary of evicted turns goes and how much of the budget it may take.

    Attributes:
        share: share of the budget held back for the summary, in (0, 1): the selection runs
            on the rest.
        role: the role the summary is sent as (``user``, ``system`` or ``assistant``; see the
            module docstring for what providers accept).
        refresh: for a memory that re-selects every turn (``ChatMemory`` without a prefix
            cache), the summary is rewritten only once the messages evicted since the last
            rewrite hold this share of the budget, in [0, 1] (0: at every new eviction). In
            prefix-cache mode it is rewritten at every compaction.

    Example:
        >>> SummaryOptions(share=0.2).role
        'user'
    """

    _what = "summary option"

    share: float = 0.1
    role: str = "user"
    refresh: float = 0.05

    def __post_init__(self) -> None:
        s, r = self.share, self.refresh
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0.0 < s < 1.0:
            raise bad_option("share", f" must be in (0, 1), got {s!r}")
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r <= 1.0:
            raise bad_option("refresh", f" must be in [0, 1], got {r!r}")
        if self.role not in ("user", "system", "assistant"):
            raise bad_option("role", f" must be user, system or assistant, got {self.role!r}")


@dataclass(frozen=True)
class ChatSummary:
    """The summary message of a window: ``text`` as sent (header included), ``tokens`` billed
    for it (framing included), ``position`` in ``result.messages``, ``covers`` the input
    indices of the messages it folds in, ``truncated`` when it was cut to fit its room."""

    text: str
    tokens: int
    position: int
    covers: list[int]
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "tokens": self.tokens, "position": self.position,
                "covers": self.covers, "truncated": self.truncated}


@dataclass(frozen=True)
class SummaryState:
    """A running summary: its text (without the header) and the message indices it covers."""

    text: str | None = None
    covers: frozenset[int] = field(default_factory=frozenset)


def check_summarizer(summarize: Any) -> None:
    """An ``OptionError`` unless ``summarize`` is None or callable."""
    if summarize is not None and not callable(summarize):
        raise bad_option("summarize", " must be a callable (evicted_messages, previous_summary)"
                                      f" -> str, got {summarize!r}")


def summarized_select(select: Callable[..., Any], messages: Sequence[Mapping[str, Any]],
                      budget: int, opts: Any, features: Any, query: str | None,
                      summarize: Summarizer, options: SummaryOptions,
                      state: SummaryState | None = None, *, refresh: float | None = None
                      ) -> tuple[Any, SummaryState]:
    """``select(messages, budget, opts, features, query)`` (``compress_chat``'s selection)
    with the summary of the evicted messages placed in the window; returns the result (its
    ``summary`` set) and the summary state to keep for the next call.

    ``state``: the running summary so far (``None``: none). The summarizer is called with the
    evicted messages the state does not cover yet, when they hold at least ``refresh`` (a
    share of the budget; default ``options.refresh``) of tokens or no summary exists yet.
    """
    state = state or SummaryState()
    reserve = int(options.share * budget)
    try:
        res = select(messages, budget - reserve, opts, features, query) \
            if budget - reserve > 0 else None
    except ValueError:  # the system prompt and the tail need the reserve: no summary
        res = None
    if res is None:
        res = select(messages, budget, opts, features, query)
        return _note(res, "no room for the summary"), state
    evicted = [c.index for c in res.ledger if c.action == "dropped" and c.code in _LOSSY]
    if not evicted or res.original_tokens <= budget:  # the budget needs no eviction
        return select(messages, budget, opts, features, query), state
    new = [i for i in evicted if i not in state.covers]
    refresh = options.refresh if refresh is None else refresh
    new_tokens = sum(c.tokens_before for c in res.ledger if c.index in set(new))
    if new and (state.text is None or new_tokens >= refresh * budget):
        text = summarize([dict(messages[i]) for i in new], state.text)
        if not isinstance(text, str):
            raise InputError(f"summarize returned {type(text).__name__}, not str")
        state = SummaryState(text.strip(), state.covers | frozenset(new))
    if not state.text:
        return res, state
    return _attach(res, messages, budget, opts, features, options, state), state


def _attach(res: Any, messages: Sequence[Mapping[str, Any]], budget: int, opts: Any,
            features: Any, options: SummaryOptions, state: SummaryState) -> Any:
    """``res`` with the summary message inserted after its leading system messages and the
    ledger entries of the covered evicted messages marked ``summarized``."""
    fmt = res.format
    room = budget - res.compressed_tokens - (0 if res.messages else opts.reply_priming)
    empty = summary_message(SUMMARY_HEADER + "\n", options.role, fmt)
    framing = features.message_tokens(empty, raw_role(empty), message_text(empty, 0),
                                      opts.per_message, opts.image_tokens)
    limit = room - framing
    while True:  # the header and the body can tokenize differently once joined: check
        body, truncated = fit_text(state.text, limit, features.tok)
        if features.count(body) < min(MIN_SUMMARY_TOKENS, features.count(state.text)):
            return _note(res, "summary left out: no room for it")
        msg = summary_message(f"{SUMMARY_HEADER}\n{body}", options.role, fmt)
        text = message_text(msg, 0)
        tokens = features.message_tokens(msg, raw_role(msg), text, opts.per_message,
                                         opts.image_tokens)
        if tokens <= room:
            break
        limit -= tokens - room
    pos = 0
    while pos < len(res.messages) and raw_role(res.messages[pos]) in SYSTEM_ROLES:
        pos += 1
    ledger = [replace(c, action="summarized", code="summarized",
                      reason=c.reason + "; folded into the summary")
              if c.action == "dropped" and c.code in _LOSSY and c.index in state.covers
              else c for c in res.ledger]
    summary = ChatSummary(text, tokens, pos, sorted(state.covers), truncated)
    return replace(res, messages=res.messages[:pos] + [msg] + res.messages[pos:],
                   compressed_tokens=res.compressed_tokens + tokens + (
                       0 if res.messages else opts.reply_priming),
                   ledger=ledger, summary=summary)


def _note(res: Any, note: str) -> Any:
    """``res`` with ``note`` added to the reason of each lossy drop."""
    return replace(res, ledger=[replace(c, reason=f"{c.reason} ({note})")
                                if c.action == "dropped" and c.code in _LOSSY else c
                                for c in res.ledger])


def fit_text(text: str, max_tokens: int, tok: Any) -> tuple[str, bool]:
    """``text`` cut at a word boundary to at most ``max_tokens`` tokens, and whether it was cut.

    Example:
        >>> from ctxkit.io.tokenizers import get_tokenizer
        >>> fit_text("one two three four five", 3, get_tokenizer("cl100k_base"))
        ('one two three', True)
    """
    if tok.count(text) <= max_tokens:
        return text, False
    if max_tokens <= 0:
        return "", True
    cut = tok.decode(tok.encode(text)[:max_tokens])
    if not text.startswith(cut) or text[len(cut):len(cut) + 1].strip():  # inside a word
        cut = cut[:cut.rstrip().rfind(" ")] if " " in cut.strip() else ""
    while cut and tok.count(cut) > max_tokens:  # a decoded cut can re-encode longer
        cut = cut[:cut.rfind(" ")] if " " in cut else ""
    return cut.rstrip(), True


def summary_message(text: str, role: str, fmt: str) -> Any:
    """The summary ``text`` as one message of format ``fmt`` (``openai``, ``sharegpt``,
    ``anthropic``, ``langchain`` or ``llamaindex``) sent as ``role``.

    Example:
        >>> summary_message("Ana moved to Porto.", "user", "sharegpt")["from"]
        'human'
    """
    if fmt == "sharegpt":
        return {"from": {"user": "human", "assistant": "gpt"}.get(role, role), "value": text}
    if fmt == "langchain":
        mod = sys.modules["langchain_core.messages"]
        cls = {"user": "HumanMessage", "assistant": "AIMessage"}.get(role, "SystemMessage")
        return getattr(mod, cls)(content=text)
    if fmt == "llamaindex":
        chat_message = sys.modules["llama_index.core.base.llms.types"].ChatMessage
        return chat_message(role=role, content=text)
    if fmt == "anthropic" and role == "system":  # Anthropic takes no system turn
        role = "user"
    return {"role": role, "content": text}
