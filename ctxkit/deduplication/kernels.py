"""Compiled inner loops of MinHash dedup (numba), each equal to a numpy reference path.

numpy computes a MinHash signature as whole-array passes: every shingle times every
permutation into a buffer, then a per-text minimum over it. That buffer makes three
trips through memory per shingle and permutation; :func:`min_affine` keeps a text's running
minima in one row and reads each shingle once, about eight times faster on one core.
:func:`count_equal` (signature matches of candidate pairs) and :func:`intersection_sizes`
(shared values of two sorted runs, the exact Jaccard's rare shingles) replace gathers into
temporaries and a binary search per value; :func:`crowded_rows` (LSH keys that may share a
bucket) counts in a table of bytes where ``np.bincount`` counts in 8-byte integers, a table
eight times smaller, which stays in cache at sizes where numpy's falls out of it. numba
compiles them on first use (about half a second; kept on disk after that where a cache
directory is writable).

Where numba cannot be imported, ``NUMBA`` is False and callers keep their numpy path;
``CTXKIT_NO_NUMBA=1`` forces that path (the tests compare the two).

Example (the same loop runs as plain Python where numba is missing):
    >>> import numpy as np
    >>> loop = min_affine if NUMBA else _min_affine
    >>> out = np.empty((1, 2), dtype=np.uint32)
    >>> hv, a, b = (np.array(x, dtype=np.uint32) for x in ([3, 5], [1, 3], [0, 1]))
    >>> loop(hv, np.array([0, 2]), a, b, np.uint64(0xFFFFFFFF), out)
    >>> out.tolist()  # min(3, 5) and min(3 * 3 + 1, 3 * 5 + 1)
    [[3, 10]]
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["NUMBA", "count_equal", "crowded_rows", "intersection_sizes", "min_affine"]

try:  # pragma: no branch - which side runs depends on the install
    if os.environ.get("CTXKIT_NO_NUMBA"):
        raise ImportError("CTXKIT_NO_NUMBA is set")
    import numba
except ImportError:
    numba = None

NUMBA = numba is not None


def _min_affine(hv, offsets, a, b, mask, out):  # pragma: no cover - compiled by numba
    """``out[d, k] = min over i in text d of (a[k] * hv[i] + b[k]) & mask``; a text without
    values keeps ``mask`` (datasketch's empty signature)."""
    perms = a.shape[0]
    for d in range(offsets.shape[0] - 1):
        row = out[d]
        for k in range(perms):
            row[k] = mask
        for i in range(offsets[d], offsets[d + 1]):
            h = hv[i]
            for k in range(perms):
                # uint32 operands multiply in 64 bits without overflow; the mask is the
                # modulus of the scheme (2**32, or 2**64 where the product wraps anyway)
                v = (a[k] * h + b[k]) & mask
                if v < row[k]:
                    row[k] = v


def _count_equal(sig, pairs, out):  # pragma: no cover - compiled by numba
    """``out[i]`` = the number of equal entries of signature rows ``pairs[i]``."""
    perms = sig.shape[1]
    for i in range(pairs.shape[0]):
        x = sig[pairs[i, 0]]
        y = sig[pairs[i, 1]]
        same = 0
        for k in range(perms):
            same += x[k] == y[k]
        out[i] = same


def _intersection_sizes(keys, offsets, pairs, out):  # pragma: no cover - compiled by numba
    """``out[i]`` = how many values the sorted runs ``keys[offsets[p]:offsets[p + 1]]`` of the
    two texts ``p`` of ``pairs[i]`` share, comparing the low 32 bits (a merge of two runs,
    each sorted by value)."""
    low = np.uint64(0xFFFFFFFF)
    for i in range(pairs.shape[0]):
        x, x_end = offsets[pairs[i, 0]], offsets[pairs[i, 0] + 1]
        y, y_end = offsets[pairs[i, 1]], offsets[pairs[i, 1] + 1]
        same = 0
        while x < x_end and y < y_end:
            u = keys[x] & low
            v = keys[y] & low
            same += u == v
            x += u <= v
            y += v <= u
        out[i] = same


def _crowded_rows(keys, shift, counts, out):  # pragma: no cover - compiled by numba
    """Write to ``out`` the positions ``i`` whose slot ``keys[i] >> shift`` holds another key
    too, in ascending order, and return how many. ``counts`` (uint8, one per slot) must be
    zero and is left zero, so one table serves call after call; counts stop at 2."""
    n = keys.shape[0]
    for i in range(n):
        s = keys[i] >> shift
        if counts[s] < 2:
            counts[s] += 1
    k = 0
    for i in range(n):
        if counts[keys[i] >> shift] > 1:
            out[k] = i
            k += 1
    for i in range(n):
        counts[keys[i] >> shift] = 0
    return k


def _compiled(fn):
    try:
        return numba.njit(cache=True, nogil=True, boundscheck=False)(fn)
    except RuntimeError:  # no writable cache directory (a read-only install): compile per process
        return numba.njit(nogil=True, boundscheck=False)(fn)


if NUMBA:
    min_affine = _compiled(_min_affine)
    count_equal = _compiled(_count_equal)
    intersection_sizes = _compiled(_intersection_sizes)
    crowded_rows = _compiled(_crowded_rows)
else:
    min_affine = count_equal = intersection_sizes = crowded_rows = None
