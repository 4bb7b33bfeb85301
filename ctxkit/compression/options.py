"""The compression options, declared and validated once.

:class:`CompressOptions` is what :func:`ctxkit.compress` and ``ctxkit compress`` take or build;
:class:`ChatOptions` is what :func:`ctxkit.compress_chat`, :class:`ctxkit.ChatMemory` and
``ctxkit chat`` take or build. Each constraint sits beside its field and raises
:class:`~ctxkit.errors.OptionError` naming the option, so a bad ``--granularity`` fails before
any text is read or any model is loaded.

Example:
    >>> CompressOptions(granularity="sentence").replace(token_drop=0.2).token_drop
    0.2
    >>> try:
    ...     ChatOptions(keep_last=-1)
    ... except ValueError as exc:
    ...     print(exc)
    keep_last must be an integer >= 0, got -1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxkit.io.formats import IMAGE_TOKENS
from ctxkit.options import OptionSet, bad_option

__all__ = [
    "DEFAULT_SCORER",
    "GRANULARITIES",
    "REORDERS",
    "ChatOptions",
    "CompressOptions",
    "DensityOptions",
    "check_budget",
]

GRANULARITIES = ("coarse-to-fine", "sentence", "token", "chunk")
REORDERS = ("original", "sort")
DEFAULT_SCORER = "embedding"  # MiniLM fused with BM25: the best relevance the house ships


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))


def check_budget(budget: Any, name: str = "budget") -> int:
    """``budget`` as an int >= 1 (numpy ints too), or an ``OptionError`` naming ``name``.

    Example:
        >>> check_budget(np.int64(64))
        64
    """
    if not _is_int(budget) or budget <= 0:
        raise bad_option(name, f" must be a positive number of tokens, got {budget!r}")
    return int(budget)


def _check_count(obj: Any, name: str) -> None:
    value = getattr(obj, name)
    if not _is_int(value) or value < 0:
        raise bad_option(name, f" must be an integer >= 0, got {value!r}")
    object.__setattr__(obj, name, int(value))


def _check_share(obj: Any, name: str, *, low_open: bool = False, high_open: bool = False
                 ) -> None:
    """``name`` is a number in [0, 1], with an open end where the flags say."""
    value = getattr(obj, name)
    ok = _is_number(value) and (0 < value if low_open else 0 <= value) and (
        value < 1 if high_open else value <= 1)
    if not ok:
        interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise bad_option(name, f" must be a number in {interval}, got {value!r}")
    object.__setattr__(obj, name, float(value))


def _check_bool(obj: Any, name: str) -> None:
    value = getattr(obj, name)
    if not isinstance(value, (bool, np.bool_)):
        raise bad_option(name, f" must be True or False, got {value!r}")
    object.__setattr__(obj, name, bool(value))


def _check_choice(value: Any, choices: tuple[str, ...], name: str) -> None:
    if not isinstance(value, str) or value not in choices:
        raise bad_option(name, f" {value!r} is unknown; choose one of {', '.join(choices)}")


def _check_named(value: Any, name: str) -> None:
    """A tokenizer or scorer: a non-empty name, or an object (a Tokenizer, a Scorer)."""
    if (isinstance(value, str) and value) or not isinstance(
            value, (str, bytes, int, float, type(None), list, tuple, dict)):
        return
    raise bad_option(name, f" must be a name or a {name} object, got {value!r}")


@dataclass(frozen=True)
class CompressOptions(OptionSet):
    """How :func:`ctxkit.compress` shrinks a text (see it for each option's effect).

    Attributes:
        tokenizer: tokenizer name or :class:`~ctxkit.io.tokenizers.Tokenizer` the budget is
            counted in.
        scorer: ``embedding``, ``idf``, ``lm`` or a
            :class:`~ctxkit.compression.scoring.registry.Scorer`.
        granularity: ``coarse-to-fine``, ``sentence``, ``token`` or ``chunk``.
        force_keep: texts that must survive (a str or a sequence of str; kept as a tuple).
        reorder: ``original`` (kept units in input order) or ``sort`` (most useful first).
        token_drop: share of words dropped inside kept units, in [0, 1).
        dedup_threshold: similarity in (0, 1] at which a unit is redundant with a kept one.
        redundancy: weight in [0, 1] of the redundancy penalty.
        query_weight: weight in [0, 1] of relevance to the query against information.
    """

    tokenizer: Any = "cl100k_base"
    scorer: Any = DEFAULT_SCORER
    granularity: str = "coarse-to-fine"
    force_keep: Any = ()
    reorder: str = "original"
    token_drop: float = 0.0
    dedup_threshold: float = 0.8
    redundancy: float = 0.5
    query_weight: float = 0.95

    _what = "compression option"

    def __post_init__(self) -> None:
        _check_named(self.tokenizer, "tokenizer")
        _check_named(self.scorer, "scorer")
        _check_choice(self.granularity, GRANULARITIES, "granularity")
        _check_choice(self.reorder, REORDERS, "reorder")
        force = self.force_keep
        if isinstance(force, str):
            force = (force,)
        if not isinstance(force, (list, tuple)) or not all(isinstance(f, str) for f in force):
            raise bad_option("force_keep", f" must be a str or a list of str, got {force!r}")
        object.__setattr__(self, "force_keep", tuple(f for f in force if f))
        _check_share(self, "token_drop", high_open=True)
        _check_share(self, "dedup_threshold", low_open=True)
        _check_share(self, "redundancy")
        _check_share(self, "query_weight")


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

    _what = "chat option"

    def __post_init__(self) -> None:
        for name in ("keep_last", "per_message", "reply_priming", "min_shortened",
                     "image_tokens"):
            _check_count(self, name)
        for name in ("keep_system", "shorten", "alternate"):
            _check_bool(self, name)
        _check_named(self.tokenizer, "tokenizer")
        _check_named(self.scorer, "scorer")
        _check_share(self, "dedup_threshold", low_open=True)
        for name in ("query_weight", "neighbors", "whole_share"):
            _check_share(self, name)
        _check_share(self, "word_keep", low_open=True)  # shorten=False never shortens


@dataclass(frozen=True)
class DensityOptions(OptionSet):
    """How :func:`ctxkit.density` scores a text or a corpus.

    Attributes:
        tokenizer: tokenizer name or object the tokens are counted in.
        scorer: the scorer of self-information (``idf``, ``lm``, ``embedding`` or an object),
            or None to skip it (and the composite score).
        n: word n-gram size of the redundancy and near-duplicate shingles (>= 1).
        threshold: Jaccard similarity at or above which two texts are near duplicates,
            in (0, 1].
        semantic: also the semantic novelty of each text (embeddings).
        top_clusters: near-duplicate clusters listed in the result (>= 0).

    Example:
        >>> DensityOptions(threshold=0.9).n
        3
    """

    _what = "density option"

    tokenizer: Any = "cl100k_base"
    scorer: Any = "idf"
    n: int = 3
    threshold: float = 0.8
    semantic: bool = False
    top_clusters: int = 10

    def __post_init__(self) -> None:
        _check_named(self.tokenizer, "tokenizer")
        if self.scorer is not None:
            _check_named(self.scorer, "scorer")
        _check_count(self, "n")
        if self.n < 1:
            raise bad_option("n", f" must be an integer >= 1, got {self.n!r}")
        _check_share(self, "threshold", low_open=True)
        _check_bool(self, "semantic")
        _check_count(self, "top_clusters")
