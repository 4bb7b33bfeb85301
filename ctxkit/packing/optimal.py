"""Near-optimal packing on the length histogram: cutting stock by column generation.

Bin packing with many copies of few distinct lengths is the cutting-stock problem. Its linear
relaxation (Gilmore and Gomory, "A linear programming approach to the cutting-stock problem",
Operations Research 9, 1961) has one variable per *pattern* (how many items of each length one
window holds) and one row per distinct length, and is solved by column generation: solve the LP
over the patterns found so far with HiGHS, then price a new pattern with a bounded knapsack over
the dual values; stop when no pattern has reduced cost below zero. The LP value is a lower bound
that is usually within one window of the optimum (the "integer round-up property").

Before any LP, a sequential exact fill (the fullest window the remaining lengths allow, by a
vectorised subset-sum, used as often as the counts permit; cf. the Minimum Bin Slack heuristic)
usually reaches ``ceil(total / capacity)`` when items are small against the window, and then
nothing else runs. Otherwise its windows seed the LP, and an integer plan comes from rounding:
every pattern is used ``floor(x)`` times (plus whole patterns that still fit), and the items
left over go to another round of column generation, to the exact fill, or to best-fit
decreasing in the free space of those windows; the best of these wins.
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

from ctxkit.packing.binpack import bfd, order_desc

__all__ = ["CuttingStock", "cutting_stock", "optimal_assign"]


@dataclass
class CuttingStock:
    """An integer packing found by column generation and rounding.

    ``order``/``bin_of`` as in :func:`ctxkit.packing.plan.assign_bins`; ``lp_value`` is the value
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


def _pieces(bound: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Binary splitting: up to ``bound[t]`` copies of each type in ``types`` as 0/1 pieces of
    1, 2, 4, ... copies plus a remainder, so any count up to the bound is a subset of pieces.
    Returns (type of each piece, copies in it), in the order of ``types``."""
    b = bound[types]
    types, b = types[b > 0], b[b > 0]
    n_full = np.floor(np.log2(b + 1)).astype(np.int64)
    rem = b - (2**n_full - 1)
    n_pieces = n_full + (rem > 0)
    piece_type = np.repeat(types, n_pieces)
    j = np.arange(piece_type.size) - np.repeat(np.cumsum(n_pieces) - n_pieces, n_pieces)
    mult = np.where(j < np.repeat(n_full, n_pieces), 2**j, np.repeat(rem, n_pieces))
    return piece_type, mult


def _price(
    w: np.ndarray, pi: np.ndarray, bound: np.ndarray, capacity: int, n_cols: int = 40
) -> tuple[float, list[np.ndarray]]:
    """Bounded knapsack over the duals: the best pattern and a few other improving ones.

    Each length with bound ``b`` becomes 0/1 pieces of 1, 2, 4, ... copies (binary splitting),
    so every piece is one vectorised update of the value array. Besides the best pattern,
    "best pattern that also holds one item of length i" (``dp[C - w_i] + pi_i``) gives cheap
    extra columns, which cuts the number of LP solves several times.
    """
    types_a, mult_a = _pieces(bound, np.flatnonzero(pi > 1e-12))
    if not types_a.size:
        return 0.0, []
    types, mult = types_a.tolist(), mult_a.tolist()
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
    lower: int, max_iter: int, smoothing: float = 0.6,
) -> tuple[np.ndarray, np.ndarray, float, int, int, bool]:
    """Solve the cutting-stock LP: (patterns, x, LP value, lower bound, iterations, optimal).

    Column generation on bin packing with many small items tails off: the LP duals jump
    around and each new column helps little. Wentges smoothing prices at a mix of the current
    duals and the best duals seen so far (those with the highest Farley bound); when that
    finds no improving column ("mispricing") it falls back to the plain duals, so the final
    answer is exact. Every pricing also gives a valid lower bound, ``d.pi / v(pi)``.
    """
    bound = np.minimum(demand, capacity // w)
    best_lb, center, iterations = float(lower), None, 0
    while True:
        x, z, pi = _solve_lp(patterns, demand)
        iterations += 1
        cols: list[np.ndarray] = []
        for alpha in ((smoothing, 0.0) if center is not None else (0.0,)):
            trial = alpha * center + (1 - alpha) * pi if alpha else pi
            value, found = _price(w, trial, bound, capacity)
            lb = float(demand @ trial) / max(value, 1.0)  # Farley bound: trial / v is dual-feasible
            if lb > best_lb + 1e-9 or center is None:
                best_lb, center = max(best_lb, lb), trial
            cols = [c for c in found if float(c @ pi) > 1 + 1e-9]
            if cols:
                break
        lp_bound = max(lower, int(np.ceil(best_lb - 1e-6)))
        if not cols:  # no pattern prices out at the LP duals: the LP is solved
            return patterns, x, z, max(lp_bound, int(np.ceil(z - 1e-6))), iterations, True
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


def _exact_fill(
    w: np.ndarray, demand: np.ndarray, capacity: int
) -> tuple[list[np.ndarray], list[int]]:
    """Sequential exact fill: the fullest window the remaining items allow, used as often
    as the demand permits, repeated (a sequential heuristic procedure for cutting stock, as
    the Minimum Bin Slack heuristic of Gupta and Ho, 1999, on the histogram).

    Each window is a subset-sum over binary-split pieces, one vectorised OR per piece. When
    items are small against the window, most windows come out exactly full and this reaches
    the lower bound where LP rounding tails off; the LP does better when items are large.
    """
    left = demand.copy()
    pats: list[np.ndarray] = []
    counts: list[int] = []
    big_first = np.argsort(-w, kind="stable")
    while left.sum():
        types_a, mult_a = _pieces(np.minimum(left, capacity // w), big_first)
        types, mult = types_a.tolist(), mult_a.tolist()
        weights = (w[types_a] * mult_a).tolist()
        reach = np.zeros(capacity + 1, bool)
        reach[0] = True
        first: list[np.ndarray] = []  # first[p][c - w_p]: piece p first reached sum c
        for wt in weights:
            new = reach[: capacity + 1 - wt] & ~reach[wt:]
            first.append(new)
            reach[wt:] |= new
            if reach[capacity]:  # an exactly full window: nothing can be fuller
                break
        c = int(np.flatnonzero(reach)[-1])
        pattern = np.zeros(w.size, np.int64)
        for p in range(len(first) - 1, -1, -1):
            if c >= weights[p] and first[p][c - weights[p]]:
                pattern[types[p]] += mult[p]
                c -= weights[p]
        used = pattern > 0
        k = int((left[used] // pattern[used]).min())
        pats.append(pattern)
        counts.append(k)
        left -= k * pattern
    return pats, counts


def _rank_in_type(type_of: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """For each item, how many items of the same length come before it in input order."""
    by_type = np.argsort(type_of, kind="stable")
    rank = np.empty(type_of.size, np.int64)
    rank[by_type] = np.arange(type_of.size) - np.repeat(np.cumsum(demand) - demand, demand)
    return rank


def _assign(
    pats: np.ndarray, use: np.ndarray, w: np.ndarray, demand: np.ndarray,
    type_of: np.ndarray, rank: np.ndarray, capacity: int,
) -> np.ndarray:
    """Window of every item from (pattern, count) pairs; items no pattern took go in by BFD."""
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
        order_r, bin_r = bfd(sizes, capacity, open_free=capacity - filled[used])
        bin_of[rest[order_r]] = bin_r
    # placement order: by window, then by decreasing length inside a window
    return bin_of


def _window_order(bin_of: np.ndarray, sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Items by window, longest first inside a window."""
    desc = order_desc(sizes, capacity)
    return desc[np.argsort(bin_of[desc], kind="stable")]


def cutting_stock(
    sizes, capacity: int, fallback=None, max_iter: int = 100, time_limit: float | None = None,
    seed_columns: int = 2000, use_exact_fill: bool = True,
) -> CuttingStock:
    """Pack items of ``sizes`` (each in ``1..capacity``) close to the fewest windows.

    ``fallback`` is an ``(order, bin_of)`` plan (e.g. BFD) whose fullest windows seed the LP.
    The sequential exact fill runs first (``use_exact_fill``) and ends the search when it
    reaches ``ceil(total / capacity)``; otherwise the better of it and the LP rounding wins.
    ``max_iter`` caps the LP solves of the column generation (each adds up to 40 patterns),
    which keeps the result deterministic; ``time_limit`` (seconds) adds a wall-clock cap for
    callers who prefer speed to determinism.
    """
    start = time.perf_counter()
    sizes = np.asarray(sizes, np.int64)
    if sizes.size == 0:
        return CuttingStock(sizes, sizes.copy(), 0, 0, 0.0, 0, 0, True, 0.0)
    hist = np.bincount(sizes, minlength=capacity + 1)
    w = np.flatnonzero(hist)
    demand = hist[w]
    type_of = (np.cumsum(hist > 0) - 1)[sizes]  # index of each item's length in w
    lower = -(-int(sizes.sum()) // capacity)
    rank = _rank_in_type(type_of, demand)
    best = None
    if use_exact_fill:
        pats, counts = _exact_fill(w, demand, capacity)
        best = _assign(np.array(pats), np.array(counts), w, demand, type_of, rank, capacity)
        if int(best.max()) + 1 <= lower:  # at the bound: nothing can beat it
            order = _window_order(best, sizes, capacity)
            return CuttingStock(
                order=order, bin_of=best[order], n_bins=lower, lower_bound=lower,
                lp_value=float("nan"), lp_bound=lower, iterations=0, lp_optimal=False,
                seconds=time.perf_counter() - start,
            )
    patterns = _seed_patterns(w, demand, type_of, fallback, capacity, seed_columns)
    if use_exact_fill:  # an integer solution close to the bound: a strong start for the LP
        patterns = np.unique(np.vstack([patterns, *pats]), axis=0)
    deadline = start + time_limit if time_limit is not None else float("inf")
    patterns, x, z, lp_bound, iterations, optimal = _column_generation(
        w, demand, capacity, patterns, deadline, lower, max_iter
    )
    pats, counts = _integer_patterns(
        w, demand, capacity, patterns, x, deadline, max(10, max_iter // 4)
    )
    floors = np.floor(x + 1e-9).astype(np.int64)
    candidates = [] if best is None else [best]
    roundings = [(np.array(pats).reshape(-1, w.size), np.array(counts, np.int64)),
                 (patterns, floors)]  # smart rounding, and plain floor (+ BFD of the rest)
    # plain floor, the rest by exact fill
    left = np.maximum(demand - floors @ patterns, 0)
    if left.sum():
        sub = left > 0
        more, more_counts = _exact_fill(w[sub], left[sub], capacity)
        full = np.zeros((len(more), w.size), np.int64)
        full[:, sub] = np.array(more).reshape(len(more), -1)
        roundings.append((np.vstack([patterns, full]),
                          np.concatenate([floors, np.array(more_counts, np.int64)])))
    for pats_c, counts_c in roundings:
        candidates.append(_assign(pats_c, counts_c, w, demand, type_of, rank, capacity))
    bin_of = min(candidates, key=lambda c: int(c.max()))
    order = _window_order(bin_of, sizes, capacity)
    bin_of = bin_of[order]
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
