"""Near-optimal packing on the length histogram: cutting stock by column generation.

Bin packing with many copies of few distinct lengths is the cutting-stock problem. Its linear
relaxation (Gilmore and Gomory, "A linear programming approach to the cutting-stock problem",
Operations Research 9, 1961) has one variable per *pattern* (how many items of each length one
window holds) and one row per distinct length, and is solved by column generation: solve the LP
over the patterns found so far with HiGHS, then price a new pattern with a bounded knapsack over
the dual values; stop when no pattern has reduced cost below zero. The LP value is a lower bound
that is usually within one window of the optimum (the "integer round-up property").

An integer plan comes from rounding: every pattern is used ``floor(x)`` times, and the few items
left over are placed by best-fit decreasing into the free space of those windows and new ones.
Cost depends on the number of distinct lengths and on the capacity, not on the number of
items: a million lengths cost the same LP as ten thousand with the same histogram.

Example:
    >>> import numpy as np
    >>> sizes = np.array([6, 6, 6, 4, 4, 4, 3, 3, 3, 2, 2, 2])
    >>> res = cutting_stock(sizes, 12)
    >>> res.n_bins, res.lower_bound
    (4, 4)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

__all__ = ["CuttingStock", "cutting_stock", "optimal_assign"]


@dataclass
class CuttingStock:
    """An integer packing found by column generation and rounding.

    ``order``/``bin_of`` as in :func:`ctxkit.pack.plan.assign_bins`; ``lp_value`` is the value
    of the last restricted LP, ``lp_bound`` a proven lower bound on the number of windows
    (``ceil`` of the Farley bound, or of the LP when it was solved to optimality).
    """

    order: np.ndarray
    bin_of: np.ndarray
    n_bins: int
    lower_bound: int
    lp_value: float
    lp_bound: int
    iterations: int
    lp_optimal: bool
    seconds: float


def _price(
    w: np.ndarray, pi: np.ndarray, bound: np.ndarray, capacity: int, n_cols: int = 40
) -> tuple[float, list[np.ndarray]]:
    """Bounded knapsack over the duals: the best pattern and a few other improving ones.

    Each length with bound ``b`` becomes 0/1 pieces of 1, 2, 4, ... copies (binary splitting),
    so every piece is one vectorised update of the value array. Besides the best pattern,
    "best pattern that also holds one item of length i" (``dp[C - w_i] + pi_i``) gives cheap
    extra columns, which cuts the number of LP solves several times.
    """
    types, mult = [], []
    for i in np.flatnonzero(pi > 1e-12).tolist():
        b, k = int(bound[i]), 1
        while b > 0:
            t = min(k, b)
            types.append(i)
            mult.append(t)
            b -= t
            k *= 2
    if not types:
        return 0.0, []
    types_a = np.asarray(types)
    mult_a = np.asarray(mult)
    weights = (w[types_a] * mult_a).tolist()
    values = (pi[types_a] * mult_a).tolist()
    dp = np.zeros(capacity + 1)
    take = np.zeros((len(types), capacity + 1), bool)
    for p, (wt, v) in enumerate(zip(weights, values)):
        cand = dp[: capacity + 1 - wt] + v
        better = cand > dp[wt:] + 1e-12
        take[p, wt:] = better
        dp[wt:] = np.where(better, cand, dp[wt:])

    def backtrack(c: int) -> np.ndarray:
        pattern = np.zeros(w.size, np.int64)
        for p in range(len(types) - 1, -1, -1):
            if take[p, c]:
                pattern[types[p]] += mult[p]
                c -= weights[p]
        return pattern

    best = float(dp[capacity])
    cols = [backtrack(capacity)] if best > 1 + 1e-9 else []
    if cols and n_cols > 1:
        extra = dp[capacity - w[pi > 1e-12]] + pi[pi > 1e-12]
        ids = np.flatnonzero(pi > 1e-12)
        seen = {cols[0].tobytes()}
        for j in np.argsort(-extra)[: 3 * n_cols].tolist():
            if extra[j] <= 1 + 1e-9 or len(cols) >= n_cols:
                break
            i = int(ids[j])
            pattern = backtrack(int(capacity - w[i]))
            pattern[i] += 1
            key = pattern.tobytes()
            if pattern[i] <= bound[i] and key not in seen:
                seen.add(key)
                cols.append(pattern)
    return best, cols


def _solve_lp(patterns: np.ndarray, demand: np.ndarray):
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix

    res = linprog(
        np.ones(patterns.shape[0]), A_ub=csr_matrix(-patterns.T.astype(float)),
        b_ub=-demand.astype(float),
        bounds=(0, None), method="highs",
    )
    if res.status != 0:
        raise RuntimeError(f"cutting-stock LP failed: {res.message}")
    return res.x, float(res.fun), -res.ineqlin.marginals


def _seed_patterns(
    w: np.ndarray, demand: np.ndarray, type_of: np.ndarray, fallback, capacity: int, limit: int
) -> np.ndarray:
    """Start columns: one homogeneous pattern per length plus the fullest windows of BFD."""
    bound = np.minimum(demand, capacity // w)
    cols = [np.diag(bound)]
    if fallback is not None:
        order, bin_of = fallback
        fill = np.bincount(bin_of, weights=w[type_of[order]])
        best = np.argsort(-fill, kind="stable")[:limit]
        local = np.full(fill.size, -1)
        local[best] = np.arange(best.size)
        sel = local[bin_of] >= 0
        mat = np.zeros((best.size, w.size), np.int64)
        np.add.at(mat, (local[bin_of[sel]], type_of[order[sel]]), 1)
        cols.append(mat)
    return np.unique(np.vstack(cols), axis=0)


def _column_generation(
    w: np.ndarray, demand: np.ndarray, capacity: int, patterns: np.ndarray, deadline: float,
    lower: int, max_iter: int,
) -> tuple[np.ndarray, np.ndarray, float, int, int, bool]:
    """Solve the cutting-stock LP: (patterns, x, LP value, lower bound, iterations, optimal)."""
    bound = np.minimum(demand, capacity // w)
    lp_bound, iterations = lower, 0
    while True:
        x, z, pi = _solve_lp(patterns, demand)
        iterations += 1
        value, cols = _price(w, pi, bound, capacity)
        if not cols:  # no pattern prices out: the LP is solved
            return patterns, x, z, max(lp_bound, int(np.ceil(z - 1e-6))), iterations, True
        # Farley: z / (best pattern value) is a lower bound on the full LP
        lp_bound = max(lp_bound, int(np.ceil(z / value - 1e-6)))
        if (np.ceil(z - 1e-6) <= lp_bound or iterations >= max_iter
                or time.perf_counter() > deadline):
            return patterns, x, z, lp_bound, iterations, False
        patterns = np.vstack([patterns, *cols])


def _integer_patterns(
    w: np.ndarray, demand: np.ndarray, capacity: int, patterns: np.ndarray, x: np.ndarray,
    deadline: float, max_iter: int, depth: int = 3,
) -> tuple[list[np.ndarray], list[int]]:
    """Round an LP solution to whole windows: floor, fill with whole patterns, recurse.

    What the floors leave is a small residual problem; greedily adding whole patterns that
    still fit the residual demand (largest fractional part first), then solving the rest by
    column generation again, keeps the rounding loss to about one window.
    """
    use = np.floor(x + 1e-9).astype(np.int64)
    left = np.maximum(demand - use @ patterns, 0)
    for p in np.argsort(-(x - use), kind="stable").tolist():
        if x[p] - use[p] < 1e-9:
            break
        if (patterns[p] <= left).all():
            use[p] += 1
            left -= patterns[p]
    keep = use > 0
    pats, counts = list(patterns[keep]), use[keep].tolist()
    if left.sum() and depth > 0:
        sub = left > 0
        ws, ds = w[sub], left[sub]
        init = np.unique(np.vstack([np.diag(np.minimum(ds, capacity // ws)), patterns[:, sub]]),
                         axis=0)
        init = init[(init <= ds).all(axis=1) & (init.sum(axis=1) > 0)]
        low = -(-int(ws @ ds) // capacity)
        sub_pats, sub_x, *_ = _column_generation(ws, ds, capacity, init, deadline, low, max_iter)
        more, more_counts = _integer_patterns(
            ws, ds, capacity, sub_pats, sub_x, deadline, max_iter, depth - 1
        )
        for pat, c in zip(more, more_counts):
            full = np.zeros(w.size, np.int64)
            full[sub] = pat
            pats.append(full)
            counts.append(c)
    return pats, counts


def _assign(
    pats: np.ndarray, use: np.ndarray, w: np.ndarray, demand: np.ndarray,
    type_of: np.ndarray, capacity: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Windows from (pattern, count) pairs; items no pattern took go in by BFD."""
    from ctxkit.pack.plan import _bfd

    keep = use > 0
    pats, use = pats[keep], use[keep]
    n_fixed = int(use.sum())
    win_start = np.cumsum(use) - use  # fixed windows of pattern p: win_start[p] + 0..use[p]-1
    # Slots: one per item position in a fixed window, grouped by length (type).
    ent_t, ent_p = np.nonzero(pats.T)  # entries sorted by type
    ent_a = pats[ent_p, ent_t]
    ent_n = use[ent_p] * ent_a  # slots per entry
    local = np.arange(int(ent_n.sum())) - np.repeat(np.cumsum(ent_n) - ent_n, ent_n)
    slot_win = np.repeat(win_start[ent_p], ent_n) + local // np.repeat(ent_a, ent_n)
    slots_per_type = np.bincount(ent_t, weights=ent_n, minlength=w.size).astype(np.int64)
    slot_start = np.cumsum(slots_per_type) - slots_per_type
    # The r-th item of a length (in input order) takes that length's r-th slot, if any.
    by_type = np.argsort(type_of, kind="stable")
    type_start = np.cumsum(demand) - demand
    rank = np.empty(type_of.size, np.int64)
    rank[by_type] = np.arange(type_of.size) - np.repeat(type_start, demand)
    has_slot = rank < slots_per_type[type_of]
    bin_of = np.full(type_of.size, -1, np.int64)
    bin_of[has_slot] = slot_win[slot_start[type_of[has_slot]] + rank[has_slot]]
    filled = np.bincount(bin_of[has_slot], weights=w[type_of[has_slot]], minlength=n_fixed)
    filled = filled.astype(np.int64)
    # windows whose slots were all surplus stay empty: drop them
    used = np.flatnonzero(np.bincount(bin_of[bin_of >= 0], minlength=n_fixed) > 0)
    renum = np.full(n_fixed, -1, np.int64)
    renum[used] = np.arange(used.size)
    placed = bin_of >= 0
    bin_of[placed] = renum[bin_of[placed]]
    rest = np.flatnonzero(~placed)
    if rest.size:
        sizes = w[type_of[rest]]
        order_r, bin_r = _bfd(sizes, capacity, open_free=capacity - filled[used])
        bin_of[rest[order_r]] = bin_r
    # placement order: by window, then by decreasing length inside a window
    order = np.lexsort((-w[type_of], bin_of))
    return order, bin_of[order]


def cutting_stock(
    sizes, capacity: int, fallback=None, max_iter: int = 100, time_limit: float | None = None,
    seed_columns: int = 2000,
) -> CuttingStock:
    """Pack items of ``sizes`` (each in ``1..capacity``) close to the fewest windows.

    ``fallback`` is an ``(order, bin_of)`` plan (e.g. BFD) whose fullest windows seed the LP.
    ``max_iter`` caps the LP solves of the column generation (each adds up to 40 patterns),
    which keeps the result deterministic; ``time_limit`` (seconds) adds a wall-clock cap for
    callers who prefer speed to determinism.
    """
    start = time.perf_counter()
    sizes = np.asarray(sizes, np.int64)
    hist = np.bincount(sizes, minlength=capacity + 1)
    w = np.flatnonzero(hist)
    demand = hist[w]
    type_of = (np.cumsum(hist > 0) - 1)[sizes]  # index of each item's length in w
    lower = -(-int(sizes.sum()) // capacity)
    patterns = _seed_patterns(w, demand, type_of, fallback, capacity, seed_columns)
    deadline = start + time_limit if time_limit is not None else float("inf")
    patterns, x, z, lp_bound, iterations, optimal = _column_generation(
        w, demand, capacity, patterns, deadline, lower, max_iter
    )
    pats, counts = _integer_patterns(
        w, demand, capacity, patterns, x, deadline, max(10, max_iter // 4)
    )
    if pats:
        order, bin_of = _assign(np.array(pats), np.array(counts), w, demand, type_of, capacity)
    else:
        order, bin_of = _assign(patterns[:0], np.zeros(0, np.int64), w, demand, type_of, capacity)
    n_bins = int(bin_of.max()) + 1 if bin_of.size else 0
    return CuttingStock(
        order=order, bin_of=bin_of, n_bins=n_bins, lower_bound=lower, lp_value=z,
        lp_bound=lp_bound, iterations=iterations, lp_optimal=optimal,
        seconds=time.perf_counter() - start,
    )


def optimal_assign(
    sizes: np.ndarray, capacity: int, fallback: tuple[np.ndarray, np.ndarray] | None = None,
    max_iter: int = 100,
) -> tuple[np.ndarray, np.ndarray]:
    """``(order, bin_of)`` of the better of ``fallback`` (BFD) and the cutting-stock rounding."""
    if sizes.size == 0:
        return sizes.astype(np.int64), sizes.astype(np.int64)
    lower = -(-int(sizes.sum()) // capacity)
    if fallback is not None and int(fallback[1].max()) + 1 <= lower:
        return fallback  # already at the lower bound: provably optimal
    res = cutting_stock(sizes, capacity, fallback=fallback, max_iter=max_iter)
    if fallback is not None and int(fallback[1].max()) + 1 <= res.n_bins:
        return fallback
    return res.order, res.bin_of
