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

from ctxkit.compression.scoring.idf import IdfScorer
from ctxkit.compression.scoring.lexical import _unit_range
from ctxkit.options import bad_option

__all__ = ["CrossEncoderScorer"]

_CACHE_LIMIT = 50_000  # (query, unit) pairs remembered per scorer


class CrossEncoderScorer(IdfScorer):
    """Relevance from a cross-encoder reranker (a local directory or a loaded model), packed.

    ``device``, ``dtype`` and ``batch_tokens`` go to
    :class:`~ctxkit.embedding.classifier.PackedClassifier`. Scores are cached per
    ``(query, unit)``, so a ``ChatMemory`` asking again about the same turns pays once.
    """

    name = "cross-encoder"

    def __init__(self, model: str | Path | Any, device: str = "auto", dtype: str = "auto",
                 batch_tokens: int | None = None, table: dict[str, float] | None = None):
        from ctxkit.embedding.classifier import PackedClassifier

        super().__init__(table=table)
        if isinstance(model, str) and not model:
            raise bad_option("model", ": the cross-encoder scorer needs a model directory: "
                                      "cross-encoder:<dir>")
        self.classifier = PackedClassifier(model, device=device, dtype=dtype,
                                           batch_tokens=batch_tokens)
        if self.classifier.num_labels not in (1, 2):
            raise bad_option("model", f": a cross-encoder scorer needs a model with 1 or 2 "
                                      f"labels; {model} has {self.classifier.num_labels}")
        self._cache: dict[tuple[str, str], float] = {}

    def logits(self, units: Sequence[str], query: str) -> np.ndarray:
        """The reranker's relevance logit of each unit for ``query`` (cached)."""
        todo = list(dict.fromkeys((query, u) for u in units if (query, u) not in self._cache))
        if todo:
            if len(self._cache) + len(todo) > _CACHE_LIMIT:
                self._cache.clear()
            out = self.classifier.predict(todo)
            margin = out[:, 0] if out.shape[1] == 1 else out[:, 1] - out[:, 0]
            self._cache.update(zip(todo, margin.tolist()))
        return np.array([self._cache[(query, u)] for u in units], dtype=np.float64)

    def relevance(self, units: Sequence[str], query: str) -> np.ndarray:
        if not units:
            return np.zeros(0)
        return _unit_range(self.logits(units, query))
