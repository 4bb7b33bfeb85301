"""Redundancy elimination: exact, MinHash and semantic dedup, for texts and chat messages.

Example:
    >>> from ctxkit.dedup import dedup
    >>> dedup(["a cat sat on the mat", "A cat sat on the mat.", "dogs bark"],
    ...       method=["exact", "minhash"]).keep.tolist()
    [0, 2]
"""

from __future__ import annotations

import sys
import types
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


class _CallableModule(types.ModuleType):
    """``ctxkit.dedup`` is both this package and the function ``dedup``: once a submodule
    such as ``ctxkit.dedup.minhash`` is imported, ``ctxkit.dedup`` names the package, so the
    package forwards calls to the function and ``ctxkit.dedup(texts)`` always works."""

    def __call__(self, *args: Any, **kwargs: Any) -> DedupResult:
        return dedup(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule


def __getattr__(name: str) -> Any:
    # dedup_messages lives in its own module; load it on first use.
    if name in ("dedup_messages", "MessageDedup"):
        from ctxkit.dedup import messages

        return getattr(messages, name)
    raise AttributeError(f"module 'ctxkit.dedup' has no attribute {name!r}")
