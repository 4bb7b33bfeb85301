"""Pluggable scorers: how much information a word carries, and how relevant a unit is.

Every stage that prunes or ranks text (``compress``, ``compress_chat``, ``density``) asks a
:class:`Scorer` three things:

- ``information(texts)``: self-information in bits of each *atom* of each text (atoms come from
  :func:`atoms`: words, numbers, identifiers, URLs and code spans, never split);
- ``relevance(units, query)``: how relevant each unit is to a query, in [0, 1];
- ``similarity(units)``: pairwise similarity in [0, 1], for redundancy penalties (MMR).

Built in, by name (:func:`get_scorer`):

- ``"idf"``: -log2 p(word) from an offline reference table: the ``wordfreq`` package's English
  frequencies when it is installed, or an IDF table fitted with scikit-learn on your corpus
  (``IdfScorer.fit(corpus)``); relevance is BM25 to the query, scaled to [0, 1].
- ``"embedding"`` (the default of ``compress`` and ``compress_chat``): relevance as
  LongLLMLingua's coarse, question-aware ranking does it, the bundled all-MiniLM-L6-v2 cosine
  fused with BM25 (:func:`ctxkit.compression.scoring.lexical.hybrid_relevance`); information as
  ``idf``.

- ``"cross-encoder:<dir>"``: relevance from a local cross-encoder reranker, run on packed rows
  (:mod:`ctxkit.compression.scoring.cross_encoder`); information as ``idf``.

Other scorers plug in with :func:`register_scorer` or the ``ctxkit.scorers`` entry-point group.
A name alone gives the process's one scorer of that name, built on first use (as
``tiktoken.get_encoding`` does), so its caches serve every call that names it.

Example:
    >>> s = get_scorer("idf")
    >>> [round(b) for b in s.information(["the quasar"])[0]]  # doctest: +SKIP
    [4, 24]
    >>> "cross-encoder:<dir>" in available_scorers()
    True
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ctxkit.compression.scoring.base import Scorer
from ctxkit.compression.scoring.cross_encoder import CrossEncoderScorer
from ctxkit.compression.scoring.embedding import EmbeddingScorer
from ctxkit.compression.scoring.idf import IdfScorer
from ctxkit.compression.scoring.lm import LMScorer
from ctxkit.options import bad_option

__all__ = ["available_scorers", "get_scorer", "register_scorer"]

_REGISTRY: dict[str, Callable[..., Scorer]] = {
    "idf": IdfScorer,
    "embedding": EmbeddingScorer,
    "lm": LMScorer,
}


# "<name>:<argument>" scorers: the argument (a model directory) goes first to the factory
_PREFIXED: dict[str, Callable[..., Scorer]] = {"cross-encoder": CrossEncoderScorer}
# the scorer of each name asked for without keywords, built once per process
_SHARED: dict[str, Scorer] = {}
_SHARED_LOCK = threading.Lock()


def register_scorer(name: str, factory: Callable[..., Scorer]) -> None:
    """Make ``get_scorer(name)`` build scorers with ``factory(**kwargs)``."""
    if not isinstance(name, str) or not name:
        raise bad_option("name", f": a scorer name must be a non-empty string, got {name!r}")
    with _SHARED_LOCK:
        _REGISTRY[name] = factory
        _SHARED.pop(name, None)


def _entry_points() -> dict[str, Callable[..., Scorer]]:
    from importlib.metadata import entry_points

    # loading is deferred to get_scorer, so a broken plugin only fails when it is asked for
    return {ep.name: ep.load for ep in entry_points(group="ctxkit.scorers")}


def available_scorers() -> list[str]:
    """Names :func:`get_scorer` accepts (``<name>:<dir>`` for the ones that take a model)."""
    return sorted(set(_REGISTRY) | set(_entry_points()) | {f"{p}:<dir>" for p in _PREFIXED})


def check_scorer(scorer: Any, name: str = "scorer") -> Any:
    """``scorer`` when it names a known scorer (registered, ``prefix:<argument>`` or a plugin)
    or is a scorer object; else an :class:`~ctxkit.errors.OptionError` naming ``name``.
    Nothing is loaded.

    Example:
        >>> check_scorer("idf")
        'idf'
    """
    if isinstance(scorer, str):
        prefix, sep, _ = scorer.partition(":")
        if scorer in _REGISTRY or (sep and prefix in _PREFIXED) or scorer in _entry_points():
            return scorer
        raise bad_option(name, f": unknown scorer {scorer!r}; available: "
                               f"{', '.join(available_scorers())}")
    missing = [m for m in ("information", "relevance", "similarity")
               if not callable(getattr(scorer, m, None))]
    if missing:
        raise bad_option(name, f" must be a scorer name or a Scorer; {type(scorer).__name__} "
                               f"lacks {', '.join(missing)}()")
    return scorer


def get_scorer(scorer: str | Scorer = "idf", **kwargs) -> Scorer:
    """The scorer called ``scorer`` (or ``scorer`` itself when it is already one).

    Args:
        scorer: a name from :func:`available_scorers` or a :class:`Scorer`.
        **kwargs: options of the scorer's class; with any, a new scorer is built.

    Returns:
        Without keywords, the process's one scorer of that name (its caches shared by every
        call that names it); with keywords, a new one.

    Example:
        >>> get_scorer("idf").name, get_scorer("idf") is get_scorer("idf")
        ('idf', True)
    """
    check_scorer(scorer)
    if not isinstance(scorer, str):
        return scorer
    if kwargs:
        return _build(scorer, **kwargs)
    with _SHARED_LOCK:
        if scorer not in _SHARED:
            _SHARED[scorer] = _build(scorer)
        return _SHARED[scorer]


def _build(scorer: str, **kwargs: Any) -> Scorer:
    if scorer in _REGISTRY:
        return _REGISTRY[scorer](**kwargs)
    prefix, sep, argument = scorer.partition(":")
    if sep and prefix in _PREFIXED:
        return _PREFIXED[prefix](argument, **kwargs)
    return _entry_points()[scorer]()(**kwargs)
