"""Clusters from similar pairs: connected components and their representatives.

Duplicates are transitive here on purpose: if a ~ b and b ~ c, all three form one cluster
and one representative is kept, as in datasketch/text-dedup pipelines. Labels are the
smallest index in each component, so results never depend on edge order.

Example:
    >>> labels = connected_components(5, np.array([[0, 1], [3, 1]]))
    >>> labels.tolist()
    [0, 0, 2, 0, 4]
    >>> representatives(labels, priority=np.array([0, 5, 0, 5, 0])).tolist()
    [1, 1, 2, 1, 4]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxkit.errors import InputError
from ctxkit.options import bad_option

__all__ = ["KEEP_RULES", "connected_components", "keep_priority", "representatives"]

KEEP_RULES = ("first", "last", "longest")


def connected_components(n: int, pairs: np.ndarray) -> np.ndarray:
    """Label each of ``n`` items with the smallest index of its connected component.

    ``pairs`` is an ``(m, 2)`` integer array of edges. Runs in scipy's C graph code, so
    millions of edges take well under a second.
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if len(pairs) == 0:
        return np.arange(n, dtype=np.int64)
    if pairs.min() < 0 or pairs.max() >= n:
        raise InputError(f"pairs: pair indices must lie in [0, {n})")
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components as cc

    graph = coo_matrix(
        (np.ones(len(pairs), dtype=np.int8), (pairs[:, 0], pairs[:, 1])), shape=(n, n)
    )
    _, comp = cc(graph, directed=False)
    # scipy numbers components arbitrarily; relabel each by its smallest member.
    smallest = np.full(comp.max() + 1, n, dtype=np.int64)
    np.minimum.at(smallest, comp, np.arange(n, dtype=np.int64))
    return smallest[comp]


def keep_priority(
    keep: str,
    n: int,
    *,
    lengths: Sequence[int] | None = None,
    scores: Sequence[float] | None = None,
) -> np.ndarray:
    """Priority per item for :func:`representatives`: the highest priority is kept.

    ``keep="first"`` keeps the earliest item, ``"last"`` the latest, ``"longest"`` the longest
    text (``lengths``); ``scores`` (e.g. information-density scores) overrides ``keep`` and
    keeps the highest-scoring item. Ties always go to the earliest item.
    """
    if scores is not None:
        scores = np.asarray(scores, dtype=np.float64)
        if scores.shape != (n,):
            raise InputError(f"scores must have one value per text ({n}), got shape {scores.shape}")
        if np.isnan(scores).any():
            raise InputError("scores must not contain NaN")
        return scores
    if keep == "first":
        return np.zeros(n)
    if keep in ("last", "latest"):
        return np.arange(n, dtype=np.float64)
    if keep == "longest":
        if lengths is None:
            raise InputError("keep='longest' needs the text lengths")
        return np.asarray(lengths, dtype=np.float64)
    raise bad_option("keep", f" must be one of {KEEP_RULES} (or pass scores=), got {keep!r}")


def representatives(labels: np.ndarray, priority: np.ndarray | None = None) -> np.ndarray:
    """For each item, the index of its component's representative.

    The representative has the highest ``priority`` in its component (ties: smallest index);
    with no priority it is the smallest index.
    """
    labels = np.asarray(labels, dtype=np.int64)
    n = len(labels)
    if priority is None:
        return labels.copy()
    idx = np.arange(n, dtype=np.int64)
    # Sort by (label, -priority, index); the first row of each label group is its winner.
    order = np.lexsort((idx, -np.asarray(priority, dtype=np.float64), labels))
    first = np.ones(n, dtype=bool)
    first[1:] = labels[order][1:] != labels[order][:-1]
    winner = np.empty(n, dtype=np.int64)
    winner[labels[order][first]] = order[first]
    return winner[labels]
