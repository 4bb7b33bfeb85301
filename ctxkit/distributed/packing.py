"""Packing a Ray dataset of token sequences into windows of ``capacity`` tokens.

The options are :class:`ctxkit.packing.options.PackOptions`, the same as :func:`ctxkit.pack`,
and the windows are collated by the same code (:func:`ctxkit.packing.tensors.collate_plan`),
so separators, loss masks, layouts and seeds mean what they mean on one machine. Two modes:

- ``mode="global"`` (two passes): collect every sequence's length on the driver (8 bytes per
  document: 100 M documents are 800 MB), plan all of them at once with
  :func:`ctxkit.packing.plan.pack_lengths`, broadcast the plan, then one shuffle on the window
  number brings each window's pieces together. The windows are exactly those of
  ``ctxkit.pack`` on the same sequences and options (every strategy and overflow policy).
- ``mode="block"``: :func:`ctxkit.packing.sequences.pack_arrays` on each block (or each
  ``block_rows`` rows) inside ``map_batches``: streaming, no driver state, no shuffle, but
  every block ends with partly filled windows, so utilization drops by about (tail waste per
  block) / (tokens per block). ``evals/distributed.py`` measures the loss against global
  packing; it is small once a block holds thousands of sequences. A window never spans
  blocks, so ``overflow="split"`` and ``strategy="wrapped"`` need the global mode.

Sequences of length 0 are never packed; they, and sequences over ``capacity`` with
``overflow="drop"``, are listed in :attr:`DistributedPack.skipped` with the reason.

Example:
    >>> ds = ray.data.from_items([{"input_ids": [1, 2, 3]},
    ...                           {"input_ids": [4, 5]}])   # doctest: +SKIP
    >>> pack(ds, capacity=8, layout="flat").windows.take_all()[0]["input_ids"]  # doctest: +SKIP
    array([1, 2, 3, 4, 5])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit.distributed.blocks import (
    Broadcast,
    collect_columns,
    expand_ranges,
    hash_partitions,
    map_key_groups,
    set_shuffle,
)
from ctxkit.distributed.cluster import require_ray
from ctxkit.distributed.errors import WorkerInputError, raise_worker_errors
from ctxkit.distributed.rows import ROW, index_rows
from ctxkit.errors import InputError, OptionError
from ctxkit.options import bad_option
from ctxkit.packing.options import PackOptions

__all__ = ["MODES", "DistributedPack", "pack", "window_utilization"]

MODES = ("global", "block")
_D = PackOptions()


@dataclass
class DistributedPack:
    """What :func:`pack` returns.

    Attributes:
        windows: one row per window, the columns of :func:`ctxkit.packing.hf.packed_table`
            (``input_ids``, ``labels``, ``position_ids``, ``segment_ids``, ``seq_lengths``,
            ``source_ids``, ``source_ranges``) plus ``window``, its number: in global mode
            the row index the window has in ``ctxkit.pack``'s output. ``source_ids`` are the
            ``id_column`` values (as text) or the input row numbers. When the column holds
            integer lengths instead of tokens, windows have ``window``, ``source_ids``,
            ``seq_lengths`` and ``source_ranges`` only.
        skipped: input rows not packed (``row``, ``length``, ``reason``: ``"empty"`` or
            ``"over capacity"``); lazy.
        options: the packing options used.
        mode: ``"global"`` or ``"block"``.
        stats: for ``"global"``, the plan's figures (windows, lower bound, utilization, ...)
            known before any window is built; empty for ``"block"`` (see
            :func:`window_utilization`).
    """

    windows: Any
    skipped: Any
    options: PackOptions
    mode: str
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def capacity(self) -> int:
        return self.options.capacity


def _lengths_of(values: np.ndarray, tokens: bool) -> np.ndarray:
    if tokens:
        return np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    return np.asarray(values, dtype=np.int64)


def _packed_lengths(lengths: np.ndarray, opts: PackOptions) -> np.ndarray:
    """Lengths as the planner sees them: one separator after every non-empty sequence."""
    return lengths + (lengths > 0) if opts.separator_id is not None else lengths


def _over_capacity(lengths: np.ndarray, rows: np.ndarray, ids: np.ndarray | None,
                   opts: PackOptions) -> str | None:
    """The one-line error for sequences over capacity under ``overflow="error"``, or None."""
    if opts.overflow != "error" or opts.strategy == "wrapped":
        return None
    over = np.flatnonzero(lengths > opts.capacity)
    if not len(over):
        return None
    i = int(over[0])
    who = f"row {int(rows[i])}" + (f" (id {ids[i]})" if ids is not None else "")
    return (f"{who} has {int(lengths[i]):,} tokens, more than capacity {opts.capacity:,}; "
            f"{len(over)} row(s) are too long (use overflow='split', 'truncate' or 'drop')")


def _with_separator(tokens: Any, keep: Any, opts: PackOptions) -> tuple[np.ndarray, np.ndarray]:
    """One sequence as packed: tokens (separator appended) and its loss mask."""
    ids = np.asarray(tokens, dtype=np.int64)
    mask = np.ones(ids.size, bool) if keep is None else np.asarray(keep) != 0
    if opts.separator_id is not None and ids.size:
        ids = np.append(ids, opts.separator_id)
        mask = np.append(mask, opts.label_separators)
    return ids, mask


def _windows_table(batch: Any, segment_rows: np.ndarray, segment_ids: list | None,
                   window_ids: np.ndarray) -> Any:
    """``packed_table`` of a collated batch whose segments come from global ``segment_rows``
    (one per segment input), with the ids as text when given and a ``window`` column."""
    import pyarrow as pa

    from ctxkit.packing.hf import packed_table

    table = packed_table(batch)  # source_ids: the batch's own input numbers, replaced below
    src = segment_rows[batch.segment_input]
    values = pa.array(src) if segment_ids is None else \
        pa.array([str(segment_ids[i]) for i in batch.segment_input.tolist()], pa.string())
    offsets = table.column("source_ids").combine_chunks().offsets
    col = table.schema.get_field_index("source_ids")
    table = table.set_column(col, "source_ids", pa.ListArray.from_arrays(offsets, values))
    return table.append_column("window", pa.array(np.asarray(window_ids, np.int64)))


def _plan_table(plan: Any, rows: np.ndarray, window_ids: np.ndarray) -> Any:
    """Windows of a plan on lengths only: ``window``, ``source_ids``, ``seq_lengths`` and
    ``source_ranges`` (no tokens to collate)."""
    import pyarrow as pa

    from ctxkit.packing.hf import _lists
    from ctxkit.packing.tensors import plan_segments

    win, inp, start, stop = plan_segments(plan)
    offsets = np.searchsorted(win, np.arange(plan.n_bins + 1))
    ranges = pa.FixedSizeListArray.from_arrays(pa.array(np.stack([start, stop], 1).ravel()), 2)
    return pa.table({
        "window": pa.array(np.asarray(window_ids, np.int64)),
        "source_ids": _lists(offsets, pa.array(rows[inp])),
        "seq_lengths": _lists(offsets, pa.array(stop - start)),
        "source_ranges": _lists(offsets, ranges),
    })


def _pack_block(batch: dict[str, np.ndarray], column: str, mask_column: str | None,
                id_column: str | None, tokens: bool, opts: PackOptions) -> Any:
    from ctxkit.packing.plan import pack_lengths
    from ctxkit.packing.sequences import pack_arrays

    rows = np.asarray(batch[ROW], dtype=np.int64)
    ids = None if id_column is None else batch[id_column]
    lengths = _lengths_of(batch[column], tokens)
    message = _over_capacity(_packed_lengths(lengths, opts), rows, ids, opts)
    if message is not None:
        raise WorkerInputError(message, None if ids is None else ids[int(np.argmax(
            _packed_lengths(lengths, opts) > opts.capacity))])
    first = int(rows.min()) if rows.size else 0
    if not tokens:
        plan = pack_lengths(_packed_lengths(lengths, opts), capacity=opts.capacity,
                            strategy=opts.strategy, overflow=opts.overflow, seed=opts.seed)
        # a block of n rows holds at most n windows (no split): ids from its first row are unique
        return _plan_table(plan, rows, first + np.arange(plan.n_bins))
    values = batch[column]
    flat = np.concatenate([np.asarray(v, np.int64) for v in values]) if len(values) else \
        np.zeros(0, np.int64)
    mask = None
    if mask_column is not None:
        mask = np.concatenate([np.asarray(v) for v in batch[mask_column]]) if len(values) else \
            np.zeros(0, bool)
    packed = pack_arrays(flat, lengths, completion_mask=mask, options=opts)
    return _windows_table(packed, rows, None if ids is None else list(ids),
                          first + np.arange(packed.n_windows))


def _tag_pieces(batch: dict[str, np.ndarray], plan: Broadcast, column: str,
                mask_column: str | None, id_column: str | None, opts: PackOptions
                ) -> dict[str, Any]:
    """One output row per piece of a sequence in the plan: its window, slot and tokens."""
    first, window, slot, start, stop = plan.get()
    rows = np.asarray(batch[ROW], dtype=np.int64)
    piece, owner = expand_ranges(first[rows], first[rows + 1])
    values = batch[column]
    masks = batch[mask_column] if mask_column is not None else None
    tok = np.empty(piece.size, dtype=object)
    keep = np.empty(piece.size, dtype=object)
    cache: tuple[int, np.ndarray, np.ndarray] | None = None
    for k, (p, o) in enumerate(zip(piece.tolist(), owner.tolist())):
        if cache is None or cache[0] != o:  # a split sequence's pieces are consecutive
            cache = (o, *_with_separator(values[o], None if masks is None else masks[o], opts))
        tok[k] = cache[1][start[p]:stop[p]]
        keep[k] = cache[2][start[p]:stop[p]]
    out = {"window": window[piece], "slot": slot[piece], ROW: rows[owner],
           "start": start[piece], "stop": stop[piece], "tokens": tok, "keep": keep}
    if id_column is not None:
        out[id_column] = np.asarray(batch[id_column])[owner]
    return out


def _assemble(batch: dict[str, np.ndarray], id_column: str | None, opts: PackOptions) -> Any:
    """Collate the complete windows of one partition, exactly as ``pack_arrays`` would."""
    from ctxkit.packing.plan import BinList, PackLengthsResult
    from ctxkit.packing.tensors import collate_plan

    window = np.asarray(batch["window"], dtype=np.int64)
    order = np.lexsort((np.asarray(batch["slot"]), window))
    window = window[order]
    start = np.asarray(batch["start"], np.int64)[order]
    lengths = np.asarray(batch["stop"], np.int64)[order] - start
    toks, keep = batch["tokens"][order], batch["keep"][order]
    n = len(window)
    flat = np.concatenate([np.asarray(t, np.int64) for t in toks]) if n else np.zeros(0, np.int64)
    keep_flat = np.concatenate([np.asarray(k, bool) for k in keep]) if n else np.zeros(0, bool)
    cuts = np.flatnonzero(np.diff(window)) + 1
    bounds = np.r_[0, cuts, n] if n else np.zeros(1)  # an empty partition has no window
    bins = BinList(np.arange(n, dtype=np.int64), bounds.astype(np.int64))
    # each piece is an input of its own here; its place in the sequence is put back below
    plan = PackLengthsResult(bins=bins, capacity=opts.capacity, total_tokens=int(lengths.sum()),
                    strategy=opts.strategy, lengths=lengths)
    offsets = np.cumsum(lengths) - lengths
    packed = collate_plan(plan, flat, offsets, lengths, label_keep=keep_flat,
                          pad_id=opts.pad_id, layout=opts.layout)
    packed.segment_start = packed.segment_start + start[packed.segment_input]
    packed.segment_stop = packed.segment_stop + start[packed.segment_input]
    rows = np.asarray(batch[ROW], np.int64)[order]
    ids = None if id_column is None else list(np.asarray(batch[id_column])[order])
    return _windows_table(packed, rows, ids, window[np.r_[0, cuts]] if n else window)


def _row_lengths(batch: dict[str, np.ndarray], column: str, tokens: bool) -> dict[str, Any]:
    return {ROW: np.asarray(batch[ROW], dtype=np.int64),
            "length": _lengths_of(batch[column], tokens)}


def _skipped_rows(batch: dict[str, np.ndarray], column: str, tokens: bool, opts: PackOptions
                  ) -> dict[str, Any]:
    lengths = _lengths_of(batch[column], tokens)
    empty = lengths == 0
    over = (_packed_lengths(lengths, opts) > opts.capacity) & (opts.overflow == "drop")
    mask = empty | over
    return {"row": np.asarray(batch[ROW], dtype=np.int64)[mask], "length": lengths[mask],
            "reason": np.where(empty[mask], "empty", "over capacity").astype(object)}


def _is_token_column(ds: Any, column: str) -> bool:
    import pyarrow as pa

    schema = ds.schema()
    if schema is None or column not in schema.names:
        raise InputError(f"column {column!r} is not in the dataset (columns: {ds.columns()})")
    kind = schema.base_schema.field(column).type if hasattr(schema.base_schema, "field") else None
    if kind is None:  # pandas-backed block: look at a value
        sample = ds.take(1)
        return bool(sample) and not isinstance(sample[0][column], (int, np.integer))
    if pa.types.is_integer(kind):
        return False
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or \
            pa.types.is_fixed_size_list(kind) or "tensor" in str(kind).lower():
        return True
    raise InputError(f"column {column!r} must hold token-id lists or integer lengths, got "
                     f"{kind}")


def _piece_table(plan: Any, n: int) -> tuple[np.ndarray, ...]:
    """The plan's pieces grouped by input: (first piece of each input, window, slot, start,
    stop), so a worker finds a row's pieces with two lookups."""
    from ctxkit.packing.tensors import plan_segments

    window, inp, start, stop = plan_segments(plan)
    row_first = np.searchsorted(window, np.arange(plan.n_bins))
    slot = np.arange(window.size, dtype=np.int64) - row_first[window]
    by_input = np.lexsort((start, inp))
    first = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(inp, minlength=n), out=first[1:])
    return first, window[by_input], slot[by_input], start[by_input], stop[by_input]


def pack(
    ds: Any,
    capacity: int | None = None,
    *,
    column: str = "input_ids",
    mask_column: str | None = None,
    id_column: str | None = None,
    strategy: str = _D.strategy,
    overflow: str = _D.overflow,
    separator_id: int | None = _D.separator_id,
    label_separators: bool = _D.label_separators,
    pad_id: int = _D.pad_id,
    seed: int | None = _D.seed,
    layout: str = _D.layout,
    options: PackOptions | None = None,
    mode: str = "global",
    block_rows: int | None = None,
    num_partitions: int | None = None,
    shuffle: str | None = "auto",
) -> DistributedPack:
    """Pack the sequences of a Ray dataset into windows, as :func:`ctxkit.pack` does.

    ``column`` holds token-id lists (windows then carry collated tokens) or integer lengths
    (windows list their pieces only). ``mask_column`` holds each sequence's completion mask
    (1 = train on the token); ``id_column`` names the sources in ``source_ids``. The packing
    options are those of :class:`~ctxkit.packing.options.PackOptions` (keywords or
    ``options``). ``mode`` is ``"global"`` (plan on the driver; the windows of
    ``ctxkit.pack``) or ``"block"`` (per block, or per ``block_rows`` rows; see the module
    docs). ``shuffle`` (global mode): ``"auto"`` (sort shuffle below 20 M rows, hash above),
    ``"hash"``, ``"sort"``, or ``None`` for the current DataContext's strategy. A sequence
    over capacity with ``overflow="error"`` is a ``ValueError`` naming its row.

    Example:
        >>> out = pack(ray.data.from_items([{"n": 3}, {"n": 5}]), 8, column="n")  # doctest: +SKIP
        >>> out.stats["windows"]                                                   # doctest: +SKIP
        1
    """
    ray = require_ray()
    from ctxkit.packing.plan import pack_lengths

    if capacity is None and options is None:
        raise OptionError("capacity", "pack needs capacity (or options=PackOptions(capacity=...))")
    opts = PackOptions.resolve(
        options, capacity=capacity, strategy=strategy, overflow=overflow,
        separator_id=separator_id, label_separators=label_separators, pad_id=pad_id,
        seed=seed, layout=layout)
    if mode not in MODES:
        raise bad_option("mode", f" must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "block" and (opts.overflow == "split" or opts.strategy == "wrapped"):
        raise OptionError("mode", "mode='block' keeps each window inside one block; "
                          "overflow='split' and strategy='wrapped' cut sequences across windows: "
                          "use mode='global'")
    tokens = _is_token_column(ds, column)
    names = ds.columns() or []
    for extra in (mask_column, id_column):
        if extra is not None and extra not in names:
            raise InputError(f"column {extra!r} is not in the dataset (columns: {names})")
    if mask_column is not None and not tokens:
        raise InputError("mask_column needs a column of token lists, not lengths")
    indexed, n = index_rows(ds)
    raise_worker_errors(indexed)
    set_shuffle(indexed, shuffle, n)
    skipped = indexed.map_batches(
        _skipped_rows, fn_kwargs=dict(column=column, tokens=tokens, opts=opts),
        batch_format="numpy")
    if mode == "block" or n == 0:
        windows = indexed.map_batches(
            _pack_block, batch_size=block_rows, batch_format="numpy",
            fn_kwargs=dict(column=column, mask_column=mask_column, id_column=id_column,
                           tokens=tokens, opts=opts))
        return DistributedPack(windows, skipped, opts, mode)

    got = collect_columns(indexed.map_batches(
        _row_lengths, fn_kwargs={"column": column, "tokens": tokens}, batch_format="numpy"),
        [ROW, "length"])
    lengths = np.empty(n, dtype=np.int64)
    lengths[got[ROW].astype(np.int64)] = got["length"]
    planned = _packed_lengths(lengths, opts)
    message = _over_capacity(planned, np.arange(n), None, opts)
    if message is not None and id_column is not None:
        row = int(np.argmax(planned > opts.capacity))
        rid = indexed.filter(lambda r: r[ROW] == row).take(1)[0][id_column]
        message = message.replace(f"row {row} ", f"row {row} (id {rid}) ", 1)
    if message is not None:
        raise InputError(message)
    plan = pack_lengths(planned, capacity=opts.capacity, strategy=opts.strategy,
                        overflow=opts.overflow, seed=opts.seed)
    stats = {"windows": plan.n_bins, "lower_bound": plan.lower_bound,
             "utilization": plan.utilization, "tokens": plan.total_tokens,
             "sequences": n - len(plan.empty) - len(plan.dropped), "split": len(plan.split),
             "truncated": len(plan.truncated), "tokens_truncated": plan.tokens_truncated,
             "dropped": len(plan.dropped), "empty": len(plan.empty)}
    if not tokens:  # lengths only: the plan is the answer, no shuffle needed
        table = _plan_table(plan, np.arange(n, dtype=np.int64), np.arange(plan.n_bins))
        return DistributedPack(ray.data.from_arrow(table), skipped, opts, mode, stats)
    tagged = indexed.map_batches(
        _tag_pieces, batch_format="numpy",
        fn_kwargs={"plan": Broadcast(_piece_table(plan, n)), "column": column,
                   "mask_column": mask_column, "id_column": id_column, "opts": opts})
    parts = hash_partitions(n, int(lengths.mean() * 10 + 48) if n else 64, num_partitions)
    windows = map_key_groups(tagged, ["window"], _assemble, parts,
                             fn_kwargs={"id_column": id_column, "opts": opts})
    return DistributedPack(windows, skipped, opts, mode, stats)


def _window_tokens(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    return {"tokens": np.array([int(np.sum(s)) for s in batch["seq_lengths"]], np.int64)}


def window_utilization(windows: Any, capacity: int) -> dict[str, float]:
    """Windows, tokens (separators included) and utilization (tokens / (windows x capacity))
    of packed windows."""
    got = collect_columns(windows.map_batches(_window_tokens, batch_format="numpy"), ["tokens"])
    count, total = len(got["tokens"]), int(got["tokens"].sum())
    return {"windows": count, "tokens": total,
            "utilization": total / (count * capacity) if count else 0.0}
