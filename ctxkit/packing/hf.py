"""Hugging Face interop: packed rows as Arrow tables and ``datasets.Dataset``.

:func:`pack_dataset` is a drop-in for TRL's ``pack_dataset`` that packs globally (one plan over
the whole dataset, not blocks of 1,000 examples) and masks what collation masks. Its default
``layout="flat"`` gives one unpadded row per window with ``seq_lengths``, exactly what TRL's
``SFTTrainer(padding_free=True)`` collator and transformers' flattening path consume; it also
keeps ready ``labels`` (-100 where masked) and ``position_ids``. ``layout="padded"`` gives rows of
exactly ``capacity`` tokens with ``segment_ids``.

Example:
    >>> from datasets import Dataset
    >>> ds = Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6]]})
    >>> pack_dataset(ds, capacity=4)["seq_lengths"][:]
    [[3, 1], [2]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxkit.errors import InputError
from ctxkit.packing.options import PackOptions
from ctxkit.packing.result import PackResult
from ctxkit.packing.sequences import pack_arrays

_D = PackOptions()

__all__ = ["pack_dataset", "packed_rows", "packed_table"]


def packed_rows(batch: PackResult) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per column, ``(values, offsets)`` of one list per window (vectorised, no row loop).

    Padded batches keep padding (rows of exactly ``capacity``); flat batches are cut back into
    one unpadded row per window.
    """
    seg_len = batch.segment_stop - batch.segment_start
    seg_off = batch.row_offsets.astype(np.int64)
    if batch.layout == "padded":
        row_len = np.full(batch.n_windows, batch.capacity, dtype=np.int64)
    else:
        csum = np.concatenate([[0], np.cumsum(seg_len)])
        row_len = csum[seg_off[1:]] - csum[seg_off[:-1]]
    tok_off = np.concatenate([[0], np.cumsum(row_len)]).astype(np.int64)
    seg = batch.segment_ids.reshape(-1).astype(np.int64)
    if batch.layout == "flat":  # renumber 1..k per window, as in the padded layout
        seg_base = np.repeat(seg_off[:-1], row_len)
        seg = seg - seg_base
    return {
        "input_ids": (batch.input_ids.reshape(-1), tok_off),
        "labels": (batch.labels.reshape(-1), tok_off),
        "position_ids": (batch.position_ids.reshape(-1), tok_off),
        "segment_ids": (seg.astype(np.int32), tok_off),
        "seq_lengths": (seg_len, seg_off),
        "source_index": (batch.segment_input, seg_off),
    }


def _lists(offsets: np.ndarray, values):
    """A list array; 64-bit offsets once the values outgrow 32-bit ones."""
    import pyarrow as pa

    if offsets.size and int(offsets[-1]) >= 2**31 - 1:
        return pa.LargeListArray.from_arrays(pa.array(offsets.astype(np.int64)), values)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)


def packed_table(batch: PackResult, ids: Sequence[Any] | None = None):
    """A ``pyarrow.Table``, one row per window: ``input_ids``, ``labels``, ``position_ids``,
    ``segment_ids``, ``seq_lengths``, ``source_ids`` (``ids[i]`` of each segment's input, or
    the input index when ``ids`` is None) and ``source_ranges`` (``[start, stop]`` token range of
    each segment within its input, separator included).

    Example:
        >>> from ctxkit import pack
        >>> t = packed_table(pack([[1, 2], [3]], capacity=4), ids=["a", "b"])
        >>> t.column("source_ids").to_pylist(), t.column("seq_lengths").to_pylist()
        ([['a', 'b']], [[2, 1]])
    """
    import pyarrow as pa

    cols = packed_rows(batch)
    out = {}
    for name in ("input_ids", "labels", "position_ids", "segment_ids", "seq_lengths"):
        values, offsets = cols[name]
        out[name] = _lists(offsets, pa.array(values))
    sources, seg_off = cols["source_index"]
    if ids is None:
        src_values = pa.array(sources)
    else:
        id_arr = np.asarray([str(x) for x in ids], dtype=object)
        src_values = pa.array(id_arr[sources].tolist(), type=pa.string())
    out["source_ids"] = _lists(seg_off, src_values)
    ranges = pa.FixedSizeListArray.from_arrays(pa.array(
        np.stack([batch.segment_start, batch.segment_stop], axis=1).reshape(-1)), 2)
    out["source_ranges"] = _lists(seg_off, ranges)
    return pa.table(out)


def _import_datasets():
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "pack_dataset needs the Hugging Face 'datasets' package: "
            "pip install 'ctxkit[hf]' (or pip install datasets)"
        ) from exc
    return datasets


def _list_column(table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Values and per-row lengths of a list-of-int Arrow column, without Python rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = table.column(name).combine_chunks()
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
        raise InputError(f"column {name!r} must hold lists of token ids, got {col.type}")
    if col.null_count:
        row = int(np.flatnonzero(np.asarray(col.is_null()))[0])
        raise InputError(f"column {name!r} is null at row {row}")
    lengths = np.asarray(pc.list_value_length(col), dtype=np.int64)
    values = col.flatten()
    if values.null_count:
        raise InputError(f"column {name!r} holds null token ids")
    if not (pa.types.is_integer(values.type) or pa.types.is_boolean(values.type)):
        raise InputError(f"column {name!r} must hold integers, got {values.type}")
    return np.asarray(values, dtype=np.int64), lengths


def pack_dataset(
    dataset,
    *,
    capacity: int | None = None,
    strategy: str = _D.strategy,
    column: str = "input_ids",
    separator_id: int | None = _D.separator_id,
    overflow: str = _D.overflow,
    pad_id: int = _D.pad_id,
    seed: int | None = _D.seed,
    layout: str | None = None,
    label_separators: bool = _D.label_separators,
    id_column: str | None = None,
    return_batch: bool = False,
    options: PackOptions | None = None,
):
    """Pack a Hugging Face ``Dataset`` (or each split of a ``DatasetDict``) into windows.

    Uses the dataset's ``completion_mask`` column (1 = train on the token) and ``labels``
    column when present. Returns a ``datasets.Dataset`` with one row per window: ``input_ids``,
    ``labels``, ``position_ids``, ``segment_ids``, ``seq_lengths``, ``source_ids``,
    ``source_ranges`` (see :func:`packed_table`). With ``return_batch=True`` also returns the
    :class:`~ctxkit.packing.result.PackResult` (its report: windows, lower bound, utilization,
    split/truncated/dropped/empty inputs). ``layout`` defaults to ``"flat"`` (TRL's
    padding-free rows) or, when ``options`` (a :class:`~ctxkit.packing.options.PackOptions`)
    is given, to its layout; ``capacity`` is required unless ``options`` carries it.

    Example:
        >>> from datasets import Dataset
        >>> ds = Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6]]})
        >>> packed = pack_dataset(ds, capacity=4)
        >>> packed["input_ids"][:]
        [[1, 2, 3, 6], [4, 5]]
    """
    datasets = _import_datasets()
    if capacity is None and options is None:
        raise InputError("pack_dataset needs capacity (or options=PackOptions(capacity=...))")
    opts = PackOptions.resolve(
        options, capacity=capacity, strategy=strategy, separator_id=separator_id,
        overflow=overflow, pad_id=pad_id, seed=seed, label_separators=label_separators,
    )
    opts = opts.replace(layout=layout or (opts.layout if options is not None else "flat"))
    if isinstance(dataset, datasets.DatasetDict):
        if return_batch:
            raise InputError("return_batch works on one Dataset, not a DatasetDict")
        return datasets.DatasetDict({
            split: pack_dataset(ds, column=column, id_column=id_column, options=opts)
            for split, ds in dataset.items()
        })
    if not isinstance(dataset, datasets.Dataset):
        raise InputError(f"expected a datasets.Dataset, got {type(dataset).__name__}")
    if column not in dataset.column_names:
        raise InputError(f"dataset has no column {column!r} (columns: {dataset.column_names})")
    wanted = [c for c in (column, "completion_mask", "labels", id_column)
              if c is not None and c in dataset.column_names]
    if id_column is not None and id_column not in dataset.column_names:
        raise InputError(f"dataset has no id column {id_column!r}")
    table = dataset.select_columns(wanted).with_format("arrow")[:]
    tokens, lengths = _list_column(table, column)
    extra = {}
    for name in ("completion_mask", "labels"):
        if name in wanted and name != column:
            values, lens = _list_column(table, name)
            bad = np.flatnonzero(lens != lengths)
            if bad.size:
                i = int(bad[0])
                raise InputError(f"row {i}: {name} has {lens[i]} entries for {lengths[i]} tokens")
            extra[name] = values
    batch = pack_arrays(tokens, lengths, completion_mask=extra.get("completion_mask"),
                        labels=extra.get("labels"), options=opts)
    ids = table.column(id_column).to_pylist() if id_column is not None else None
    from datasets.table import InMemoryTable

    packed = datasets.Dataset(InMemoryTable(packed_table(batch, ids=ids)))
    return (packed, batch) if return_batch else packed
