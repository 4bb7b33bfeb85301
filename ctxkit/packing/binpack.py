"""The bin-packing core shared by :mod:`~ctxkit.packing.plan` and :mod:`~ctxkit.packing.optimal`.

Each function takes item sizes (int64, all in ``1..capacity``) and returns ``(order, bin_of)``:
``order`` lists item ids in placement order and ``bin_of[k]`` is the window of ``order[k]``.

Example:
    >>> order, bin_of = bfd(np.array([3, 5, 2, 6]), 8)
    >>> order.tolist(), bin_of.tolist()
    ([3, 1, 0, 2], [0, 1, 1, 0])
"""

from __future__ import annotations

import bisect

import numpy as np

__all__ = ["bfd", "ffd", "next_fit", "order_desc"]


def order_desc(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Item ids by decreasing size, ties in input order (a radix sort on small integers)."""
    key = capacity - sizes
    key = key.astype(np.int16 if capacity < 2**15 else np.int32)
    return np.argsort(key, kind="stable")


def _new_bins(
    first: int, size: int, count: int, capacity: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Open windows for ``count`` items of ``size``: (bin per item, free space per new bin)."""
    per = capacity // size
    n_new = -(-count // per)
    ids = np.arange(first, first + n_new, dtype=np.int64)
    assign = np.repeat(ids, per)[:count]
    free = np.full(n_new, capacity - per * size, np.int64)
    free[-1] = capacity - (count - (n_new - 1) * per) * size
    return assign, free, n_new


def bfd(
    sizes: np.ndarray, capacity: int, open_free: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Best-fit decreasing; ``open_free`` gives windows already open (ids 0..), by free space."""
    order = order_desc(sizes, capacity)
    counts = np.bincount(sizes, minlength=capacity + 1)
    uniq = np.flatnonzero(counts)
    counts = counts[uniq]
    n_level = np.zeros(capacity + 1, np.int64)  # open windows per amount of free space
    members: dict[int, list[np.ndarray]] = {}  # their ids, in chunks (sparse: long windows)
    # Sorted free-space levels that may hold windows (entries whose count dropped to 0 stay
    # until the next compaction), so finding the levels >= s never scans empty levels: this
    # keeps long windows (128k, 1M tokens) as fast as short ones.
    occ: list[int] = []
    pending: list[int] = []  # levels that became occupied since the last merge
    bin_of = np.empty(sizes.size, np.int64)
    pos = n_bins = 0

    def take_level(r: int) -> np.ndarray:
        chunks = members.pop(r)
        ids = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        n_level[r] = 0
        return ids

    def put(r: int, ids: np.ndarray) -> None:
        if r > 0 and ids.size:
            if not n_level[r]:
                pending.append(r)
            members.setdefault(r, []).append(ids)
            n_level[r] += ids.size

    def merge(occ: list[int]) -> list[int]:
        if len(occ) > 64 and len(occ) > 2 * len(members):
            return sorted(members)  # drop stale entries (members holds the occupied levels)
        for r in pending:
            i = bisect.bisect_left(occ, r)
            if i == len(occ) or occ[i] != r:
                occ.insert(i, r)
        return occ

    if open_free is not None and open_free.size:
        n_bins = open_free.size
        ids = np.arange(n_bins, dtype=np.int64)
        by_free = np.argsort(open_free, kind="stable")
        bounds = np.flatnonzero(np.diff(open_free[by_free])) + 1
        for group in np.split(ids[by_free], bounds):
            put(int(open_free[group[0]]), group)

    for s, k in zip(uniq[::-1].tolist(), counts[::-1].tolist()):
        if pending:
            occ = merge(occ)
            pending.clear()
        left = k
        parts: list[np.ndarray] = []
        at, width = bisect.bisect_left(occ, s), 16
        # Visit free-space levels >= s in increasing order; every window there takes r // s.
        while left and at < len(occ):
            levels = np.array(occ[at : at + width], np.int64)
            at += width
            width *= 4
            levels = levels[n_level[levels] > 0]
            if not levels.size:
                continue
            per = levels // s
            cum = np.cumsum(n_level[levels] * per)
            j = int(np.searchsorted(cum, left))  # first level that cannot be fully used
            for r, q in zip(levels[: min(j, levels.size)].tolist(), per[:j].tolist()):
                ids = take_level(r)
                parts.append(np.repeat(ids, q))
                put(r - q * s, ids)
            if j < levels.size:
                r, q = int(levels[j]), int(per[j])
                rest = left - (int(cum[j - 1]) if j else 0)
                ids = take_level(r)
                full, extra = divmod(rest, q)
                parts.append(np.repeat(ids[:full], q))
                put(r - q * s, ids[:full])
                if extra:
                    parts.append(np.repeat(ids[full : full + 1], extra))
                    put(r - extra * s, ids[full : full + 1])
                put(r, ids[full + (1 if extra else 0) :])
                left = 0
            else:
                left -= int(cum[-1])
        if left:
            assign, free, n_new = _new_bins(n_bins, s, left, capacity)
            parts.append(assign)
            ids = np.arange(n_bins, n_bins + n_new, dtype=np.int64)
            n_bins += n_new
            # all new windows but the last share one free-space level
            put(int(free[0]), ids[:-1])
            put(int(free[-1]), ids[-1:])
        bin_of[pos : pos + k] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        pos += k
    return order, bin_of


_BLOCK = 512


def ffd(sizes: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    order = order_desc(sizes, capacity)
    counts = np.bincount(sizes, minlength=capacity + 1)
    uniq = np.flatnonzero(counts)
    counts = counts[uniq]
    n = sizes.size
    free = np.zeros(n + _BLOCK, np.int64)  # free space per window, in opening order
    block_max = np.zeros(n // _BLOCK + 2, np.int64)  # largest free space per block of windows
    bin_of = np.empty(n, np.int64)
    pos = n_bins = 0
    for s, k in zip(uniq[::-1].tolist(), counts[::-1].tolist()):
        left = k
        parts: list[np.ndarray] = []
        n_blocks = -(-n_bins // _BLOCK)
        for b in np.flatnonzero(block_max[:n_blocks] >= s).tolist():
            lo, hi = b * _BLOCK, min((b + 1) * _BLOCK, n_bins)
            seg = free[lo:hi]
            per = seg // s  # first fit: each window in order takes all it can
            cum = np.cumsum(per)
            if cum[-1] >= left:
                j = int(np.searchsorted(cum, left))
                per = per.copy()
                per[j] = left - (int(cum[j - 1]) if j else 0)
                per[j + 1 :] = 0
                left = 0
            else:
                left -= int(cum[-1])
            parts.append(np.repeat(np.arange(lo, hi, dtype=np.int64), per))
            seg -= per * s
            block_max[b] = seg.max()
            if not left:
                break
        if left:
            assign, new_free, n_new = _new_bins(n_bins, s, left, capacity)
            parts.append(assign)
            free[n_bins : n_bins + n_new] = new_free
            first_block, last_block = n_bins // _BLOCK, (n_bins + n_new - 1) // _BLOCK
            n_bins += n_new
            for b in range(first_block, last_block + 1):
                block_max[b] = free[b * _BLOCK : min((b + 1) * _BLOCK, n_bins)].max()
        bin_of[pos : pos + k] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        pos += k
    return order, bin_of


def next_fit(sizes: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    ends = np.cumsum(sizes)
    # A window opened at item i runs up to the first item whose end passes start_i + capacity.
    nxt = np.searchsorted(ends, ends - sizes + capacity, side="right").tolist()
    firsts, i, n = [], 0, sizes.size
    while i < n:  # one step per window, not per item
        firsts.append(i)
        i = nxt[i]
    opened = np.zeros(n, np.int64)
    opened[firsts] = 1
    return np.arange(n, dtype=np.int64), np.cumsum(opened) - 1
