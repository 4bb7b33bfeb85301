"""Packing plans: which input goes into which context window, computed on integer lengths only.

A plan never touches tokens; collation (``ctxkit.packing.collate``) turns it into tensors. Lengths
are the *final* lengths (collation adds any separator before asking for a plan).

Strategies
----------
``bfd``
    Best-fit decreasing, exact and near-linear. Lengths are integers in ``1..capacity``, so the
    state of BFD is just how many open windows have each amount of free space. All items of one
    length are placed in one vectorised step: a window with ``r`` free tokens takes
    ``r // length`` of them (after the first it is still the best fit), windows are visited in
    increasing free space, and new windows are opened for what is left. This gives the same
    windows as item-by-item BFD (up to ties between windows with equal free space, which do not
    change the count), in ``O(distinct lengths x log capacity)`` numpy calls plus one Python
    step per free-space level emptied, instead of one Python step per item.
``ffd``
    First-fit decreasing, exact, with the same per-length batching over windows kept in blocks
    that remember their largest free space (blocks that cannot take a length are skipped).
``greedy``
    Next-fit in input order: keeps the data order, fills a window until the next input does not
    fit.
``wrapped``
    Concatenate every input in order and cut every ``capacity`` tokens, as pretraining does.
    Windows are full (except the last) and inputs are cut across windows: see ``pieces``.
``optimal``
    Cutting stock on the length histogram (:mod:`ctxkit.packing.optimal`): a sequential exact
    fill (the fullest window the remaining lengths allow, repeated as often as the counts
    permit), then, unless that already reaches ``ceil(total / capacity)``, Gilmore-Gomory
    column generation with HiGHS seeded by it, several roundings and BFD repair of leftovers.
    It starts from the BFD plan and returns the best plan found, so it is never worse than
    ``bfd``; its cost depends on the number of distinct lengths and the capacity, not on the
    number of inputs.

Plans are global: one plan over the lengths of the whole dataset, so only its last windows
can be partly filled (packing in blocks of 1,000, as TRL does, leaves partly filled windows at
the end of every block; ``docs/packing.md`` has the measurements). For data that does not fit
in memory, :mod:`ctxkit.packing.online` packs a stream with a bounded buffer.

Overflow (inputs longer than ``capacity``)
------------------------------------------
``error`` raises naming the first such input; ``split`` cuts it into ``capacity``-sized pieces
(the last one shorter) that are packed as separate items (``wrapped`` cuts every input across
windows by design, so there ``error`` and ``split`` both let long inputs span windows);
``truncate`` keeps the first ``capacity`` tokens; ``drop`` leaves it out. Split, truncated and
dropped inputs are listed on the plan; zero-length inputs are never placed and are listed in
``empty``. So every input token is either placed exactly once or reported.

Example:
    >>> plan = pack_lengths([3, 5, 2, 6, 12], capacity=8, overflow="split")
    >>> plan.n_bins, plan.lower_bound, plan.split.tolist()
    (4, 4, [4])
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.errors import InputError, SequenceTooLongError
from ctxkit.options import bad_option
from ctxkit.packing.binpack import bfd, ffd, next_fit
from ctxkit.packing.optimal import optimal_assign
from ctxkit.packing.options import OVERFLOW_POLICIES, STRATEGIES, check_capacity, check_choice

__all__ = [
    "MAX_PIECES",
    "OVERFLOW_POLICIES",
    "STRATEGIES",
    "BinList",
    "PackLengthsResult",
    "PieceList",
    "assign_bins",
    "pack_lengths",
]

_EMPTY = np.zeros(0, np.int64)
# A plan holds a few int64 entries per piece (a whole input, or one capacity-sized part of a
# cut one) and peaks near 80 bytes per piece while planning: 2**26 pieces is about 5 GiB.
# Cutting 10**12 tokens into 8-token windows would need 1.25e11 pieces (about 9 TiB); such
# a plan is refused up front with the count, before anything is allocated.
MAX_PIECES = 2**26


class _Windows(Sequence):
    """A read-only sequence of windows stored flat: window ``b`` spans ``offsets[b:b + 2]``."""

    __slots__ = ()
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, b):
        if isinstance(b, slice):
            return [self[j] for j in range(*b.indices(len(self)))]
        n = len(self)
        if not -n <= b < n:
            raise IndexError(f"window {b} out of range for {n} windows")
        b %= n
        return self._window(int(self.offsets[b]), int(self.offsets[b + 1]))

    def _window(self, start: int, stop: int):
        raise NotImplementedError


class BinList(_Windows):
    """The windows of a plan as a read-only sequence of int64 index arrays.

    Stored flat (``flat`` holds every window's entries back to back, window ``b`` is
    ``flat[offsets[b]:offsets[b + 1]]``) so a plan of a million inputs costs a few arrays, not
    a million objects; ``list(bins)`` gives a plain list, and vectorised consumers can use
    ``flat``/``offsets`` directly.
    """

    __slots__ = ("flat", "offsets")

    def __init__(self, flat: np.ndarray, offsets: np.ndarray):
        self.flat, self.offsets = flat, offsets

    def _window(self, start: int, stop: int) -> np.ndarray:
        return self.flat[start:stop]

    def __iter__(self):
        flat, off = self.flat, self.offsets.tolist()
        return (flat[a:b] for a, b in itertools.pairwise(off))

    def sizes(self) -> np.ndarray:
        """Entries per window."""
        return np.diff(self.offsets)

    def tolist(self) -> list[list[int]]:
        return [b.tolist() for b in self]

    def __repr__(self) -> str:
        return f"BinList({len(self)} windows, {self.flat.size} entries)"


class PieceList(_Windows):
    """Per window, the ``(input index, start, stop)`` token ranges, stored flat like BinList."""

    __slots__ = ("offsets", "src", "start", "stop")

    def __init__(self, src: np.ndarray, start: np.ndarray, stop: np.ndarray, offsets: np.ndarray):
        self.src, self.start, self.stop, self.offsets = src, start, stop, offsets

    def _window(self, a: int, z: int) -> list[tuple[int, int, int]]:
        return list(zip(self.src[a:z].tolist(), self.start[a:z].tolist(), self.stop[a:z].tolist()))

    def tolist(self) -> list[list[tuple[int, int, int]]]:
        rows = list(zip(self.src.tolist(), self.start.tolist(), self.stop.tolist()))
        off = self.offsets.tolist()
        return [rows[a:b] for a, b in itertools.pairwise(off)]

    def __iter__(self):
        return iter(self.tolist())

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and self.tolist() == [list(x) for x in other]

    def __repr__(self) -> str:
        return f"PieceList({len(self)} windows, {self.src.size} pieces)"


@dataclass
class PackLengthsResult:
    """Where each input goes.

    ``bins[b]`` is an int64 array of input indices in window ``b``, in row order (a
    :class:`BinList`; any sequence of arrays works when building a plan by hand). When an input
    is cut (``overflow="split"`` or ``strategy="wrapped"``) it may occupy several windows and
    ``pieces`` then lists, per window, the ``(index, start, stop)`` token ranges it holds
    (``None`` when every input is placed whole or truncated; use :meth:`segments` either way).
    ``split`` lists the inputs that were cut: by ``overflow="split"``, or, for ``wrapped``, every
    input that spans more than one window. ``total_tokens`` counts placed tokens only (after
    truncation, without dropped inputs).

    Example:
        >>> plan = pack_lengths([3, 5, 2, 6], capacity=8)
        >>> plan.n_bins, plan.lower_bound, plan.utilization
        (2, 2, 1.0)
        >>> plan.segments()
        [[(3, 0, 6), (2, 0, 2)], [(1, 0, 5), (0, 0, 3)]]
    """

    bins: Sequence[np.ndarray]
    capacity: int
    total_tokens: int
    strategy: str
    lengths: np.ndarray = field(repr=False)
    pieces: Sequence[list[tuple[int, int, int]]] | None = field(default=None, repr=False)
    split: np.ndarray = field(default_factory=lambda: _EMPTY.copy())
    truncated: np.ndarray = field(default_factory=lambda: _EMPTY.copy())
    dropped: np.ndarray = field(default_factory=lambda: _EMPTY.copy())
    tokens_truncated: int = 0
    empty: np.ndarray = field(default_factory=lambda: _EMPTY.copy())

    def segments(self) -> list[list[tuple[int, int, int]]]:
        """Per bin, the ``(input index, start, stop)`` token ranges it holds, in row order.

        This is what collation consumes: whole inputs are ``(i, 0, len)``, truncated ones
        ``(i, 0, capacity)``; split and wrapped inputs appear as several consecutive ranges.
        """
        if self.pieces is not None:
            return self.pieces.tolist() if isinstance(self.pieces, PieceList) else list(self.pieces)
        stop = np.minimum(self.lengths, self.capacity)
        if isinstance(self.bins, BinList):
            flat = self.bins.flat
            return PieceList(flat, np.zeros_like(flat), stop[flat], self.bins.offsets).tolist()
        lens = stop.tolist()
        return [[(i, 0, lens[i]) for i in np.asarray(b).tolist()] for b in self.bins]

    @property
    def n_bins(self) -> int:
        return len(self.bins)

    @property
    def lower_bound(self) -> int:
        """``ceil(total_tokens / capacity)``: no plan can use fewer windows."""
        return -(-self.total_tokens // self.capacity)

    @property
    def utilization(self) -> float:
        """Real tokens / (windows x capacity); 0.0 for an empty plan."""
        return self.total_tokens / (self.n_bins * self.capacity) if self.n_bins else 0.0

    @property
    def padding_tokens(self) -> int:
        return self.n_bins * self.capacity - self.total_tokens


# --------------------------------------------------------------------------- validation


def _validate(lengths, capacity: int, strategy: str, overflow: str) -> np.ndarray:
    check_choice(strategy, STRATEGIES, "strategy")
    check_choice(overflow, OVERFLOW_POLICIES, "overflow")
    check_capacity(capacity)
    return lengths_array(lengths)


def lengths_array(lengths: Any) -> np.ndarray:
    """``lengths`` as a 1-D int64 array of non-negative token counts, or an ``InputError``.

    Example:
        >>> lengths_array((3, 0, 5)).tolist()
        [3, 0, 5]
    """
    if isinstance(lengths, (str, bytes, Mapping)) or lengths is None:
        raise InputError(f"lengths must be a 1-D sequence of integers, got "
                         f"{type(lengths).__name__}")
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise InputError("lengths must be a 1-D sequence of integers")
    if arr.size and not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
        raise InputError(f"lengths must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        bad = int(np.argmin(arr))
        raise InputError(f"input {bad} has negative length {int(arr[bad])}")
    return arr


def assign_bins(sizes, capacity: int, strategy: str = "bfd") -> tuple[np.ndarray, np.ndarray]:
    """Low-level: assign items of ``sizes`` (each in ``1..capacity``) to windows.

    Returns ``(order, bin_of)``: item ids in placement order and the window of each of them.
    The engine under :func:`pack_lengths`, which most callers want (it adds overflow handling,
    empty inputs, shuffling and the plan object).

    Example:
        >>> order, bin_of = assign_bins(np.array([3, 5, 2, 6]), 8)
        >>> order.tolist(), bin_of.tolist()
        ([3, 1, 0, 2], [0, 1, 1, 0])
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    if not sizes.size:
        return _EMPTY.copy(), _EMPTY.copy()
    if sizes.min() < 1 or sizes.max() > capacity:
        raise InputError(f"sizes must be in 1..capacity ({capacity}), got "
                         f"{int(sizes.min())}..{int(sizes.max())}")
    if strategy == "bfd":
        return bfd(sizes, capacity)
    if strategy == "ffd":
        return ffd(sizes, capacity)
    if strategy == "greedy":
        return next_fit(sizes, capacity)
    if strategy == "optimal":
        return optimal_assign(sizes, capacity, fallback=bfd(sizes, capacity))
    raise bad_option("strategy", f" must be bfd, ffd, greedy or optimal for assign_bins, got "
                     f"{strategy!r}")


def _group(order: np.ndarray, bin_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Items grouped by window, placement order kept inside a window: (flat items, offsets)."""
    if bin_of.size and (bin_of[1:] >= bin_of[:-1]).all():
        flat = order  # already grouped (next-fit)
    else:
        flat = order[np.argsort(bin_of, kind="stable")]
    offsets = np.zeros(int(bin_of.max()) + 2 if bin_of.size else 1, np.int64)
    np.cumsum(np.bincount(bin_of, minlength=offsets.size - 1), out=offsets[1:])
    return flat, offsets


def _permute(offsets: np.ndarray, perm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reorder ragged rows: (gather index into the old flat array, new offsets)."""
    sizes = np.diff(offsets)[perm]
    new_offsets = np.zeros(perm.size + 1, np.int64)
    np.cumsum(sizes, out=new_offsets[1:])
    take = np.arange(int(new_offsets[-1]), dtype=np.int64)
    take += np.repeat(offsets[:-1][perm] - new_offsets[:-1], sizes)
    return take, new_offsets


def _wrapped_pieces(src: np.ndarray, item_len: np.ndarray, capacity: int):
    """Concatenate items in order and cut every ``capacity`` tokens: one piece per cut part."""
    if not item_len.size:
        return _EMPTY, _EMPTY, _EMPTY, _EMPTY
    ends = np.cumsum(item_len)
    starts = ends - item_len
    total = int(ends[-1])
    # Merge the window edges into the (sorted) input starts; both are sorted, so no sort.
    edges = np.arange(capacity, total, capacity)
    at = np.searchsorted(starts, edges)
    new = starts[np.minimum(at, starts.size - 1)] != edges
    cuts = np.append(np.insert(starts, at[new], edges[new]), total)
    lo, hi = cuts[:-1], cuts[1:]
    item = np.searchsorted(ends, lo, side="right")  # the item each part falls in
    window = lo // capacity
    offset = lo - starts[item]
    return window, src[item], offset, offset + (hi - lo)


def _check_pieces(eff: np.ndarray, active: np.ndarray, capacity: int, strategy: str,
                  split: bool) -> None:
    """Refuse a plan of more than :data:`MAX_PIECES` pieces, counted without making them."""
    if strategy == "wrapped":  # at most one piece per input plus one per window edge
        pieces = active.size + int(eff[active].sum()) // capacity
        why = f"strategy='wrapped' would cut the {int(eff[active].sum()):,} tokens into"
    elif split:
        pieces = int((-(-eff[active] // capacity)).sum())
        big = int(active[np.argmax(eff[active])])
        why = (f"overflow='split' would cut the inputs (input {big} alone has "
               f"{int(eff[big]):,} tokens) into")
    else:
        return
    if pieces > MAX_PIECES:
        raise InputError(f"{why} {pieces:,} pieces of at most {capacity:,} tokens; a plan holds "
                         f"at most {MAX_PIECES:,} (about 80 bytes each while planning): pack "
                         "fewer tokens per call or use a larger capacity")


def pack_lengths(
    lengths,
    *,
    capacity: int = 2048,
    strategy: str = "bfd",
    overflow: str = "error",
    seed: int | None = None,
) -> PackLengthsResult:
    """Assign inputs of the given token lengths to windows of ``capacity`` tokens.

    Args:
        lengths: non-negative integer token count per input (final lengths, separators
            included).
        capacity: tokens per window.
        strategy: ``bfd`` | ``ffd`` | ``wrapped`` | ``greedy`` | ``optimal`` (module docs).
        overflow: what to do with inputs longer than ``capacity``: ``error`` | ``split`` |
            ``truncate`` | ``drop``.
        seed: shuffle the windows with this seed (training wants that); ``None`` keeps the
            order in which windows were opened. The plan is deterministic either way.

    Example:
        >>> plan = pack_lengths([3, 5, 2, 6], capacity=8)
        >>> plan.n_bins, plan.lower_bound
        (2, 2)
        >>> [b.tolist() for b in plan.bins]
        [[3, 2], [1, 0]]
        >>> pack_lengths([10, 3], capacity=8, overflow="split").segments()
        [[(0, 0, 8)], [(1, 0, 3), (0, 8, 10)]]
    """
    arr = _validate(lengths, capacity, strategy, overflow)
    validate.seed(seed)
    capacity = int(capacity)
    over = np.flatnonzero(arr > capacity)
    if over.size and overflow == "error" and strategy != "wrapped":
        raise SequenceTooLongError(int(over[0]), int(arr[over[0]]), capacity, int(over.size))
    empty = np.flatnonzero(arr == 0)
    truncated = dropped = _EMPTY
    tokens_truncated = 0
    eff = arr
    if over.size and overflow == "truncate":
        truncated, tokens_truncated = over, int((arr[over] - capacity).sum())
        eff = np.minimum(arr, capacity)
    elif over.size and overflow == "drop":
        dropped = over
        eff = np.where(arr > capacity, 0, arr)
    active = np.flatnonzero(eff > 0)
    total = int(eff[active].sum())
    _check_pieces(eff, active, capacity, strategy, overflow == "split" and over.size > 0)

    # Items: what the strategy places. An input is one item unless it is split.
    src, item_len = active, eff[active]
    item_start = None
    cut = overflow == "split" and over.size > 0 and strategy != "wrapped"
    if cut:
        n_pieces = -(-item_len // capacity)
        src = np.repeat(active, n_pieces)
        first = np.cumsum(n_pieces) - n_pieces
        k = np.arange(src.size) - np.repeat(first, n_pieces)  # piece number within its input
        item_start = k * capacity
        item_len = np.minimum(capacity, eff[src] - item_start)

    split = over if cut else _EMPTY
    if strategy == "wrapped":
        window, flat, p_start, p_stop = _wrapped_pieces(src, item_len, capacity)
        n_win = int(window[-1]) + 1 if window.size else 0
        offsets = np.searchsorted(window, np.arange(n_win + 1))
        split = np.flatnonzero(np.bincount(flat, minlength=arr.size) > 1)
    else:
        order, bin_of = assign_bins(item_len, capacity, strategy)
        flat_items, offsets = _group(order, bin_of)
        flat = src[flat_items]
        if cut:
            p_start = item_start[flat_items]
            p_stop = p_start + item_len[flat_items]

    if seed is not None and len(offsets) > 1:
        perm = np.random.default_rng(seed).permutation(len(offsets) - 1)
        take, offsets = _permute(offsets, perm)
        flat = flat[take]
        if strategy == "wrapped" or cut:
            p_start, p_stop = p_start[take], p_stop[take]
    bins = BinList(flat, offsets)
    pieces = PieceList(flat, p_start, p_stop, offsets) if strategy == "wrapped" or cut else None
    return PackLengthsResult(
        bins=bins, capacity=capacity, total_tokens=total, strategy=strategy, lengths=arr,
        pieces=pieces, split=split, truncated=truncated, dropped=dropped,
        tokens_truncated=tokens_truncated, empty=empty,
    )
