"""MinHash near-duplicate detection: vectorized signatures, LSH banding, verification.

MinHash (Broder, "On the resemblance and containment of documents", 1997) estimates the
Jaccard similarity of two shingle sets as the fraction of equal signature entries. LSH
banding (Indyk & Motwani 1998; Leskovec, Rajaraman & Ullman, *Mining of Massive Datasets*,
ch. 3) proposes candidate pairs (all pairs of a small bucket, a star around one hub in a
large one, so the work stays linear on templated corpora); candidates are verified by their
estimated or exact Jaccard and clusters are the connected components of the verified pairs.
Design notes and measurements: ``docs/dedup.md``.

Permutations follow datasketch 2.x exactly (scheme ``"affine32"``, its default, or
``"affine64"``): each shingle hash ``h`` is pre-mixed with the MurmurHash3 finalizer and
permutation ``k`` is ``a_k * h + b_k mod 2**w`` with ``(a, b)`` drawn from
``np.random.RandomState(seed)`` the way datasketch draws them. So a ctxkit signature *is* a
datasketch signature of the same shingle hashes: :func:`to_datasketch` wraps rows as
``LeanMinHash`` objects for an existing ``MinHashLSH``, and with ``hashfunc="sha1"`` the
rows equal datasketch's default ``MinHash`` of the UTF-8 shingles bit for bit.

To query an index a datasketch user already has (built from ``MinHash()`` with the
default SHA1 hash over raw character shingles), hash the same way and wrap the rows::

    raw = Normalization(nfkc=False, case=False, whitespace=False)
    sig = signatures(texts, hashfunc="sha1", normalization=raw)
    hits = [existing_lsh.query(m) for m in to_datasketch(sig, seed=1)]

The building blocks are plain functions on numpy arrays, so they run unchanged inside a
Ray ``map_batches`` (and give identical results for the same seed):
:func:`signatures` -> :func:`band_keys` -> :func:`candidate_pairs` -> :func:`verify_pairs`
(or :func:`verify_pairs_exact`, or the rounds of
:func:`ctxkit.deduplication.linking.link_pairs`) ->
:func:`ctxkit.deduplication.unionfind.connected_components` ->
:func:`ctxkit.deduplication.unionfind.representatives`.

Example:
    >>> texts = ["The quick brown fox jumps over the lazy dog.",
    ...          "the quick brown fox jumped over the lazy dog!", "Something else entirely."]
    >>> sig = signatures(texts, num_perm=128, seed=1)
    >>> sig.shape, sig.dtype
    ((3, 128), dtype('uint32'))
    >>> minhash_dedup(texts, threshold=0.5).duplicate_of.tolist()
    [-1, 0, -1]
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxkit.deduplication import kernels
from ctxkit.deduplication.linking import link_pairs
from ctxkit.deduplication.normalize import Normalization, codepoints_to_texts, normalized_codepoints
from ctxkit.deduplication.options import (
    DEFAULT_MAX_BUCKET,
    DEFAULT_THRESHOLD,
    HASHFUNCS,
    MinHashOptions,
)
from ctxkit.deduplication.result import DedupResult, result_from_representatives
from ctxkit.deduplication.shingle import (
    _P_CHAR,
    _P_WORD,
    _ngrams,
    _segment_poly,
    _word_spans,
    fmix64,
    shingle_hash,
    shingles,
)
from ctxkit.deduplication.unionfind import connected_components, keep_priority, representatives

__all__ = [
    "DEFAULT_MAX_BUCKET",
    "DEFAULT_THRESHOLD",
    "SCHEMES",
    "band_keys",
    "candidate_pairs",
    "candidate_probability",
    "choose_bands",
    "datasketch_hashfunc",
    "empty_rows",
    "estimate_jaccard",
    "from_datasketch",
    "hash_values",
    "match_upper_bounds",
    "minhash_dedup",
    "pair_jaccard",
    "permutations",
    "shingle_sets",
    "signatures",
    "signatures_from_hashes",
    "to_datasketch",
    "verify_pairs",
]

SCHEMES = {"affine32": (np.uint32, 32), "affine64": (np.uint64, 64)}
_FMIX32 = (
    np.uint32(16),
    np.uint32(0x85EBCA6B),
    np.uint32(13),
    np.uint32(0xC2B2AE35),
    np.uint32(16),
)
_BAND_P = np.uint64(0x100000001B3)


def _scheme(scheme: str) -> tuple[type, int]:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {tuple(SCHEMES)}, got {scheme!r}")
    return SCHEMES[scheme]


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


def _check_num_perm(num_perm: int) -> None:
    if not isinstance(num_perm, (int, np.integer)) or num_perm < 1:
        raise ValueError(f"num_perm must be a positive integer, got {num_perm!r}")


@functools.lru_cache(maxsize=32)
def permutations(
    num_perm: int = 128, seed: int = 1, scheme: str = "affine32"
) -> tuple[np.ndarray, np.ndarray]:
    """The ``(a, b)`` permutation parameters datasketch's ``MinHash(num_perm, seed, scheme)`` uses.

    Example:
        >>> a, b = permutations(4, seed=1)
        >>> bool((a % 2 == 1).all())
        True
    """
    _check_num_perm(num_perm)
    dtype, width = _scheme(scheme)
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << (width - 1), num_perm, dtype=dtype) * dtype(2) + dtype(1)
    b = gen.randint(0, 1 << width, num_perm, dtype=dtype)
    a.flags.writeable = False
    b.flags.writeable = False
    return a, b


def _fmix(hv: np.ndarray, width: int) -> np.ndarray:
    if width == 64:
        return fmix64(hv)
    s1, m1, s2, m2, s3 = _FMIX32
    hv = hv ^ (hv >> s1)
    hv *= m1
    hv ^= hv >> s2
    hv *= m2
    hv ^= hv >> s3
    return hv


def _sha1_values(
    texts: Sequence[str], ngram: int, unit: str, width: int
) -> tuple[np.ndarray, np.ndarray]:
    dtype = np.uint32 if width == 32 else np.uint64
    size = width // 8
    fmt = "<u4" if width == 32 else "<u8"
    values, offsets = [], [0]
    for text in texts:
        grams = shingles(text, ngram, unit)
        if unit == "word":
            grams = [" ".join(g) for g in grams]
        raw = b"".join(
            hashlib.sha1(g.encode("utf-8", "surrogatepass")).digest()[:size] for g in grams
        )
        values.append(np.frombuffer(raw, dtype=fmt).astype(dtype))
        offsets.append(offsets[-1] + len(grams))
    flat = np.concatenate(values) if values else np.empty(0, dtype=dtype)
    return flat, np.asarray(offsets, dtype=np.int64)


def hash_values(
    texts: Sequence[str],
    ngram: int = 5,
    unit: str = "char",
    normalization: Normalization | None = None,
    hashfunc: str = "fast",
    scheme: str = "affine32",
) -> tuple[np.ndarray, np.ndarray]:
    """Per-shingle hash values of every text, as datasketch's ``hashfunc`` would return them.

    ``hashfunc="fast"`` is the vectorized 64-bit polynomial hash of
    :mod:`ctxkit.deduplication.shingle` (its top 32 bits for ``affine32``); ``"sha1"`` is
    datasketch's default ``sha1_hash32``/``sha1_hash64`` of each UTF-8 shingle (a word
    shingle is its words joined by one space), a Python loop kept for compatibility.

    Returns ``(values, offsets)``; text ``i`` owns ``values[offsets[i]:offsets[i + 1]]``.
    """
    _, width = _scheme(scheme)
    if hashfunc not in HASHFUNCS:
        raise ValueError(f"hashfunc must be one of {HASHFUNCS}, got {hashfunc!r}")
    cps, offsets = normalized_codepoints(texts, normalization)
    if hashfunc == "sha1":
        return _sha1_values(codepoints_to_texts(cps, offsets), ngram, unit, width)
    from ctxkit.deduplication.shingle import _check

    _check(ngram, unit)
    if unit == "char":
        h, off = _ngrams(cps, offsets, ngram, _P_CHAR)
    else:
        w_start, w_end, w_off = _word_spans(cps, offsets)
        word_h = (
            fmix64(_segment_poly(cps, w_start, w_end, _P_CHAR))
            if len(w_start)
            else np.empty(0, np.uint64)
        )
        h, off = _ngrams(word_h, w_off, ngram, _P_WORD)
    if width == 32:
        h = (h >> np.uint64(32)).astype(np.uint32)
    return h, off


def signatures_from_hashes(
    values: np.ndarray,
    offsets: np.ndarray,
    num_perm: int = 128,
    seed: int = 1,
    scheme: str = "affine32",
    chunk: int | None = None,
) -> np.ndarray:
    """MinHash signatures ``[n_texts, num_perm]`` from flat per-shingle hash values.

    Equal to ``datasketch.MinHash(num_perm, seed, scheme=scheme, hashfunc=lambda v: v)``
    updated with each text's values. A text with no values gets datasketch's empty
    signature (every entry the maximum). With numba (:mod:`ctxkit.deduplication.kernels`) a
    compiled loop keeps each text's minima in registers; without it all texts are processed
    together in shingle chunks of ``[num_perm, chunk]`` (a few MB, cache-sized),
    minimum-reduced per text with ``np.minimum.reduceat``, with no per-text Python loop.
    Both give the same signatures.
    """
    dtype, width = _scheme(scheme)
    a, b = permutations(num_perm, seed, scheme)
    values = np.ascontiguousarray(values, dtype=dtype)
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    if n < 0 or offsets[0] != 0 or offsets[-1] != len(values) or (np.diff(offsets) < 0).any():
        raise ValueError("offsets must ascend from 0 to len(values)")
    hv = _fmix(values, width)  # a new array: the finalizer's first step is not in place
    if kernels.NUMBA:
        out = np.empty((n, num_perm), dtype=dtype)
        kernels.min_affine(hv, offsets, a, b, np.uint64((1 << width) - 1), out)
        return out
    sig = np.full((num_perm, n), np.iinfo(dtype).max, dtype=dtype)
    total = len(values)
    if total == 0 or n == 0:
        return np.ascontiguousarray(sig.T)
    chunk = chunk or max(1024, (1 << 20) // num_perm)
    buf = np.empty((num_perm, min(chunk, total)), dtype=dtype)
    a_col, b_col = a[:, None], b[:, None]
    with np.errstate(over="ignore"):
        for s0 in range(0, total, chunk):
            s1 = min(total, s0 + chunk)
            block = buf[:, : s1 - s0]
            np.multiply(a_col, hv[None, s0:s1], out=block)
            block += b_col
            # Texts overlapping this chunk, each with its first position inside the chunk.
            d0 = int(np.searchsorted(offsets, s0, side="right")) - 1
            d1 = int(np.searchsorted(offsets, s1, side="left"))
            starts = np.clip(offsets[d0:d1], s0, s1) - s0
            docs = np.arange(d0, d1)
            # Empty texts share their start with the next text: only the last of a run owns it.
            last = np.ones(len(starts), dtype=bool)
            last[:-1] = starts[1:] != starts[:-1]
            last &= starts < s1 - s0
            starts, docs = starts[last], docs[last]
            mins = np.minimum.reduceat(block, starts, axis=1)
            sig[:, docs] = np.minimum(sig[:, docs], mins)
    return np.ascontiguousarray(sig.T)


def signatures(
    texts: Sequence[str],
    num_perm: int = 128,
    seed: int = 1,
    ngram: int = 5,
    unit: str = "char",
    normalization: Normalization | None = None,
    hashfunc: str = "fast",
    scheme: str = "affine32",
    batch_size: int = 4096,
    batch_chars: int = 1 << 17,
) -> np.ndarray:
    """MinHash signatures of raw texts, ``[len(texts), num_perm]`` (uint32 for ``affine32``).

    Texts are normalized (see :class:`~ctxkit.deduplication.normalize.Normalization`), shingled into
    ``ngram``-grams of ``unit`` (``"char"`` or ``"word"``) and hashed, all vectorized, in
    batches of at most ``batch_size`` texts and ``batch_chars`` characters (a longer text is
    a batch of its own). Deterministic for a given ``seed``; the batching never changes the
    result. Batches cut by characters keep every temporary to about a megabyte whatever the
    texts' lengths, which the allocator hands back batch after batch: batches of 4,096
    ordinary documents made temporaries of over ten megabytes, fresh pages from the kernel
    each time, and that kernel time grew with the corpus. Short texts still come thousands
    to a batch, so the fixed cost of a batch (about 0.15 ms) stays small per text.

    Example:
        >>> s = signatures(["abc", "abc", ""], num_perm=8)
        >>> bool((s[0] == s[1]).all()), bool((s[2] == 2**32 - 1).all())
        (True, True)
    """
    _check_num_perm(num_perm)
    dtype, _ = _scheme(scheme)
    if batch_size < 1 or batch_chars < 1:
        raise ValueError("batch_size and batch_chars must be positive")
    out = np.empty((len(texts), num_perm), dtype=dtype)
    for start, stop in _batches([len(t) for t in texts], batch_size, batch_chars):
        batch = texts[start:stop]
        values, offsets = hash_values(batch, ngram, unit, normalization, hashfunc, scheme)
        out[start:stop] = signatures_from_hashes(values, offsets, num_perm, seed, scheme)
    return out


def _batches(lengths: Sequence[int], max_items: int, max_total: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` ranges covering ``lengths``, each of at most ``max_items``
    items whose lengths sum to at most ``max_total`` (an item longer than that alone).

    Example:
        >>> _batches([3, 3, 3, 10, 1], max_items=4, max_total=6)
        [(0, 2), (2, 3), (3, 4), (4, 5)]
    """
    ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
    out, start = [], 0
    while start < len(ends):
        before = int(ends[start - 1]) if start else 0
        stop = int(np.searchsorted(ends, before + max_total, side="right"))
        stop = min(max(stop, start + 1), start + max_items)
        out.append((start, stop))
        start = stop
    return out


def empty_rows(sig: np.ndarray) -> np.ndarray:
    """True for signatures of texts without shingles (every entry the dtype maximum).

    Only rows whose first entry is the maximum are compared whole: a comparison of the whole
    matrix at once was a temporary a quarter of its size, fresh memory on every call.

    Example:
        >>> empty_rows(np.array([[7, 2**32 - 1], [2**32 - 1] * 2], dtype=np.uint32)).tolist()
        [False, True]
    """
    top = np.iinfo(sig.dtype).max
    empty = sig[:, 0] == top if sig.shape[1] else np.ones(len(sig), dtype=bool)
    maybe = np.flatnonzero(empty)
    empty[maybe] = (sig[maybe] == top).all(axis=1)
    return empty


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
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    if not 0.0 < min_recall < 1.0:
        raise ValueError("min_recall must be in (0, 1)")
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
        raise ValueError(f"bands * rows = {bands * rows} exceeds num_perm = {sig.shape[1]}")
    if bands < 1 or rows < 1:
        raise ValueError("bands and rows must be positive")
    # column-major: candidate generation reads one band at a time, and a band's keys lying
    # contiguous make that read a copy instead of a strided gather through every row
    out = np.empty((bands, len(sig)), dtype=np.uint64).T
    # blocks of rows keep every temporary cache-sized and reused: whole-corpus temporaries
    # cost a fresh, page-faulted allocation each, which made this step grow with the corpus
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
        raise ValueError(f"max_bucket must be at least 2, got {max_bucket!r}")
    if ids is None:
        ids = np.arange(n, dtype=np.int64)
    else:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) != n:
            raise ValueError("ids must name every row of keys")
    if n and (ids.min() < 0 or ids.max() >= 1 << 32):
        raise ValueError("candidate_pairs handles row ids in [0, 2**32)")
    live = None if skip is None else ~np.asarray(skip, dtype=bool)
    if live is not None and live.all():
        live = None
    if live is not None:
        ids = ids[live]
    codes = []
    # one counting table for every band (it is left zero): a fresh one per band was fresh
    # memory from the kernel each time
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


def _checked_pairs(pairs: np.ndarray, n: int) -> np.ndarray:
    """``pairs`` as a contiguous ``(m, 2)`` int64 array of row numbers below ``n`` (the compiled
    loops do not check bounds, so bad rows are refused here)."""
    pairs = np.ascontiguousarray(np.asarray(pairs, dtype=np.int64).reshape(-1, 2))
    if len(pairs) and (int(pairs.min()) < 0 or int(pairs.max()) >= n):
        raise IndexError(f"pair rows must lie in [0, {n})")
    return pairs


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


def shingle_sets(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each text's distinct shingle values in one sorted key array, for :func:`pair_jaccard`.

    Keys are ``text << 32 | value`` (values folded to 32 bits), so every text's set is a
    sorted run and a membership test for any (text, value) is one ``searchsorted``.
    Returns ``(keys, set_offsets)``.
    """
    values = np.asarray(values)
    if values.dtype == np.uint64:
        values = (values >> np.uint64(32)).astype(np.uint32)
    n = len(offsets) - 1
    if n >= 1 << 32:
        raise ValueError("shingle_sets handles fewer than 2**32 texts per call")
    doc = np.repeat(np.arange(n, dtype=np.uint64), np.diff(offsets))
    keys = _unique_keys((doc << np.uint64(32)) | values.astype(np.uint64))
    set_offsets = np.searchsorted(keys, np.arange(n + 1, dtype=np.uint64) << np.uint64(32))
    return keys, set_offsets.astype(np.int64)


def pair_jaccard(
    keys: np.ndarray, set_offsets: np.ndarray, pairs: np.ndarray, chunk: int = 1 << 18
) -> np.ndarray:
    """Exact Jaccard of each pair's shingle sets (from :func:`shingle_sets`), vectorized.

    The smaller set of each pair is looked up in the larger one with one ``searchsorted``
    over all pairs at once. Two empty sets have Jaccard 1.

    Example:
        >>> v, off = hash_values(["abcdef", "abcdeg", ""], scheme="affine32")
        >>> keys, so = shingle_sets(v, off)
        >>> pair_jaccard(keys, so, np.array([[0, 1], [0, 2], [2, 2]])).round(3).tolist()
        [0.333, 0.0, 1.0]
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    sizes = np.diff(set_offsets)
    inter = _intersections(keys, set_offsets, pairs, chunk)
    return _jaccard(inter, sizes[pairs[:, 0]] + sizes[pairs[:, 1]])


def _jaccard(inter: np.ndarray, size_sum: np.ndarray) -> np.ndarray:
    union = size_sum - inter
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def _intersections(
    keys: np.ndarray, set_offsets: np.ndarray, pairs: np.ndarray, chunk: int = 1 << 18
) -> np.ndarray:
    """``|A & B|`` for each pair of :func:`shingle_sets` sets: the smaller set of each pair is
    looked up in the larger one, in chunks of about ``chunk`` lookups."""
    if kernels.NUMBA:
        inter = np.empty(len(pairs), dtype=np.int64)
        kernels.intersection_sizes(keys, set_offsets, _checked_pairs(pairs, len(set_offsets) - 1),
                                   inter)
        return inter
    sizes = np.diff(set_offsets)
    a, b = pairs[:, 0], pairs[:, 1]
    swap = sizes[a] > sizes[b]
    small, large = np.where(swap, b, a), np.where(swap, a, b)
    inter = np.zeros(len(pairs), dtype=np.int64)
    if len(keys) == 0:
        return inter
    # pairs in order of the larger set make the lookups ascending, so the binary searches
    # walk ``keys`` front to back through the cache instead of jumping across all of it
    by_large = np.lexsort((small, large))
    small, large = small[by_large], large[by_large]
    counts = sizes[small]
    # Chunks of pairs whose query elements total about `chunk`.
    bounds = np.searchsorted(
        np.cumsum(counts), np.arange(chunk, counts.sum() + chunk, chunk), side="right"
    )
    lo = 0
    low32 = np.uint64(0xFFFFFFFF)
    for hi in np.unique(np.concatenate([bounds, [len(pairs)]])):
        if hi <= lo:
            continue
        c = counts[lo:hi]
        pid = np.repeat(np.arange(lo, hi), c)
        pos = np.repeat(set_offsets[small[lo:hi]], c) + (
            np.arange(c.sum()) - np.repeat(np.cumsum(c) - c, c)
        )
        query = (large[pid].astype(np.uint64) << np.uint64(32)) | (keys[pos] & low32)
        # the larger sets of these pairs are one stretch of ``keys`` (pairs come in order of
        # their larger set): searching that stretch alone keeps the search in cache however
        # large the corpus grows
        hay = keys[set_offsets[large[lo]] : set_offsets[large[hi - 1] + 1]]
        if len(hay) == 0:
            lo = hi
            continue
        found = np.searchsorted(hay, query)
        hit = hay[np.minimum(found, len(hay) - 1)] == query
        inter[by_large[lo:hi]] = np.bincount(pid[hit] - lo, minlength=hi - lo)
        lo = hi
    return inter


def verify_margin(threshold: float, num_perm: int, sigmas: float = 4.5) -> float:
    """How far from the threshold an estimate must be to be trusted without the exact Jaccard.

    ``sigmas`` standard deviations of the estimator (``sqrt(t (1 - t) / num_perm)``) plus one
    permutation's step: beyond that an estimate falls on the wrong side of the threshold
    with probability below 1e-5 (for the default 4.5).
    """
    return sigmas * math.sqrt(threshold * (1 - threshold) / num_perm) + 1.0 / num_perm


def exact_pair_jaccard(
    texts: Sequence[str] | dict[int, str],
    pairs: np.ndarray,
    ngram: int = 5,
    unit: str = "char",
    normalization: Normalization | None = None,
    hashfunc: str = "fast",
    scheme: str = "affine32",
) -> np.ndarray:
    """Exact Jaccard of each pair's shingle sets, hashing only the texts the pairs involve.

    ``texts`` may be a sequence or a mapping from index to text (e.g. the texts of one batch
    of pairs in a distributed run).
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return _ExactJaccard(texts, pairs.ravel(), pairs, ngram=ngram, unit=unit,
                         normalization=normalization, hashfunc=hashfunc, scheme=scheme)(pairs)


class _ExactJaccard:
    """Exact pair Jaccard over a fixed set of texts, each hashed once however many calls ask.

    Shingles shared by many of the texts (a template's, or a language's commonest 5-grams)
    are kept as one bit each in a small per-text bitmap, so their part of an intersection is
    an AND and a popcount over a few machine words; only the rarer shingles are looked up
    one by one. On templated records that is most of every set (``docs/dedup.md``).

    Given the ``pairs`` it will score, the scorer picks the bitmap's shingles per connected
    component of those pairs (each component of at least ``group_min`` texts on its own, the
    small ones pooled): a bitmap of a few thousand shingles then covers each template
    family, however many families a corpus holds. One choice for all texts covered fewer
    of each family's shingles the more families a corpus held, so the time per pair grew
    with the corpus. Any pair is exact, also across components (a slower path).
    """

    bitmap_bytes = 64 << 20  # memory for the frequent-shingle bitmaps, all texts together
    group_min = 64  # texts a component needs to get frequent shingles of its own

    def __init__(
        self, texts: Sequence[str] | dict[int, str], ids: np.ndarray,
        pairs: np.ndarray | None = None, **options: Any,
    ):
        """``options`` are :func:`hash_values`' shingling options; ``pairs`` (in ids), when
        given, the pairs to be scored, whose components choose the frequent shingles."""
        self.ids = _distinct_ids(np.asarray(ids, dtype=np.int64))
        n = len(self.ids)
        # where ids are dense (the texts of a corpus's pairs), a table finds an id's position
        # (later its row) in one lookup; a binary search per pair end cost more than the
        # exact scores
        table = None
        if n and _dense(int(self.ids[-1]), n):
            table = np.full(int(self.ids[-1]) + 1, -1, dtype=np.int64)
            table[self.ids] = np.arange(n)
        group = np.zeros(n, dtype=np.int64)  # 0: the pool of small components
        component = np.arange(n)
        if pairs is not None and n:
            pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
            local = table[pairs] if table is not None else np.searchsorted(self.ids, pairs)
            labels = connected_components(n, local)
            big = np.bincount(labels, minlength=n)[labels] >= self.group_min
            group[big] = labels[big] + 1
            component = labels
        # rows are laid out group by group, each group's texts hashed together with its own
        # frequent shingles; inside a group, component by component (then by id), so the two
        # texts of a pair have rows close together
        order = np.lexsort((np.arange(n), component, group))
        self.row = np.empty(n, dtype=np.int64)  # row of the text at each position of ``ids``
        self.row[order] = np.arange(n)
        self._row_of = table  # an id's row, where the table exists
        if table is not None:
            table[self.ids] = self.row
        self.group = group[order]

        # The texts are hashed again here, a block at a time, rather than kept from the
        # signature pass: only those in surviving pairs are needed (about a fifth of a
        # templated corpus), and keeping every text's hashes took more fresh memory than the
        # signatures themselves, which made the time per document grow with the corpus.
        def hashes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            values, offsets = hash_values([texts[i] for i in self.ids[order[rows]].tolist()],
                                          **options)
            return _fold32(values), offsets

        words = min(64, self.bitmap_bytes // (8 * max(n, 1)))
        self.bits = np.zeros((n, max(words, 1)), dtype=np.uint64)
        self.frequent: dict[int, np.ndarray] = {}
        # a direct-mapped table on the top 17 bits (the values are uniform hashes) finds each
        # frequent shingle's bit in two cache-resident lookups; a frequent value that
        # collides with a more frequent one is simply treated as rare. One table serves every
        # group in turn: only the slots a group set are cleared after it.
        table = np.full(1 << 17, -1, dtype=np.int32)
        # texts per hashing block, small for the same reason as :func:`signatures`' batches
        # (still a count of texts, not of characters as there)
        step = 256
        cuts = (np.flatnonzero(np.diff(self.group)) + 1).tolist()
        spans = list(zip([0, *cuts], [*cuts, n])) if n else []
        # First each group's frequent shingles: those of a spread-out sample of the group
        # stand for it (a template's shingles are in every sample, and any choice keeps the
        # result exact). The samples also size the key buffer.
        chosen = []
        reserve = 1024
        for g0, g1 in spans:
            size = g1 - g0
            k = min(size, 256 if self.group[g0] == 0 else max(16, min(256, size // 4)))
            sample = np.unique(np.linspace(g0, g1 - 1, k).astype(np.int64))
            values = hashes(sample)[0]
            # without bitmap words there is nothing to choose
            chosen.append(_frequent_values(values, words * 64) if words
                          else np.empty(0, dtype=np.uint32))
            # a group's rare keys are at most its shingles: the sample's per text, scaled
            reserve += int(1.25 * size * len(values) / len(sample))
        # Room reserved for every key, filled in place: pages past the last key are never
        # touched, while keys kept in parts and joined at the end were fresh memory twice.
        rare = np.empty(reserve, dtype=np.uint64)
        filled = 0
        # Blocks of texts keep every temporary cache-sized, and each block's rare keys sort on
        # their own (in pieces, :func:`_unique_keys`): blocks come in row order, so their
        # sorted runs laid end to end are one sorted array, and the work per text does not
        # grow with the corpus.
        for (g0, g1), frequent in zip(spans, chosen):
            home = None
            if len(frequent):
                self.frequent[int(self.group[g0])] = frequent
                home = (frequent >> np.uint32(15)).astype(np.int64)
                # the most frequent wins a shared slot
                table[home[::-1]] = np.arange(len(frequent), dtype=np.int32)[::-1]
            for d0 in range(g0, g1, step):
                d1 = min(d0 + step, g1)
                v, offsets = hashes(np.arange(d0, d1))
                doc = np.repeat(np.arange(d0, d1, dtype=np.uint64), np.diff(offsets))
                if home is not None:
                    slot = table[v >> np.uint32(15)]
                    common = (slot >= 0) & (frequent[np.maximum(slot, 0)] == v)
                    self._set_bits(d0, (doc[common] - np.uint64(d0)).astype(np.intp),
                                   slot[common])
                    doc, v = doc[~common], v[~common]
                part = _unique_keys((doc << np.uint64(32)) | v.astype(np.uint64))
                if filled + len(part) > len(rare):  # a sample that understated its group
                    grown = np.empty(max(2 * len(rare), filled + len(part)), dtype=np.uint64)
                    grown[:filled] = rare[:filled]
                    rare = grown
                rare[filled : filled + len(part)] = part
                filled += len(part)
            if home is not None:
                table[home] = -1
        rare = rare[:filled]
        rare_offsets = np.searchsorted(rare, np.arange(n + 1, dtype=np.uint64) << np.uint64(32))
        self.rare = (rare, rare_offsets.astype(np.int64))
        self.sizes = np.bitwise_count(self.bits).sum(axis=1, dtype=np.int64) + np.diff(
            self.rare[1])

    def _rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ids that are among ``self.ids``: one lookup where the ids are dense."""
        if self._row_of is not None:
            return self._row_of[ids]
        return self.row[np.searchsorted(self.ids, ids)]

    def _set_bits(self, d0: int, doc: np.ndarray, slot: np.ndarray, texts: int = 128) -> None:
        """Set bit ``slot`` of text ``d0 + doc`` for each (ascending) ``doc``: through a
        boolean block of ``texts`` texts at a time (an assignment, so a shingle repeated
        inside a text is harmless; the block stays cache-sized), then packed."""
        if len(doc) == 0:
            return
        width = self.bits.shape[1] * 64
        cuts = np.searchsorted(doc, np.arange(0, int(doc[-1]) + texts + 1, texts))
        for b in range(len(cuts) - 1):
            if cuts[b + 1] == cuts[b]:
                continue
            block = np.zeros((texts, width), dtype=bool)
            block[doc[cuts[b] : cuts[b + 1]] - b * texts, slot[cuts[b] : cuts[b + 1]]] = True
            rows = min(texts, len(self.bits) - d0 - b * texts)
            packed = np.packbits(block[:rows], axis=1, bitorder="little").view(np.uint64)
            self.bits[d0 + b * texts : d0 + b * texts + rows] = packed

    def __call__(self, pairs: np.ndarray, chunk: int | None = None) -> np.ndarray:
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        # scored in row order, results put back in the caller's: rows of a component lie
        # together, so each pair's sets are read near the previous pair's; in the callers'
        # order (most similar first) every read was a cache miss, more of them the larger
        # the corpus
        rows = self._rows(pairs)
        by = np.argsort(rows[:, 0])
        pairs = rows[by]
        inter = _intersections(*self.rare, pairs)
        # bitmap rows are copied about 2 MB at a time: a larger copy is fresh memory from the
        # kernel on every call (beyond malloc's reuse), which grew the time per pair with
        # the corpus
        chunk = chunk or max(1, (1 << 21) // (8 * self.bits.shape[1]))
        for s in range(0, len(pairs), chunk):
            p = pairs[s : s + chunk]
            both = np.take(self.bits, p[:, 0], axis=0) & np.take(self.bits, p[:, 1], axis=0)
            inter[s : s + chunk] += np.bitwise_count(both).sum(axis=1, dtype=np.int64)
        # bits mean different shingles in different groups: such pairs are counted anew
        for i in np.flatnonzero(self.group[pairs[:, 0]] != self.group[pairs[:, 1]]).tolist():
            a, b = pairs[i].tolist()
            inter[i] = len(np.intersect1d(self._set(a), self._set(b), assume_unique=True))
        out = np.empty(len(pairs), dtype=np.float64)
        out[by] = _jaccard(inter, self.sizes[pairs[:, 0]] + self.sizes[pairs[:, 1]])
        return out

    def _set(self, row: int) -> np.ndarray:
        """The shingle values of one row: its rare keys' values and its bits' shingles."""
        rare, offsets = self.rare
        own = (rare[offsets[row] : offsets[row + 1]] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        bits = np.flatnonzero(np.unpackbits(self.bits[row].view(np.uint8), bitorder="little"))
        if len(bits) == 0:
            return own
        return np.concatenate([own, self.frequent[int(self.group[row])][bits]])


def _fold32(values: np.ndarray) -> np.ndarray:
    """Shingle values as the 32-bit values sets are compared on (as :func:`shingle_sets`)."""
    if values.dtype == np.uint64:
        return (values >> np.uint64(32)).astype(np.uint32)
    return values


def _frequent_values(values: np.ndarray, k: int) -> np.ndarray:
    """The (at most) ``k`` values that occur most often, at least twice, most frequent first
    (ties by value, so the choice is deterministic)."""
    if k == 0 or len(values) == 0:
        return values[:0]
    v = np.sort(values)
    starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])
    counts = np.diff(np.r_[starts, len(v)])
    top = np.lexsort((v[starts], -counts))[:k]
    return v[starts[top[counts[top] >= 2]]]


def _verify_exact(
    sig: np.ndarray, pairs: np.ndarray, threshold: float,
    texts: Sequence[str] | dict[int, str], options: dict[str, Any], keep_scorer: bool = False,
    big: int | None = None,
) -> tuple[np.ndarray, np.ndarray, _ExactJaccard | None]:
    """:func:`verify_pairs_exact`; with ``keep_scorer`` it also returns the exact scorer, built
    over every text of a pair that survived the estimate (all future cluster members), so
    the caller's later exact similarities hash nothing again. With ``big``, pairs inside an
    already linked component of more than ``big`` texts are not scored
    (:func:`~ctxkit.deduplication.linking.link_pairs`)."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    margin = verify_margin(threshold, sig.shape[1])
    # estimates at or below threshold - margin are rejected without a second look
    at, scores = _estimates_at_least(sig, pairs, threshold - margin, strict=True)
    pairs = pairs[at]
    unsure = np.abs(scores - threshold) < margin
    exact = None
    if keep_scorer or unsure.any():
        scored = pairs if keep_scorer else pairs[unsure]
        exact = _ExactJaccard(texts, scored.ravel(), scored, **options)
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


def to_datasketch(sig: np.ndarray, seed: int = 1, scheme: str = "affine32") -> list:
    """Wrap signature rows as ``datasketch.LeanMinHash`` objects (for ``MinHashLSH`` etc.).

    Example:
        >>> lean = to_datasketch(signatures(["some text here"], num_perm=16), seed=1)
        >>> lean[0].scheme, len(lean[0])
        ('affine32', 16)
    """
    from datasketch import LeanMinHash

    dtype, _ = _scheme(scheme)
    return [
        LeanMinHash(seed=seed, hashvalues=row, scheme=scheme)
        for row in np.asarray(sig, dtype=dtype)
    ]


def from_datasketch(minhashes: Sequence[Any]) -> np.ndarray:
    """Stack datasketch ``MinHash``/``LeanMinHash`` hash values into a signature matrix."""
    if not minhashes:
        raise ValueError("no MinHash objects given")
    schemes = {getattr(m, "scheme", "legacy") for m in minhashes}
    if len(schemes) != 1 or schemes.pop() not in SCHEMES:
        raise ValueError("all MinHash objects must share one scheme, 'affine32' or 'affine64'")
    return np.stack([np.asarray(m.hashvalues) for m in minhashes])


def datasketch_hashfunc(scheme: str = "affine32"):
    """A ``hashfunc`` for ``datasketch.MinHash`` that reproduces ctxkit's fast shingle hash.

    Feed it the shingles of :func:`ctxkit.deduplication.shingle.shingles` (strings, or word tuples)
    of the *normalized* text and the datasketch signature equals :func:`signatures`' row.

    Example:
        >>> from datasketch import MinHash
        >>> from ctxkit.deduplication.shingle import shingles
        >>> m = MinHash(num_perm=32, seed=7, hashfunc=datasketch_hashfunc())
        >>> m.update_batch(shingles("hello world", 5))
        >>> bool((m.hashvalues == signatures(["Hello  World"], num_perm=32, seed=7)[0]).all())
        True
    """
    _, width = _scheme(scheme)
    if width == 32:
        return lambda shingle: shingle_hash(shingle) >> 32
    return shingle_hash


def _without_huge_pages(fn):
    """Run ``fn`` with numpy's transparent-huge-page advice off, as it was before afterwards.

    numpy advises the kernel to back every large new array with huge pages. Dedup's working
    arrays are large, short-lived and fresh on every call, and on the VMs measured the
    kernel's time to hand out huge pages grew with the corpus: in one process at 800k
    documents it took 5.8-6.9 us per document with the advice, 2.0-2.1 without, user time
    unchanged (``docs/dedup.md``). An explicit ``NUMPY_MADVISE_HUGEPAGE`` is left to rule.
    """
    setter = getattr(getattr(getattr(np, "_core", None), "multiarray", None),
                     "_set_madvise_hugepage", None)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if setter is None or "NUMPY_MADVISE_HUGEPAGE" in os.environ:
            return fn(*args, **kwargs)
        before = setter(False)
        try:
            return fn(*args, **kwargs)
        finally:
            setter(before)

    return run


@_without_huge_pages
def minhash_dedup(
    texts: Sequence[str],
    threshold: float | None = None,
    *,
    keep: str = "first",
    scores: Sequence[float] | None = None,
    sig: np.ndarray | None = None,
    options: MinHashOptions | None = None,
    **option_values: Any,
) -> DedupResult:
    """Near-duplicate removal by MinHash + LSH, every link verified by Jaccard similarity.

    The options are :class:`~ctxkit.deduplication.options.MinHashOptions`, given as one
    ``options`` object and/or as keywords (``threshold``, ``num_perm``, ``ngram``, ``unit``,
    ``seed``, ``bands``/``rows``, ``min_recall``, ``max_bucket``, ``normalization``,
    ``hashfunc``, ``scheme``, ``verify``, ``boilerplate``); the default threshold is 0.7
    Jaccard of character 5-grams.

    LSH buckets propose candidate pairs, all pairs of a small bucket and a star around a hub
    in a large one (:func:`candidate_pairs`), so the work grows linearly with the corpus even
    when a shared template fills buckets with thousands of records. Candidates are verified
    (``verify="exact"``, the default: the exact Jaccard of the two shingle sets, recomputed
    for pairs whose estimate lies near the threshold; ``"estimate"``: the fraction of equal
    signature entries, about +-0.04 at 128 permutations). Pairs at or above the threshold
    are linked; each connected component keeps one representative chosen by ``keep``
    (``"first"``, ``"last"``, ``"longest"``) or by the highest ``scores``. Texts with no
    shingles (empty after normalization) are never near-duplicates (the exact stage handles
    them). Pass precomputed ``sig`` (of the texts as shingled) to skip hashing. With
    ``boilerplate`` set, template lines shared by many records are left out first
    (:mod:`ctxkit.deduplication.boilerplate`). ``result.warnings`` says when one cluster
    swallowed a large share of the input.

    Example:
        >>> texts = ["a b c d e f g", "a b c d e f g h", "x y z"]
        >>> minhash_dedup(texts, threshold=0.7).keep.tolist()
        [0, 2]
    """
    opts = MinHashOptions.build(options, threshold=threshold, **option_values)
    extra: dict[str, Any] = {}
    if opts.boilerplate is not None:
        from ctxkit.deduplication.boilerplate import strip_boilerplate

        stripped = strip_boilerplate(texts, opts.boilerplate)
        texts = stripped.texts
        extra["boilerplate"] = stripped.summary()
    if sig is None:
        sig = signatures(texts, **opts.signing())
    elif len(sig) != len(texts):
        raise ValueError("sig must have one row per text")
    elif sig.shape[1] != opts.num_perm:
        opts = MinHashOptions.build(opts, num_perm=int(sig.shape[1]))
    bands, rows = opts.banding()
    keys = band_keys(sig, bands, rows)
    cand = candidate_pairs(keys, skip=empty_rows(sig), max_bucket=opts.max_bucket)
    if opts.verify == "estimate":
        pairs, pair_scores = verify_pairs(sig, cand, opts.threshold)
        similarity_of = functools.partial(estimate_jaccard, sig)
    else:
        # the scorer has hashed every cluster member, so the similarity of each removed text
        # to its representative hashes nothing again
        pairs, pair_scores, similarity_of = _verify_exact(
            sig, cand, opts.threshold, texts, opts.shingling(), keep_scorer=True,
            big=opts.max_bucket)
    labels = connected_components(len(texts), pairs)
    lengths = [len(t) for t in texts] if keep == "longest" and scores is None else None
    rep = representatives(labels, keep_priority(keep, len(texts), lengths=lengths, scores=scores))
    similarity = np.ones(len(texts))
    moved = np.flatnonzero(rep != np.arange(len(texts)))
    if len(moved):
        similarity[moved] = similarity_of(np.stack([moved, rep[moved]], axis=1))
    info = {
        "method": "minhash",
        "threshold": opts.threshold,
        "num_perm": opts.num_perm,
        "bands": int(bands),
        "rows": int(rows),
        "ngram": opts.ngram,
        "unit": opts.unit,
        "seed": opts.seed,
        "max_bucket": opts.max_bucket,
        "candidates": len(cand),
        "verified": len(pairs),
        "verify": opts.verify,
        **extra,
    }
    return result_from_representatives(rep, similarity, "minhash", pairs, pair_scores, info)


def exact_jaccard(
    a: str, b: str, ngram: int = 5, unit: str = "char", normalization: Normalization | None = None
) -> float:
    """The exact Jaccard similarity of two texts' shingle sets (a reference for tests and evals)."""
    va, vb = (
        set(hash_values([t], ngram, unit, normalization, scheme="affine64")[0].tolist())
        for t in (a, b)
    )
    if not va and not vb:
        return 1.0
    return len(va & vb) / len(va | vb)
