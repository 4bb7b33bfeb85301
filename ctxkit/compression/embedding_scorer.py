"""The ``embedding`` scorer: relevance from sentence embeddings fused with BM25.

Example:
    >>> EmbeddingScorer().name
    'embedding'
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxkit.compression.idf import IdfScorer
from ctxkit.compression.relevance import embed, hybrid_relevance
from ctxkit.options import bad_option

__all__ = ["EmbeddingScorer"]


class EmbeddingScorer(IdfScorer):
    """Question-aware relevance: MiniLM cosine fused with BM25 on standardised scores.

    ``relevance`` is :func:`~ctxkit.compression.relevance.hybrid_relevance` with
    ``lexical_weight``: the embedding catches paraphrases, BM25 the exact names and numbers
    that small embedding models blur. Embeddings are cached per scorer by text, so one
    instance reused across calls on a growing history embeds each message once. Information
    per word is the ``idf`` scorer's.

    Example:
        >>> s = EmbeddingScorer()
        >>> units = ["Paris is in France.", "Cats purr."]
        >>> r = s.relevance(units, "Where is Paris?")  # doctest: +SKIP
        >>> bool(r[0] > r[1])  # doctest: +SKIP
        True
    """

    name = "embedding"

    def __init__(self, lexical_weight: float = 0.4, table: dict[str, float] | None = None):
        if lexical_weight < 0:
            raise bad_option("lexical_weight", f" must be >= 0, got {lexical_weight}")
        super().__init__(table=table)
        self.lexical_weight = lexical_weight
        self._cache: dict[str, np.ndarray] = {}

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        # relevance and similarity of one compression embed the same units: encode them once
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            if len(self._cache) + len(missing) > 50_000:
                self._cache.clear()
            self._cache.update(zip(missing, embed(missing)))
        return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, 384))

    def relevance(self, units: Sequence[str], query: str) -> np.ndarray:
        if not units:
            return np.zeros(0)
        vecs = self._embed(list(units) + [query])
        return hybrid_relevance(units, query, embeddings=vecs[:-1], query_embedding=vecs[-1],
                                lexical_weight=self.lexical_weight).scores

    def similarity(self, units: Sequence[str]) -> np.ndarray:
        if not units:
            return np.zeros((0, 0))
        vecs = self._embed(list(units))
        return np.clip(vecs @ vecs.T, 0.0, 1.0)
