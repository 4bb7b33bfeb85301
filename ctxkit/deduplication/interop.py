"""datasketch interop: ctxkit signatures as datasketch ``LeanMinHash`` objects and back.

A ctxkit signature is a datasketch signature of the same shingle hashes
(:mod:`ctxkit.deduplication.signatures`), so rows can query an index a datasketch user
already has. For one built from ``MinHash()`` with the default SHA1 hash over raw
character shingles, hash the same way and wrap the rows::

    raw = Normalization(nfkc=False, case=False, whitespace=False)
    sig = signatures(texts, hashfunc="sha1", normalization=raw)
    hits = [existing_lsh.query(m) for m in to_datasketch(sig, seed=1)]

datasketch is an optional dependency (``pip install 'ctxkit[datasketch]'``); only
:func:`to_datasketch` needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxkit.deduplication.shingle import shingle_hash
from ctxkit.deduplication.signatures import SCHEMES, _scheme
from ctxkit.errors import InputError

__all__ = ["datasketch_hashfunc", "from_datasketch", "to_datasketch"]

DATASKETCH_MISSING = ("to_datasketch needs datasketch, an optional dependency: "
                      "pip install 'ctxkit[datasketch]'")


def to_datasketch(sig: np.ndarray, seed: int = 1, scheme: str = "affine32") -> list:
    """Wrap signature rows as ``datasketch.LeanMinHash`` objects (for ``MinHashLSH`` etc.).

    Example:
        >>> from ctxkit.deduplication.signatures import signatures
        >>> lean = to_datasketch(signatures(["some text here"], num_perm=16), seed=1)
        >>> lean[0].scheme, len(lean[0])
        ('affine32', 16)
    """
    try:
        from datasketch import LeanMinHash
    except ImportError:
        raise ImportError(DATASKETCH_MISSING) from None

    dtype, _ = _scheme(scheme)
    return [
        LeanMinHash(seed=seed, hashvalues=row, scheme=scheme)
        for row in np.asarray(sig, dtype=dtype)
    ]


def from_datasketch(minhashes: Sequence[Any]) -> np.ndarray:
    """Stack datasketch ``MinHash``/``LeanMinHash`` hash values into a signature matrix."""
    if not minhashes:
        raise InputError("minhashes: no MinHash objects given")
    schemes = {getattr(m, "scheme", "legacy") for m in minhashes}
    if len(schemes) != 1 or schemes.pop() not in SCHEMES:
        raise InputError("minhashes: all MinHash objects must share one scheme, 'affine32' or "
                         "'affine64'")
    return np.stack([np.asarray(m.hashvalues) for m in minhashes])


def datasketch_hashfunc(scheme: str = "affine32"):
    """A ``hashfunc`` for ``datasketch.MinHash`` that reproduces ctxkit's fast shingle hash.

    Feed it the shingles of :func:`ctxkit.deduplication.shingle.shingles` (strings, or word tuples)
    of the *normalized* text and the datasketch signature equals
    :func:`~ctxkit.deduplication.signatures.signatures`' row.

    Example:
        >>> from datasketch import MinHash
        >>> from ctxkit.deduplication.shingle import shingles
        >>> from ctxkit.deduplication.signatures import signatures
        >>> m = MinHash(num_perm=32, seed=7, hashfunc=datasketch_hashfunc())
        >>> m.update_batch(shingles("hello world", 5))
        >>> bool((m.hashvalues == signatures(["Hello  World"], num_perm=32, seed=7)[0]).all())
        True
    """
    _, width = _scheme(scheme)
    if width == 32:
        return lambda shingle: shingle_hash(shingle) >> 32
    return shingle_hash
