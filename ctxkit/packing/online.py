"""Packing a stream with bounded memory.

:class:`OnlinePacker` collects up to ``buffer_size`` items, packs them with BFD, emits the
windows that came out full and carries the items of the emptiest windows (at most
``carry_fraction`` of the buffer) over to be packed again with the next items. Memory stays
``O(buffer_size)`` however long the stream is, and utilization approaches the global plan's as
the buffer grows (``evals/packing.py`` measures it against global BFD). The carry-over is what
a plain "pack each block of 1,000" (TRL's behaviour) lacks: there every block leaves its own
half-empty windows behind.

Items are identified by their position in the stream; each emitted window lists its
``(stream index, start, stop)`` token ranges like
:meth:`ctxkit.packing.plan.PackLengthsResult.segments`, plus the stream elements themselves so a
caller can collate them directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.errors import InputError, OptionError
from ctxkit.options import bad_option
from ctxkit.packing.options import OVERFLOW_POLICIES, PackOptions, check_capacity, check_choice
from ctxkit.packing.plan import pack_lengths

__all__ = ["OnlinePacker", "StreamWindow", "pack_stream"]


@dataclass
class StreamWindow:
    """One emitted window: ``segments[k] = (stream index, start, stop)`` holds ``items[k]``."""

    segments: list[tuple[int, int, int]]
    items: list[Any] = field(repr=False)

    @property
    def tokens(self) -> int:
        return sum(stop - start for _, start, stop in self.segments)


def _default_length(item: Any) -> int:
    if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
        return int(item)
    if not hasattr(item, "__len__"):
        raise InputError(f"stream item is {type(item).__name__}: give token sequences, lengths, "
                         "or length= to measure items")
    return len(item)


class OnlinePacker:
    """Pack a stream of sequences (or of lengths) into windows with a bounded buffer.

    Example:
        >>> packer = OnlinePacker(capacity=8, buffer_size=4)
        >>> out = []
        >>> for n in [5, 3, 6, 2, 7, 1]:
        ...     out += packer.add(n)
        >>> out += packer.flush()
        >>> [w.segments for w in out]
        [[(2, 0, 6), (3, 0, 2)], [(0, 0, 5), (1, 0, 3)], [(4, 0, 7), (5, 0, 1)]]
        >>> packer.utilization
        1.0
    """

    def __init__(
        self,
        *,
        capacity: int | None = None,
        buffer_size: int = 1000,
        strategy: str = "bfd",
        overflow: str = "error",
        carry_fraction: float = 0.25,
        length: Callable[[Any], int] | None = None,
        options: PackOptions | None = None,
    ):
        """``options``: a :class:`~ctxkit.packing.options.PackOptions` giving ``capacity``,
        ``strategy`` and ``overflow`` (keywords that differ from the defaults override it).
        Its collating fields (separator, padding, layout, seed) belong to :func:`ctxkit.pack`
        and are refused here rather than ignored."""
        if capacity is None and options is None:
            raise InputError("OnlinePacker needs capacity (or options=PackOptions(capacity=...))")
        opts = PackOptions.resolve(options, capacity=capacity, strategy=strategy,
                                   overflow=overflow)
        collating = {k: v for k, v in opts.to_dict().items()
                     if k not in ("capacity", "strategy", "overflow")
                     and v != getattr(PackOptions, k)}
        if collating:
            names = ", ".join(sorted(collating))
            raise OptionError(names, f"OnlinePacker plans windows only; {names} apply when "
                                     "collating (ctxkit.pack / pack_arrays)")
        capacity, strategy, overflow = opts.capacity, opts.strategy, opts.overflow
        check_capacity(capacity)
        validate.positive_int(buffer_size, "buffer_size")
        check_choice(strategy, ("bfd", "ffd", "optimal"), "strategy")
        check_choice(overflow, OVERFLOW_POLICIES, "overflow")
        validate.unit_interval(carry_fraction, "carry_fraction", high_open=True)
        if length is not None and not callable(length):
            raise bad_option("length", f" must be a callable or None, got {type(length).__name__}")
        self.capacity, self.buffer_size = int(capacity), int(buffer_size)
        self.strategy, self.overflow, self.carry_fraction = strategy, overflow, carry_fraction
        self.length = length or _default_length
        # pending pieces: stream index, start, length, element
        self._idx: list[int] = []
        self._start: list[int] = []
        self._len: list[int] = []
        self._items: dict[int, Any] = {}
        self._seen = 0
        self.n_windows = 0
        self.total_tokens = 0
        self.peak_buffer = 0
        self.empty: list[int] = []
        self.dropped: list[int] = []
        self.truncated: list[int] = []
        self.split: list[int] = []
        self.tokens_truncated = 0

    # ------------------------------------------------------------------ stats
    @property
    def utilization(self) -> float:
        """Tokens emitted / (windows emitted x capacity)."""
        return self.total_tokens / (self.n_windows * self.capacity) if self.n_windows else 0.0

    @property
    def pending(self) -> int:
        """Pieces waiting in the buffer."""
        return len(self._idx)

    # ------------------------------------------------------------------ feeding
    def add(self, item: Any) -> list[StreamWindow]:
        """Add one element; returns the windows this completes (often none)."""
        i = self._seen
        self._seen += 1
        n = self.length(item)
        if n < 0:
            raise InputError(f"stream item {i} has negative length {n}")
        cap = self.capacity
        if n == 0:
            self.empty.append(i)
            return []
        if n > cap:
            if self.overflow == "error":
                raise InputError(
                    f"stream item {i} has {n} tokens, more than capacity {cap} "
                    f"(use overflow='split', 'truncate' or 'drop')"
                )
            if self.overflow == "drop":
                self.dropped.append(i)
                return []
            if self.overflow == "truncate":
                self.truncated.append(i)
                self.tokens_truncated += n - cap
                n = cap
        self._items[i] = item
        if n > cap:  # split into capacity-sized pieces
            self.split.append(i)
            for start in range(0, n, cap):
                self._push(i, start, min(cap, n - start))
        else:
            self._push(i, 0, n)
        if len(self._idx) >= self.buffer_size:
            return self._pack(final=False)
        return []

    def extend(self, items: Iterable[Any]) -> Iterator[StreamWindow]:
        """Add many elements, yielding windows as they complete (not flushing)."""
        for item in items:
            yield from self.add(item)

    def flush(self) -> list[StreamWindow]:
        """Pack and emit everything still buffered (call once at the end of the stream)."""
        return self._pack(final=True) if self._idx else []

    def _push(self, i: int, start: int, n: int) -> None:
        self._idx.append(i)
        self._start.append(start)
        self._len.append(n)
        self.peak_buffer = max(self.peak_buffer, len(self._idx))

    def _pack(self, final: bool) -> list[StreamWindow]:
        cap = self.capacity
        lens = np.asarray(self._len, np.int64)
        plan = pack_lengths(lens, capacity=cap, strategy=self.strategy)
        sizes = plan.bins.sizes()
        fill = np.bincount(np.repeat(np.arange(sizes.size), sizes), weights=lens[plan.bins.flat],
                           minlength=sizes.size).astype(np.int64)
        emit = np.ones(plan.n_bins, bool)
        if not final:
            # carry the items of the emptiest windows over, within the carry budget
            budget = int(self.carry_fraction * self.buffer_size)
            for b in np.argsort(fill, kind="stable").tolist():
                if fill[b] == cap or len(plan.bins[b]) > budget:
                    break
                emit[b] = False
                budget -= len(plan.bins[b])
        out, keep = [], []
        for b, members in enumerate(plan.bins):
            members = members.tolist()
            if not emit[b]:
                keep += members
                continue
            segs = [(self._idx[k], self._start[k], self._start[k] + self._len[k]) for k in members]
            out.append(StreamWindow(segs, [self._items[s[0]] for s in segs]))
            self.n_windows += 1
            self.total_tokens += int(fill[b])
        keep.sort()  # keep stream order among carried pieces
        idx = [self._idx[k] for k in keep]
        self._start = [self._start[k] for k in keep]
        self._len = [self._len[k] for k in keep]
        still = set(idx)
        for i in {self._idx[k] for k in range(len(self._idx))} - still:
            self._items.pop(i, None)
        self._idx = idx
        return out


def pack_stream(
    iterable: Iterable[Any],
    *,
    capacity: int | None = None,
    buffer_size: int = 1000,
    strategy: str = "bfd",
    overflow: str = "error",
    carry_fraction: float = 0.25,
    length: Callable[[Any], int] | None = None,
    packer: OnlinePacker | None = None,
    options: PackOptions | None = None,
) -> Iterator[StreamWindow]:
    """Yield packed windows from a stream of sequences (or lengths), holding at most about
    ``buffer_size`` items in memory.

    Pass your own ``packer`` to read its statistics (utilization, dropped, ...) afterwards;
    ``options`` as for :class:`OnlinePacker`.

    Example:
        >>> windows = list(pack_stream([[1, 2, 3], [4, 5], [6] * 6], capacity=8, buffer_size=2))
        >>> [w.segments for w in windows]
        [[(0, 0, 3), (1, 0, 2)], [(2, 0, 6)]]
        >>> windows[1].items
        [[6, 6, 6, 6, 6, 6]]
    """
    if not hasattr(iterable, "__iter__"):
        raise InputError(f"iterable must be an iterable of sequences or lengths, got "
                         f"{type(iterable).__name__}")
    p = packer or OnlinePacker(
        capacity=capacity, buffer_size=buffer_size, strategy=strategy, overflow=overflow,
        carry_fraction=carry_fraction, length=length, options=options,
    )
    yield from p.extend(iterable)
    yield from p.flush()
