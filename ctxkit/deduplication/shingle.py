"""Vectorized shingling: many texts to 64-bit shingle hashes in a few numpy passes.

Shingling, not hashing, is what limits MinHash throughput in Python (a per-document list of
substring objects costs far more than the permutations). Here a batch of texts becomes one
array of Unicode code points, and every character n-gram (or word n-gram) is hashed at once
with a polynomial hash modulo 2**64 followed by the 64-bit MurmurHash3 finalizer:

    h(s) = fmix64(sum_k s[k] * P**(len(s) - 1 - k))    (arithmetic mod 2**64)

A word n-gram hashes the word hashes the same way with a second multiplier. A text shorter
than one shingle (fewer than ``n`` characters or words, but not empty) is one shingle of
itself, so one-word texts still match each other; an empty text has no shingles.

:func:`shingle_hash` computes the same value for one shingle in plain Python, so a datasketch
``MinHash(hashfunc=...)`` can be fed ctxkit's shingles (see ``ctxkit.deduplication.minhash``).

Example:
    >>> h, offsets = shingle_hashes(["abcdef", "abcdefg", ""], n=5)
    >>> offsets.tolist()
    [0, 2, 5, 5]
    >>> int(h[0]) == shingle_hash("abcde")
    True
    >>> h[:2].tolist() == h[2:4].tolist()
    True
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from ctxkit.options import bad_option

__all__ = ["UNITS", "fmix64", "shingle_hash", "shingle_hashes", "shingles"]

UNITS = ("char", "word")
_M64 = (1 << 64) - 1
_P_CHAR = np.uint64(0x100000001B3)  # FNV-1a 64-bit prime: odd, so it has an inverse mod 2**64
_P_WORD = np.uint64(0x9E3779B97F4A7C15)  # golden-ratio constant, odd
_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


def fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, an avalanching bijection (new array, uint64)."""
    h = h ^ (h >> _S33)
    h *= _C1
    h ^= h >> _S33
    h *= _C2
    h ^= h >> _S33
    return h


def _fmix64_int(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _M64
    return h ^ (h >> 33)


def _poly_int(values: Sequence[int], p: int) -> int:
    h = 0
    for v in values:
        h = (h * p + v) & _M64
    return h


def _word_hash_int(word: str) -> int:
    return _fmix64_int(_poly_int([ord(c) for c in word], int(_P_CHAR)))


def shingle_hash(shingle: str | Sequence[str]) -> int:
    """The 64-bit hash :func:`shingle_hashes` gives one shingle, in plain Python.

    A character shingle is a string; a word shingle is a sequence of words (a tuple).

    Example:
        >>> hashes, _ = shingle_hashes(["hello world"], n=2, unit="word")
        >>> shingle_hash(("hello", "world")) == int(hashes[0])
        True
    """
    if isinstance(shingle, str):
        return _fmix64_int(_poly_int([ord(c) for c in shingle], int(_P_CHAR)))
    return _fmix64_int(_poly_int([_word_hash_int(w) for w in shingle], int(_P_WORD)))


def shingles(text: str, n: int = 5, unit: str = "char") -> list:
    """The shingles of one (already normalized) text, in order, as Python objects.

    The slow reference for :func:`shingle_hashes`: character shingles are strings, word
    shingles are tuples of words.

    Example:
        >>> shingles("abcdef", n=5)
        ['abcde', 'bcdef']
        >>> shingles("a b c", n=2, unit="word")
        [('a', 'b'), ('b', 'c')]
    """
    _check(n, unit)
    if unit == "char":
        if not text:
            return []
        return [text] if len(text) < n else [text[i : i + n] for i in range(len(text) - n + 1)]
    words = text.split()
    if not words:
        return []
    if len(words) < n:
        return [tuple(words)]
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def _check(n: int, unit: str) -> None:
    if unit not in UNITS:
        raise bad_option("unit", f" must be one of {UNITS}, got {unit!r}")
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise bad_option("ngram", f": the shingle size must be a positive integer, got {n!r}")


def _codepoints(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """All texts as one uint32 code-point array, and each text's start offset (n + 1 entries)."""
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # utf-32 keeps one array element per Python character (surrogates included) on every platform.
    cps = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return cps, offsets


def _segment_poly(
    values: np.ndarray, starts: np.ndarray, ends: np.ndarray, p: np.uint64
) -> np.ndarray:
    """Polynomial hash of each segment values[starts[i]:ends[i]] (non-empty), mod 2**64.

    With P odd, P has an inverse mod 2**64, so the hash of a segment is a difference of
    prefix sums of values * P**-j, scaled by P**(end-1): no Python loop over segments.
    """
    m = len(values)
    with np.errstate(over="ignore"):
        pinv = np.uint64(pow(int(p), -1, 1 << 64))
        inv_pow = np.empty(m, dtype=np.uint64)
        inv_pow[0] = 1
        if m > 1:
            inv_pow[1:] = pinv
            np.multiply.accumulate(inv_pow, out=inv_pow)
        prefix = np.zeros(m + 1, dtype=np.uint64)
        np.cumsum(values.astype(np.uint64) * inv_pow, out=prefix[1:])
        # P**(end-1) = 1 / P**-(end-1): recompute directly from inv_pow's inverse is costly, so
        # build forward powers only at the needed exponents by repeated squaring in numpy.
        fwd = _pow_u64(p, ends - 1)
        return (prefix[ends] - prefix[starts]) * fwd


def _pow_u64(base: np.uint64, exps: np.ndarray) -> np.ndarray:
    """base ** exps mod 2**64, elementwise, by square-and-multiply over the exponent bits."""
    exps = exps.astype(np.uint64)
    result = np.ones(len(exps), dtype=np.uint64)
    b = np.full(len(exps), base, dtype=np.uint64)
    with np.errstate(over="ignore"):
        while True:
            odd = (exps & np.uint64(1)).astype(bool)
            result[odd] *= b[odd]
            exps = exps >> np.uint64(1)
            if not exps.any():
                break
            b *= b
    return result


def _ngrams(
    values: np.ndarray, offsets: np.ndarray, n: int, p: np.uint64, block: int = 1 << 15
) -> tuple[np.ndarray, np.ndarray]:
    """Hash every n-gram of `values` inside each segment; shorter non-empty segments give one."""
    lengths = np.diff(offsets)
    counts = np.where(lengths >= n, lengths - n + 1, np.minimum(lengths, 1))
    out_offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(counts, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), dtype=np.uint64)
    if len(out) == 0:
        return out, out_offsets
    m = len(values)
    full = lengths >= n
    short = (lengths < n) & (lengths > 0)
    any_short = bool(short.any())
    if m >= n and full.any():
        # Segments are contiguous in `values`: a window is valid when it starts and ends in
        # the same segment, and valid windows come out in segment order.
        seg_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        valid = seg_of[: m - n + 1] == seg_of[n - 1 :]
        windows = np.empty(int(np.count_nonzero(valid)), np.uint64) if any_short else out
        filled = 0
        with np.errstate(over="ignore"):
            # Horner over the n positions of every window (wraparound is the modulo), then
            # the finalizer, one cache-sized block of windows at a time: whole-array passes
            # would stream every intermediate through memory n + 5 times
            for w0 in range(0, m - n + 1, block):
                w1 = min(w0 + block, m - n + 1)
                h = values[w0:w1].astype(np.uint64)
                for k in range(1, n):
                    h *= p
                    h += values[w0 + k : w1 + k]
                keep = fmix64(h)[valid[w0:w1]]
                windows[filled : filled + len(keep)] = keep
                filled += len(keep)
        if any_short:
            out[np.repeat(full, counts)] = windows
    if any_short:
        out[out_offsets[:-1][short]] = fmix64(
            _segment_poly(values, offsets[:-1][short], offsets[1:][short], p))
    return out, out_offsets


def shingle_hashes(
    texts: Sequence[str], n: int = 5, unit: str = "char"
) -> tuple[np.ndarray, np.ndarray]:
    """64-bit hashes of every shingle of every text, flat, with per-text offsets.

    Returns ``(hashes, offsets)``: text ``i`` owns ``hashes[offsets[i]:offsets[i + 1]]``
    (in text order, repeats kept). Texts should already be normalized.

    Example:
        >>> h, off = shingle_hashes(["one two three", "one"], n=2, unit="word")
        >>> off.tolist()
        [0, 2, 3]
    """
    _check(n, unit)
    cps, offsets = _codepoints(texts)
    if unit == "char":
        return _ngrams(cps, offsets, n, _P_CHAR)
    # Words: runs of non-whitespace. Found with one regex pass over the joined text.
    w_start, w_end, w_offsets = _word_spans(cps, offsets)
    if len(w_start):
        word_h = fmix64(_segment_poly(cps, w_start, w_end, _P_CHAR))
    else:
        word_h = np.empty(0, dtype=np.uint64)
    return _ngrams(word_h, w_offsets, n, _P_WORD)


@functools.cache
def _space_table() -> np.ndarray:
    """Code points below 0x3001 that ``str.split()`` treats as whitespace (none above)."""
    return np.array([c for c in range(0x3001) if chr(c).isspace()], dtype=np.uint32)


def _word_spans(cps: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start/end positions of every word (run of non-whitespace, as ``str.split``), per text."""
    space = np.isin(cps, _space_table()) if len(cps) else np.zeros(0, dtype=bool)
    # A boundary also sits at every text start, so a word never spans two texts.
    edge = np.zeros(len(cps) + 1, dtype=bool)
    edge[offsets] = True
    word = ~space
    prev_word = np.concatenate([[False], word[:-1]]) & ~edge[:-1]
    next_word = np.concatenate([word[1:], [False]]) & ~edge[1:]
    w_start = np.flatnonzero(word & ~prev_word)
    w_end = np.flatnonzero(word & ~next_word) + 1
    doc = np.searchsorted(offsets, w_start, side="right") - 1
    w_offsets = np.zeros(len(offsets), dtype=np.int64)
    np.cumsum(np.bincount(doc, minlength=len(offsets) - 1), out=w_offsets[1:])
    return w_start, w_end, w_offsets
