"""Packing plans: invariants for every strategy and overflow policy, and equivalence with
plain item-by-item reference implementations of BFD, FFD and next-fit."""

from __future__ import annotations

import bisect

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxkit.errors import InputError
from ctxkit.packing.optimal import cutting_stock
from ctxkit.packing.plan import (
    OVERFLOW_POLICIES,
    STRATEGIES,
    BinList,
    PackLengthsResult,
    pack_lengths,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- references


def ref_bfd(lengths: list[int], capacity: int) -> tuple[int, list[int]]:
    """Item-by-item best-fit decreasing: (windows, sorted free space of the windows)."""
    free: list[tuple[int, int]] = []
    bins: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        size = lengths[i]
        pos = bisect.bisect_left(free, (size, -1))
        if pos < len(free):
            remaining, b = free.pop(pos)
        else:
            remaining, b = capacity, len(bins)
            bins.append(capacity)
        bins[b] = remaining - size
        bisect.insort(free, (remaining - size, b))
    return len(bins), sorted(bins)


def ref_ffd(lengths: list[int], capacity: int) -> list[list[int]]:
    bins: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for b, r in enumerate(free):
            if r >= lengths[i]:
                bins[b].append(i)
                free[b] -= lengths[i]
                break
        else:
            bins.append([i])
            free.append(capacity - lengths[i])
    return bins


def ref_next_fit(lengths: list[int], capacity: int) -> list[list[int]]:
    bins: list[list[int]] = []
    used = capacity
    for i, size in enumerate(lengths):
        if used + size > capacity:
            bins.append([])
            used = 0
        bins[-1].append(i)
        used += size
    return bins


@st.composite
def fitting(draw, max_cap: int = 64, max_n: int = 80):
    cap = draw(st.integers(1, max_cap))
    lengths = draw(st.lists(st.integers(1, cap), max_size=max_n))
    return lengths, cap


@st.composite
def any_lengths(draw, max_cap: int = 40, max_n: int = 40):
    """Lengths with zeros, lengths equal to capacity, and lengths beyond it."""
    cap = draw(st.integers(1, max_cap))
    item = st.one_of(
        st.integers(0, cap), st.just(0), st.just(cap), st.integers(cap + 1, 4 * cap + 3)
    )
    return draw(st.lists(item, max_size=max_n)), cap


# --------------------------------------------------------------------------- equivalence


@SETTINGS
@given(fitting())
def test_bfd_matches_item_by_item_bfd(case):
    lengths, cap = case
    plan = pack_lengths(lengths, capacity=cap, strategy="bfd")
    n_ref, free_ref = ref_bfd(lengths, cap)
    assert plan.n_bins == n_ref
    free = sorted(cap - int(np.asarray(lengths, np.int64)[b].sum()) for b in plan.bins)
    assert free == free_ref  # same free-space profile: ties only swap equal windows


@SETTINGS
@given(fitting(max_cap=200, max_n=300))
def test_bfd_matches_on_many_duplicates(case):
    lengths, cap = case
    lengths = [1 + (x % max(1, cap // 3)) for x in lengths] * 3  # few distinct, many copies
    assert pack_lengths(lengths, capacity=cap, strategy="bfd").n_bins == ref_bfd(lengths, cap)[0]


@SETTINGS
@given(fitting())
def test_ffd_matches_item_by_item_ffd_exactly(case):
    lengths, cap = case
    plan = pack_lengths(lengths, capacity=cap, strategy="ffd")
    assert [b.tolist() for b in plan.bins] == ref_ffd(lengths, cap)


@SETTINGS
@given(fitting())
def test_greedy_is_next_fit_in_input_order(case):
    lengths, cap = case
    plan = pack_lengths(lengths, capacity=cap, strategy="greedy")
    assert [b.tolist() for b in plan.bins] == ref_next_fit(lengths, cap)


def test_bfd_long_windows_against_reference():
    # long-context capacities: free-space levels are sparse
    rng = np.random.default_rng(1)
    for cap in (2**17, 10**6):
        lengths = rng.integers(1, cap // 3, 400)
        lengths[::7] = lengths[3]  # some repeated lengths too
        assert pack_lengths(lengths, capacity=cap).n_bins == ref_bfd(lengths.tolist(), cap)[0]


def test_bfd_large_random_against_reference():
    rng = np.random.default_rng(0)
    for cap in (512, 2048):
        lengths = rng.integers(1, cap + 1, 3000) // rng.integers(1, 8, 3000) + 1
        lengths = np.minimum(lengths, cap)
        assert pack_lengths(lengths, capacity=cap).n_bins == ref_bfd(lengths.tolist(), cap)[0]


# --------------------------------------------------------------------------- invariants


def check_plan(plan: PackLengthsResult, lengths: list[int], cap: int, overflow: str) -> None:
    arr = np.asarray(lengths, np.int64)
    n = arr.size
    segs = plan.segments()
    assert len(segs) == plan.n_bins
    covered: dict[int, list[tuple[int, int]]] = {}
    for b, (row, idx) in enumerate(zip(segs, plan.bins)):
        assert [i for i, _, _ in row] == np.asarray(idx).tolist()
        assert sum(stop - start for _, start, stop in row) <= cap
        assert row, f"window {b} is empty"
        for i, start, stop in row:
            assert 0 <= start < stop
            covered.setdefault(i, []).append((start, stop))
    reported = set(plan.empty.tolist()) | set(plan.dropped.tolist())
    assert set(plan.empty.tolist()) == set(np.flatnonzero(arr == 0).tolist())
    for i in range(n):
        ranges = sorted(covered.get(i, []))
        if i in reported:
            assert not ranges, f"input {i} is reported but placed"
            continue
        want = min(arr[i], cap) if i in set(plan.truncated.tolist()) else arr[i]
        # every token exactly once: ranges tile [0, want) without overlap
        pos = 0
        for start, stop in ranges:
            assert start == pos
            pos = stop
        assert pos == want, (i, ranges, want)
    assert plan.total_tokens == sum(stop - start for row in segs for _, start, stop in row)
    assert plan.lower_bound <= plan.n_bins
    assert plan.padding_tokens == plan.n_bins * cap - plan.total_tokens
    if plan.n_bins:
        assert 0 < plan.utilization <= 1
    over = np.flatnonzero(arr > cap)
    if overflow == "truncate":
        assert plan.truncated.tolist() == over.tolist()
        assert plan.tokens_truncated == int((arr[over] - cap).sum())
    if overflow == "drop":
        assert plan.dropped.tolist() == over.tolist()
    if overflow == "split" and plan.strategy != "wrapped":
        assert plan.split.tolist() == over.tolist()
    for i in plan.split.tolist():
        assert len(covered[i]) > 1


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("overflow", OVERFLOW_POLICIES)
@SETTINGS
@given(case=any_lengths())
def test_every_token_placed_once_or_reported(strategy, overflow, case):
    lengths, cap = case
    too_long = [i for i, n in enumerate(lengths) if n > cap]
    if overflow == "error" and too_long and strategy != "wrapped":
        with pytest.raises(ValueError, match=f"input {too_long[0]} has {lengths[too_long[0]]} "):
            pack_lengths(lengths, capacity=cap, strategy=strategy, overflow=overflow)
        return
    plan = pack_lengths(lengths, capacity=cap, strategy=strategy, overflow=overflow)
    check_plan(plan, lengths, cap, overflow)


@pytest.mark.parametrize("strategy", STRATEGIES)
@SETTINGS
@given(case=any_lengths(), seed=st.integers(0, 2**32 - 1))
def test_seed_shuffles_windows_deterministically(strategy, case, seed):
    lengths, cap = case
    a = pack_lengths(lengths, capacity=cap, strategy=strategy, overflow="split", seed=seed)
    b = pack_lengths(lengths, capacity=cap, strategy=strategy, overflow="split", seed=seed)
    plain = pack_lengths(lengths, capacity=cap, strategy=strategy, overflow="split")
    assert a.segments() == b.segments()
    # shuffling only reorders the windows
    assert sorted(map(tuple, a.segments())) == sorted(map(tuple, plain.segments()))
    check_plan(a, lengths, cap, "split")


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != "wrapped"])
def test_error_names_first_too_long_input(strategy):
    with pytest.raises(ValueError, match=r"input 2 has 9 tokens, more than capacity 8"):
        pack_lengths([3, 8, 9, 12], capacity=8, strategy=strategy)


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != "wrapped"])
def test_lengths_equal_to_capacity_fill_a_window_alone(strategy):
    plan = pack_lengths([8, 3, 5, 8], capacity=8, strategy=strategy)
    rows = [sorted(b.tolist()) for b in plan.bins]
    assert [0] in rows and [3] in rows
    assert plan.n_bins == 3 and plan.lower_bound == 3


def test_wrapped_fills_every_window_but_the_last():
    plan = pack_lengths([8, 3, 8, 5], capacity=8, strategy="wrapped")
    assert plan.segments() == [[(0, 0, 8)], [(1, 0, 3), (2, 0, 5)], [(2, 5, 8), (3, 0, 5)]]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_zero_length_and_empty_inputs(strategy):
    plan = pack_lengths([0, 4, 0], capacity=8, strategy=strategy)
    assert plan.empty.tolist() == [0, 2]
    assert [b.tolist() for b in plan.bins] == [[1]]
    none = pack_lengths([], capacity=8, strategy=strategy)
    assert none.n_bins == 0 and none.utilization == 0.0 and none.segments() == []
    zeros = pack_lengths([0, 0], capacity=8, strategy=strategy)
    assert zeros.n_bins == 0 and zeros.empty.tolist() == [0, 1]


def test_wrapped_concatenates_and_cuts():
    plan = pack_lengths([5, 7, 2], capacity=4, strategy="wrapped")
    assert plan.segments() == [
        [(0, 0, 4)], [(0, 4, 5), (1, 0, 3)], [(1, 3, 7)], [(2, 0, 2)]
    ]
    assert plan.split.tolist() == [0, 1]
    assert plan.n_bins == plan.lower_bound


def test_split_pieces_are_packed_as_items():
    plan = pack_lengths([10, 3], capacity=8, strategy="bfd", overflow="split")
    assert plan.segments() == [[(0, 0, 8)], [(1, 0, 3), (0, 8, 10)]]
    assert plan.split.tolist() == [0]


def test_truncate_and_drop_report():
    t = pack_lengths([10, 3], capacity=8, overflow="truncate")
    assert t.truncated.tolist() == [0] and t.tokens_truncated == 2
    assert t.segments() == [[(0, 0, 8)], [(1, 0, 3)]]
    d = pack_lengths([10, 3], capacity=8, overflow="drop")
    assert d.dropped.tolist() == [0] and d.segments() == [[(1, 0, 3)]]
    assert d.total_tokens == 3


def test_optimal_beats_bfd_where_bfd_is_not_optimal():
    lengths = [8, 3, 6, 7, 5, 7, 2, 7, 4, 2, 4, 4]  # BFD: 6 windows; 5 = lower bound is reachable
    bfd = pack_lengths(lengths, capacity=12, strategy="bfd")
    opt = pack_lengths(lengths, capacity=12, strategy="optimal")
    assert bfd.n_bins == 6 and opt.n_bins == opt.lower_bound == 5
    check_plan(opt, lengths, 12, "error")


def test_optimal_reaches_the_lp_bound_with_many_copies():
    lengths = np.array([8, 3, 6, 7, 5, 7, 2, 7, 4, 2, 4, 4] * 200)
    res = cutting_stock(lengths, 12)
    # the LP proves 1000 windows are needed (more than ceil(total / 12) = 984); BFD needs 1017
    assert res.lp_optimal and res.lp_bound == res.n_bins == 1000
    bfd = pack_lengths(lengths, capacity=12).n_bins
    assert pack_lengths(lengths, capacity=12, strategy="optimal").n_bins == 1000 < bfd


@settings(max_examples=15, deadline=None)
@given(fitting(max_cap=40, max_n=60))
def test_optimal_is_never_worse_than_bfd(case):
    lengths, cap = case
    bfd = pack_lengths(lengths, capacity=cap).n_bins
    assert pack_lengths(lengths, capacity=cap, strategy="optimal").n_bins <= bfd


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"lengths": [1, -2]}, "input 1 has negative length -2"),
        ({"lengths": [1.5]}, "must be integers"),
        ({"lengths": [[1, 2]]}, "1-D"),
        ({"lengths": [1], "capacity": 0}, "capacity must be a positive integer"),
        ({"lengths": [1], "capacity": 2.0}, "capacity must be a positive integer"),
        ({"lengths": [1], "strategy": "best"}, "strategy 'best' is unknown"),
        ({"lengths": [1], "overflow": "wrap"}, "overflow 'wrap' is unknown"),
    ],
)
def test_bad_input_is_a_clear_error(bad, message):
    with pytest.raises(ValueError, match=message):
        pack_lengths(**bad)


def test_binlist_behaves_like_a_list_of_arrays():
    plan = pack_lengths([3, 5, 2, 6], capacity=8)
    assert isinstance(plan.bins, BinList)
    assert len(plan.bins) == 2 and plan.bins[-1].tolist() == [1, 0]
    assert [b.tolist() for b in plan.bins[0:1]] == [[3, 2]]
    assert plan.bins[0].dtype == np.int64
    with pytest.raises(IndexError):
        plan.bins[2]
    # a plan built by hand with a plain list works too
    hand = PackLengthsResult(bins=[np.array([0])], capacity=8, total_tokens=3, strategy="bfd",
                    lengths=np.array([3]))
    assert hand.segments() == [[(0, 0, 3)]] and hand.n_bins == 1


@pytest.mark.parametrize("kw", [{"overflow": "split"}, {"strategy": "wrapped"}])
def test_a_cut_beyond_the_piece_bound_is_refused_before_allocating(kw):
    """10**12 tokens in 8-token windows would be 1.25e11 pieces (it tried to allocate 931 GiB)."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"125,000,000,00\d pieces of at most 8 tokens; a "
                                             r"plan holds at most 67,108,864"):
            pack_lengths([10**12], capacity=8, **kw)
        assert tracemalloc.get_traced_memory()[1] < 2**20
    finally:
        tracemalloc.stop()
    from ctxkit.packing.plan import MAX_PIECES

    plan = pack_lengths([8 * 1000 + 3, 5], capacity=8, **kw)  # below the bound: cut as ever
    assert plan.total_tokens == 8008 and plan.n_bins <= MAX_PIECES
