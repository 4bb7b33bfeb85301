"""MinHash signatures: shingle hashing, datasketch's permutations, batched minima.

MinHash (Broder, "On the resemblance and containment of documents", 1997) estimates the
Jaccard similarity of two shingle sets as the fraction of equal signature entries.

Permutations follow datasketch 2.x exactly (scheme ``"affine32"``, its default, or
``"affine64"``): each shingle hash ``h`` is pre-mixed with the MurmurHash3 finalizer and
permutation ``k`` is ``a_k * h + b_k mod 2**w`` with ``(a, b)`` drawn from
``np.random.RandomState(seed)`` the way datasketch draws them. So a ctxkit signature *is* a
datasketch signature of the same shingle hashes (:mod:`ctxkit.deduplication.interop`), and
with ``hashfunc="sha1"`` the rows equal datasketch's default ``MinHash`` of the UTF-8
shingles bit for bit.

Example:
    >>> sig = signatures(["The quick brown fox", "the quick brown fox!"], num_perm=128, seed=1)
    >>> sig.shape, sig.dtype
    ((2, 128), dtype('uint32'))
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

import numpy as np

from ctxkit.deduplication import kernels
from ctxkit.deduplication.normalize import Normalization, codepoints_to_texts, normalized_codepoints
from ctxkit.deduplication.shingle import (
    _P_CHAR,
    _P_WORD,
    _check,
    _ngrams,
    _segment_poly,
    _word_spans,
    fmix64,
    shingles,
)
from ctxkit.errors import InputError
from ctxkit.options import bad_option

__all__ = [
    "HASHFUNCS",
    "SCHEMES",
    "empty_rows",
    "hash_values",
    "permutations",
    "signatures",
    "signatures_from_hashes",
]

HASHFUNCS = ("fast", "sha1")


SCHEMES = {"affine32": (np.uint32, 32), "affine64": (np.uint64, 64)}


_FMIX32 = (
    np.uint32(16),
    np.uint32(0x85EBCA6B),
    np.uint32(13),
    np.uint32(0xC2B2AE35),
    np.uint32(16),
)


def _scheme(scheme: str) -> tuple[type, int]:
    if scheme not in SCHEMES:
        raise bad_option("scheme", f" must be one of {tuple(SCHEMES)}, got {scheme!r}")
    return SCHEMES[scheme]


def _check_num_perm(num_perm: int) -> None:
    if not isinstance(num_perm, (int, np.integer)) or num_perm < 1:
        raise bad_option("num_perm", f" must be a positive integer, got {num_perm!r}")


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
        raise bad_option("hashfunc", f" must be one of {HASHFUNCS}, got {hashfunc!r}")
    cps, offsets = normalized_codepoints(texts, normalization)
    if hashfunc == "sha1":
        return _sha1_values(codepoints_to_texts(cps, offsets), ngram, unit, width)
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
        raise InputError("offsets must ascend from 0 to len(values)")
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
    texts' lengths, memory the allocator hands back batch after batch; temporaries of ten
    megabytes and more are fresh pages from the kernel each time, a cost that grows with
    the corpus (``python -m evals.dedup_stages``, "signatures"). Short texts still come
    thousands to a batch, so the fixed cost of a batch stays small per text.

    Example:
        >>> s = signatures(["abc", "abc", ""], num_perm=8)
        >>> bool((s[0] == s[1]).all()), bool((s[2] == 2**32 - 1).all())
        (True, True)
    """
    _check_num_perm(num_perm)
    dtype, _ = _scheme(scheme)
    if batch_size < 1 or batch_chars < 1:
        raise bad_option("batch_size" if batch_size < 1 else "batch_chars", " must be positive")
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

    Only rows whose first entry is the maximum are compared whole: comparing the whole
    matrix at once would need a temporary a quarter of its size, fresh memory every call.

    Example:
        >>> empty_rows(np.array([[7, 2**32 - 1], [2**32 - 1] * 2], dtype=np.uint32)).tolist()
        [False, True]
    """
    top = np.iinfo(sig.dtype).max
    empty = sig[:, 0] == top if sig.shape[1] else np.ones(len(sig), dtype=bool)
    maybe = np.flatnonzero(empty)
    empty[maybe] = (sig[maybe] == top).all(axis=1)
    return empty
