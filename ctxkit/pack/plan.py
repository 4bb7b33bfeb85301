"""Packing plans: which input goes into which context window, computed on integer lengths only.

(First version: straightforward implementations; the fast count-based BFD, ``optimal`` and the
online packer replace these internals without changing the API.)
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

__all__ = ["PackPlan", "pack_lengths", "STRATEGIES", "OVERFLOW_POLICIES"]

STRATEGIES = ("bfd", "ffd", "wrapped", "greedy", "optimal")
OVERFLOW_POLICIES = ("error", "split", "truncate", "drop")


@dataclass
class PackPlan:
    """Where each input goes.

    ``bins[b]`` is an int64 array of input indices in window ``b``. For ``wrapped`` and for
    ``overflow="split"`` an input may occupy several windows; ``pieces`` then lists, per bin,
    ``(index, start, stop)`` token ranges (``None`` when every input is placed whole).
    """

    bins: list[np.ndarray]
    capacity: int
    total_tokens: int
    strategy: str
    lengths: np.ndarray = field(repr=False)
    pieces: list[list[tuple[int, int, int]]] | None = field(default=None, repr=False)
    split: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    truncated: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    dropped: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tokens_truncated: int = 0
    empty: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def segments(self) -> list[list[tuple[int, int, int]]]:
        """Per bin, the ``(input index, start, stop)`` token ranges it holds, in row order.

        This is what collation consumes: whole inputs are ``(i, 0, min(len, capacity))``;
        split and wrapped inputs appear as several ranges across bins.
        """
        if self.pieces is not None:
            return self.pieces
        return [
            [(int(i), 0, int(min(self.lengths[i], self.capacity))) for i in b] for b in self.bins
        ]

    @property
    def n_bins(self) -> int:
        return len(self.bins)

    @property
    def lower_bound(self) -> int:
        return -(-self.total_tokens // self.capacity)

    @property
    def utilization(self) -> float:
        return self.total_tokens / (self.n_bins * self.capacity) if self.bins else 0.0

    @property
    def padding_tokens(self) -> int:
        return self.n_bins * self.capacity - self.total_tokens


def _validate(lengths, capacity: int, strategy: str, overflow: str) -> np.ndarray:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {STRATEGIES}")
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"unknown overflow policy {overflow!r}; choose one of {OVERFLOW_POLICIES}")
    if not isinstance(capacity, (int, np.integer)) or capacity <= 0:
        raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise ValueError("lengths must be a 1-D sequence of integers")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError("lengths must be integers")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        raise ValueError(f"negative length at index {int(np.argmin(arr))}")
    return arr


def _best_fit(order: np.ndarray, lengths: np.ndarray, capacity: int) -> list[list[int]]:
    bins: list[list[int]] = []
    free: list[tuple[int, int]] = []  # sorted (remaining, bin id)
    for i in order:
        size = int(lengths[i])
        pos = bisect.bisect_left(free, (size, -1))
        if pos < len(free):
            remaining, b = free.pop(pos)
        else:
            remaining, b = capacity, len(bins)
            bins.append([])
        bins[b].append(int(i))
        if remaining - size > 0:
            bisect.insort(free, (remaining - size, b))
    return bins


def _first_fit(order: np.ndarray, lengths: np.ndarray, capacity: int) -> list[list[int]]:
    bins: list[list[int]] = []
    remaining: list[int] = []
    for i in order:
        size = int(lengths[i])
        for b, r in enumerate(remaining):
            if r >= size:
                bins[b].append(int(i))
                remaining[b] -= size
                break
        else:
            bins.append([int(i)])
            remaining.append(capacity - size)
    return bins


def _next_fit(order: np.ndarray, lengths: np.ndarray, capacity: int) -> list[list[int]]:
    bins: list[list[int]] = []
    used = capacity
    for i in order:
        size = int(lengths[i])
        if used + size > capacity:
            bins.append([])
            used = 0
        bins[-1].append(int(i))
        used += size
    return bins


def pack_lengths(
    lengths,
    capacity: int = 2048,
    strategy: str = "bfd",
    overflow: str = "error",
    seed: int | None = None,
) -> PackPlan:
    """Assign inputs of the given token lengths to windows of ``capacity`` tokens.

    Example:
        >>> plan = pack_lengths([3, 5, 2, 6], capacity=8)
        >>> plan.n_bins, plan.lower_bound
        (2, 2)
    """
    arr = _validate(lengths, capacity, strategy, overflow)
    over = np.flatnonzero(arr > capacity)
    if over.size and overflow == "error":
        raise ValueError(
            f"input {int(over[0])} has {int(arr[over[0]])} tokens, more than capacity {capacity}; "
            f"{over.size} input(s) are too long (use overflow='split', 'truncate' or 'drop')"
        )
    eff = arr.copy()
    dropped = truncated = np.zeros(0, np.int64)
    tokens_truncated = 0
    if over.size and overflow == "truncate":
        truncated, tokens_truncated = over, int((arr[over] - capacity).sum())
        eff[over] = capacity
    elif over.size and overflow == "drop":
        dropped = over
        eff[over] = 0
    # TODO(split): handled below with pieces
    empty = np.flatnonzero(arr == 0)  # nothing to place; reported, never packed
    active = np.setdiff1d(np.flatnonzero(eff > 0), dropped)
    if strategy in ("bfd", "ffd", "optimal"):
        order = active[np.argsort(-eff[active], kind="stable")]
        raw = (_first_fit if strategy == "ffd" else _best_fit)(order, eff, capacity)
    else:
        raw = _next_fit(active, eff, capacity)
    bins = [np.asarray(b, dtype=np.int64) for b in raw]
    if seed is not None:
        perm = np.random.default_rng(seed).permutation(len(bins))
        bins = [bins[p] for p in perm]
    return PackPlan(
        bins=bins, capacity=int(capacity), total_tokens=int(eff[active].sum()),
        strategy=strategy, lengths=arr, truncated=truncated, dropped=dropped,
        tokens_truncated=tokens_truncated, empty=empty,
    )
