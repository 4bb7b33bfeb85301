"""Length-grouped padded batches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.packing.batching import length_grouped_batches


@settings(max_examples=100, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 50), max_size=80),
    budget=st.integers(50, 400),
    max_rows=st.one_of(st.none(), st.integers(1, 9)),
    seed=st.one_of(st.none(), st.integers(0, 9)),
)
def test_every_input_in_one_batch_within_budget(lengths, budget, max_rows, seed):
    res = length_grouped_batches(lengths, batch_tokens=budget, max_rows=max_rows, seed=seed)
    arr = np.asarray(lengths, np.int64)
    seen = np.concatenate(res.batches) if res.batches else np.zeros(0, np.int64)
    assert sorted(seen.tolist()) == np.flatnonzero(arr > 0).tolist()
    assert res.empty.tolist() == np.flatnonzero(arr == 0).tolist()
    padded = 0
    for b in res.batches:
        assert len(b) * arr[b].max() <= budget
        if max_rows is not None:
            assert len(b) <= max_rows
        padded += len(b) * int(arr[b].max())
    assert res.padded_tokens == padded and res.real_tokens == int(arr.sum())
    if res.batches:
        assert 0 < res.utilization <= 1
    again = length_grouped_batches(lengths, batch_tokens=budget, max_rows=max_rows, seed=seed)
    assert [b.tolist() for b in again.batches] == [b.tolist() for b in res.batches]


def test_grouping_by_length_beats_input_order_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(10, 500, 2000)
    res = length_grouped_batches(lengths, batch_tokens=4096)
    assert res.utilization > 0.95
    naive = sum(16 * lengths[i:i + 16].max() for i in range(0, 2000, 16))
    assert res.padded_tokens < naive


def test_errors_name_the_input():
    with pytest.raises(ValueError, match="input 1 has 300 tokens, more than batch_tokens 256"):
        length_grouped_batches([3, 300], batch_tokens=256)
    with pytest.raises(ValueError, match="batch_tokens must be a positive integer"):
        length_grouped_batches([3], batch_tokens=0)
    with pytest.raises(ValueError, match="negative"):
        length_grouped_batches([3, -1], batch_tokens=10)
    empty = length_grouped_batches([], batch_tokens=10)
    assert empty.n_batches == 0 and empty.utilization == 0.0
