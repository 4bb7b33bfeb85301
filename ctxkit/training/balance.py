"""Rank-balanced steps: which packed windows each data-parallel rank trains on, step by step.

With ``ranks`` data-parallel workers, each optimizer step gives every rank ``windows_per_step``
windows (its micro-batches, or one batch of that many rows), and the step waits for the slowest
rank. Packed windows hold nearly the same number of tokens, but not the same compute: attention
grows with the square of each segment's length (:mod:`ctxkit.training.cost`), so a rank that
draws the windows of long examples is a straggler. Dealing windows in data order, as
``torch.utils.data.DistributedSampler`` does, balances counts, not compute.

Algorithm
---------
1. Cost every window (:class:`~ctxkit.training.cost.WindowCost`) and sort by cost, largest first
   (ties in a random order drawn from ``seed``).
2. Leftovers. Only ``n // (ranks * windows_per_step)`` full steps can be formed, and every rank
   must run the same number of micro-batches per step (data-parallel gradient all-reduce waits
   otherwise). The other ``n % (ranks * windows_per_step)`` windows are left out of the steps,
   as ``drop_last=True`` does, and listed in :attr:`BalanceResult.leftover` (never lost
   silently: train them in a later epoch, or pack them again with the next data). They are
   taken from the two ends of the cost order, the outliers that are hardest to balance (the
   partly filled last windows of a plan, the windows of the longest examples): as many from
   the expensive end as makes the worst run of ``ranks * windows_per_step`` consecutive
   windows best, the rest from the cheap end.
3. Steps. ``similar``: consecutive runs of the cost order, so the windows of a step cost about
   the same; ``mixed``: each step takes one window from every band of the cost order (rows of
   a serpentine deal), so every step holds the same mix of expensive and cheap windows. With
   one window per rank only ``similar`` can balance; with more, both are tried and the one
   whose worst step is better is kept.
4. Inside a step: longest-processing-time first with a cardinality limit (largest window onto
   the least-loaded rank that still has room, vectorised over all steps at once), then pairwise
   swaps between the most-loaded rank and any other while a swap lowers the larger of the two
   loads (each swap lowers the sorted loads lexicographically, so it ends).
5. The order of the steps is shuffled with ``seed``, so training does not see all expensive
   steps first. Everything is deterministic given ``seed``.

``max_over_mean`` is the worst step's largest per-rank cost over that step's mean (1.0 is
perfect); ``baseline_max_over_mean`` is the same for the windows dealt in plan order to the same
number of steps. ``python -m evals.balance`` measures both on the shared datasets.

Example:
    >>> res = balance([[8], [4, 4], [2, 2, 2, 2], [8], [6, 1], [5]], ranks=2,
    ...               cost=WindowCost(token=1.0, square=1.0))
    >>> res.steps, res.leftover.tolist()
    ([[[0], [3]], [[4], [1]], [[5], [2]]], [])
    >>> round(res.max_over_mean, 3), round(res.baseline_max_over_mean, 3)
    (1.111, 1.5)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit.errors import InputError
from ctxkit.options import OptionSet, bad_option
from ctxkit.packing.collate import plan_segments
from ctxkit.packing.options import check_capacity
from ctxkit.packing.plan import PackLengthsResult, pack_lengths
from ctxkit.training.cost import WindowCost

__all__ = [
    "BalanceLengthsResult",
    "BalanceOptions",
    "BalanceResult",
    "WindowCost",
    "balance",
    "balance_lengths",
    "window_costs",
]

_EMPTY = np.zeros(0, np.int64)


def _count(name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value < 1:
        raise bad_option(name, f" must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class BalanceOptions(OptionSet):
    """How windows are dealt to ranks (see :func:`balance`).

    Attributes:
        ranks: data-parallel workers, positive.
        windows_per_step: windows each rank trains on per optimizer step, positive.
        cost: the window cost model; None means the default :class:`WindowCost`.
        seed: non-negative; orders ties and the steps.
    """

    ranks: int
    windows_per_step: int = 1
    cost: WindowCost | None = None
    seed: int = 0

    _what = "balance option"

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "ranks", _count("ranks", self.ranks))
        set_(self, "windows_per_step", _count("windows_per_step", self.windows_per_step))
        if self.cost is None:
            set_(self, "cost", WindowCost())
        elif not isinstance(self.cost, WindowCost):
            raise bad_option("cost", f" must be a WindowCost or None, got {self.cost!r}")
        if isinstance(self.seed, (bool, np.bool_)) or not isinstance(
                self.seed, (int, np.integer)) or self.seed < 0:
            raise bad_option("seed", f" must be a non-negative integer, got {self.seed!r}")
        set_(self, "seed", int(self.seed))

    @property
    def step_size(self) -> int:
        """Windows per step over all ranks."""
        return self.ranks * self.windows_per_step


@dataclass(frozen=True, eq=False)
class BalanceResult:
    """Per optimizer step, the windows of each rank, and how even the ranks' compute is.

    ``steps[s][r]`` lists the window indices rank ``r`` trains on in step ``s``
    (``windows_per_step`` of them); ``leftover`` the windows in no step (the cheapest
    ``n % (ranks * windows_per_step)``); every window is in exactly one of the two.
    ``costs[w]`` is window ``w``'s cost, ``loads[s, r]`` rank ``r``'s summed cost in step ``s``
    and ``baseline_loads`` the same for windows dealt in plan order. ``formation`` is how
    steps were formed (``similar`` or ``mixed``, module docs).
    """

    steps: list[list[list[int]]]
    max_over_mean: float
    baseline_max_over_mean: float
    costs: np.ndarray = field(repr=False)
    leftover: np.ndarray
    loads: np.ndarray = field(repr=False)
    baseline_loads: np.ndarray = field(repr=False)
    ranks: int
    windows_per_step: int
    formation: str

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    @property
    def n_windows(self) -> int:
        return int(self.costs.size)

    def step_max_over_mean(self, baseline: bool = False) -> np.ndarray:
        """Per step, the largest rank load over the mean (of the plan-order deal if
        ``baseline``)."""
        return _ratios(self.baseline_loads if baseline else self.loads)

    def rank_windows(self, rank: int) -> list[int]:
        """The windows of ``rank``, step after step (what its sampler yields in one epoch)."""
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) \
                or not 0 <= rank < self.ranks:
            raise bad_option("rank", f" must be an integer in 0..{self.ranks - 1}, got {rank!r}")
        return [w for step in self.steps for w in step[rank]]


@dataclass(frozen=True, eq=False)
class BalanceLengthsResult:
    """Token-budget micro-batches per rank and step, from :func:`balance_lengths`.

    ``steps[s][r]`` lists rank ``r``'s micro-batches in step ``s`` (``windows_per_step`` of
    them), each a list of sequence indices holding at most ``tokens_per_rank`` tokens.
    ``leftover`` lists the sequences of the leftover micro-batches; sequences the plan itself
    dropped or found empty are on ``plan`` (``plan.dropped``, ``plan.empty``). ``balance`` is
    the balance of the plan's windows.
    """

    steps: list[list[list[list[int]]]]
    leftover: np.ndarray
    plan: PackLengthsResult = field(repr=False)
    balance: BalanceResult = field(repr=False)

    @property
    def max_over_mean(self) -> float:
        return self.balance.max_over_mean

    @property
    def baseline_max_over_mean(self) -> float:
        return self.balance.baseline_max_over_mean


# --------------------------------------------------------------------------- costs


def window_costs(plan: Any, cost: WindowCost | None = None) -> np.ndarray:
    """Per window, its cost: ``cost.token * tokens + cost.square * sum(segment_length ** 2)``.

    ``plan`` is a :class:`~ctxkit.PackLengthsResult`, a padded :class:`~ctxkit.PackResult`, or
    per window the lengths of its segments (a list of lists of integers).

    Example:
        >>> window_costs([[3, 1], [4]], WindowCost(token=1.0, square=1.0)).tolist()
        [14.0, 20.0]
    """
    cost = WindowCost() if cost is None else cost
    if isinstance(plan, PackLengthsResult):
        rows, _, start, stop = plan_segments(plan)
        return cost.windows(stop - start, window_of=rows, n_windows=plan.n_bins)
    if hasattr(plan, "segment_start") and hasattr(plan, "row_offsets"):  # a PackResult
        if getattr(plan, "layout", "padded") != "padded":
            raise InputError("plan: a flat-layout batch is a single row; balance its plan or "
                             "a padded batch")
        sizes = np.diff(np.asarray(plan.row_offsets, np.int64))
        rows = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
        return cost.windows(plan.segment_stop - plan.segment_start, window_of=rows,
                            n_windows=sizes.size)
    if isinstance(plan, (str, bytes)) or not isinstance(plan, Sequence):
        raise InputError(f"plan must be a PackLengthsResult, a padded PackResult or a list of "
                         f"segment lengths per window, got {type(plan).__name__}")
    sizes, flat = [], []
    for w, window in enumerate(plan):
        arr = np.asarray(window)
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise InputError(f"plan window {w} must be a list of integer segment lengths")
        if arr.size and arr.min() < 0:
            raise InputError(f"plan window {w} has a negative segment length {int(arr.min())}")
        sizes.append(arr.size)
        flat.append(arr.astype(np.int64))
    rows = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    lengths = np.concatenate(flat) if flat else _EMPTY
    return cost.windows(lengths, window_of=rows, n_windows=len(sizes))


# --------------------------------------------------------------------------- assignment


def _ratios(loads: np.ndarray) -> np.ndarray:
    """Per step (row), max over mean of the rank loads; 1.0 for a step that costs nothing."""
    if not loads.size:
        return np.ones(loads.shape[0])
    mean = loads.mean(axis=1)
    return np.where(mean > 0, loads.max(axis=1) / np.where(mean > 0, mean, 1.0), 1.0)


def _formations(kept: np.ndarray, n_steps: int, step: int, mixed: bool) -> dict[str, np.ndarray]:
    """Windows (sorted by cost, largest first) grouped into ``[n_steps, step]`` arrays whose
    rows stay in decreasing cost order."""
    out = {"similar": kept.reshape(n_steps, step)}
    if mixed:
        bands = kept.reshape(step, n_steps).copy()
        bands[1::2] = bands[1::2, ::-1]  # serpentine, so no step always gets a band's largest
        out["mixed"] = np.ascontiguousarray(bands.T)
    return out


def _top_leftovers(sorted_costs: np.ndarray, step: int) -> int:
    """How many of the ``n % step`` leftovers to take from the expensive end of the cost order
    (the rest come from the cheap end): the split whose consecutive runs of ``step`` windows
    have the smallest worst max/mean."""
    n = sorted_costs.size
    spare = n % step
    if not spare or n < step:
        return 0
    worst = [float(_ratios(sorted_costs[t:t + n - spare].reshape(-1, step)).max())
             for t in range(spare + 1)]
    return int(np.argmin(worst))  # ties: fewest expensive windows left over


def _lpt(costs: np.ndarray, ranks: int, per_rank: int) -> np.ndarray:
    """Largest-first onto the least-loaded rank with room, for every step (row) at once:
    ``costs`` is ``[steps, ranks * per_rank]`` in decreasing order; returns the rank of each."""
    n_steps, width = costs.shape
    loads = np.zeros((n_steps, ranks))
    count = np.zeros((n_steps, ranks), np.int64)
    rank_of = np.zeros((n_steps, width), np.int64)
    rows = np.arange(n_steps)
    for j in range(width):
        r = np.where(count < per_rank, loads, np.inf).argmin(axis=1)
        loads[rows, r] += costs[:, j]
        count[rows, r] += 1
        rank_of[:, j] = r
    return rank_of


def _improve(group: np.ndarray, cost: np.ndarray) -> None:
    """Pairwise swaps in one step: ``group[r]`` are rank ``r``'s windows, ``cost`` the same
    shape; swaps the pair that most lowers the larger load of the most-loaded rank and another
    while one does (in place)."""
    ranks, per = cost.shape
    for _ in range(4 * ranks * per):
        load = cost.sum(axis=1)
        hi = int(load.argmax())
        if load[hi] <= load.mean() * (1 + 1e-6):
            return
        give = cost[hi][None, :, None] - cost[:, None, :]  # [other, hi's window, other's window]
        pair_max = np.maximum(load[hi] - give, load[:, None, None] + give)
        pair_max[hi] = np.inf
        best = np.unravel_index(int(pair_max.argmin()), pair_max.shape)
        if pair_max[best] >= load[hi] * (1 - 1e-12):
            return
        o, a, b = (int(x) for x in best)
        cost[hi, a], cost[o, b] = cost[o, b], cost[hi, a]
        group[hi, a], group[o, b] = group[o, b], group[hi, a]


def _deal(windows: np.ndarray, costs: np.ndarray, ranks: int, per_rank: int) -> np.ndarray:
    """``[steps, ranks * per_rank]`` windows -> ``[steps, ranks, per_rank]``, balanced."""
    n_steps = windows.shape[0]
    if per_rank == 1:
        return windows.reshape(n_steps, ranks, 1)
    rank_of = _lpt(costs[windows], ranks, per_rank)
    # stable sort by rank keeps each rank's windows in decreasing cost order
    order = np.argsort(rank_of, axis=1, kind="stable")
    groups = np.take_along_axis(windows, order, axis=1).reshape(n_steps, ranks, per_rank)
    ratios = _ratios(costs[groups].sum(axis=2))
    for s in np.flatnonzero(ratios > 1 + 1e-6).tolist():
        _improve(groups[s], costs[groups[s]])
    return groups


def balance(
    plan: Any,
    *,
    ranks: int,
    windows_per_step: int = 1,
    cost: WindowCost | None = None,
    seed: int = 0,
) -> BalanceResult:
    """Deal the windows of ``plan`` to ``ranks`` ranks so every step's per-rank compute is even.

    Args:
        plan: a :class:`~ctxkit.PackLengthsResult`, a padded :class:`~ctxkit.PackResult`, or
            per window the lengths of its segments.
        ranks: data-parallel workers.
        windows_per_step: windows each rank trains on per optimizer step.
        cost: the window cost model (default :class:`WindowCost`: a Llama-3.2-1B's shape;
            :meth:`WindowCost.from_config` for yours).
        seed: orders cost ties and the steps; the result is deterministic given it.

    Returns a :class:`BalanceResult` (algorithm and leftover policy in the module docs).

    Example:
        >>> from ctxkit import pack_lengths
        >>> plan = pack_lengths([1500, 500, 900, 1100, 2000, 64, 1900, 100], capacity=2048)
        >>> res = balance(plan, ranks=2)
        >>> plan.n_bins, res.n_steps, res.leftover.tolist(), res.max_over_mean < 1.02
        (5, 2, [4], True)
    """
    opts = BalanceOptions(ranks=ranks, windows_per_step=windows_per_step, cost=cost, seed=seed)
    costs = window_costs(plan, opts.cost)
    n, step = costs.size, opts.step_size
    n_steps = n // step
    used = n_steps * step
    rng = np.random.default_rng(opts.seed)
    order = np.lexsort((rng.permutation(n), -costs))
    top = _top_leftovers(costs[order], step)
    kept = order[top:top + used]
    leftover = np.sort(np.concatenate([order[:top], order[top + used:]]))
    best = None
    for name, windows in _formations(kept, n_steps, step, opts.windows_per_step > 1).items():
        groups = _deal(windows, costs, opts.ranks, opts.windows_per_step)
        worst = float(_ratios(costs[groups].sum(axis=2)).max(initial=1.0))
        if best is None or worst < best[0]:
            best = (worst, name, groups)
    worst, formation, groups = best
    groups = groups[rng.permutation(n_steps)]
    loads = costs[groups].sum(axis=2)
    baseline = costs[:used].reshape(n_steps, opts.windows_per_step, opts.ranks).sum(axis=1)
    return BalanceResult(
        steps=groups.tolist(), max_over_mean=worst,
        baseline_max_over_mean=float(_ratios(baseline).max(initial=1.0)), costs=costs,
        leftover=leftover, loads=loads, baseline_loads=baseline, ranks=opts.ranks,
        windows_per_step=opts.windows_per_step, formation=formation,
    )


def balance_lengths(
    lengths: Any,
    *,
    ranks: int,
    tokens_per_rank: int,
    windows_per_step: int = 1,
    cost: WindowCost | None = None,
    seed: int = 0,
    strategy: str = "bfd",
    overflow: str = "error",
) -> BalanceLengthsResult:
    """Token-budget micro-batches for ``ranks`` ranks, with balanced compute per step.

    The setting of a multipack sampler: no fixed window, each rank's micro-batch holds at most
    ``tokens_per_rank`` tokens. The sequences are packed into micro-batches of that budget
    (:func:`ctxkit.pack_lengths` with ``strategy`` and ``overflow``), then the micro-batches
    are dealt to ranks with :func:`balance`.

    Example:
        >>> res = balance_lengths([700, 300, 1000, 200, 800, 1000], ranks=2,
        ...                       tokens_per_rank=1000)
        >>> res.steps, res.leftover.tolist()
        ([[[[4, 3]], [[0, 1]]], [[[5]], [[2]]]], [])
    """
    budget = check_capacity(tokens_per_rank, "tokens_per_rank")
    plan = pack_lengths(lengths, capacity=budget, strategy=strategy, overflow=overflow)
    res = balance(plan, ranks=ranks, windows_per_step=windows_per_step, cost=cost, seed=seed)
    bins = plan.bins
    steps = [[[np.asarray(bins[w]).tolist() for w in rank] for rank in step]
             for step in res.steps]
    left = (np.sort(np.concatenate([np.asarray(bins[w]) for w in res.leftover.tolist()]))
            if res.leftover.size else _EMPTY)
    return BalanceLengthsResult(steps=steps, leftover=left, plan=plan, balance=res)
