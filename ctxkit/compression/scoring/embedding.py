"""The ``embedding`` scorer: relevance from sentence embeddings fused with BM25.

The cold call is a cascade: BM25 over every unit is cheap, the encoder is not, so when a call
has more than :data:`CASCADE_FLOOR` units only the BM25 best ``max(CASCADE_FLOOR, n //
CASCADE_SHARE)`` are embedded and fused; the others rank below all of them. The floor keeps
every dev case of ``python -m evals.public_compression`` (20 NQ passages, LoCoMo chats of at
most ~700 turns, 75 key-value lines) under it, so their rankings are the uncascaded ones; the
cascade bounds the encoder's work on long inputs (100k tokens and more). A caller that knows
how many tokens it can keep (``compress_chat``) asks :meth:`EmbeddingScorer.relevance_within`
instead: the candidates are then the best of a cheaper and better first stage
(:mod:`ctxkit.compression.scoring.shortlist`) filling that room. Vectors are cached by text
across calls in the process (:mod:`ctxkit.compression.scoring.cache`).

Example:
    >>> EmbeddingScorer().name
    'embedding'
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxkit.compression.scoring import shortlist as cascade
from ctxkit.compression.scoring.cache import SHARED_CACHE, EmbeddingCache
from ctxkit.compression.scoring.idf import IdfScorer
from ctxkit.compression.scoring.lexical import bm25, hybrid_relevance, spread_to_neighbors
from ctxkit.embedding import vectors
from ctxkit.embedding.options import DTYPES
from ctxkit.options import bad_option

__all__ = ["CASCADE_FLOOR", "CASCADE_SHARE", "EmbeddingScorer"]

CASCADE_FLOOR = 1024  # units embedded without a first stage
CASCADE_SHARE = 4  # above the floor, the BM25 best n // CASCADE_SHARE units are embedded


def embed(texts: Sequence[str], dtype: str = vectors.RANKING_DTYPE) -> np.ndarray:
    """Unit vectors the scorer ranks with: the bundled MiniLM in ``dtype`` (``"fast"``: bf16
    on CPUs that multiply it natively, :func:`~ctxkit.embedding.vectors.ranking_encoder`)."""
    return vectors.embed(texts, vectors.default_encoder(dtype=dtype))


class EmbeddingScorer(IdfScorer):
    """Question-aware relevance: MiniLM cosine fused with BM25 on standardised scores.

    ``relevance`` is :func:`~ctxkit.compression.scoring.lexical.hybrid_relevance` with
    ``lexical_weight``: the embedding catches paraphrases, BM25 the exact names and numbers
    that small embedding models blur. Embeddings are cached by text in the process-wide
    LRU (or ``cache``), so a history or passage seen again is not embedded again.
    ``candidates``: units embedded per call after the BM25 first stage (``None``: the module's
    rule; ``0``: every unit). Information per word is the ``idf`` scorer's.
    ``dtype``: the encoder's (:class:`~ctxkit.embedding.options.EmbedOptions`); the default
    ``"fast"`` runs bf16 on CPUs with native bf16, several times faster than fp32, its vectors
    at a cosine above 0.9999 to fp32's (``python -m evals.embedding``). Another dtype keeps its
    vectors in a cache of the scorer's own, since the shared one holds ``"fast"`` vectors.

    Example:
        >>> s = EmbeddingScorer()
        >>> units = ["Paris is in France.", "Cats purr."]
        >>> r = s.relevance(units, "Where is Paris?")  # doctest: +SKIP
        >>> bool(r[0] > r[1])  # doctest: +SKIP
        True
    """

    name = "embedding"

    def __init__(self, lexical_weight: float = 0.4, table: dict[str, float] | None = None,
                 candidates: int | None = None, cache: EmbeddingCache | None = None,
                 dtype: str = vectors.RANKING_DTYPE):
        if lexical_weight < 0:
            raise bad_option("lexical_weight", f" must be >= 0, got {lexical_weight}")
        if candidates is not None and (not isinstance(candidates, int) or candidates < 0):
            raise bad_option("candidates", f" must be None or an int >= 0, got {candidates!r}")
        if dtype not in DTYPES:
            raise bad_option("dtype", f" {dtype!r} is unknown; use one of {', '.join(DTYPES)}")
        super().__init__(table=table)
        self.lexical_weight = lexical_weight
        self.candidates = candidates
        self.dtype = dtype
        self._cache = cache if cache is not None else (
            SHARED_CACHE if self.dtype == vectors.RANKING_DTYPE else EmbeddingCache())

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        # looked up at call time, so tests can count the encoder's calls
        return self._cache.get(list(texts), lambda missing: embed(missing, self.dtype))

    def _shortlist(self, n: int) -> int:
        if self.candidates is not None:
            return n if self.candidates == 0 else min(n, self.candidates)
        return n if n <= CASCADE_FLOOR else max(CASCADE_FLOOR, n // CASCADE_SHARE)

    def _fused(self, units: list[str], query: str) -> np.ndarray:
        vecs = self._embed(units + [query])
        return hybrid_relevance(units, query, embeddings=vecs[:-1], query_embedding=vecs[-1],
                                lexical_weight=self.lexical_weight).scores

    def _above(self, units: list[str], query: str, top: np.ndarray,
               below: np.ndarray) -> np.ndarray:
        """Fused relevance of ``units[top]`` in [0.5, 1]; the others keep ``below``
        (in [0, 0.5]), so every embedded unit ranks above every other."""
        out = np.asarray(below, dtype=np.float64).copy()
        out[top] = 0.5 + 0.5 * self._fused([units[i] for i in top], query)
        return out

    def relevance(self, units: Sequence[str], query: str) -> np.ndarray:
        if not units:
            return np.zeros(0)
        units = list(units)
        k = self._shortlist(len(units))
        if k >= len(units):
            return self._fused(units, query)
        # cascade: BM25 picks the k units the encoder sees; the rest rank below all of them
        top = np.sort(np.argsort(-bm25(units, query), kind="stable")[:k])
        return self._above(units, query, top, np.zeros(len(units)))

    def relevance_within(self, units: Sequence[str], query: str, tokens: Sequence[int],
                         room: int, neighbors: float = 0.0) -> np.ndarray:
        """:meth:`relevance` for a caller that keeps at most ``room`` tokens of ``units``
        (``tokens`` each): the encoder scores only the first stage's best units filling
        ``cascade.CANDIDATE_ROOMS * room`` (at least ``cascade.CANDIDATE_FLOOR``), picked
        with ``neighbors`` spreading as the caller ranks; the others rank below them by
        the first stage. ``candidates`` set on the scorer overrides the count (0: all).

        Example:
            >>> s = EmbeddingScorer()
            >>> r = s.relevance_within(["Paris is in France.", "Cats purr."],
            ...                        "Where is Paris?", [6, 4], room=6)  # doctest: +SKIP
            >>> bool(r[0] > r[1])  # doctest: +SKIP
            True
        """
        if not units:
            return np.zeros(0)
        units = list(units)
        if self.candidates is not None or len(units) <= cascade.CANDIDATE_FLOOR:
            return self.relevance(units, query)
        first = cascade.first_stage(units, query, lexical_weight=self.lexical_weight)
        top = cascade.pick_candidates(spread_to_neighbors(first, neighbors), tokens,
                                      int(cascade.CANDIDATE_ROOMS * room))
        if len(top) >= len(units):
            return self._fused(units, query)
        return self._above(units, query, top, 0.5 * first)

    def similarity(self, units: Sequence[str]) -> np.ndarray:
        if not units:
            return np.zeros((0, 0))
        vecs = self._embed(list(units))
        return np.clip(vecs @ vecs.T, 0.0, 1.0)
