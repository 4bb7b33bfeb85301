"""The compiled MinHash loops (numba) give exactly what the numpy paths give."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.deduplication import jaccard, kernels, lsh, minhash, verify
from ctxkit.deduplication import signatures as sigs
from ctxkit.errors import InputError
from evals.dedup_corpus import synthetic_templated

pytestmark = pytest.mark.skipif(not kernels.NUMBA, reason="numba is not installed")


def both(fn):
    """``fn()`` with the compiled loops, then with the numpy paths (a plain switch rather than
    a fixture, as hypothesis runs many examples per test call)."""
    compiled = fn()
    kernels.NUMBA = False
    try:
        reference = fn()
    finally:
        kernels.NUMBA = True
    return compiled, reference


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=60),
    num_perm=st.sampled_from([1, 7, 64, 128, 256]),
    scheme=st.sampled_from(sorted(sigs.SCHEMES)),
    seed=st.integers(0, 2**16),
)
def test_signatures_from_hashes_equal_the_numpy_path(lengths, num_perm, scheme, seed):
    dtype = sigs.SCHEMES[scheme][0]
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    values = np.random.default_rng(seed).integers(
        0, np.iinfo(dtype).max, offsets[-1], dtype=dtype, endpoint=True)
    compiled, reference = both(
        lambda: sigs.signatures_from_hashes(values, offsets, num_perm, seed, scheme))
    assert compiled.dtype == reference.dtype
    np.testing.assert_array_equal(compiled, reference)
    # texts without values keep datasketch's empty signature
    assert (compiled[np.asarray(lengths) == 0] == np.iinfo(dtype).max).all()


def test_signatures_from_hashes_refuse_offsets_past_the_values():
    with pytest.raises(ValueError, match="offsets"):
        sigs.signatures_from_hashes(np.arange(5, dtype=np.uint32), np.array([0, 3, 9]))
    with pytest.raises(ValueError, match="offsets"):
        sigs.signatures_from_hashes(np.arange(5, dtype=np.uint32), np.array([0, 4, 2, 5]))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 40), pairs=st.integers(0, 300), seed=st.integers(0, 2**16))
def test_estimates_and_intersections_equal_the_numpy_paths(n, pairs, seed):
    rng = np.random.default_rng(seed)
    # few distinct entries so that many pairs share some
    sig = rng.integers(0, 4, (n, 128), dtype=np.uint32)
    pair = rng.integers(0, n, (pairs, 2))
    lengths = rng.integers(0, 30, n)
    values = rng.integers(0, 50, lengths.sum(), dtype=np.uint32)
    keys, set_offsets = jaccard.shingle_sets(values, np.r_[0, np.cumsum(lengths)])
    compiled, reference = both(lambda: (
        verify.estimate_jaccard(sig, pair), verify._estimates_at_least(sig, pair, 0.3),
        verify._estimates_at_least(sig, pair, 0.3, strict=True),
        jaccard.pair_jaccard(keys, set_offsets, pair)))
    np.testing.assert_array_equal(compiled[0], reference[0])
    for (at, scores), (ref_at, ref_scores) in zip(compiled[1:3], reference[1:3]):
        np.testing.assert_array_equal(at, ref_at)
        np.testing.assert_array_equal(scores, ref_scores)
    np.testing.assert_array_equal(compiled[3], reference[3])


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 400), distinct=st.integers(1, 500), seed=st.integers(0, 2**16))
def test_shared_buckets_equal_the_numpy_path(n, distinct, seed):
    rng = np.random.default_rng(seed)
    # keys drawn from a few values make true buckets; uniform top bits make chance slot-mates
    col = rng.choice(rng.integers(0, 2**64, distinct, dtype=np.uint64), n)
    counts = np.zeros(1 << lsh._slot_bits(n), dtype=np.uint8)
    compiled, reference = both(lambda: (lsh._shared_buckets(col, counts), lsh._shared_buckets(col)))
    for got in compiled:
        want = reference[0]
        # the same buckets with the same members (the order inside a bucket is free)
        assert got[2].tolist() == want[2].tolist()
        for (s, z), (t, w) in zip(zip(got[1], got[2]), zip(want[1], want[2])):
            assert sorted(got[0][s : s + z]) == sorted(want[0][t : t + w])
            assert len(set(col[got[0][s : s + z]].tolist())) == 1
    assert not counts.any()  # left zero for the next band
    assert sum(compiled[0][2]) == n - len(np.unique(col)) + len(compiled[0][2])


def test_compiled_loops_refuse_rows_out_of_range():
    sig = np.zeros((3, 8), dtype=np.uint32)
    for bad in ([[0, 3]], [[-1, 0]]):
        with pytest.raises(InputError, match="rows"):
            verify.estimate_jaccard(sig, np.array(bad))
    keys, set_offsets = jaccard.shingle_sets(np.arange(4, dtype=np.uint32), np.array([0, 2, 4]))
    with pytest.raises(InputError, match="rows"):
        jaccard.pair_jaccard(keys, set_offsets, np.array([[0, 2]]))


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8])
def test_minhash_dedup_of_templated_records_equals_the_numpy_path(threshold):
    import random

    records = synthetic_templated(600, random.Random(3))
    # records that share a template, and near copies of some of them
    texts = records + [r.replace("query", "the query", 1) + " thanks" for r in records[:150]]
    compiled, reference = both(lambda: minhash.minhash_dedup(texts, threshold))
    np.testing.assert_array_equal(compiled.duplicate_of, reference.duplicate_of)
    np.testing.assert_array_equal(compiled.similarity, reference.similarity)
    assert compiled.info == reference.info
    assert compiled.n_removed > 0


def test_loops_compile_without_a_writable_cache_directory(monkeypatch):
    """numba refuses ``cache=True`` where no cache directory is writable (a read-only
    install); the loops are then compiled per process instead."""
    real = kernels.numba.njit

    def njit(*args, cache=False, **kwargs):
        if cache:
            raise RuntimeError("cannot cache function: no locator available")
        return real(*args, **kwargs)

    monkeypatch.setattr(kernels.numba, "njit", njit)
    count_equal = kernels._compiled(kernels._count_equal)
    out = np.empty(1, dtype=np.int64)
    count_equal(np.array([[1, 2, 3], [1, 0, 3]], dtype=np.uint32), np.array([[0, 1]]), out)
    assert out.tolist() == [2]


def test_ctxkit_no_numba_selects_the_numpy_paths():
    import os
    import subprocess
    import sys

    code = ("from ctxkit.deduplication import kernels\n"
            "from ctxkit.deduplication.minhash import minhash_dedup\n"
            "print(kernels.NUMBA, minhash_dedup(['a b c d e f g', 'a b c d e f g h']).n_removed)")
    env = {**os.environ, "CTXKIT_NO_NUMBA": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=300)
    assert out.stdout.split() == ["False", "1"]
