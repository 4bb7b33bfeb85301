"""The chat options, declared and validated once.

:class:`ChatOptions` is what :func:`ctxkit.compress_chat`, :class:`ctxkit.ChatMemory` and
``ctxkit chat`` take or build; both entry points take each field as a keyword too
(:func:`ctxkit.options.takes_options`).

Example:
    >>> ChatOptions(keep_last=5).replace(alternate=True).keep_last
    5
    >>> try:
    ...     ChatOptions(keep_last=-1)
    ... except ValueError as exc:
    ...     print(exc)
    keep_last must be an integer >= 0, got -1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxkit.compression.options import (
    DEFAULT_SCORER,
    check_bool,
    check_count,
    check_marker,
    check_named,
    check_share,
)
from ctxkit.io.formats import IMAGE_TOKENS
from ctxkit.options import OptionSet

__all__ = ["ChatOptions"]


@dataclass(frozen=True)
class ChatOptions(OptionSet):
    """How :func:`ctxkit.compress_chat` and :class:`ctxkit.ChatMemory` choose what to keep
    (see :func:`~ctxkit.chat.pipeline.compress_chat` for each option's effect).

    Attributes:
        keep_last: last messages kept verbatim (>= 0).
        keep_system: keep system (and developer) messages verbatim.
        tokenizer: tokenizer name or object the budget is counted in.
        scorer: ``embedding``, ``idf``, ``lm`` or a scorer object.
        per_message: framing tokens billed per message (>= 0).
        reply_priming: tokens billed once to prime the reply (>= 0).
        shorten: shorten older turns so more of them fit.
        min_shortened: content tokens a turn cut to fit must keep (>= 0).
        dedup_threshold: word 3-gram Jaccard in (0, 1] at which a re-asked turn goes.
        query_weight: weight in [0, 1] of relevance against information per token.
        neighbors: share in [0, 1] of a better neighbour's score a turn gains.
        whole_share: share in [0, 1] of the free room for turns kept whole.
        word_keep: share in (0, 1] of a shortened turn's tokens kept.
        alternate: keep user/assistant turns alternating.
        image_tokens: tokens billed per image (>= 0; OpenAI's low-detail cost by default,
            see :data:`ctxkit.io.formats.IMAGE_TOKENS`).
        gap_marker: text a turn cut to fit shows where sentences or clauses that were not
            adjacent meet (its tokens count), so two fragments never read as one statement;
            empty: none.
    """

    keep_last: int = 2
    keep_system: bool = True
    tokenizer: Any = "cl100k_base"
    scorer: Any = DEFAULT_SCORER
    per_message: int = 3
    reply_priming: int = 3
    shorten: bool = True
    min_shortened: int = 24
    dedup_threshold: float = 0.8
    query_weight: float = 0.95
    neighbors: float = 0.3
    whole_share: float = 0.25
    word_keep: float = 0.5
    alternate: bool = False
    image_tokens: int = IMAGE_TOKENS
    gap_marker: str = "…"

    _what = "chat option"

    def __post_init__(self) -> None:
        for name in ("keep_last", "per_message", "reply_priming", "min_shortened",
                     "image_tokens"):
            check_count(self, name)
        for name in ("keep_system", "shorten", "alternate"):
            check_bool(self, name)
        check_named(self.tokenizer, "tokenizer")
        check_named(self.scorer, "scorer")
        check_share(self, "dedup_threshold", low_open=True)
        for name in ("query_weight", "neighbors", "whole_share"):
            check_share(self, name)
        check_share(self, "word_keep", low_open=True)  # shorten=False never shortens
        check_marker(self.gap_marker)
