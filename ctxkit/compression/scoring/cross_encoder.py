"""The ``cross-encoder:<dir>`` scorer: query relevance from a local reranker, run packed.

A cross-encoder reads the query and the unit together, so it ranks the units of a
compression better than a bi-encoder's cosine can, at the price of one forward per unit
(the slowest step of most retrieval pipelines). Here those forwards run on packed rows
(:class:`~ctxkit.embedding.classifier.PackedClassifier`), with the same logits as
``CrossEncoder.predict``.

``relevance(units, query)`` is the reranker's logit for each ``(query, unit)`` pair (for a
two-label model, relevant minus irrelevant), scaled to [0, 1] over the units of the call as
the other scorers' relevance is (1 = most relevant unit). Information per word is the
``idf`` scorer's; similarity is TF-IDF.

Example:
    >>> from ctxkit.compression.scoring.registry import get_scorer
    >>> s = get_scorer("cross-encoder:path/to/reranker")  # doctest: +SKIP
    >>> s.relevance(["Paris is in France.", "Cats purr."], "Where is Paris?")  # doctest: +SKIP
    array([1., 0.])
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.compression.scoring.cache import DEFAULT_CACHE_SIZE, TextCache
from ctxkit.compression.scoring.lexical import unit_range
from ctxkit.compression.scoring.shortlist import ShortlistedScorer
from ctxkit.options import bad_option

__all__ = ["CrossEncoderScorer"]

class CrossEncoderScorer(ShortlistedScorer):
    """Relevance from a cross-encoder reranker (a local directory or a loaded model), packed.

    ``device``, ``dtype`` and ``batch_tokens`` go to
    :class:`~ctxkit.embedding.classifier.PackedClassifier`. On long inputs the reranker reads
    only the shortlist's units (``candidates`` and ``lexical_weight`` as for
    :class:`~ctxkit.compression.scoring.shortlist.Shortlist`). Logits are cached per
    ``(query, unit)`` (``cache_size`` pairs), so a ``ChatMemory`` asking again about the same
    turns pays once.
    """

    name = "cross-encoder"

    def __init__(self, model: str | Path | Any, device: str = "auto", dtype: str = "auto",
                 batch_tokens: int | None = None, table: dict[str, float] | None = None,
                 candidates: int | None = None, lexical_weight: float = 0.4,
                 cache_size: int = DEFAULT_CACHE_SIZE):
        from ctxkit.embedding.classifier import PackedClassifier

        super().__init__(candidates=candidates, lexical_weight=lexical_weight,
                         cache_size=cache_size, table=table)
        if isinstance(model, str) and not model:
            raise bad_option("model", ": the cross-encoder scorer needs a model directory: "
                                      "cross-encoder:<dir>")
        self.classifier = PackedClassifier(model, device=device, dtype=dtype,
                                           batch_tokens=batch_tokens)
        if self.classifier.num_labels not in (1, 2):
            raise bad_option("model", f": a cross-encoder scorer needs a model with 1 or 2 "
                                      f"labels; {model} has {self.classifier.num_labels}")
        self.cache = TextCache(cache_size)

    def clear_cache(self) -> None:
        super().clear_cache()
        self.cache.clear()

    def _margins(self, pairs: list[tuple[str, str]]) -> list[float]:
        out = self.classifier.predict(pairs)
        return (out[:, 0] if out.shape[1] == 1 else out[:, 1] - out[:, 0]).tolist()

    def logits(self, units: Sequence[str], query: str) -> np.ndarray:
        """The reranker's relevance logit of each unit for ``query`` (cached)."""
        return np.array(self.cache.values([(query, u) for u in units], self._margins),
                        dtype=np.float64)

    def model_relevance(self, units: list[str], query: str) -> np.ndarray:
        return unit_range(self.logits(units, query))
