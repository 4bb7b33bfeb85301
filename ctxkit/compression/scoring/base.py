"""What a scorer is: the :class:`Scorer` protocol, and the lexical base of the built-in ones.

Every stage that prunes or ranks text (``compress``, ``compress_chat``, ``density``) asks a
:class:`Scorer` three things:

- ``information(texts)``: self-information in bits of each *atom* of each text (atoms come from
  :func:`ctxkit.compression.atoms.atoms`: words, numbers, identifiers, URLs and code spans,
  never split);
- ``relevance(units, query)``: how relevant each unit is to a query, in [0, 1];
- ``similarity(units)``: pairwise similarity in [0, 1], for redundancy penalties (MMR).

Example:
    >>> class Flat(_Lexical):
    ...     name = "flat"
    ...     def information(self, texts):
    ...         return [np.ones(1) for _ in texts]
    >>> isinstance(Flat(), Scorer)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from ctxkit.compression.scoring.lexical import lexical_relevance
from ctxkit.compression.scoring.tfidf import tfidf_similarity

__all__ = ["Scorer"]


@runtime_checkable
class Scorer(Protocol):
    """What compression and density need from a scorer."""

    name: str

    def information(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Bits of self-information per atom of each text (aligned with ``atoms(text)``)."""
        ...

    def relevance(self, units: Sequence[str], query: str) -> np.ndarray:
        """Relevance of each unit to ``query`` in [0, 1]."""
        ...

    def similarity(self, units: Sequence[str]) -> np.ndarray:
        """Pairwise similarity ``[n, n]`` in [0, 1]."""
        ...


class _Lexical:
    """Relevance and similarity from TF-IDF; scorers override what they model better."""

    def relevance(self, units: Sequence[str], query: str) -> np.ndarray:
        return lexical_relevance(units, query).scores

    def similarity(self, units: Sequence[str]) -> np.ndarray:
        return tfidf_similarity(units)
