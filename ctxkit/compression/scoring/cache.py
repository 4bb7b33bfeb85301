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
from collections.abc import Callable, Hashable, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from ctxkit.options import bad_option

__all__ = ["DEFAULT_CACHE_SIZE", "TextCache"]

# entries a scorer's cache keeps by default: 50,000 MiniLM vectors are about 77 MB as float32
DEFAULT_CACHE_SIZE = 50_000


class TextCache:
    """Least-recently-used map from a key (a text, or a tuple of texts) to a computed value, at
    most ``max_entries`` keys (0 keeps nothing). Safe to share between threads.

    Vectors (:meth:`rows`) live in one matrix, a row per key, so reading the rows of thousands
    of known texts (a long chat history, every turn) is one lookup per key and one gather, not
    one stacked array per key; recency is a stamp per row, so a hit costs no reordering.
    """

    def __init__(self, max_entries: int = DEFAULT_CACHE_SIZE):
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
            raise bad_option("cache_size", f" must be an integer >= 0, got {max_entries!r}")
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self.clear()

    def __len__(self) -> int:
        return len(self._slot)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._slot: dict[Hashable, int] = {}  # key -> slot
            self._keys: list[Hashable] = []  # slot -> key (None when free)
            self._objs: list[Any] = []  # slot -> value, for values()
            self._matrix: np.ndarray | None = None  # slot -> row, for rows()
            self._stamp = np.zeros(0, dtype=np.int64)  # slot -> last use (_FREE when free)
            self._tick = 0
            self._free: list[int] = []

    def _slots(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Each key's slot (-1: not cached), the hits stamped as used now; under the lock."""
        slots = np.fromiter(map(self._slot.get, keys, repeat(-1)), np.int64, len(keys))
        hit = slots[slots >= 0]
        self._stamp[hit] = self._tick + np.arange(len(hit))
        self._tick += len(hit)
        return slots

    def _insert(self, keys: list[Hashable], values: Sequence[Any], rows: bool) -> None:
        """Store new keys' values (under the lock), then evict the least recent over the cap."""
        for key, value in zip(keys, values):
            slot = self._slot.get(key)
            if slot is None:
                slot = self._free.pop() if self._free else self._grow()
                self._slot[key], self._keys[slot] = slot, key
            if rows:
                self._row_store(value)[slot] = value
            else:
                self._objs[slot] = value
            self._stamp[slot] = self._tick
            self._tick += 1
        excess = len(self._slot) - self.max_entries
        if excess > 0:
            for slot in np.argpartition(self._stamp, excess - 1)[:excess].tolist():
                del self._slot[self._keys[slot]]
                self._keys[slot], self._objs[slot] = None, None
                self._stamp[slot] = _FREE
                self._free.append(slot)

    def _grow(self) -> int:
        slot = len(self._keys)
        self._keys.append(None)
        self._objs.append(None)
        if slot >= len(self._stamp):
            self._stamp = np.concatenate([self._stamp, np.full(max(16, slot), _FREE)])
        return slot

    def _row_store(self, row: np.ndarray) -> np.ndarray:
        row = np.asarray(row)
        m = self._matrix
        if m is None:
            m = self._matrix = np.zeros((len(self._stamp),) + row.shape, dtype=row.dtype)
        elif m.shape[1:] != row.shape:
            raise ValueError(f"a cache of {m.shape[1:]} rows was given a {row.shape} row")
        elif len(m) < len(self._stamp):
            m = self._matrix = np.concatenate([m, np.zeros((len(self._stamp) - len(m),) +
                                                           row.shape, dtype=m.dtype)])
        return m

    def values(self, keys: Sequence[Hashable], compute: Callable[[list[Any]], Sequence[Any]]
               ) -> list[Any]:
        """The value of each key; only keys not in the cache go to ``compute`` (once each, in
        first-seen order), which returns their values in that order."""
        keys = list(keys)
        with self._lock:  # the hits are read now: another thread may evict them meanwhile
            slots = self._slots(keys)
            hits = slots.tolist()
            out = list(map(self._objs.__getitem__, hits)) if (slots >= 0).all() else \
                [self._objs[s] if s >= 0 else None for s in hits]
        missing = list(dict.fromkeys(keys[i] for i in np.flatnonzero(slots < 0).tolist()))
        if missing:
            new = dict(zip(missing, compute(missing)))
            with self._lock:
                self._insert(missing, [new[k] for k in missing], rows=False)
            for i in np.flatnonzero(slots < 0).tolist():
                out[i] = new[keys[i]]
        return out

    def put(self, keys: Sequence[Hashable], values: Sequence[Any]) -> None:
        """Store ``values`` under ``keys`` (computed elsewhere: a restored session's vectors,
        stored as rows when they are equal-length vectors)."""
        values = list(values)
        rows = bool(values) and all(isinstance(v, np.ndarray) and v.ndim == 1 and
                                    v.shape == values[0].shape for v in values)
        with self._lock:
            self._insert(list(keys), values, rows=rows)

    def rows(self, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray],
             dim: int = 384) -> np.ndarray:
        """``[len(texts), dim]`` vectors: the cached rows gathered, the others from
        ``encode`` (once each)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, dim))
        with self._lock:
            slots = self._slots(texts)
            hit = slots >= 0
            known = self._matrix[slots[hit]] if hit.any() else None
        if known is not None and len(known) == len(texts):
            return known
        todo = np.flatnonzero(~hit)
        missing = list(dict.fromkeys(texts[i] for i in todo.tolist()))
        new = np.asarray(encode(missing)) if missing else None
        ref = known if known is not None else new
        out = np.empty((len(texts),) + ref.shape[1:], dtype=ref.dtype)
        if known is not None:
            out[hit] = known
        if missing:
            where = {t: k for k, t in enumerate(missing)}
            out[todo] = new[[where[texts[i]] for i in todo.tolist()]]
            with self._lock:
                self._insert(missing, list(new), rows=True)
        return out

    def dots(self, texts: Sequence[str], vector: np.ndarray,
             encode: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        """Each text's row (from ``encode`` once when not cached) times ``vector``: the rows
        are gathered a block at a time, so thousands of cached rows are read without one large
        temporary copy (which costs more than the product itself)."""
        texts = list(texts)
        if not texts:
            return np.zeros(0)
        with self._lock:
            slots = self._slots(texts)
        if (slots < 0).any():
            rows = self.rows(texts, encode)
            return rows @ np.asarray(vector, dtype=rows.dtype)
        with self._lock:
            m = self._matrix
            v = np.asarray(vector, dtype=m.dtype)
            return np.concatenate([m[slots[k:k + _BLOCK]] @ v
                                   for k in range(0, len(slots), _BLOCK)] or [np.zeros(0)])


_BLOCK = 1024  # rows gathered at a time by TextCache.dots (1.5 MB of 384-d float32)
_FREE = np.iinfo(np.int64).max  # the stamp of a free slot: never the least recent
