"""The one cache type of the scorers: a least-recently-used map from a text (or a
``(query, text)`` pair) to what a scorer computed for it.

Each model-backed scorer owns its caches (embeddings, word-piece vectors, reranker logits, LM
surprisal) with a size its caller sets (``cache_size``), so a history or a passage seen again is
not computed again. The scorer :func:`~ctxkit.compression.scoring.registry.get_scorer` returns
for a name is one per process, as ``tiktoken.get_encoding`` returns one encoding, so calls that
name a scorer share its caches.

Example:
    >>> import numpy as np
    >>> cache = TextCache(max_entries=2)
    >>> calls = []
    >>> def encode(texts):
    ...     calls.append(list(texts))
    ...     return np.ones((len(texts), 3))
    >>> cache.rows(["a", "b"], encode).shape, cache.rows(["b", "a"], encode).shape, calls
    ((2, 3), (2, 3), [['a', 'b']])
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from ctxkit.options import bad_option

__all__ = ["DEFAULT_CACHE_SIZE", "TextCache"]

# entries a scorer's cache keeps by default: 50,000 MiniLM vectors are about 77 MB as float32
DEFAULT_CACHE_SIZE = 50_000


class TextCache:
    """Least-recently-used map from a key (a text, or a tuple of texts) to a computed value, at
    most ``max_entries`` keys (0 keeps nothing). Safe to share between threads."""

    def __init__(self, max_entries: int = DEFAULT_CACHE_SIZE):
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
            raise bad_option("cache_size", f" must be an integer >= 0, got {max_entries!r}")
        self.max_entries = max_entries
        self._store: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._store)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._store.clear()

    def values(self, keys: Sequence[Hashable], compute: Callable[[list[Any]], Sequence[Any]]
               ) -> list[Any]:
        """The value of each key; only keys not in the cache go to ``compute`` (once each, in
        first-seen order), which returns their values in that order."""
        store = self._store
        with self._lock:  # the hits are read now: another thread may evict them meanwhile
            known = {k: store[k] for k in keys if k in store}
            for k in known:
                store.move_to_end(k)
        missing = list(dict.fromkeys(k for k in keys if k not in known))
        if missing:
            known.update(zip(missing, compute(missing)))
            with self._lock:
                store.update((k, known[k]) for k in missing)
                while len(store) > self.max_entries:
                    store.popitem(last=False)
        return [known[k] for k in keys]

    def put(self, keys: Sequence[Hashable], values: Sequence[Any]) -> None:
        """Store ``values`` under ``keys`` (computed elsewhere: a restored session's vectors)."""
        with self._lock:
            self._store.update(zip(keys, values))
            while len(self._store) > self.max_entries:
                self._store.popitem(last=False)

    def rows(self, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray],
             dim: int = 384) -> np.ndarray:
        """``[len(texts), dim]`` vectors stacked from :meth:`values`."""
        out = self.values(texts, encode)
        return np.stack(out) if out else np.zeros((0, dim))
