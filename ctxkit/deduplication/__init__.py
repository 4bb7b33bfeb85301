"""Redundancy elimination: exact, MinHash and semantic dedup, for texts and chat messages.

The public functions are re-exported by :mod:`ctxkit`.

Example:
    >>> from ctxkit.deduplication.pipeline import dedup
    >>> dedup(["a cat sat on the mat", "A cat sat on the mat.", "dogs bark"],
    ...       method=["exact", "minhash"]).keep.tolist()
    [0, 2]
"""
