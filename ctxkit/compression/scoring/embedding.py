"""The ``embedding`` scorer: relevance from sentence embeddings fused with BM25.

The bundled all-MiniLM-L6-v2's cosine is fused with BM25 on standardised scores
(:func:`~ctxkit.compression.scoring.lexical.hybrid_relevance`): the embedding catches
paraphrases, BM25 the exact names and numbers that small embedding models blur. On long
inputs the encoder ranks only the shortlist's units
(:mod:`ctxkit.compression.scoring.shortlist`); the vectors are cached by text in the scorer
(:mod:`ctxkit.compression.scoring.cache`).

Example:
    >>> EmbeddingScorer().name
    'embedding'
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxkit.compression.scoring.cache import DEFAULT_CACHE_SIZE, TextCache
from ctxkit.compression.scoring.lexical import hybrid_relevance
from ctxkit.compression.scoring.shortlist import ShortlistedScorer
from ctxkit.embedding import vectors
from ctxkit.embedding.options import DTYPES
from ctxkit.options import bad_option

__all__ = ["EmbeddingScorer", "embed"]


def embed(texts: Sequence[str], dtype: str = vectors.RANKING_DTYPE) -> np.ndarray:
    """Unit vectors the scorer ranks with: the bundled MiniLM in ``dtype`` (``"fast"``: bf16
    on CPUs that multiply it natively, :func:`~ctxkit.embedding.vectors.ranking_encoder`)."""
    return vectors.embed(texts, vectors.default_encoder(dtype=dtype))


class EmbeddingScorer(ShortlistedScorer):
    """Question-aware relevance: MiniLM cosine fused with BM25 on standardised scores.

    Args:
        lexical_weight: BM25's weight in the fusion (and in the shortlist's first stage).
        table: the ``idf`` table for information per word (default: ``wordfreq``).
        candidates: units the encoder ranks per call (``None``: the shortlist's rules; 0:
            every unit; k: BM25's best k).
        cache_size: texts each of the scorer's caches keeps (vectors and word pieces).
        dtype: the encoder's (:class:`~ctxkit.embedding.options.EmbedOptions`); the default
            ``"fast"`` runs bf16 on CPUs with native bf16, several times faster than fp32, its
            vectors at a cosine above 0.9999 to fp32's (``python -m evals.embedding``).

    Example:
        >>> s = EmbeddingScorer()
        >>> r = s.relevance(["Paris is in France.", "Cats purr."], "Where is Paris?")
        >>> bool(r[0] > r[1])
        True
    """

    name = "embedding"

    def __init__(self, lexical_weight: float = 0.4, table: dict[str, float] | None = None,
                 candidates: int | None = None, cache_size: int = DEFAULT_CACHE_SIZE,
                 dtype: str = vectors.RANKING_DTYPE):
        if dtype not in DTYPES:
            raise bad_option("dtype", f" {dtype!r} is unknown; use one of {', '.join(DTYPES)}")
        super().__init__(candidates=candidates, lexical_weight=lexical_weight,
                         cache_size=cache_size, table=table)
        self.dtype = dtype
        self.cache = TextCache(cache_size)

    def clear_cache(self) -> None:
        super().clear_cache()
        self.cache.clear()

    def prepare(self, units: Sequence[str]) -> None:
        super().prepare(units)
        self._embed(units)

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        # ``embed`` is looked up at call time, so tests can count the encoder's calls
        return self.cache.rows(list(texts), lambda missing: embed(missing, self.dtype))

    def model_relevance(self, units: list[str], query: str) -> np.ndarray:
        vecs = self._embed(units + [query])
        return hybrid_relevance(units, query, embeddings=vecs[:-1], query_embedding=vecs[-1],
                                lexical_weight=self.lexical_weight, index=self.terms).scores

    def similarity(self, units: Sequence[str]) -> np.ndarray:
        if not units:
            return np.zeros((0, 0))
        vecs = self._embed(list(units))
        return np.clip(vecs @ vecs.T, 0.0, 1.0)
