"""A content-keyed LRU of unit embeddings, shared by every ``embedding`` scorer of a process.

``compress`` builds a fresh scorer per call, and a RAG pipeline sees the same passages again
and again: with the vectors keyed by text in one process-wide cache, a passage is embedded once
for as long as it stays among the ``max_entries`` most recently used texts.

Example:
    >>> import numpy as np
    >>> cache = EmbeddingCache(max_entries=2)
    >>> calls = []
    >>> def encode(texts):
    ...     calls.append(list(texts))
    ...     return np.ones((len(texts), 3))
    >>> cache.get(["a", "b"], encode).shape, cache.get(["b", "a"], encode).shape, calls
    ((2, 3), (2, 3), [['a', 'b']])
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["SHARED_CACHE", "EmbeddingCache"]


class EmbeddingCache:
    """Least-recently-used map from text to its embedding, at most ``max_entries`` texts
    (50,000 MiniLM vectors are about 77 MB as float32)."""

    def __init__(self, max_entries: int = 50_000):
        self.max_entries = int(max_entries)
        self._store: OrderedDict[str, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self._store)

    def clear(self) -> None:
        """Forget every vector."""
        self._store.clear()

    def get(self, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray],
            dim: int = 384) -> np.ndarray:
        """``[len(texts), dim]`` vectors; only texts not in the cache go to ``encode``."""
        store = self._store
        missing = list(dict.fromkeys(t for t in texts if t not in store))
        fresh = dict(zip(missing, encode(missing))) if missing else {}
        out = [fresh[t] if t in fresh else store[t] for t in texts]
        for t in texts:
            if t in store:
                store.move_to_end(t)
        store.update(fresh)
        while len(store) > self.max_entries:
            store.popitem(last=False)
        return np.stack(out) if out else np.zeros((0, dim))


SHARED_CACHE = EmbeddingCache()
