"""ctxkit in the place of its peers, on the cases their own suites exercise.

Each case runs the installed peer (transformers' ``DataCollatorWithFlattening``, TRL's
``pack_dataset`` and padding-free ``DataCollatorForLanguageModeling``) beside ctxkit and asserts
equality where ctxkit claims it, or the documented difference where it does not: ctxkit's
packed datasets carry more columns (``labels``, ``position_ids``, ``segment_ids``,
``source_ids``, ``source_ranges``) and always name the token column ``input_ids``; a Dataset
is packed with one global plan where TRL packs each block of 1,000 rows; a mini-batch that
needs several windows is laid out window after window.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from ctxkit import PackedCollator
from ctxkit.errors import InputError, OptionError
from ctxkit.packing.hf import pack_dataset

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
trl_data = pytest.importorskip("trl.data_utils")
trl_sft = pytest.importorskip("trl.trainer.sft_trainer")

Flattening = transformers.DataCollatorWithFlattening
TRLCollator = trl_sft.DataCollatorForLanguageModeling
datasets.disable_progress_bars()

# what ctxkit's packed datasets add to TRL's columns
ADDED = {"labels", "position_ids", "segment_ids", "source_ids", "source_ranges"}


def assert_same_batch(ours: dict, ref: dict) -> None:
    """Same keys, and per key the same type, dtype, shape and values."""
    assert set(ours) == set(ref)
    for key, want in ref.items():
        got = ours[key]
        assert type(got) is type(want), key
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and got.shape == want.shape, key
            assert torch.equal(got, want), key
        elif isinstance(want, np.ndarray):
            assert got.dtype == want.dtype and got.shape == want.shape, key
            assert np.array_equal(got, want), key
        else:
            assert got == want, key


# ------------------------------------------------- transformers' DataCollatorWithFlattening

FEATURES = [{"input_ids": [10, 11, 12]}, {"input_ids": [20, 21, 22, 23, 24, 25]},
            {"input_ids": [30, 31, 32, 33, 34, 35, 36]}]


@pytest.mark.parametrize("return_tensors", ["pt", "np"])
@pytest.mark.parametrize("flags", [{}, {"return_flash_attn_kwargs": True},
                                   {"return_seq_idx": True},
                                   {"return_flash_attn_kwargs": True, "return_seq_idx": True}])
def test_flat_collator_equals_flattening(flags, return_tensors):
    """Basic flattening, flash-attention kwargs, seq_idx, numpy output: same keys and values."""
    ref = Flattening(return_tensors=return_tensors, **flags)(copy.deepcopy(FEATURES))
    ours = PackedCollator(capacity=16, layout="flat", return_tensors=return_tensors,
                          **flags)(copy.deepcopy(FEATURES))
    assert_same_batch(ours, ref)
    if not flags:  # the reference's defaults: no mask, no boundaries, no seq_idx
        assert set(ours) == {"input_ids", "labels", "position_ids"}
    # return_tensors per call, as the reference takes it
    other = "np" if return_tensors == "pt" else "pt"
    assert_same_batch(PackedCollator(capacity=16, layout="flat", **flags)(
        copy.deepcopy(FEATURES), return_tensors=other),
        Flattening(**flags)(copy.deepcopy(FEATURES), return_tensors=other))


def test_flat_collator_keeps_the_given_order():
    """The issue's case: the reference keeps the order; so does ctxkit when the batch fits."""
    feats = [{"input_ids": [4, 5]}, {"input_ids": [1, 2, 3]}]
    ours = PackedCollator(capacity=8, layout="flat")(feats)
    assert ours["input_ids"].tolist() == [[4, 5, 1, 2, 3]]
    assert_same_batch(ours, Flattening()(feats))


@pytest.mark.parametrize("as_tensor", [False, True])
def test_flat_collator_with_labels_equals_flattening(as_tensor):
    wrap = torch.tensor if as_tensor else list
    feats = [{"input_ids": wrap([1, 2, 3]), "labels": wrap([10, 11, 12])},
             {"input_ids": wrap([4, 5]), "labels": wrap([13, 14])}]
    ours = PackedCollator(capacity=5, layout="flat")(feats)
    assert_same_batch(ours, Flattening()(feats))
    assert ours["labels"].tolist() == [[-100, 11, 12, -100, 14]]


@pytest.mark.parametrize("return_tensors", ["pt", "np"])
def test_flat_collator_leaves_its_input_alone(return_tensors):
    feats = [{"input_ids": [1, 2, 3], "labels": [1, 2, 3]},
             {"input_ids": np.array([4, 5]), "labels": np.array([4, 5])}]
    before = copy.deepcopy(feats)
    PackedCollator(capacity=8, layout="flat", return_tensors=return_tensors)(feats)
    assert [f["input_ids"].tolist() if isinstance(f["input_ids"], np.ndarray) else f["input_ids"]
            for f in feats] == [[1, 2, 3], [4, 5]]
    for f, b in zip(feats, before):
        assert set(f) == set(b)
        for k in f:
            assert np.array_equal(np.asarray(f[k]), np.asarray(b[k]))


def test_flat_collator_equals_flattening_on_random_batches():
    """Every mini-batch that fits one window, empty examples included (both leave them out)."""
    rng = np.random.default_rng(0)
    ref = Flattening(return_flash_attn_kwargs=True, return_seq_idx=True)
    ours = PackedCollator(capacity=256, layout="flat", return_flash_attn_kwargs=True,
                          return_seq_idx=True)
    for _ in range(60):
        feats = [{"input_ids": rng.integers(1, 1000, int(n)).tolist()}
                 for n in rng.integers(0, 30, int(rng.integers(1, 9)))]
        if not any(f["input_ids"] for f in feats):
            continue  # the reference refuses a batch of only empty examples
        if rng.random() < 0.5:
            for f in feats:
                f["labels"] = [t if rng.random() < 0.7 else -100 for t in f["input_ids"]]
        assert_same_batch(ours(feats), ref(feats))


def test_flat_collator_over_one_window_is_planned():
    """Documented difference: a batch over ``capacity`` is planned into windows, laid out one
    after the other; it equals the reference on the examples in that order."""
    feats = [{"input_ids": [1] * 5}, {"input_ids": [2] * 2}, {"input_ids": [3] * 6},
             {"input_ids": [4] * 3}]
    collate = PackedCollator(capacity=8, layout="flat")
    order = [i for row in collate.pack(feats).sources for i in row.tolist()]
    assert order != [0, 1, 2, 3]  # bfd: [3, 2] and [0, 3]-like windows, not the given order
    assert_same_batch(collate(feats), Flattening()([feats[i] for i in order]))
    greedy = PackedCollator(capacity=8, layout="flat", strategy="greedy")
    assert_same_batch(greedy(feats), Flattening()(feats))  # in-order windows keep the order


def test_collator_flags_are_checked():
    with pytest.raises(OptionError, match="return_seq_idx applies to layout='flat'"):
        PackedCollator(capacity=8, return_seq_idx=True)
    with pytest.raises(ValueError, match="return_tensors"):
        PackedCollator(capacity=8, layout="flat", return_tensors="tf")
    with pytest.raises(OptionError, match="return_flash_attn_kwargs"):
        PackedCollator(capacity=8, layout="flat", return_flash_attn_kwargs="yes")


# ------------------------------------------------------------------- TRL's pack_dataset

def trl_pack(ds, capacity, strategy):
    return trl_data.pack_dataset(ds, capacity, strategy)


# TRL's strategy -> ctxkit's options giving the same rows
SAME_AS_TRL = {
    "bfd": {"strategy": "bfd", "overflow": "truncate"},
    "bfd_split": {"strategy": "bfd", "overflow": "split"},
    "wrapped": {"strategy": "wrapped"},
}


def assert_trl_columns(ours: dict, theirs: dict, column: str = "input_ids") -> None:
    """TRL's columns equal; ctxkit adds its own and names the token column ``input_ids``."""
    renamed = {("input_ids" if k == column else k): v for k, v in theirs.items()}
    assert {k: ours[k] for k in renamed} == renamed
    assert set(ours) - set(renamed) == ADDED | ({"seq_lengths"} - set(renamed))


TRL_CASES = [  # (columns, capacity): the shapes of TRL's TestPackDataset* cases
    ({"input_ids": [[1, 2, 3], [4, 5, 6, 7], [8]],
      "attention_mask": [[0, 1, 1], [0, 0, 1, 1], [1]]}, 3),
    ({"input_ids": [[1, 2, 3], [4, 5, 6, 7], [8]]}, 4),
    ({"input_ids": [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10, 11], [12]]}, 4),
    ({"input_ids": [[1, 2, 3, 4, 5], [6], [7, 8, 9, 10], [11, 12, 13]]}, 5),
    ({"input_ids": [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [11]],
      "attention_mask": [[1, 1, 1, 0, 0], [1, 0], [1, 1, 0], [1]]}, 4),
]


@pytest.mark.parametrize("trl_strategy", list(SAME_AS_TRL))
@pytest.mark.parametrize("case", range(len(TRL_CASES)))
def test_pack_dataset_equals_trl(case, trl_strategy):
    columns, capacity = TRL_CASES[case]
    ds = datasets.Dataset.from_dict(columns)
    theirs = trl_pack(ds, capacity, trl_strategy).to_dict()
    ours = pack_dataset(ds, capacity=capacity, **SAME_AS_TRL[trl_strategy]).to_dict()
    assert_trl_columns(ours, theirs)


def test_pack_dataset_two_columns_equals_trl():
    """TRL packs every list column; ctxkit packs the per-token ones beside ``column``."""
    ds = datasets.Dataset.from_dict({
        "col1": [[1, 2, 3, 4, 5, 6], [7, 8, 9], [10, 11, 12], [13, 14, 15, 16]],
        "col2": [[-1, 2, -3, 4, -5, 6], [-7, 8, -9], [10, -11, 12], [-13, 14, -15, 16]]})
    for trl_strategy, opts in SAME_AS_TRL.items():
        theirs = trl_pack(ds, 4, trl_strategy).to_dict()
        ours = pack_dataset(ds, capacity=4, column="col1", **opts).to_dict()
        assert_trl_columns(ours, theirs, column="col1")


@pytest.mark.parametrize("trl_strategy", list(SAME_AS_TRL))
def test_pack_dataset_equals_trl_on_random_datasets(trl_strategy):
    """Under 1,000 rows TRL's per-block plan is a global one: the rows agree, in order."""
    rng = np.random.default_rng(1)
    for _ in range(10):
        capacity = int(rng.integers(4, 64))
        seqs = [rng.integers(1, 100, int(n)).tolist()
                for n in rng.integers(0, 2 * capacity, int(rng.integers(1, 200)))]
        ds = datasets.Dataset.from_dict({
            "input_ids": seqs, "completion_mask": [rng.integers(0, 2, len(s)).tolist()
                                                   for s in seqs]})
        theirs = trl_pack(ds, capacity, trl_strategy).to_dict()
        ours = pack_dataset(ds, capacity=capacity, **SAME_AS_TRL[trl_strategy]).to_dict()
        assert_trl_columns(ours, theirs)


def test_pack_dataset_is_global_where_trl_packs_blocks():
    """Documented difference: TRL plans each block of 1,000 rows, leaving part-filled windows
    behind every block; ctxkit plans the whole dataset, so only its last windows are partial."""
    rng = np.random.default_rng(2)
    seqs = [rng.integers(1, 100, int(n)).tolist() for n in rng.integers(1, 40, 2500)]
    ds = datasets.Dataset.from_dict({"input_ids": seqs})
    theirs = trl_pack(ds, 64, "bfd")
    ours = pack_dataset(ds, capacity=64, overflow="truncate")
    lower_bound = -(-sum(map(len, seqs)) // 64)
    assert ours.num_rows <= theirs.num_rows
    assert ours.num_rows <= lower_bound + 1
    # the same tokens either way
    assert sorted(t for row in ours["input_ids"] for t in row) == \
        sorted(t for row in theirs["input_ids"] for t in row)


@pytest.mark.parametrize("trl_strategy", ["bfd", "wrapped"])
def test_pack_iterable_dataset_equals_trl(trl_strategy):
    """TRL's iterable cases: the stream's rows, batched, equal TRL's (and the Dataset's)."""
    columns = {"input_ids": [[1, 2, 3], [4, 5, 6, 7], [8]],
               "attention_mask": [[0, 1, 1], [0, 0, 1, 1], [1]]}
    capacity = 4 if trl_strategy == "bfd" else 3
    stream = datasets.Dataset.from_dict(columns).to_iterable_dataset()
    theirs = next(iter(trl_pack(stream, capacity, trl_strategy).batch(batch_size=3)))
    packed = pack_dataset(stream, capacity=capacity, **SAME_AS_TRL[trl_strategy])
    assert isinstance(packed, datasets.IterableDataset)
    ours = next(iter(packed.batch(batch_size=3)))
    assert_trl_columns(ours, theirs)
    whole = pack_dataset(datasets.Dataset.from_dict(columns), capacity=capacity,
                         **SAME_AS_TRL[trl_strategy])
    assert ours == whole.to_dict()


@pytest.mark.parametrize("layout", ["flat", "padded"])
@pytest.mark.parametrize("sep", [None, 0])
def test_streaming_pack_equals_the_global_plan_when_the_buffer_holds_it(layout, sep):
    rng = np.random.default_rng(3)
    seqs = [rng.integers(1, 100, int(n)).tolist() for n in rng.integers(0, 20, 80)]
    cols = {"input_ids": seqs, "attention_mask": [[1] * len(s) for s in seqs],
            "completion_mask": [[0] * (len(s) // 2) + [1] * (len(s) - len(s) // 2)
                                for s in seqs],
            "rid": [f"r{i}" for i in range(len(seqs))], "text": ["x"] * len(seqs)}
    ds = datasets.Dataset.from_dict(cols)
    kw = {"capacity": 32, "layout": layout, "separator_id": sep, "id_column": "rid"}
    whole = pack_dataset(ds, **kw)
    stream = pack_dataset(ds.to_iterable_dataset(), buffer_size=1000, **kw)
    assert list(stream) == list(whole)
    assert list(stream.features) == whole.column_names  # same columns, in the same order
    assert "text" not in whole.column_names  # not per-token: left out, source_ids lead back


def test_streaming_pack_holds_a_bounded_buffer():
    """An endless stream packs: rows come out after about ``buffer_size`` examples."""
    read = []

    def endless():
        rng = np.random.default_rng(4)
        i = 0
        while True:
            read.append(i)
            yield {"input_ids": rng.integers(1, 100, int(rng.integers(1, 30))).tolist()}
            i += 1

    stream = datasets.IterableDataset.from_generator(endless)
    rows = list(pack_dataset(stream, capacity=64, buffer_size=50).take(10))
    assert len(rows) == 10 and all(sum(r["seq_lengths"]) <= 64 for r in rows)
    assert len(read) < 200  # a few buffers read, not the (endless) stream


def test_streaming_pack_places_every_token_once():
    rng = np.random.default_rng(5)
    seqs = [rng.integers(1, 100, int(n)).tolist() for n in rng.integers(0, 90, 300)]
    stream = datasets.Dataset.from_dict({"input_ids": seqs}).to_iterable_dataset()
    for strategy in ("bfd", "ffd", "wrapped"):
        placed: dict[int, list] = {}
        packed = pack_dataset(stream, capacity=64, strategy=strategy, overflow="split",
                              buffer_size=40)
        for row in packed:
            assert len(row["input_ids"]) == sum(row["seq_lengths"]) <= 64
            off = 0
            for i, (s, e) in zip(row["source_ids"], row["source_ranges"]):
                assert row["input_ids"][off:off + e - s] == seqs[i][s:e]
                placed.setdefault(i, []).append((s, e))
                off += e - s
        for i, s in enumerate(seqs):
            spans = sorted(placed.get(i, []))
            assert [t for a, b in spans for t in range(a, b)] == list(range(len(s))), i


def test_streaming_pack_refuses_what_needs_the_whole_dataset():
    stream = datasets.Dataset.from_dict({"input_ids": [[1, 2]]}).to_iterable_dataset()
    with pytest.raises(OptionError, match="IterableDataset.shuffle"):
        pack_dataset(stream, capacity=4, seed=0)
    with pytest.raises(OptionError, match="greedy"):
        pack_dataset(stream, capacity=4, strategy="greedy")
    with pytest.raises(InputError, match="return_batch"):
        pack_dataset(stream, capacity=4, return_batch=True)
    with pytest.raises(InputError, match="stream item 1 has 9 tokens, more than capacity 4"):
        list(pack_dataset(datasets.Dataset.from_dict({"input_ids": [[1], [2] * 9]})
                          .to_iterable_dataset(), capacity=4))


# ------------------------------------------------------------------ datasets' formats

@pytest.mark.parametrize("fmt", ["numpy", "torch", "pandas", "arrow"])
def test_pack_dataset_keeps_the_format_as_trl_does(fmt):
    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5, 6, 7], [8]],
                                     "attention_mask": [[1, 1, 1], [1, 1, 1, 1], [1]]})
    ds = ds.with_format(fmt)
    theirs = trl_pack(ds, 4, "bfd")
    ours = pack_dataset(ds, capacity=4, overflow="truncate")
    assert ours.format["type"] == theirs.format["type"] == fmt
    assert type(ours[0]["input_ids"]) is type(theirs[0]["input_ids"])
    assert type(ours[:2]) is type(theirs[:2])


def test_pack_dataset_keeps_listed_columns_visible():
    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5]],
                                     "attention_mask": [[1, 1, 1], [1, 1]]})
    ds = ds.with_format("numpy", columns=["input_ids"])
    theirs = trl_pack(ds, 8, "bfd")
    ours = pack_dataset(ds, capacity=8)
    assert theirs.format["columns"] == ["input_ids", "seq_lengths"]
    assert set(ours.format["columns"]) == {"input_ids", "seq_lengths"} | ADDED
    assert set(ours[0]) == set(ours.format["columns"])  # attention_mask hidden, as asked


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_pack_iterable_dataset_keeps_the_format(fmt):
    stream = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5]]})
    stream = stream.to_iterable_dataset().with_format(fmt)
    row = next(iter(pack_dataset(stream, capacity=8)))
    theirs = next(iter(trl_pack(stream, 8, "bfd")))
    assert type(row["input_ids"]) is type(theirs["input_ids"])


def test_pack_dataset_dicts_of_splits():
    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6]]})
    out = pack_dataset(datasets.IterableDatasetDict({"train": ds.to_iterable_dataset()}),
                       capacity=4)
    assert isinstance(out, datasets.IterableDatasetDict)
    assert [r["input_ids"] for r in out["train"]] == [[1, 2, 3, 6], [4, 5]]


# ------------------------------------------------ TRL's padding-free collator on ctxkit rows

def test_trl_padding_free_batches_equal_trl_packing():
    """TRL's SFT path masks prompts into ``labels`` and packs with bfd; the padding-free
    collator then gives the same batch on ctxkit's rows as on TRL's."""
    rng = np.random.default_rng(6)
    seqs = [rng.integers(3, 100, int(n)).tolist() for n in rng.integers(1, 30, 40)]
    masks = [[0] * (len(s) // 3) + [1] * (len(s) - len(s) // 3) for s in seqs]
    labels = [[t if m else -100 for t, m in zip(s, mk)] for s, mk in zip(seqs, masks)]
    trl_rows = trl_pack(datasets.Dataset.from_dict({"input_ids": seqs, "labels": labels}),
                        32, "bfd")
    ours = pack_dataset(datasets.Dataset.from_dict({"input_ids": seqs,
                                                    "completion_mask": masks}), capacity=32)
    collator = TRLCollator(pad_token_id=0, padding_free=True)
    keys = ("input_ids", "labels", "seq_lengths")
    for start in range(0, trl_rows.num_rows, 4):
        stop = min(start + 4, trl_rows.num_rows)
        theirs = collator([{k: trl_rows[r][k] for k in keys} for r in range(start, stop)])
        got = collator([{k: ours[r][k] for k in keys} for r in range(start, stop)])
        assert_same_batch(got, theirs)


@pytest.mark.parametrize("with_labels", [False, True])
def test_trl_padding_free_collator_equals_packed_collator(with_labels):
    """TRL's padding-free collator on unpacked examples equals PackedCollator's flat batch
    with the flash-attention kwargs and seq_idx that TRL always returns."""
    feats = [{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}, {"input_ids": [6, 7, 8, 9]}]
    if with_labels:
        feats = [{**f, "labels": [-100] + f["input_ids"][1:]} for f in feats]
    theirs = TRLCollator(pad_token_id=0, padding_free=True)(copy.deepcopy(feats))
    ours = PackedCollator(capacity=16, layout="flat", return_flash_attn_kwargs=True,
                          return_seq_idx=True)(feats)
    assert_same_batch(ours, theirs)
