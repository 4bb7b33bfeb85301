"""Verification of candidate pairs: by the signatures' estimate, or by exact Jaccard near
the threshold.

An estimate is the fraction of equal signature entries (about +-0.04 at 128 permutations).
Pairs whose estimate lies within :func:`verify_margin` of the threshold are scored exactly
(:mod:`ctxkit.deduplication.jaccard`); the others keep their estimate.

Example:
    >>> s = np.array([[1, 2, 3, 4], [1, 2, 3, 0], [9, 9, 9, 9]], dtype=np.uint32)
    >>> verify_pairs(s, np.array([[0, 1], [0, 2]]), 0.5)[0].tolist()
    [[0, 1]]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from ctxkit.deduplication import kernels
from ctxkit.deduplication.arrays import _checked_pairs
from ctxkit.deduplication.jaccard import _ExactJaccard
from ctxkit.deduplication.linking import link_pairs

__all__ = [
    "estimate_jaccard",
    "match_upper_bounds",
    "verify_margin",
    "verify_pairs",
    "verify_pairs_exact",
]


def estimate_jaccard(sig: np.ndarray, pairs: np.ndarray, chunk: int = 1 << 13) -> np.ndarray:
    """Estimated Jaccard of each pair: the fraction of equal signature entries.

    Example:
        >>> s = np.array([[1, 2, 3, 4], [1, 2, 0, 0]], dtype=np.uint32)
        >>> estimate_jaccard(s, np.array([[0, 1]])).tolist()
        [0.5]
    """
    pairs = _checked_pairs(pairs, len(sig))
    if kernels.NUMBA:
        same = np.empty(len(pairs), dtype=np.int64)
        kernels.count_equal(np.ascontiguousarray(sig), pairs, same)
        return same / sig.shape[1]
    out = np.empty(len(pairs), dtype=np.float64)
    for s in range(0, len(pairs), chunk):
        p = pairs[s : s + chunk]
        equal = np.take(sig, p[:, 0], axis=0) == np.take(sig, p[:, 1], axis=0)
        out[s : s + chunk] = np.count_nonzero(equal, axis=1)
    out /= sig.shape[1]
    return out


_BYTE_ONES = np.uint64(0x0101010101010101)


def match_upper_bounds(sig: np.ndarray, pairs: np.ndarray, chunk: int = 1 << 12) -> np.ndarray:
    """Per pair, an upper bound on its number of equal signature entries, four times cheaper.

    Only the low byte of each entry is compared (b-bit minwise hashing, Li and Konig 2010):
    equal entries have equal low bytes, so the count can only grow, by about one
    ``num_perm / 256``-th of the unequal entries. Verification without numba runs this over
    all candidates and compares full entries only where the bound reaches the threshold:
    most LSH candidates are far below it (their Jaccard is near 0.05), and reading a quarter
    of the bytes of two random signature rows is what makes it cheaper. Nothing is lost: a
    pair this rejects has an estimate below the threshold too.

    Example:
        >>> s = np.array([[1, 2, 3, 4], [1, 2, 0, 260]], dtype=np.uint32)
        >>> match_upper_bounds(s, np.array([[0, 1]])).tolist()  # 4 and 260 share a low byte
        [3]
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    width = -(-sig.shape[1] // 8) * 8  # whole 64-bit words; padding bytes are equal zeros
    low = np.zeros((len(sig), width), dtype=np.uint8)
    # a casting copy keeps the low bytes without a temporary the size of ``sig``
    np.copyto(low[:, : sig.shape[1]], sig, casting="unsafe")
    out = np.empty(len(pairs), dtype=np.int64)
    with np.errstate(over="ignore"):
        for s in range(0, len(pairs), chunk):
            p = pairs[s : s + chunk]
            # np.take copies rows several times faster than fancy indexing
            equal = np.take(low, p[:, 0], axis=0) == np.take(low, p[:, 1], axis=0)
            # Bytes of `equal` are 0 or 1: adding a row's words adds bytewise without carries
            # (each byte stays <= width / 8), and the multiply then sums the 8 bytes into
            # the top one.
            # The top byte must not overflow, so at most 248 entries go into one sum.
            total = np.zeros(len(p), dtype=np.uint64)
            for c in range(0, width, 248):
                words = equal[:, c : c + 248].view(np.uint64).sum(axis=1, dtype=np.uint64)
                total += (words * _BYTE_ONES) >> np.uint64(56)
            out[s : s + chunk] = total
    return out - (width - sig.shape[1])


def _estimates_at_least(
    sig: np.ndarray, pairs: np.ndarray, floor: float, strict: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The pairs whose estimated Jaccard is >= ``floor`` (> when ``strict``), with estimates.
    Compiled, every pair's signatures are compared; in numpy, only those of pairs that
    :func:`match_upper_bounds` lets through."""
    num_perm = sig.shape[1]
    if kernels.NUMBA:  # the compiled count is cheaper than the bound
        scores = estimate_jaccard(sig, pairs)
        at = np.flatnonzero(scores > floor if strict else scores >= floor)
        return at, scores[at]
    bound = match_upper_bounds(sig, pairs) / num_perm  # the same division as the estimate
    maybe = np.flatnonzero(bound > floor if strict else bound >= floor)
    scores = estimate_jaccard(sig, pairs[maybe])
    ok = scores > floor if strict else scores >= floor
    return maybe[ok], scores[ok]


def verify_pairs(
    sig: np.ndarray, pairs: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs whose estimated Jaccard is >= ``threshold``: (pairs, scores).

    Example:
        >>> s = np.array([[1, 2, 3, 4], [1, 2, 3, 0], [9, 9, 9, 9]], dtype=np.uint32)
        >>> kept, scores = verify_pairs(s, np.array([[0, 1], [0, 2]]), 0.5)
        >>> kept.tolist(), scores.tolist()
        ([[0, 1]], [0.75])
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    at, scores = _estimates_at_least(sig, pairs, threshold)
    return pairs[at], scores


def verify_margin(threshold: float, num_perm: int, sigmas: float = 4.5) -> float:
    """How far from the threshold an estimate must be to be trusted without the exact Jaccard.

    ``sigmas`` standard deviations of the estimator (``sqrt(t (1 - t) / num_perm)``) plus one
    permutation's step: beyond that an estimate falls on the wrong side of the threshold
    with probability below 1e-5 (for the default 4.5).
    """
    return sigmas * math.sqrt(threshold * (1 - threshold) / num_perm) + 1.0 / num_perm


def _no_stage(name: str) -> AbstractContextManager[None]:
    """The stage hook that does nothing (:func:`~ctxkit.deduplication.minhash.minhash_dedup`)."""
    return nullcontext()


def _verify_exact(
    sig: np.ndarray, pairs: np.ndarray, threshold: float,
    texts: Sequence[str] | dict[int, str], options: dict[str, Any], keep_scorer: bool = False,
    big: int | None = None, stage: Callable[[str], AbstractContextManager[Any]] = _no_stage,
) -> tuple[np.ndarray, np.ndarray, _ExactJaccard | None]:
    """:func:`verify_pairs_exact`; with ``keep_scorer`` it also returns the exact scorer, built
    over every text of a pair that survived the estimate (all future cluster members), so
    the caller's later exact similarities hash nothing again. With ``big``, pairs inside an
    already linked component of more than ``big`` texts are not scored
    (:func:`~ctxkit.deduplication.linking.link_pairs`). Each step runs inside
    ``stage(name)``: ``"estimates"``, ``"exact scorer build"``, ``"linking with exact
    scores"``."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    margin = verify_margin(threshold, sig.shape[1])
    with stage("estimates"):
        # estimates at or below threshold - margin are rejected without a second look
        at, scores = _estimates_at_least(sig, pairs, threshold - margin, strict=True)
    pairs = pairs[at]
    unsure = np.abs(scores - threshold) < margin
    exact = None
    with stage("exact scorer build"):
        if keep_scorer or unsure.any():
            scored = pairs if keep_scorer else pairs[unsure]
            exact = _ExactJaccard(texts, scored.ravel(), scored, **options)
    with stage("linking with exact scores"):
        linked, linked_scores = link_pairs(len(sig), pairs, scores, threshold, margin, exact,
                                           big=len(sig) if big is None else big)
    return linked, linked_scores, exact


def verify_pairs_exact(
    sig: np.ndarray,
    pairs: np.ndarray,
    threshold: float,
    texts: Sequence[str] | dict[int, str],
    **options: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs whose *exact* Jaccard is >= ``threshold``: (pairs, scores).

    Only pairs whose estimate lies within :func:`verify_margin` of the threshold are
    recomputed exactly (most candidates are far from it); the others keep their estimate.
    ``options`` are the shingling options of :func:`exact_pair_jaccard`.
    """
    pairs, scores, _ = _verify_exact(sig, pairs, threshold, texts, options)
    return pairs, scores
