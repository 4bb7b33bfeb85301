"""LSH banding: band keys of signatures, and the candidate pairs that share a bucket.

Banding (Indyk & Motwani 1998; Leskovec, Rajaraman & Ullman, *Mining of Massive Datasets*,
ch. 3) cuts each signature into ``bands`` bands of ``rows`` entries; two texts that agree on
a whole band share its bucket and become a candidate pair. A small bucket yields all its
pairs, a large one a star around one hub, so the work stays linear on templated corpora.

Example:
    >>> keys = np.array([[1, 5], [1, 6], [2, 6], [3, 7]], dtype=np.uint64)
    >>> candidate_pairs(keys).tolist()
    [[0, 1], [1, 2]]
"""

from __future__ import annotations

import numpy as np

from ctxkit.deduplication import kernels
from ctxkit.deduplication.arrays import _unique
from ctxkit.deduplication.shingle import fmix64
from ctxkit.deduplication.signatures import _check_num_perm
from ctxkit.errors import InputError
from ctxkit.options import bad_option

__all__ = [
    "DEFAULT_MAX_BUCKET",
    "band_keys",
    "candidate_pairs",
    "candidate_probability",
    "choose_bands",
]

# LSH buckets above this size yield a star around a hub instead of all their pairs.
DEFAULT_MAX_BUCKET = 32


_BAND_P = np.uint64(0x100000001B3)


def candidate_probability(
    similarity: float | np.ndarray, bands: int, rows: int
) -> float | np.ndarray:
    """P(a pair with Jaccard ``similarity`` shares at least one band): 1 - (1 - s**r)**b."""
    return 1.0 - (1.0 - np.asarray(similarity, dtype=np.float64) ** rows) ** bands


def choose_bands(
    threshold: float, num_perm: int = 128, min_recall: float = 0.995
) -> tuple[int, int]:
    """Bands x rows for recall: the most rows per band that still catch a pair at the threshold.

    Verification removes false candidates cheaply, but a pair LSH never proposes is lost for
    good, so this picks the largest ``rows`` (fewest false candidates) for which a pair whose
    Jaccard equals ``threshold`` becomes a candidate with probability >= ``min_recall``
    (pairs above the threshold are caught more often still), with ``bands = num_perm // rows``.

    Example:
        >>> choose_bands(0.5), choose_bands(0.7), choose_bands(0.8)
        ((42, 3), (32, 4), (21, 6))
    """
    if not 0.0 < threshold <= 1.0:
        raise bad_option("threshold", f" must be in (0, 1], got {threshold!r}")
    if not 0.0 < min_recall < 1.0:
        raise bad_option("min_recall", f" must be in (0, 1), got {min_recall!r}")
    _check_num_perm(num_perm)
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if candidate_probability(threshold, bands, rows) >= min_recall:
            best = (bands, rows)
    return best


def band_keys(sig: np.ndarray, bands: int, rows: int, block: int = 4096) -> np.ndarray:
    """One 64-bit key per (text, band): a hash of the band's ``rows`` signature entries.

    Two texts share a bucket in band ``k`` when ``keys[i, k] == keys[j, k]`` (a false match
    of 64-bit keys is about 2**-64 per pair, negligible next to LSH's own false candidates).
    """
    sig = np.asarray(sig)
    if bands * rows > sig.shape[1]:
        raise bad_option("bands", f" * rows = {bands * rows} exceeds num_perm = {sig.shape[1]}")
    if bands < 1 or rows < 1:
        raise bad_option("bands" if bands < 1 else "rows", " must be positive")
    # column-major: candidate generation reads one band at a time, and a band's keys lying
    # contiguous make that read a copy instead of a strided gather through every row
    out = np.empty((bands, len(sig)), dtype=np.uint64).T
    # blocks of rows keep every temporary cache-sized and reused: a whole-corpus temporary
    # is a fresh, page-faulted allocation each time, a cost that grows with the corpus
    with np.errstate(over="ignore"):
        for s in range(0, len(sig), block):
            key = sig[s : s + block, 0 : bands * rows : rows].astype(np.uint64)
            for r in range(1, rows):
                key *= _BAND_P
                key += sig[s : s + block, r : bands * rows : rows]
            out[s : s + block] = fmix64(key)
    return out


def _shared_buckets(
    col: np.ndarray, counts: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The buckets of ``col`` (uint64 band keys) holding two or more rows: positions into
    ``col`` grouped by key (``order``), and each bucket's ``(start, size)`` in ``order``.

    Linear where a sort is not: the keys are uniform hashes, so a counting pass over a table
    of about ``4 n`` slots (their top bits) clears most rows as alone in their slot, and only
    the rest (true buckets and about a fifth of the rows by chance) is sorted. With numba the
    table is bytes, ``counts`` (zero, at least ``1 << _slot_bits(n)`` long) when the caller
    reuses one across bands.

    Example:
        >>> order, starts, sizes = _shared_buckets(np.array([7, 3, 7, 9, 7], dtype=np.uint64) << 60)
        >>> order[starts[0] : starts[0] + sizes[0]].tolist(), sizes.tolist()
        ([0, 2, 4], [3])
    """
    bits = _slot_bits(len(col))
    size, shift = 1 << bits, np.uint64(64 - bits)
    if kernels.NUMBA:
        if counts is None or len(counts) < size:
            counts = np.zeros(size, dtype=np.uint8)
        crowded = np.empty(len(col), dtype=np.int64)
        crowded = crowded[: kernels.crowded_rows(col, shift, counts, crowded)]
    else:
        slot = (col >> shift).astype(np.intp)
        crowded = np.flatnonzero(np.bincount(slot, minlength=size)[slot] > 1)
    # the order inside a bucket is irrelevant: pairs and hubs depend on ids only
    order = crowded[np.argsort(col[crowded])]
    sorted_keys = col[order]
    boundary = np.ones(len(order) + 1, dtype=bool)
    boundary[1:-1] = sorted_keys[1:] != sorted_keys[:-1]
    starts = np.flatnonzero(boundary[:-1])
    sizes = np.diff(np.flatnonzero(boundary))
    multi = sizes > 1
    return order, starts[multi], sizes[multi]


def _slot_bits(n: int) -> int:
    """Bits of a key that name its slot in :func:`_shared_buckets`' counting table for ``n``
    keys (its top bits): ``1 << bits`` slots, about ``4 n`` and at least 256."""
    return max(8, (n - 1).bit_length() + 2)


def _bucket_members(order: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Positions into ``order`` of every member of the buckets ``[start, start + size)``."""
    first = np.cumsum(sizes) - sizes
    return np.repeat(starts, sizes) + (np.arange(sizes.sum()) - np.repeat(first, sizes))


def _hub_priority(ids: np.ndarray, band: int) -> np.ndarray:
    """A pseudo-random, reproducible priority of each text in one band (its hub draw)."""
    with np.errstate(over="ignore"):
        mixed = (ids.astype(np.uint64) + np.uint64(band) * _BAND_P) * np.uint64(0x9E3779B97F4A7C15)
    return fmix64(mixed)


def _group_codes(
    order: np.ndarray, starts: np.ndarray, sizes: np.ndarray, max_bucket: int, band: int
) -> np.ndarray:
    """Candidate pairs of each bucket (members ``order[start:start+size]``, global ids) as codes
    ``lo << 32 | hi`` (shifts, unlike ``lo * n + hi``, decode without a division).

    A bucket of at most ``max_bucket`` members yields all its pairs. A larger one (a shared
    template, boilerplate) yields only a star: every member paired with the bucket's *hub*,
    the member with the smallest :func:`_hub_priority` in this band. So no text gets more than
    ``(max_bucket - 1) / 2`` pairs per band on average and candidates grow linearly with the
    corpus; union-find over the verified edges closes the clusters. The hub is drawn afresh
    per band, so a text that fails against one hub meets others in its other bands (see
    ``docs/dedup.md`` for what this costs in recall).
    """
    out = []
    small = sizes <= max_bucket
    if small.any():
        st, sz = starts[small], sizes[small]
        # Each member pairs with every member after it in its bucket.
        pos = _bucket_members(order, st, sz)
        after = np.repeat(st + sz, sz) - pos - 1
        left = np.repeat(pos, after)
        base = np.cumsum(after) - after
        right = left + 1 + (np.arange(after.sum()) - np.repeat(base, after))
        a, b = order[left], order[right]
        out.append((np.minimum(a, b) << 32) | np.maximum(a, b))
    if (~small).any():
        st, sz = starts[~small], sizes[~small]
        members = order[_bucket_members(order, st, sz)]
        bucket = np.repeat(np.arange(len(st)), sz)
        first = np.cumsum(sz) - sz
        hub = members[np.lexsort((members, _hub_priority(members, band), bucket))[first]]
        hub = np.repeat(hub, sz)
        spoke = members != hub
        a, b = members[spoke], hub[spoke]
        out.append((np.minimum(a, b) << 32) | np.maximum(a, b))
    if not out:
        return np.empty(0, dtype=np.int64)
    return np.concatenate(out)


def candidate_pairs(
    keys: np.ndarray,
    skip: np.ndarray | None = None,
    max_bucket: int = DEFAULT_MAX_BUCKET,
    *,
    ids: np.ndarray | None = None,
    first_band: int = 0,
) -> np.ndarray:
    """Candidate pairs ``(i, j)``, ``i < j``, sharing a bucket in any band; sorted, unique.

    ``keys`` is ``[n, bands]`` from :func:`band_keys`; rows where ``skip`` is True (e.g.
    :func:`empty_rows`) never become candidates. Buckets of more than ``max_bucket``
    members yield a star around a hub instead of all their pairs (see :func:`_group_codes`),
    which keeps the candidates linear in ``n`` however large the buckets grow. ``ids`` names
    the rows (default ``0..n-1``; the pairs are given in ids, which must be below 2**32) and
    ``first_band`` the band of column 0: a caller that holds one band's buckets, like the
    distributed stage, passes both to get exactly the single-machine pairs.

    Example:
        >>> keys = np.array([[1, 5], [1, 6], [2, 6], [3, 7]], dtype=np.uint64)
        >>> candidate_pairs(keys).tolist()
        [[0, 1], [1, 2]]
    """
    keys = np.asarray(keys)
    n = len(keys)
    if max_bucket < 2:
        raise bad_option("max_bucket", f" must be at least 2, got {max_bucket!r}")
    if ids is None:
        ids = np.arange(n, dtype=np.int64)
    else:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) != n:
            raise InputError("ids must name every row of keys")
    if n and (ids.min() < 0 or ids.max() >= 1 << 32):
        raise InputError("ids: candidate_pairs handles row ids in [0, 2**32)")
    live = None if skip is None else ~np.asarray(skip, dtype=bool)
    if live is not None and live.all():
        live = None
    if live is not None:
        ids = ids[live]
    codes = []
    # one counting table for every band (each band leaves it zero), so no band asks the
    # kernel for fresh memory
    counts = np.zeros(1 << _slot_bits(len(ids)), dtype=np.uint8) if kernels.NUMBA else None
    # one band at a time: a column (copied contiguous) is the only temporary the size of n
    for band in range(keys.shape[1] if keys.ndim == 2 else 0):
        col = keys[:, band] if live is None else keys[live, band]
        order, starts, sizes = _shared_buckets(np.ascontiguousarray(col, dtype=np.uint64),
                                               counts)
        if len(starts):
            codes.append(_group_codes(ids[order], starts, sizes, max_bucket, band + first_band))
    if not codes:
        return np.empty((0, 2), dtype=np.int64)
    code = _unique(np.concatenate(codes))
    pairs = np.empty((len(code), 2), dtype=np.int64)
    np.right_shift(code, 32, out=pairs[:, 0])
    np.bitwise_and(code, 0xFFFFFFFF, out=pairs[:, 1])
    return pairs
