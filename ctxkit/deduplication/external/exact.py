"""The exact stage out of core: records with equal normalized-text digests, grouped one
partition of digests at a time.

Digests are split by their low bits into partitions that fit the budget; equal digests
always share a partition, so each group is whole in one. Within a group the representative
is the one :func:`~ctxkit.deduplication.unionfind.representatives` would keep (highest
priority, then smallest index), so the result is the in-memory exact stage's.

Example:
    >>> rows = np.zeros(4, dtype=DIGEST)
    >>> rows["hi"] = [5, 7, 5, 5]; rows["i"] = np.arange(4)
    >>> group_representatives(rows, np.array([0.0, 0.0, 2.0, 2.0])).tolist()
    [2, 1, 2, 2]
"""

from __future__ import annotations

import numpy as np

from ctxkit.deduplication.external.budget import Budget
from ctxkit.deduplication.external.scan import DIGEST
from ctxkit.deduplication.external.spill import Appender, partitioned

__all__ = ["exact_representatives", "group_representatives"]


def group_representatives(rows: np.ndarray, priority: np.ndarray) -> np.ndarray:
    """Per row of ``rows`` (:data:`DIGEST`), the index its digest group keeps: highest
    ``priority`` (one value per row), ties to the smallest index."""
    order = np.lexsort((rows["i"], -priority, rows["lo"], rows["hi"]))
    hi, lo = rows["hi"][order], rows["lo"][order]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
    group = np.cumsum(first) - 1
    out = np.empty(len(rows), dtype=np.int64)
    out[order] = rows["i"][order][first][group]
    return out


def exact_representatives(digests: Appender, n: int, keep: str, lengths: np.ndarray | None,
                          budget: Budget) -> np.ndarray:
    """Each record's representative among ``n`` (itself when kept), by ``keep``."""
    rep = np.arange(n, dtype=np.int64)
    parts = budget.parts(n, DIGEST.itemsize * 3)
    mask = np.uint64(parts - 1)
    for rows in partitioned(digests, parts, lambda r: r["lo"] & mask,
                            budget.rows(DIGEST.itemsize)):
        # keep_priority's values, for this partition's records only
        if keep == "longest":
            priority = np.asarray(lengths, dtype=np.float64)[rows["i"]]
        elif keep == "last":
            priority = rows["i"].astype(np.float64)
        else:
            priority = np.zeros(len(rows))
        rep[rows["i"]] = group_representatives(rows, priority)
    return rep
