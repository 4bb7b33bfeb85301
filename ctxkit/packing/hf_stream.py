"""Packing a Hugging Face ``IterableDataset`` as it is read, with a bounded buffer.

:func:`ctxkit.packing.hf.pack_dataset` hands an ``IterableDataset`` here. Examples are read one
at a time; ``bfd``, ``ffd`` and ``optimal`` go through
:class:`~ctxkit.packing.online.OnlinePacker` (about ``buffer_size`` examples held, the emptiest
windows carried over to the next buffer), ``wrapped`` cuts the stream every ``capacity``
tokens as it comes. Each window becomes one row with the columns and label rules of the
global path (:func:`~ctxkit.packing.hf.packed_table`), so a stream that fits the buffer gives
the rows of the global plan. The per-token columns are those of the first example that are
numeric lists as long as its tokens; every later example must have them at that length.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ctxkit.errors import InputError
from ctxkit.options import bad_option
from ctxkit.packing.online import OnlinePacker
from ctxkit.packing.options import PackOptions
from ctxkit.packing.result import IGNORE_INDEX

__all__ = ["ALIGNED", "STREAM_STRATEGIES", "WRITTEN", "pack_iterable"]

# columns pack_dataset writes itself; an input column of one of these names is not carried over
WRITTEN = ("labels", "position_ids", "segment_ids", "seq_lengths", "source_ids", "source_ranges")
# per-token columns that must align with the tokens (the others are carried when they do)
ALIGNED = ("completion_mask", "labels")
STREAM_STRATEGIES = ("bfd", "ffd", "optimal", "wrapped")


def pack_iterable(datasets, dataset, opts: PackOptions, column: str, id_column: str | None,
                   buffer_size: int):
    """An ``IterableDataset`` of packed rows, packed as ``dataset`` (an ``IterableDataset``)
    is read; ``datasets`` is the imported module. :func:`ctxkit.packing.hf.pack_dataset` is
    the public entry."""
    if opts.seed is not None:
        raise bad_option("seed", " shuffles a Dataset's windows; shuffle a stream with "
                                 "IterableDataset.shuffle(seed=..., buffer_size=...)")
    if opts.strategy not in STREAM_STRATEGIES:
        raise bad_option("strategy", f" {opts.strategy!r} needs the whole dataset; a stream "
                                     f"packs with {', '.join(STREAM_STRATEGIES)}")
    source = dataset.with_format(None)
    first = next(iter(source), None)
    if first is not None and column not in first:
        raise InputError(f"dataset has no column {column!r} (columns: {sorted(first)})")
    if first is not None and id_column is not None and id_column not in first:
        raise InputError(f"dataset has no id column {id_column!r}")
    carried, value_types = [], {}
    if first is not None:
        n = len(first[column])
        for name, value in first.items():
            if name in (column, id_column) or (name in WRITTEN and name not in ALIGNED):
                continue
            arr = np.asarray(value) if isinstance(value, (list, tuple, np.ndarray)) else None
            numeric = arr is not None and arr.ndim == 1 and (
                arr.size == 0 or arr.dtype.kind in "biuf")
            if numeric and arr.size == n:
                carried.append(name)
                value_types[name] = _value_type(dataset, name, arr)
            elif name in ALIGNED:
                raise InputError(f"stream item 0: {name} must be a list of {n} integers")
    F = datasets.Features
    L, V = datasets.List, datasets.Value
    feats = {"input_ids": L(V("int64"))}
    feats.update({c: L(V(value_types[c])) for c in carried if c != "labels"})
    feats.update({"labels": L(V("int64")), "position_ids": L(V("int64")),
                  "segment_ids": L(V("int32")), "seq_lengths": L(V("int64")),
                  "source_ids": L(V("string" if id_column is not None else "int64")),
                  "source_ranges": L(L(V("int64"), length=2))})
    out = datasets.IterableDataset.from_generator(
        _stream_rows, features=F(feats),
        gen_kwargs={"source": source, "opts": opts, "column": column, "id_column": id_column,
                    "carried": tuple(carried), "buffer_size": buffer_size})
    fmt = dataset._formatting.format_type if dataset._formatting is not None else None
    return out.with_format(fmt) if fmt is not None else out


def _value_type(dataset, name: str, sample: np.ndarray) -> str:
    """The value dtype of list column ``name``: the dataset's feature, else the sample's."""
    feature = (dataset.features or {}).get(name)
    inner = getattr(feature, "feature", None)
    dtype = getattr(inner, "dtype", None)
    if isinstance(dtype, str):
        return dtype
    return "int64" if sample.size == 0 else str(sample.dtype)


def _stream_item(example: Mapping[str, Any], i: int, opts: PackOptions, column: str,
                 carried: Sequence[str]) -> dict[str, Any]:
    """One example as the arrays its rows are cut from: tokens with the separator appended,
    labels already masked, and each carried per-token column."""
    ids = np.asarray(example[column])
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "biu"):
        raise InputError(f"stream item {i}: {column} must be a list of token ids")
    if ids.size and ids.min() < 0:
        raise InputError(f"stream item {i}: {column} holds the negative token id {ids.min()}")
    ids = ids.astype(np.int64)
    n = ids.size
    cols = {}
    for name in carried:
        arr = np.asarray(example[name])
        if arr.ndim != 1 or arr.size != n:
            raise InputError(f"stream item {i}: {name} has {arr.size} entries for {n} tokens")
        cols[name] = arr
    keep = cols["completion_mask"] != 0 if "completion_mask" in cols else np.ones(n, bool)
    labels = cols.pop("labels").astype(np.int64) if "labels" in cols else ids.copy()
    if opts.separator_id is not None and n:
        sep = opts.separator_id
        ids = np.append(ids, sep)
        keep = np.append(keep, opts.label_separators)
        labels = np.append(labels, sep)
        for name, arr in cols.items():
            value = int(opts.label_separators) if name == "completion_mask" else arr[-1]
            cols[name] = np.append(arr, np.asarray(value, dtype=arr.dtype))
    labels[~keep] = IGNORE_INDEX
    return {"ids": ids, "labels": labels, "cols": cols, "n": int(ids.size)}


def _window_row(segments, items, opts: PackOptions, carried: Sequence[str]) -> dict:
    """One packed row from a window's ``(stream index, start, stop)`` segments."""
    parts = [(item, s, e) for item, (_, s, e) in zip(items, segments)]
    input_ids = np.concatenate([it["ids"][s:e] for it, s, e in parts])
    labels = np.concatenate([it["labels"][s:e] for it, s, e in parts])
    seg_len = np.array([e - s for _, s, e in parts], np.int64)
    starts = np.concatenate([[0], np.cumsum(seg_len)[:-1]])
    labels[starts] = IGNORE_INDEX  # no loss term predicts a segment's first token
    position_ids = np.arange(input_ids.size) - np.repeat(starts, seg_len)
    segment_ids = np.repeat(np.arange(1, seg_len.size + 1, dtype=np.int32), seg_len)
    row = {"input_ids": input_ids}
    for name in carried:
        if name != "labels":
            row[name] = np.concatenate([it["cols"][name][s:e] for it, s, e in parts])
    row.update(labels=labels, position_ids=position_ids, segment_ids=segment_ids)
    if opts.layout == "padded":
        pad = opts.capacity - input_ids.size
        fill = {"input_ids": opts.pad_id, "labels": IGNORE_INDEX}
        for name, arr in row.items():
            row[name] = np.concatenate([arr, np.full(pad, fill.get(name, 0), arr.dtype)])
    row = {k: v.tolist() for k, v in row.items()}
    row["seq_lengths"] = seg_len.tolist()
    row["source_ids"] = [it["id"] for it in items]
    row["source_ranges"] = [[s, e] for _, s, e in segments]
    return row


def _wrapped_windows(items: Iterator[tuple[int, dict]], capacity: int, overflow: str):
    """``(segments, items)`` of every window of the stream concatenated and cut every
    ``capacity`` tokens (the last window may be shorter)."""
    segs, its, fill = [], [], 0
    for i, item in items:
        n = item["n"]
        if n > capacity and overflow in ("truncate", "drop"):
            if overflow == "drop":
                continue
            n = capacity
        start = 0
        while start < n:
            take = min(capacity - fill, n - start)
            segs.append((i, start, start + take))
            its.append(item)
            fill += take
            start += take
            if fill == capacity:
                yield segs, its
                segs, its, fill = [], [], 0
    if segs:
        yield segs, its


def _stream_rows(source, opts: PackOptions, column: str, id_column: str | None,
                 carried: tuple[str, ...], buffer_size: int):
    def items():
        for i, example in enumerate(source):
            item = _stream_item(example, i, opts, column, carried)
            item["id"] = str(example[id_column]) if id_column is not None else i
            yield i, item

    if opts.strategy == "wrapped":
        windows = _wrapped_windows(items(), opts.capacity, opts.overflow)
    else:
        packer = OnlinePacker(capacity=opts.capacity, buffer_size=buffer_size,
                              strategy=opts.strategy, overflow=opts.overflow,
                              length=lambda item: item["n"])

        def planned():
            for _, item in items():
                for w in packer.add(item):
                    yield w.segments, w.items
            for w in packer.flush():
                yield w.segments, w.items

        windows = planned()
    for segments, window_items in windows:
        yield _window_row(segments, window_items, opts, carried)
