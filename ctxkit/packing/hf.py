"""Hugging Face interop: packed rows as Arrow tables and ``datasets`` datasets.

:func:`pack_dataset` is a drop-in for TRL's ``pack_dataset`` that packs globally (one plan over
the whole dataset, not blocks of 1,000 examples) and masks what collation masks. Its default
``layout="flat"`` gives one unpadded row per window with ``seq_lengths``, exactly what TRL's
``SFTTrainer(padding_free=True)`` collator and transformers' flattening path consume; it also
keeps ready ``labels`` (-100 where masked) and ``position_ids``. ``layout="padded"`` gives rows of
exactly ``capacity`` tokens with ``segment_ids``. Every per-token column (a list column as long
as ``input_ids`` in every row: ``attention_mask``, ``completion_mask``, ...) is packed alongside
the tokens, as TRL packs them; the dataset's format (``with_format("numpy")``, ...) is kept; an
``IterableDataset`` is packed as a stream with a bounded buffer
(:class:`~ctxkit.packing.online.OnlinePacker`).

Example:
    >>> from datasets import Dataset
    >>> ds = Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6]]})
    >>> pack_dataset(ds, capacity=4)["seq_lengths"][:]
    [[3, 1], [2]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.errors import InputError
from ctxkit.packing.hf_stream import ALIGNED, WRITTEN, pack_iterable
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


def packed_table(batch: PackResult, ids: Sequence[Any] | None = None,
                 columns: Mapping[str, np.ndarray] | None = None):
    """A ``pyarrow.Table``, one row per window: ``input_ids``, then ``columns``, then ``labels``,
    ``position_ids``, ``segment_ids``, ``seq_lengths``, ``source_ids`` (``ids[i]`` of each
    segment's input, or the input index when ``ids`` is None) and ``source_ranges``
    (``[start, stop]`` token range of each segment within its input, separator included).

    ``columns`` maps a name to per-token values in the order of the batch's real tokens (see
    :func:`gather_per_token`); the padded layout pads them with 0.

    Example:
        >>> from ctxkit import pack
        >>> t = packed_table(pack([[1, 2], [3]], capacity=4), ids=["a", "b"])
        >>> t.column("source_ids").to_pylist(), t.column("seq_lengths").to_pylist()
        ([['a', 'b']], [[2, 1]])
    """
    import pyarrow as pa

    cols = packed_rows(batch)
    tok_off = cols["input_ids"][1]
    real = batch.segment_ids.reshape(-1) > 0  # row-major: the real tokens, then padding
    out = {"input_ids": _lists(tok_off, pa.array(cols["input_ids"][0]))}
    for name, values in (columns or {}).items():
        values = np.asarray(values)
        if batch.layout == "padded":
            full = np.zeros(real.size, dtype=values.dtype)
            full[real] = values
            values = full
        out[name] = _lists(tok_off, pa.array(values))
    for name in ("labels", "position_ids", "segment_ids", "seq_lengths"):
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


def gather_per_token(batch: PackResult, values: np.ndarray, lengths: np.ndarray,
                     separator_value: Any = None) -> np.ndarray:
    """A per-token column of the inputs (``values``: all inputs back to back, input ``i`` has
    ``lengths[i]`` entries) in the order of ``batch``'s real tokens.

    A separator takes the value of the last token of its sequence (an ``attention_mask`` stays
    1), or ``separator_value`` when given.

    Example:
        >>> from ctxkit import pack
        >>> b = pack([[7, 8], [9]], capacity=3, separator_id=0, strategy="greedy")
        >>> gather_per_token(b, np.array([1, 2, 3]), np.array([2, 1])).tolist()
        [1, 2, 2, 3, 3]
    """
    seg_len = batch.segment_stop - batch.segment_start
    total = int(seg_len.sum())
    tok_seg = np.repeat(np.arange(seg_len.size, dtype=np.int64), seg_len)
    seg_first = np.concatenate([[0], np.cumsum(seg_len)[:-1]]).astype(np.int64)
    pos = batch.segment_start[tok_seg] + (np.arange(total, dtype=np.int64) - seg_first[tok_seg])
    inp = batch.segment_input[tok_seg]
    n = np.asarray(lengths, np.int64)[inp]
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    out = np.asarray(values)[offsets[inp] + np.minimum(pos, n - 1)]
    if separator_value is not None:
        out[pos >= n] = separator_value
    return out


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


def _is_numeric_list(arrow_type) -> bool:
    import pyarrow as pa

    if not (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
        return False
    v = arrow_type.value_type
    return pa.types.is_integer(v) or pa.types.is_boolean(v) or pa.types.is_floating(v)


def _per_token_columns(table, names: Sequence[str], lengths: np.ndarray,
                       ) -> dict[str, tuple[np.ndarray, Any]]:
    """The columns of ``names`` as long as the tokens in every row: name -> (values, type)."""
    import pyarrow.compute as pc

    out = {}
    for name in names:
        col = table.column(name).combine_chunks()
        if not _is_numeric_list(col.type):
            if name in ALIGNED:
                raise InputError(f"column {name!r} must hold lists of integers, got {col.type}")
            continue
        if col.null_count:
            if name in ALIGNED:
                row = int(np.flatnonzero(np.asarray(col.is_null()))[0])
                raise InputError(f"column {name!r} is null at row {row}")
            continue
        lens = np.asarray(pc.list_value_length(col), dtype=np.int64)
        bad = np.flatnonzero(lens != lengths)
        if bad.size:
            if name in ALIGNED:
                i = int(bad[0])
                raise InputError(f"row {i}: {name} has {lens[i]} entries for {lengths[i]} tokens")
            continue  # a list column of another length is not per-token: left out
        values = col.flatten()
        if values.null_count:
            if name in ALIGNED:
                raise InputError(f"column {name!r} holds null values")
            continue
        out[name] = (np.asarray(values), values.type)
    return out


def _keep_format(packed, source):
    """``packed`` in ``source``'s format (type, columns, kwargs); columns ctxkit adds stay
    visible when the format lists columns, as TRL adds ``seq_lengths`` to them."""
    fmt = source.format
    if fmt["type"] is None and fmt["columns"] is None:
        return packed
    columns = fmt["columns"]
    if columns is not None:
        added = [c for c in packed.column_names if c not in source.column_names]
        columns = [c for c in columns if c in packed.column_names] + added
    return packed.with_format(fmt["type"], columns=columns,
                              output_all_columns=fmt["output_all_columns"], **fmt["format_kwargs"])


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
    buffer_size: int = 1000,
    options: PackOptions | None = None,
):
    """Pack a Hugging Face ``Dataset`` or ``IterableDataset`` (or each split of a
    ``DatasetDict`` / ``IterableDatasetDict``) into windows.

    Uses the dataset's ``completion_mask`` column (1 = train on the token) and ``labels``
    column when present. Returns a dataset of the same kind with one row per window:
    ``input_ids``, every other per-token column (a list column as long as the tokens in every
    row, e.g. ``attention_mask`` or ``completion_mask``; a separator takes the value of its
    sequence's last token, and in ``completion_mask`` 1 only with ``label_separators``), then
    ``labels``, ``position_ids``, ``segment_ids``, ``seq_lengths``, ``source_ids``,
    ``source_ranges`` (see :func:`packed_table`). Other columns are left out (``source_ids``
    leads back to them). The dataset's format is kept. With ``return_batch=True`` (a
    ``Dataset`` only) also returns the :class:`~ctxkit.packing.result.PackResult` (its report:
    windows, lower bound, utilization, split/truncated/dropped/empty inputs). ``layout``
    defaults to ``"flat"`` (TRL's padding-free rows) or, when ``options`` (a
    :class:`~ctxkit.packing.options.PackOptions`) is given, to its layout; ``capacity`` is
    required unless ``options`` carries it.

    A ``Dataset`` is packed with one global plan. An ``IterableDataset`` is packed as it is
    read, holding about ``buffer_size`` examples (:class:`~ctxkit.packing.online.OnlinePacker`
    for ``bfd``, ``ffd`` and ``optimal``; ``wrapped`` cuts the stream as it comes); its rows
    equal the global plan's when the whole stream fits the buffer. Shuffle a stream with
    ``IterableDataset.shuffle``: ``seed`` is refused there.

    Example:
        >>> from datasets import Dataset
        >>> ds = Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6]]})
        >>> packed = pack_dataset(ds, capacity=4)
        >>> packed["input_ids"][:]
        [[1, 2, 3, 6], [4, 5]]
        >>> stream = pack_dataset(ds.to_iterable_dataset(), capacity=4)
        >>> [row["input_ids"] for row in stream]
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
    validate.positive_int(buffer_size, "buffer_size")
    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        if return_batch:
            raise InputError("return_batch works on one Dataset, not a DatasetDict")
        return type(dataset)({
            split: pack_dataset(ds, column=column, id_column=id_column, buffer_size=buffer_size,
                                options=opts)
            for split, ds in dataset.items()
        })
    if isinstance(dataset, datasets.IterableDataset):
        if return_batch:
            raise InputError("return_batch works on a Dataset; an IterableDataset is packed "
                             "as it is read")
        return pack_iterable(datasets, dataset, opts, column, id_column, buffer_size)
    if not isinstance(dataset, datasets.Dataset):
        raise InputError(f"expected a datasets.Dataset or IterableDataset, got "
                         f"{type(dataset).__name__}")
    if column not in dataset.column_names:
        raise InputError(f"dataset has no column {column!r} (columns: {dataset.column_names})")
    if id_column is not None and id_column not in dataset.column_names:
        raise InputError(f"dataset has no id column {id_column!r}")
    carried = [c for c in dataset.column_names
               if c not in (column, id_column) and (c in ALIGNED or c not in WRITTEN)]
    wanted = [column, *carried] + ([id_column] if id_column is not None else [])
    table = dataset.select_columns(wanted).with_format("arrow")[:]
    tokens, lengths = _list_column(table, column)
    per_token = _per_token_columns(table, carried, lengths)
    mask = per_token.get("completion_mask")
    labels = per_token.get("labels")
    batch = pack_arrays(tokens, lengths,
                        completion_mask=None if mask is None else mask[0],
                        labels=None if labels is None else labels[0].astype(np.int64),
                        options=opts)
    columns = {}
    for name, (values, _) in per_token.items():
        if name == "labels":
            continue  # written as the packed labels
        sep_value = int(opts.label_separators) if name == "completion_mask" else None
        columns[name] = gather_per_token(batch, values, lengths, sep_value)
    ids = table.column(id_column).to_pylist() if id_column is not None else None
    from datasets.table import InMemoryTable

    packed = datasets.Dataset(InMemoryTable(packed_table(batch, ids=ids, columns=columns)))
    packed = _keep_format(packed, dataset)
    return (packed, batch) if return_batch else packed
