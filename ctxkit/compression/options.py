"""The compression options, declared and validated once, and the checks they share.

:class:`CompressOptions` is what :func:`ctxkit.compress` and ``ctxkit compress`` take or build;
:class:`DensityOptions` is what :func:`ctxkit.density` takes (the chat options are
:class:`ctxkit.chat.options.ChatOptions`). Each constraint sits beside its field and raises
:class:`~ctxkit.errors.OptionError` naming the option, so a bad ``--granularity`` fails before
any text is read or any model is loaded.

Example:
    >>> CompressOptions(granularity="sentence").replace(token_drop=0.2).token_drop
    0.2
    >>> try:
    ...     CompressOptions(token_drop=1)
    ... except ValueError as exc:
    ...     print(exc)
    token_drop must be a number in [0, 1), got 1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxkit.options import OptionSet, bad_option

__all__ = [
    "DEFAULT_SCORER",
    "GRANULARITIES",
    "REORDERS",
    "CompressOptions",
    "DensityOptions",
    "check_bool",
    "check_budget",
    "check_choice",
    "check_count",
    "check_named",
    "check_share",
]

GRANULARITIES = ("coarse-to-fine", "sentence", "token", "chunk")
REORDERS = ("original", "sort")
DEFAULT_SCORER = "embedding"  # MiniLM fused with BM25: the best relevance the house ships


def is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))


def check_marker(marker: Any, name: str = "gap_marker") -> None:
    """A gap marker: a short string on one line (empty for none)."""
    if not isinstance(marker, str) or "\n" in marker or len(marker) > 16:
        raise bad_option(name, f" must be a one-line string of at most 16 characters, got "
                               f"{marker!r}")


def check_budget(budget: Any, name: str = "budget") -> int:
    """``budget`` as an int >= 1 (numpy ints too), or an ``OptionError`` naming ``name``.

    Example:
        >>> check_budget(np.int64(64))
        64
    """
    if not is_int(budget) or budget <= 0:
        raise bad_option(name, f" must be a positive number of tokens, got {budget!r}")
    return int(budget)


def check_count(obj: Any, name: str) -> None:
    value = getattr(obj, name)
    if not is_int(value) or value < 0:
        raise bad_option(name, f" must be an integer >= 0, got {value!r}")
    object.__setattr__(obj, name, int(value))


def check_share(obj: Any, name: str, *, low_open: bool = False, high_open: bool = False
                 ) -> None:
    """``name`` is a number in [0, 1], with an open end where the flags say."""
    value = getattr(obj, name)
    ok = is_number(value) and (0 < value if low_open else 0 <= value) and (
        value < 1 if high_open else value <= 1)
    if not ok:
        interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise bad_option(name, f" must be a number in {interval}, got {value!r}")
    object.__setattr__(obj, name, float(value))


def check_bool(obj: Any, name: str) -> None:
    value = getattr(obj, name)
    if not isinstance(value, (bool, np.bool_)):
        raise bad_option(name, f" must be True or False, got {value!r}")
    object.__setattr__(obj, name, bool(value))


def check_choice(value: Any, choices: tuple[str, ...], name: str) -> None:
    if not isinstance(value, str) or value not in choices:
        raise bad_option(name, f" {value!r} is unknown; choose one of {', '.join(choices)}")


def check_named(value: Any, name: str) -> None:
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
        gap_marker: text put where kept units that were not adjacent in the input meet (e.g.
            ``"…"``; its tokens count against the budget); empty: the units' own separator.
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
    gap_marker: str = ""

    _what = "compression option"

    def __post_init__(self) -> None:
        check_named(self.tokenizer, "tokenizer")
        check_named(self.scorer, "scorer")
        check_choice(self.granularity, GRANULARITIES, "granularity")
        check_choice(self.reorder, REORDERS, "reorder")
        force = self.force_keep
        if isinstance(force, str):
            force = (force,)
        if not isinstance(force, (list, tuple)) or not all(isinstance(f, str) for f in force):
            raise bad_option("force_keep", f" must be a str or a list of str, got {force!r}")
        object.__setattr__(self, "force_keep", tuple(f for f in force if f))
        check_share(self, "token_drop", high_open=True)
        check_share(self, "dedup_threshold", low_open=True)
        check_share(self, "redundancy")
        check_share(self, "query_weight")
        check_marker(self.gap_marker)


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
        check_named(self.tokenizer, "tokenizer")
        if self.scorer is not None:
            check_named(self.scorer, "scorer")
        check_count(self, "n")
        if self.n < 1:
            raise bad_option("n", f" must be an integer >= 1, got {self.n!r}")
        check_share(self, "threshold", low_open=True)
        check_bool(self, "semantic")
        check_count(self, "top_clusters")
