"""Redundancy elimination: exact, MinHash and semantic dedup, for texts and chat messages.

Example:
    >>> from ctxkit.dedup import dedup
    >>> dedup(["a cat sat on the mat", "A cat sat on the mat.", "dogs bark"],
    ...       method=["exact", "minhash"]).keep.tolist()
    [0, 2]
"""

from __future__ import annotations

from typing import Any

from ctxkit.dedup.pipeline import DEFAULT_THRESHOLDS, METHODS, dedup
from ctxkit.dedup.result import DedupResult

__all__ = [
    "DEFAULT_THRESHOLDS",
    "METHODS",
    "DedupResult",
    "MessageDedup",
    "dedup",
    "dedup_messages",
]


def __getattr__(name: str) -> Any:
    # dedup_messages lives in its own module; load it on first use.
    if name in ("dedup_messages", "MessageDedup"):
        from ctxkit.dedup import messages

        return getattr(messages, name)
    raise AttributeError(f"module 'ctxkit.dedup' has no attribute {name!r}")
