"""Packing a Ray dataset of token sequences into windows of ``capacity`` tokens.

Two modes, both on :func:`ctxkit.packing.plan.pack_lengths` (the single-machine planner):

- ``mode="global"`` (two passes): collect every sequence's length on the driver (8 bytes per
  document: 100 M documents are 800 MB), plan all of them at once, broadcast the plan, then
  one hash shuffle on the window number brings each window's sequences together. Same windows
  as ``pack_lengths(all_lengths)`` would give on one machine.
- ``mode="block"``: plan each block (or each ``block_rows`` rows) on its own inside
  ``map_batches``: streaming, no driver state, no shuffle, but every block ends with
  partly filled windows, so utilization drops by about (tail waste per block) / (tokens per
  block). ``evals/distributed.py`` measures the loss against global packing; it is small once
  a block holds thousands of sequences.

Sequences of length 0 are never packed; they, and sequences over ``capacity`` with
``overflow="drop"``, are listed in :attr:`DistributedPack.skipped` with the reason.

Example:
    >>> ds = ray.data.from_items([{"input_ids": [1, 2, 3]},
    ...                           {"input_ids": [4, 5]}])   # doctest: +SKIP
    >>> pack(ds, capacity=8).windows.take_all()              # doctest: +SKIP
    [{'window': 0, 'rows': [0, 1], 'lengths': [3, 2], 'tokens': 5, 'input_ids': [1, 2, 3, 4, 5]}]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit.distributed.blocks import (
    Broadcast,
    collect_columns,
    hash_partitions,
    map_key_groups,
    set_shuffle,
)
from ctxkit.distributed.cluster import require_ray
from ctxkit.distributed.rows import ROW, index_rows

__all__ = ["MODES", "DistributedPack", "pack", "window_utilization"]

MODES = ("global", "block")
_OVERFLOW = ("error", "truncate", "drop")


@dataclass
class DistributedPack:
    """What :func:`pack` returns.

    Attributes:
        windows: one row per window: ``window`` (its number), ``rows`` (input row numbers in
            window order), ``lengths`` (their token counts, after truncation), ``tokens``
            (the sum) and, when the input held token lists, the concatenated tokens under
            the input column's name (no padding, no separators: collation adds those).
        skipped: input rows not packed (``row``, ``length``, ``reason``: ``"empty"`` or
            ``"over capacity"``); lazy.
        capacity: the window size.
        mode: ``"global"`` or ``"block"``.
        stats: for ``"global"``, the plan's figures (windows, lower bound, utilization)
            known before any window is built; empty for ``"block"`` (see
            :func:`window_utilization`).
    """

    windows: Any
    skipped: Any
    capacity: int
    mode: str
    stats: dict[str, Any] = field(default_factory=dict)


def _lengths_of(values: np.ndarray, tokens: bool) -> np.ndarray:
    if tokens:
        return np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    return np.asarray(values, dtype=np.int64)


def _check_over(lengths: np.ndarray, rows: np.ndarray, capacity: int, overflow: str) -> None:
    if overflow != "error":
        return
    over = np.flatnonzero(lengths > capacity)
    if len(over):
        i = over[0]
        raise ValueError(
            f"row {int(rows[i])} has {int(lengths[i])} tokens, more than capacity {capacity} "
            "(use overflow='truncate' or 'drop')"
        )


def _windows_from_bins(
    bins: list[np.ndarray], rows: np.ndarray, lengths: np.ndarray, capacity: int,
    values: np.ndarray | None, column: str, window_ids: np.ndarray,
) -> dict[str, Any]:
    eff = np.minimum(lengths, capacity)
    out: dict[str, Any] = {
        "window": np.asarray(window_ids, dtype=np.int64),
        "rows": _objects([rows[b] for b in bins]),
        "lengths": _objects([eff[b] for b in bins]),
        "tokens": np.array([int(eff[b].sum()) for b in bins], dtype=np.int64),
    }
    if values is not None:
        out[column] = _objects([
            np.concatenate([np.asarray(values[i])[:capacity] for i in b]) if len(b) else
            np.empty(0, np.int64) for b in bins
        ])
    return out


def _objects(arrays: list[np.ndarray]) -> np.ndarray:
    out = np.empty(len(arrays), dtype=object)
    out[:] = arrays
    return out


def _pack_block(
    batch: dict[str, np.ndarray], column: str, tokens: bool, capacity: int, strategy: str,
    overflow: str,
) -> dict[str, Any]:
    from ctxkit.packing.plan import pack_lengths

    rows = np.asarray(batch[ROW], dtype=np.int64)
    values = batch[column]
    lengths = _lengths_of(values, tokens)
    _check_over(lengths, rows, capacity, overflow)
    plan = pack_lengths(lengths, capacity, strategy=strategy, overflow=overflow)
    bins = list(plan.bins)
    # A window is named by its smallest row number: unique, and stable across runs.
    ids = np.array([rows[b].min() for b in bins], dtype=np.int64)
    return _windows_from_bins(bins, rows, lengths, capacity, values if tokens else None,
                              column, ids)


def _tag_rows(batch: dict[str, np.ndarray], plan: Broadcast, column: str) -> dict[str, Any]:
    window_of, slot_of = plan.get()
    rows = np.asarray(batch[ROW], dtype=np.int64)
    w = window_of[rows]
    keep = w >= 0
    return {"window": w[keep], "slot": slot_of[rows][keep], ROW: rows[keep],
            column: batch[column][keep]}


def _assemble(batch: dict[str, np.ndarray], column: str, capacity: int) -> dict[str, Any]:
    """Every window here is complete: order its rows by slot and concatenate their tokens."""
    window = np.asarray(batch["window"], dtype=np.int64)
    order = np.lexsort((np.asarray(batch["slot"]), window))
    window, rows, values = window[order], np.asarray(batch[ROW])[order], batch[column][order]
    lengths = _lengths_of(values, True)
    cuts = np.flatnonzero(np.diff(window)) + 1
    bins = np.split(np.arange(len(window)), cuts) if len(window) else []
    ids = window[np.r_[0, cuts]] if len(window) else np.empty(0, np.int64)
    return _windows_from_bins(bins, rows, lengths, capacity, values, column, ids)


def _row_lengths(batch: dict[str, np.ndarray], column: str, tokens: bool) -> dict[str, Any]:
    return {ROW: np.asarray(batch[ROW], dtype=np.int64),
            "length": _lengths_of(batch[column], tokens)}


def _skipped_rows(batch: dict[str, np.ndarray], column: str, tokens: bool, capacity: int,
                  overflow: str) -> dict[str, Any]:
    lengths = _lengths_of(batch[column], tokens)
    empty = lengths == 0
    over = (lengths > capacity) & (overflow == "drop")
    mask = empty | over
    return {"row": np.asarray(batch[ROW], dtype=np.int64)[mask], "length": lengths[mask],
            "reason": np.where(empty[mask], "empty", "over capacity").astype(object)}


def _is_token_column(ds: Any, column: str) -> bool:
    import pyarrow as pa

    schema = ds.schema()
    if schema is None or column not in schema.names:
        raise ValueError(f"column {column!r} is not in the dataset (columns: {ds.columns()})")
    kind = schema.base_schema.field(column).type if hasattr(schema.base_schema, "field") else None
    if kind is None:  # pandas-backed block: look at a value
        sample = ds.take(1)
        return bool(sample) and not isinstance(sample[0][column], (int, np.integer))
    if pa.types.is_integer(kind):
        return False
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or \
            pa.types.is_fixed_size_list(kind) or "tensor" in str(kind).lower():
        return True
    raise ValueError(f"column {column!r} must hold token-id lists or integer lengths, got {kind}")


def pack(
    ds: Any,
    capacity: int,
    *,
    column: str = "input_ids",
    strategy: str = "bfd",
    mode: str = "global",
    overflow: str = "error",
    block_rows: int | None = None,
    num_partitions: int | None = None,
    shuffle: str | None = "auto",
) -> DistributedPack:
    """Pack the sequences of a Ray dataset into windows of ``capacity`` tokens.

    ``column`` holds token-id lists (windows then carry the concatenated tokens) or integer
    lengths (windows list their rows only). ``strategy`` is any of
    :data:`ctxkit.packing.plan.STRATEGIES` that places whole sequences (``bfd``, ``ffd``,
    ``greedy``, ``optimal``); ``overflow`` is ``"error"`` (naming the row), ``"truncate"``
    or ``"drop"`` (reported in ``skipped``). ``mode`` is ``"global"`` (two-pass plan on the
    driver) or ``"block"`` (per block, or per ``block_rows`` rows; see the module docs).
    ``shuffle`` (global mode): ``"auto"`` (sort shuffle below 20 M rows, hash above),
    ``"hash"``, ``"sort"``, or ``None`` for the current DataContext's strategy.

    Example:
        >>> out = pack(ray.data.from_items([{"n": 3}, {"n": 5}]), 8, column="n")  # doctest: +SKIP
        >>> out.stats["windows"]                                                   # doctest: +SKIP
        1
    """
    ray = require_ray()
    from ctxkit.packing.plan import STRATEGIES, pack_lengths

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if overflow not in _OVERFLOW:
        raise ValueError(f"overflow must be one of {_OVERFLOW} here ('split' would spread a "
                         f"sequence over windows of different blocks), got {overflow!r}")
    if strategy not in STRATEGIES or strategy == "wrapped":
        raise ValueError(f"strategy must be one of {[s for s in STRATEGIES if s != 'wrapped']}, "
                         f"got {strategy!r}")
    if not isinstance(capacity, (int, np.integer)) or capacity <= 0:
        raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
    tokens = _is_token_column(ds, column)
    indexed, n = index_rows(ds)
    set_shuffle(indexed, shuffle, n)
    skipped = indexed.map_batches(
        _skipped_rows, fn_kwargs=dict(column=column, tokens=tokens, capacity=capacity,
                                      overflow=overflow), batch_format="numpy")
    if mode == "block" or n == 0:
        windows = indexed.map_batches(
            _pack_block, batch_size=block_rows, batch_format="numpy",
            fn_kwargs=dict(column=column, tokens=tokens, capacity=int(capacity),
                           strategy=strategy, overflow=overflow))
        return DistributedPack(windows, skipped, int(capacity), mode)

    got = collect_columns(indexed.map_batches(
        _row_lengths, fn_kwargs={"column": column, "tokens": tokens}, batch_format="numpy"),
        [ROW, "length"])
    lengths = np.empty(n, dtype=np.int64)
    lengths[got[ROW].astype(np.int64)] = got["length"]
    _check_over(lengths, np.arange(n), int(capacity), overflow)
    plan = pack_lengths(lengths, int(capacity), strategy=strategy, overflow=overflow)
    stats = {"windows": plan.n_bins, "lower_bound": plan.lower_bound,
             "utilization": plan.utilization, "tokens": plan.total_tokens,
             "sequences": n - len(plan.empty) - len(plan.dropped)}
    bins = list(plan.bins)
    if not tokens:  # lengths only: the plan is the answer, no shuffle needed
        rows = np.arange(n, dtype=np.int64)
        table = _windows_from_bins(bins, rows, lengths, int(capacity), None, column,
                                   np.arange(len(bins)))
        import pyarrow as pa

        windows = ray.data.from_arrow(pa.table({k: list(v) if v.dtype == object else v
                                                for k, v in table.items()}))
        return DistributedPack(windows, skipped, int(capacity), mode, stats)
    window_of = np.full(n, -1, dtype=np.int64)
    slot_of = np.zeros(n, dtype=np.int64)
    if bins:
        # BinList keeps the windows flat; plain lists of arrays work too.
        members = getattr(plan.bins, "flat", None)
        members = np.concatenate(bins) if members is None else members
        sizes = np.array([len(b) for b in bins])
        window_of[members] = np.repeat(np.arange(len(bins)), sizes)
        slot_of[members] = np.arange(len(members)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    tagged = indexed.map_batches(_tag_rows, batch_format="numpy",
                                 fn_kwargs={"plan": Broadcast((window_of, slot_of)),
                                            "column": column})
    parts = hash_partitions(n, int(lengths.mean() * 8 + 32) if n else 64, num_partitions)
    windows = map_key_groups(tagged, ["window"], _assemble, parts,
                             fn_kwargs={"column": column, "capacity": int(capacity)})
    return DistributedPack(windows, skipped, int(capacity), mode, stats)


def window_utilization(windows: Any, capacity: int) -> dict[str, float]:
    """Windows, tokens and utilization (tokens / (windows x capacity)) of packed windows."""
    got = collect_columns(windows, ["tokens"])
    count, total = len(got["tokens"]), int(got["tokens"].sum())
    return {"windows": count, "tokens": total,
            "utilization": total / (count * capacity) if count else 0.0}
