"""Sorted-array helpers shared by LSH banding and exact Jaccard scoring.

Distinct values by a sort and a diff, distinct ids by a mark per id where the ids are dense,
and the bounds check the compiled loops rely on.

Example:
    >>> _unique(np.array([3, 1, 3, 2])).tolist()
    [1, 2, 3]
"""

from __future__ import annotations

import numpy as np

from ctxkit.errors import InputError

__all__: list[str] = []


def _unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values; a sort and a diff beat numpy 2's hash-based unique on integers."""
    # the default kind is numpy's SIMD sort, several times faster than "stable" (a timsort
    # for 64-bit integers); stability means nothing for plain values
    x = np.sort(x)
    if len(x) < 2:
        return x
    keep = np.empty(len(x), dtype=bool)
    keep[0] = True
    np.not_equal(x[1:], x[:-1], out=keep[1:])
    return x[keep]


def _unique_keys(keys: np.ndarray, piece: int = 1 << 14) -> np.ndarray:
    """:func:`_unique` of ``text << 32 | value`` keys whose texts ascend (as hashed), sorted
    in pieces of about ``piece`` keys cut between texts: the pieces laid end to end are one
    sorted array, and a sort of cache-sized pieces costs the same per key however many
    texts there are (one sort of all of them grows with the log of their number and falls
    out of the cache).

    Example:
        >>> keys = (np.array([0, 0, 1, 1, 1], dtype=np.uint64) << np.uint64(32)) | np.array(
        ...     [5, 5, 9, 2, 9], dtype=np.uint64)
        >>> (_unique_keys(keys, piece=2) & np.uint64(0xFFFFFFFF)).tolist()
        [5, 2, 9]
    """
    if len(keys) <= piece:
        return _unique(keys)
    text = keys >> np.uint64(32)
    cuts = np.searchsorted(text, text[piece::piece])  # the first key of a text, every piece
    cuts = np.unique(np.concatenate([[0], cuts, [len(keys)]]))
    return np.concatenate([_unique(keys[a:b]) for a, b in zip(cuts[:-1], cuts[1:])])


def _dense(largest: int, count: int) -> bool:
    """Whether ``count`` ids up to ``largest`` are dense enough for an array indexed by id."""
    return largest <= 4 * count + 1024


def _distinct_ids(ids: np.ndarray) -> np.ndarray:
    """Sorted distinct non-negative ids: a mark per id where the ids are dense (linear; every
    text of a pair list, say), else :func:`_unique`."""
    if len(ids) == 0 or not _dense(int(ids.max()), len(ids)):
        return _unique(ids)
    seen = np.zeros(int(ids.max()) + 1, dtype=bool)
    seen[ids] = True
    return np.flatnonzero(seen)


def _checked_pairs(pairs: np.ndarray, n: int) -> np.ndarray:
    """``pairs`` as a contiguous ``(m, 2)`` int64 array of row numbers below ``n`` (the compiled
    loops do not check bounds, so bad rows are refused here)."""
    pairs = np.ascontiguousarray(np.asarray(pairs, dtype=np.int64).reshape(-1, 2))
    if len(pairs) and (int(pairs.min()) < 0 or int(pairs.max()) >= n):
        raise InputError(f"pairs: pair rows must lie in [0, {n})")
    return pairs
