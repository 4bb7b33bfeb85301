"""Interop: the flat layout against transformers' DataCollatorWithFlattening, pack_dataset."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.errors import InputError
from ctxkit.packing.collate import PackedCollator, pack
from ctxkit.packing.hf import packed_table

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
DataCollatorWithFlattening = transformers.DataCollatorWithFlattening


def _ordered_features(batch, sequences, labels=None):
    """The inputs in the order the batch laid them out, as the reference collator takes them."""
    feats = []
    for row in batch.pieces:
        for i, s, e in row:
            f = {"input_ids": list(sequences[i][s:e])}
            if labels is not None:
                f["labels"] = list(labels[i][s:e])
            feats.append(f)
    return feats


def _assert_same(ours: dict, ref: dict):
    assert set(ours) == set(ref)
    for key, value in ref.items():
        got = ours[key]
        if isinstance(value, torch.Tensor):
            assert isinstance(got, torch.Tensor), key
            assert got.dtype == value.dtype and got.shape == value.shape, key
            assert torch.equal(got, value), key
        elif isinstance(value, np.ndarray):
            assert isinstance(got, np.ndarray) and got.dtype == value.dtype, key
            assert np.array_equal(got, value), key
        else:
            assert type(got) is type(value) and got == value, key


REF = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_seq_idx=True)


@settings(max_examples=40, deadline=None)
@given(
    seqs=st.lists(st.lists(st.integers(1, 500), min_size=0, max_size=30), min_size=1,
                  max_size=10),
    capacity=st.integers(31, 64),
    strategy=st.sampled_from(["bfd", "ffd", "greedy", "optimal"]),
    seed=st.one_of(st.none(), st.integers(0, 3)),
    sep=st.sampled_from([None, 0, 2]),
)
def test_flat_layout_matches_data_collator_with_flattening(seqs, capacity, strategy, seed, sep):
    if not any(seqs):
        return  # the reference refuses a batch of only empty examples
    batch = pack(seqs, capacity=capacity, strategy=strategy, layout="flat", seed=seed,
                 separator_id=sep)
    if sep is None:
        feats = _ordered_features(batch, seqs)
    else:  # the separator is part of its segment and masked from the loss
        ext = [s + [sep] if s else s for s in seqs]
        feats = _ordered_features(batch, ext, [s[:-1] + [-100] if s else s for s in ext])
    _assert_same(batch.to_torch(), REF(feats, return_tensors="pt"))
    _assert_same(batch.as_dict(), REF(feats, return_tensors="np"))


def test_flat_layout_with_labels_matches_reference():
    seqs = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    mask = [[0, 0, 1, 1], [1, 1], [0, 1, 1]]
    labels = [[t if m else -100 for t, m in zip(s, mk)] for s, mk in zip(seqs, mask)]
    batch = pack(seqs, capacity=16, completion_mask=mask, layout="flat")
    _assert_same(batch.to_torch(), REF(_ordered_features(batch, seqs, labels)))
    collated = PackedCollator(capacity=16, layout="flat", return_flash_attn_kwargs=True,
                              return_seq_idx=True)(
        [{"input_ids": s, "completion_mask": m} for s, m in zip(seqs, mask)])
    # the collator keeps the examples' order when they fit one window, as the reference does
    _assert_same(collated, REF([{"input_ids": s, "labels": lb} for s, lb in zip(seqs, labels)]))


def test_padded_rows_flatten_to_the_reference():
    """Each padded window, trimmed of padding, is the reference flattening of its segments."""
    seqs = [[1] * 5, [2] * 9, [3] * 3, [4] * 7, [5] * 2]
    batch = pack(seqs, capacity=12, strategy="bfd")
    for r, row in enumerate(batch.pieces):
        used = sum(e - s for _, s, e in row)
        ref = REF([{"input_ids": seqs[i][s:e]} for i, s, e in row])
        assert batch.input_ids[r, :used].tolist() == ref["input_ids"][0].tolist()
        assert batch.labels[r, :used].tolist() == ref["labels"][0].tolist()
        assert batch.position_ids[r, :used].tolist() == ref["position_ids"][0].tolist()


datasets = pytest.importorskip("datasets")


def test_pack_dataset_roundtrip():
    rng = np.random.default_rng(0)
    seqs = [rng.integers(1, 1000, size=int(n)).tolist() for n in rng.integers(0, 40, size=60)]
    masks = [[0] * (len(s) // 2) + [1] * (len(s) - len(s) // 2) for s in seqs]
    ds = datasets.Dataset.from_dict({
        "input_ids": seqs, "completion_mask": masks, "rid": [f"r{i}" for i in range(60)]})
    packed, batch = pack_dataset_both(ds)
    assert packed.num_rows == batch.n_windows
    # completion_mask is per-token: packed alongside the tokens, as TRL packs it
    assert set(packed.column_names) == {"input_ids", "completion_mask", "labels", "position_ids",
                                        "segment_ids", "seq_lengths", "source_ids",
                                        "source_ranges"}
    seen = {}
    for row in packed:
        assert len(row["input_ids"]) == sum(row["seq_lengths"]) <= 48
        off = 0
        for rid, (s, e), n in zip(row["source_ids"], row["source_ranges"], row["seq_lengths"]):
            i = int(rid[1:])
            assert e - s == n
            assert row["input_ids"][off:off + n] == seqs[i][s:e]
            assert row["position_ids"][off:off + n] == list(range(n))
            assert row["completion_mask"][off:off + n] == masks[i][s:e]
            want = [-100] + [t if m else -100 for t, m in zip(seqs[i][s + 1:e], masks[i][s + 1:e])]
            assert row["labels"][off:off + n] == want
            seen[i] = seen.get(i, 0) + n
            off += n
    assert seen == {i: len(s) for i, s in enumerate(seqs) if s}
    assert sorted(batch.empty.tolist()) == [i for i, s in enumerate(seqs) if not s]


def pack_dataset_both(ds):
    from ctxkit.packing.hf import pack_dataset

    return pack_dataset(ds, capacity=48, id_column="rid", seed=1, return_batch=True)


def test_pack_dataset_padded_and_dict():
    from ctxkit.packing.hf import pack_dataset

    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6]]})
    rows = pack_dataset(ds, capacity=4, layout="padded", separator_id=0, pad_id=99)[:]
    assert rows["input_ids"] == [[1, 2, 3, 0], [4, 5, 0, 99], [6, 0, 99, 99]]
    assert rows["segment_ids"] == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]]
    assert rows["labels"] == [[-100, 2, 3, -100], [-100, 5, -100, -100], [-100] * 4]
    dd = datasets.DatasetDict({"train": ds, "test": ds.select([0])})
    out = pack_dataset(dd, capacity=4)
    assert set(out) == {"train", "test"} and out["test"]["input_ids"][:] == [[1, 2, 3]]


def test_pack_dataset_errors():
    from ctxkit.packing.hf import pack_dataset

    ds = datasets.Dataset.from_dict({"text": ["a", "b"]})
    with pytest.raises(ValueError, match="no column 'input_ids'"):
        pack_dataset(ds, capacity=8)
    with pytest.raises(ValueError, match="lists of token ids"):
        pack_dataset(ds, capacity=8, column="text")
    bad = datasets.Dataset.from_dict({"input_ids": [[1, 2], [3]], "completion_mask": [[1], [1]]})
    with pytest.raises(ValueError, match="row 0: completion_mask has 1 entries"):
        pack_dataset(bad, capacity=8)
    with pytest.raises(ValueError, match="more than capacity"):
        pack_dataset(datasets.Dataset.from_dict({"input_ids": [[1] * 9]}), capacity=8)
    with pytest.raises(InputError, match="datasets.Dataset or IterableDataset"):
        pack_dataset([[1, 2]], capacity=8)


def test_trl_padding_free_collator_reads_packed_rows():
    """TRL's padding-free collator turns our rows into the same flat batch we build."""
    trl_sft = pytest.importorskip("trl.trainer.sft_trainer")
    from ctxkit.packing.hf import pack_dataset

    seqs = [[11, 12, 13], [21, 22, 23, 24], [31, 32], [41, 42, 43, 44, 45]]
    ds = datasets.Dataset.from_dict({"input_ids": seqs})
    packed = pack_dataset(ds, capacity=8)
    collator = trl_sft.DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)
    examples = [{k: packed[r][k] for k in ("input_ids", "labels", "seq_lengths")}
                for r in range(packed.num_rows)]
    got = collator(examples)
    ours = pack(seqs, capacity=8, layout="flat").to_torch()
    for key in ("input_ids", "labels", "position_ids", "cu_seq_lens_q", "seq_idx"):
        assert torch.equal(got[key], ours[key]), key
    assert got["max_length_q"] == ours["max_length_q"]


def test_packed_table_ids_and_ranges():
    batch = pack([[1, 2, 3], [4]], capacity=8, separator_id=9, strategy="greedy")
    table = packed_table(batch, ids=["x", "y"])
    assert table.column("source_ids").to_pylist() == [["x", "y"]]
    assert table.column("source_ranges").to_pylist() == [[[0, 4], [0, 2]]]
    assert table.column("input_ids").to_pylist() == [[1, 2, 3, 9, 4, 9, 0, 0]]


def test_pack_dataset_without_datasets_installed(monkeypatch):
    import sys

    from ctxkit.packing.hf import pack_dataset

    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'ctxkit\[hf\]'"):
        pack_dataset(object(), capacity=8)
