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
   budget too small for them is an ``OptionError`` naming ``budget``);
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
from dataclasses import replace
from typing import Any

from ctxkit import validate
from ctxkit.chat.features import ChatFeatures, billed_tokens
from ctxkit.chat.options import ChatOptions
from ctxkit.chat.result import CompressChatResult, MessageChange
from ctxkit.chat.selection import select
from ctxkit.chat.summary_placement import (
    Summarizer,
    SummaryOptions,
    check_summarizer,
    summarized_select,
    summary_message,
)
from ctxkit.compression.scoring.registry import check_scorer
from ctxkit.io.formats import IMAGE_TOKENS, Conversation, read_conversation
from ctxkit.io.messages import message_text as _text
from ctxkit.io.messages import raw_role as _role
from ctxkit.io.tokenizers import Tokenizer, resolve_tokenizer
from ctxkit.options import takes_options

__all__ = ["CompressChatResult", "MessageChange", "compress_chat", "count_chat_tokens"]


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

    Args:
        messages: the history in any format :mod:`ctxkit.io.formats` reads.
        budget: tokens the window may bill (>= 1), counted as chat APIs bill them.
        query: what the window is chosen for (default: the latest user turn).
        options: a :class:`~ctxkit.chat.options.ChatOptions`; every option keyword given
            applies on top of it (the options below).
        system: a system prompt sent apart from the messages (Anthropic's top-level
            ``system``: text or text blocks), counted in the budget, always kept and returned
            as ``result.system``.
        summarize: a callable ``(evicted_messages, previous_summary) -> str``
            (:mod:`ctxkit.chat.summarizers` has three); the summary of the evicted turns is
            one more message after the system prompt, within the budget, placed and sized as
            ``summary_options`` (a :class:`~ctxkit.chat.summary_placement.SummaryOptions`)
            says.
        keep_last, keep_system: the last messages and the system prompt kept verbatim.
        neighbors: with a query, each turn's score gains this share of its better
            neighbour's (the question a kept answer replies to).
        whole_share: share of the free room for the most relevant turns kept whole; the
            rest holds the next turns shortened to ``word_keep`` of their tokens (their least
            informative words dropped), so more of the history survives.
        shorten: ``False`` keeps turns whole or drops them.
        min_shortened: a turn is cut to fit the last of the room only when at least this
            many content tokens remain for it.
        alternate: keep user/assistant turns alternating (two user turns in a row break many
            chat templates) by dropping the weaker of two same-side turns that a removal made
            adjacent, and never start with an assistant turn.
        image_tokens, per_message, reply_priming: the billing of images, message framing and
            reply priming.
        gap_marker: shown (``"…"`` by default, its tokens counted) wherever a turn cut to fit
            joins sentences or clauses that were not adjacent, so fragments of two sentences
            never read as one statement; ``""`` joins them plainly.
        tokenizer, scorer, dedup_threshold, query_weight: as for :func:`ctxkit.compress`.

    Returns:
        A :class:`~ctxkit.chat.result.CompressChatResult`: the kept messages in the input's
        format and types, and the ledger of every removed or shortened one. A tool result
        whose call is not kept is never kept.

    Raises:
        OptionError: a budget under 1, one too small for the kept messages, or a bad option.
        InputError: malformed messages (naming the message).
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
