"""Collation invariants (hypothesis), checked against a slow per-token reference."""

from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxkit.errors import InputError
from ctxkit.packing.collate import IGNORE_INDEX, PackedCollator, collate_plan, pack, pack_arrays
from ctxkit.packing.plan import OVERFLOW_POLICIES, STRATEGIES, PackLengthsResult

SEP = 7
PAD = 3




def _ext(seq, sep):
    seq = list(seq)
    return seq + [sep] if (sep is not None and seq) else seq


def check_invariants(batch, sequences, capacity, *, sep=None, mask=None, overflow="error",
                     label_separators=False, labels=None):
    """Everything the packing contract promises, checked token by token."""
    ext = [_ext(s, sep) for s in sequences]
    ext_len = np.array([len(e) for e in ext], dtype=np.int64)
    n = len(sequences)
    flat = batch.layout == "flat"
    ids, lab, pos, seg = batch.input_ids, batch.labels, batch.position_ids, batch.segment_ids
    rows = ids.shape[0]
    assert ids.shape == lab.shape == pos.shape == seg.shape
    if flat:
        assert rows == 1
    else:
        assert ids.shape[1] == capacity and rows == batch.n_windows

    # reported overflow sets match the policy
    over = set(np.flatnonzero(ext_len > capacity).tolist())
    empty = set(np.flatnonzero(ext_len == 0).tolist())
    assert set(batch.empty.tolist()) == empty
    assert set(batch.dropped.tolist()) == (over if overflow == "drop" else set())
    assert set(batch.truncated.tolist()) == (over if overflow == "truncate" else set())
    if overflow == "split" and batch.strategy != "wrapped":
        assert set(batch.split.tolist()) >= over

    covered = {i: [] for i in range(n)}
    seg_counter = 0
    for r in range(len(batch.pieces)):
        row_off = 0 if not flat else None
        assert len(batch.pieces[r]) == len(batch.sources[r]) == len(batch.seq_lengths[r])
        used = 0
        for k, (i, s, e) in enumerate(batch.pieces[r]):
            assert batch.sources[r][k] == i and batch.seq_lengths[r][k] == e - s > 0
            covered[i].append((s, e))
            used += e - s
        assert used <= capacity
        if not flat:
            row_off = 0
            for k, (i, s, e) in enumerate(batch.pieces[r]):
                span = slice(row_off, row_off + e - s)
                _check_segment(ids[r, span], lab[r, span], pos[r, span], seg[r, span], k + 1,
                               ext[i], s, e, sequences[i], i, sep, mask, label_separators, labels)
                row_off += e - s
            assert (ids[r, row_off:] == PAD).all() and (lab[r, row_off:] == IGNORE_INDEX).all()
            assert (seg[r, row_off:] == 0).all()

    if flat:
        off = 0
        for r in range(len(batch.pieces)):
            for i, s, e in batch.pieces[r]:
                seg_counter += 1
                span = slice(off, off + e - s)
                _check_segment(ids[0, span], lab[0, span], pos[0, span], seg[0, span],
                               seg_counter, ext[i], s, e, sequences[i], i, sep, mask,
                               label_separators, labels)
                off += e - s
        assert off == ids.shape[1]

    # every token exactly once, or reported
    for i in range(n):
        ranges = sorted(covered[i])
        if i in set(batch.dropped.tolist()) or i in empty:
            assert ranges == []
            continue
        want = min(ext_len[i], capacity) if i in set(batch.truncated.tolist()) else ext_len[i]
        pos_ = 0
        for s, e in ranges:
            assert s == pos_, f"input {i}: gap or overlap at {s}"
            pos_ = e
        assert pos_ == want, f"input {i}: {pos_} of {want} tokens placed"
        if len(ranges) > 1:
            assert i in set(batch.split.tolist()) or batch.strategy == "wrapped"

    # cu_seqlens: boundaries over the flattened rows
    cu = batch.cu_seqlens
    assert cu[0] == 0 and cu[-1] == ids.size and cu.dtype == np.int32 and (np.diff(cu) > 0).all()
    flat_seg = (seg.astype(np.int64) + np.arange(rows)[:, None] * 10**6).reshape(-1)
    starts = np.flatnonzero(np.diff(flat_seg, prepend=-1) != 0)
    assert starts.tolist() == cu[:-1].tolist()
    assert batch.max_seqlen == (int(np.diff(cu).max()) if cu.size > 1 else 0)
    # report fields
    assert batch.utilization == pytest.approx(
        batch.total_tokens / (batch.n_windows * capacity) if batch.n_windows else 0.0)
    assert batch.total_tokens == int(sum(int(x.sum()) for x in batch.seq_lengths))
    assert batch.lower_bound == -(-batch.total_tokens // capacity)


def _check_segment(ids, lab, pos, seg, seg_id, ext, s, e, raw, i, sep, mask, label_sep, labels):
    assert ids.tolist() == ext[s:e], f"input {i} tokens [{s}:{e}] misplaced"
    assert pos.tolist() == list(range(e - s))
    assert (seg == seg_id).all()
    for j in range(s, e):
        got = lab[j - s]
        is_sep = sep is not None and j == len(raw)
        if j == s:
            want = IGNORE_INDEX
        elif is_sep:
            want = sep if label_sep else IGNORE_INDEX
        elif mask is not None and mask[i][j] == 0:
            want = IGNORE_INDEX
        else:
            want = labels[i][j] if labels is not None else ext[j]
        assert got == want, f"input {i} token {j}: label {got}, want {want}"


def _mask_reference(batch, causal):
    seg = batch.segment_ids
    rows, length = seg.shape
    ref = np.zeros((rows, 1, length, length), dtype=bool)
    for r in range(rows):
        for q in range(length):
            for k in range(length):
                same = seg[r, q] == seg[r, k] and seg[r, q] > 0 and (not causal or k <= q)
                ref[r, 0, q, k] = same or q == k
    return ref


seqs_st = st.lists(st.lists(st.integers(10, 99), min_size=0, max_size=14), min_size=0,
                   max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seqs=seqs_st,
    capacity=st.integers(1, 16),
    strategy=st.sampled_from(STRATEGIES),
    overflow=st.sampled_from(OVERFLOW_POLICIES),
    use_sep=st.booleans(),
    use_mask=st.booleans(),
    label_separators=st.booleans(),
    layout=st.sampled_from(["padded", "flat"]),
    seed=st.one_of(st.none(), st.integers(0, 5)),
    data=st.data(),
)
def test_pack_invariants(seqs, capacity, strategy, overflow, use_sep, use_mask,
                         label_separators, layout, seed, data):
    sep = SEP if use_sep else None
    mask = [data.draw(st.lists(st.integers(0, 1), min_size=len(s), max_size=len(s)))
            for s in seqs] if use_mask else None
    too_long = any(len(_ext(s, sep)) > capacity for s in seqs)
    if overflow == "error" and too_long and strategy != "wrapped":  # wrapped cuts every input
        with pytest.raises(ValueError, match="capacity"):
            pack(seqs, capacity=capacity, strategy=strategy, separator_id=sep, overflow=overflow)
        return
    batch = pack(seqs, capacity=capacity, strategy=strategy, separator_id=sep, completion_mask=mask,
                 overflow=overflow, pad_id=PAD, seed=seed, layout=layout,
                 label_separators=label_separators)
    check_invariants(batch, seqs, capacity, sep=sep, mask=mask, overflow=overflow,
                     label_separators=label_separators)
    # deterministic given the seed
    again = pack(seqs, capacity=capacity, strategy=strategy, separator_id=sep, completion_mask=mask,
                 overflow=overflow, pad_id=PAD, seed=seed, layout=layout,
                 label_separators=label_separators)
    assert np.array_equal(again.input_ids, batch.input_ids)


@settings(max_examples=40, deadline=None)
@given(seqs=st.lists(st.lists(st.integers(10, 99), min_size=0, max_size=20), max_size=8),
       capacity=st.integers(1, 9), data=st.data())
def test_collate_split_pieces(seqs, capacity, data):
    """Collation of plans whose inputs are cut into pieces (split / wrapped plans)."""
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    pieces_all = []
    for i, n in enumerate(lengths.tolist()):
        cuts = sorted(set(data.draw(st.lists(st.integers(1, max(n - 1, 1)), max_size=3))))
        bounds = [0] + [c for c in cuts if 0 < c < n] + [n]
        for s, e in itertools.pairwise(bounds):
            while e - s > capacity:  # every piece must fit a window
                pieces_all.append((i, s, s + capacity))
                s += capacity
            if e > s:
                pieces_all.append((i, s, e))
    order = data.draw(st.permutations(range(len(pieces_all))))
    bins, cur, used = [], [], 0
    for k in order:
        i, s, e = pieces_all[k]
        if used + e - s > capacity:
            bins.append(cur)
            cur, used = [], 0
        cur.append(pieces_all[k])
        used += e - s
    if cur:
        bins.append(cur)
    multi = {i for i, _, _ in pieces_all if sum(p[0] == i for p in pieces_all) > 1}
    plan = PackLengthsResult(
        bins=[np.array([p[0] for p in b], dtype=np.int64) for b in bins], capacity=capacity,
        total_tokens=int(lengths.sum()), strategy="bfd", lengths=lengths, pieces=bins,
        split=np.array(sorted(multi), dtype=np.int64),
        empty=np.flatnonzero(lengths == 0),
    )
    tokens = np.array([t for s in seqs for t in s], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if seqs else np.zeros(0, np.int64)
    for layout in ("padded", "flat"):
        batch = collate_plan(plan, tokens, offsets, lengths, pad_id=PAD, layout=layout)
        check_invariants(batch, seqs, capacity, overflow="split")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_length_equal_capacity_and_empty(strategy):
    seqs = [[11] * 8, [], [12] * 3, [13] * 5, [], [14] * 8]
    batch = pack(seqs, capacity=8, strategy=strategy, pad_id=PAD)
    check_invariants(batch, seqs, 8)
    assert batch.empty.tolist() == [1, 4]
    assert batch.n_windows == 3 and batch.utilization == 1.0 and batch.padding_tokens == 0


@pytest.mark.parametrize("overflow", OVERFLOW_POLICIES)
def test_overlong_inputs(overflow):
    seqs = [[11] * 12, [12] * 3, [13] * 4]
    if overflow == "error":
        with pytest.raises(ValueError, match="more than capacity 8"):
            pack(seqs, capacity=8, overflow=overflow)
        return
    batch = pack(seqs, capacity=8, overflow=overflow, pad_id=PAD, separator_id=SEP)
    check_invariants(batch, seqs, 8, sep=SEP, overflow=overflow)
    if overflow == "truncate":
        assert batch.truncated.tolist() == [0] and batch.tokens_truncated == 5
    if overflow == "drop":
        assert batch.dropped.tolist() == [0] and batch.total_tokens == 9


def test_attention_mask_block_diagonal():
    seqs = [[11, 12, 13], [14], [15, 16], [17, 18, 19, 20]]
    for layout in ("padded", "flat"):
        batch = pack(seqs, capacity=6, layout=layout, pad_id=PAD)
        for causal in (False, True):
            assert np.array_equal(batch.attention_mask(causal=causal),
                                  _mask_reference(batch, causal))


@settings(max_examples=25, deadline=None)
@given(seqs=st.lists(st.lists(st.integers(10, 99), min_size=0, max_size=7), max_size=6),
       capacity=st.integers(7, 12), causal=st.booleans())
def test_attention_mask_property(seqs, capacity, causal):
    batch = pack(seqs, capacity=capacity, pad_id=PAD)
    assert np.array_equal(batch.attention_mask(causal=causal), _mask_reference(batch, causal))


def test_labels_argument_and_completion_mask():
    seqs = [[11, 12, 13, 14], [21, 22, 23]]
    labels = [[-100, -100, 13, 14], [21, 22, 23]]
    mask = [[1, 1, 1, 0], [0, 1, 1]]
    batch = pack(seqs, capacity=10, completion_mask=mask, labels=labels, separator_id=SEP,
                 label_separators=True, layout="flat", strategy="greedy")
    assert batch.labels.tolist() == [[-100, -100, 13, -100, SEP, -100, 22, 23, SEP]]
    check_invariants(batch, seqs, 10, sep=SEP, mask=mask, label_separators=True, labels=labels)


def test_bad_inputs():
    with pytest.raises(ValueError, match="completion_mask 1 has 2 entries"):
        pack([[1, 2], [3, 4, 5]], capacity=8, completion_mask=[[1, 1], [1, 1]])
    with pytest.raises(ValueError, match="layout"):
        pack([[1]], capacity=8, layout="ragged")
    with pytest.raises(ValueError, match="must hold integers"):
        pack([[1.5, 2.0]], capacity=8)
    with pytest.raises(ValueError, match="capacity"):
        pack([[1]], capacity=0)
    with pytest.raises(ValueError, match="strategy"):
        pack([[1]], capacity=8, strategy="nope")


def test_no_inputs():
    batch = pack([], capacity=8)
    assert batch.input_ids.shape == (0, 8) and batch.n_windows == 0
    assert batch.cu_seqlens.tolist() == [0]
    assert pack([[], []], capacity=8, layout="flat").input_ids.shape == (1, 0)


def test_seq_idx_and_to_torch_padded():
    torch = pytest.importorskip("torch")
    batch = pack([[11, 12], [13, 14, 15], [16]], capacity=4, pad_id=PAD, strategy="greedy")
    assert batch.seq_idx().tolist() == [[0, 0, -1, -1], [1, 1, 1, 2]]
    t = batch.to_torch(attention_mask=True)
    assert set(t) == {"input_ids", "labels", "position_ids", "segment_ids", "attention_mask"}
    assert t["attention_mask"].dtype == torch.bool and t["attention_mask"].shape == (2, 1, 4, 4)
    assert t["input_ids"].dtype == torch.int64


def test_packed_collator():
    torch = pytest.importorskip("torch")
    examples = [
        {"input_ids": [11, 12, 13], "completion_mask": [0, 1, 1]},
        {"input_ids": np.array([21, 22]), "completion_mask": [0, 1]},
        {"input_ids": torch.tensor([31, 32, 33, 34]), "completion_mask": [0, 0, 1, 1]},
    ]
    padded = PackedCollator(capacity=6, separator_id=SEP)(examples)
    assert set(padded) == {"input_ids", "labels", "position_ids", "attention_mask"}
    assert padded["input_ids"].shape[1] == 6
    flat = PackedCollator(capacity=6, layout="flat")(examples)
    assert set(flat) == {"input_ids", "labels", "position_ids"}  # DataCollatorWithFlattening's
    full = PackedCollator(capacity=6, layout="flat", return_flash_attn_kwargs=True,
                          return_seq_idx=True)(examples)
    assert set(full) == {"input_ids", "labels", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k",
                         "max_length_q", "max_length_k", "seq_idx"}
    assert sorted(flat["labels"][flat["labels"] != -100].tolist()) == [12, 13, 22, 33, 34]
    with pytest.raises(ValueError, match="no 'input_ids'"):
        PackedCollator(capacity=6)([{"text": "x"}])
    with pytest.raises(ValueError, match="every example"):
        PackedCollator(capacity=6)([{"input_ids": [1], "labels": [1]}, {"input_ids": [2]}])


# ---------------------------------------------------------------- PackOptions: one source


@pytest.mark.parametrize("capacity", [10**12, 2**63, 2**24 + 1])
def test_absurd_capacity_is_one_line_error_everywhere(capacity):
    from ctxkit.packing.online import OnlinePacker
    from ctxkit.packing.options import PackOptions
    from ctxkit.packing.plan import pack_lengths

    calls = [lambda: PackOptions(capacity=capacity), lambda: pack([[1, 2]], capacity=capacity),
             lambda: pack_arrays(np.array([1]), np.array([1]), capacity=capacity),
             lambda: PackedCollator(capacity=capacity),
             lambda: pack_lengths([3], capacity=capacity),
             lambda: OnlinePacker(capacity=capacity)]
    for call in calls:
        with pytest.raises(ValueError, match=r"^capacity [\d,]+ is more than the 16,777,216 "
                                             r"tokens a window can hold$"):
            call()


@pytest.mark.parametrize("bad, message", [
    (dict(layout="rows"), "layout 'rows' is unknown; choose one of padded, flat"),
    (dict(strategy="bestfit"), "strategy 'bestfit' is unknown; choose one of bfd"),
    (dict(overflow="wrap"), "overflow 'wrap' is unknown"),
    (dict(capacity=0), "capacity must be a positive integer, got 0"),
    (dict(capacity=True), "capacity must be a positive integer, got True"),
    (dict(capacity=64.0), "capacity must be a positive integer, got 64.0"),
    (dict(seed=-1), "seed must be a non-negative integer or None"),
    (dict(separator_id="eos"), "separator_id must be a token id in 0..2,147,483,647 or None"),
    (dict(separator_id=-5), "separator_id must be a token id in 0..2,147,483,647 or None, "
                            "got -5"),
    (dict(separator_id=2**40), "separator_id must be a token id in 0..2,147,483,647 or None"),
    (dict(pad_id=None), "pad_id must be a token id in 0..2,147,483,647, got None"),
    (dict(pad_id=-1), "pad_id must be a token id in 0..2,147,483,647, got -1"),
    (dict(label_separators="yes"), "label_separators must be True or False"),
])
def test_bad_options_same_message_from_every_entry_point(bad, message):
    from ctxkit.packing.options import PackOptions

    opts = {"capacity": 64, **bad}
    for call in (lambda: PackOptions(**opts), lambda: pack([[1, 2]], **opts),
                 lambda: PackedCollator(**opts)):
        with pytest.raises(ValueError, match=re.escape(message)):
            call()


def test_options_object_equals_keywords_and_keywords_override_it():
    from ctxkit.packing.options import PackOptions

    rng = np.random.default_rng(3)
    seqs = [rng.integers(1, 50, int(n)).tolist() for n in rng.integers(0, 40, 60)]
    opts = PackOptions(capacity=64, strategy="ffd", separator_id=0, seed=7, layout="flat",
                       overflow="split", label_separators=True, pad_id=9)
    by_kw = pack(seqs, capacity=64, strategy="ffd", separator_id=0, seed=7, layout="flat",
                 overflow="split", label_separators=True, pad_id=9)
    by_opts = pack(seqs, options=opts)
    for name in ("input_ids", "labels", "position_ids", "segment_ids", "cu_seqlens"):
        np.testing.assert_array_equal(getattr(by_opts, name), getattr(by_kw, name))
    # a keyword that differs from the default overrides the options
    reseeded = pack(seqs, options=opts, seed=8)
    np.testing.assert_array_equal(reseeded.input_ids, pack(seqs, options=opts.replace(seed=8))
                                  .input_ids)
    assert not np.array_equal(reseeded.segment_input, by_opts.segment_input)
    assert PackOptions.resolve(opts, capacity=None) is opts
    collate = PackedCollator(options=opts)
    assert collate.options == opts
    np.testing.assert_array_equal(
        collate.pack([{"input_ids": s} for s in seqs]).input_ids, by_kw.input_ids)
    with pytest.raises(InputError, match="needs capacity"):
        PackedCollator()
    with pytest.raises(TypeError, match="unknown packing option"):
        PackOptions.resolve(None, capacity=8, window=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.capacity = 8


def test_a_broken_plan_is_an_internal_error_not_lost_tokens():
    """A plan that places an input twice (a bug of ours, not the user's) raises InternalError,
    which the CLI reports with exit status 3 and a request for a bug report."""
    from ctxkit.errors import InternalError

    lengths = np.array([3, 2], dtype=np.int64)
    twice = PackLengthsResult(bins=[np.array([0, 0], dtype=np.int64),
                                    np.array([1], dtype=np.int64)],
                              capacity=8, total_tokens=8, strategy="bfd", lengths=lengths)
    tokens = np.array([11, 11, 11, 12, 12], dtype=np.int64)
    with pytest.raises(InternalError, match="placed 6 of input 0.s 3 tokens"):
        collate_plan(twice, tokens, np.array([0, 3]), lengths, pad_id=PAD)


@pytest.mark.parametrize("seqs, message", [
    ([[1, 2**40]], "sequence 0 holds the token id 1,099,511,627,776, above 2,147,483,647"),
    ([[1], [2**31]], "sequence 1 holds the token id 2,147,483,648"),
    ([np.array([2**63], dtype=np.uint64)], "sequence 0 holds the token id "
                                           "9,223,372,036,854,775,808"),
    ([[3, -2]], "sequence 0 holds the negative token id -2"),
])
def test_token_ids_out_of_range_are_refused_not_written(seqs, message):
    """An id no vocabulary has would be written into input_ids and fail only in the model."""
    with pytest.raises(InputError, match=re.escape(message)):
        pack(seqs, capacity=8)
    from ctxkit.packing.collate import pack_arrays

    flat = np.concatenate([np.asarray(s) for s in seqs])
    with pytest.raises(InputError, match="tokens holds the"):
        pack_arrays(flat, np.array([len(s) for s in seqs]), capacity=8)
