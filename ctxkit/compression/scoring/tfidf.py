"""TF-IDF: lexical similarity of units (the default of every scorer).

Example:
    >>> tfidf_similarity(["red apples", "red apples", "blue sky"]).round(2)[0].tolist()
    [1.0, 1.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["tfidf_similarity"]


def _tfidf(units: Sequence[str], extra: Sequence[str] = ()):
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(lowercase=True, token_pattern=r"(?u)\b\w[\w.\-']*\w\b|\b\w\b",
                          sublinear_tf=True)
    try:
        matrix = vec.fit_transform(list(units) + list(extra))
    except ValueError:  # every document empty or punctuation only: no vocabulary
        return None
    return matrix


def tfidf_similarity(units: Sequence[str]) -> np.ndarray:
    """Pairwise TF-IDF cosine similarity ``[n, n]``."""
    n = len(units)
    matrix = _tfidf(units) if n else None
    if matrix is None:
        return np.eye(n)
    return np.clip((matrix @ matrix.T).toarray(), 0.0, 1.0)
