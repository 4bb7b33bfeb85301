"""Global row numbers for a Ray dataset, and small helpers on blocks.

Ray Data has no stable global row index (``monotonically_increasing_id`` is unique but not
ordered across tasks). Stages that must agree with the single-machine path ("keep the first
of each cluster", "document ``i``") need one, so :func:`with_row_index` executes the dataset
once in order, counts each block's rows and numbers them with a running offset.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ctxkit.distributed.cluster import require_ray
from ctxkit.errors import InputError

__all__ = ["CHUNK_BYTES", "ROW", "index_rows", "ordered", "row_chunks", "with_row_index"]

ROW = "_row"  # the column holding the global row number (0-based, dataset order)
# Bytes of input per chunk of :func:`row_chunks`: every later pass pays a task and a few
# objects per chunk (a JSON reader's half-megabyte blocks made that the cost of a run), and
# chunks many times the cores keep the cores evenly busy to the end of each pass.
CHUNK_BYTES = 16 << 20


def ordered(ds: Any) -> Any:
    """A copy of ``ds`` whose executions keep the input order (``preserve_order=True``).

    Derived datasets share their parent's DataContext, so the copy gets its own context and
    the caller's dataset is left as it was.
    """
    ray = require_ray()
    copy = ray.data.Dataset.copy(ds, _deep_copy=True)
    copy.context.execution_options.preserve_order = True
    return copy


def _number_block(block: Any, start: int, column: str) -> Any:
    from ray.data.block import BlockAccessor

    table = BlockAccessor.for_block(block).to_arrow()
    if column in table.column_names:
        raise InputError(f"column {column!r}: the dataset already has a column of that name")
    import pyarrow as pa

    rows = pa.array(np.arange(start, start + table.num_rows, dtype=np.int64))
    return table.append_column(column, rows)


def with_row_index(ds: Any, column: str = ROW) -> Any:
    """``ds`` with an int64 column numbering its rows 0..n-1 in dataset order.

    Executes ``ds`` once (its blocks stay in the object store, spilling to disk when large)
    and returns a dataset over the numbered blocks. Cost: one pass, no shuffle.

    Example:
        >>> ds = with_row_index(ray.data.from_items([{"t": "a"}, {"t": "b"}]))  # doctest: +SKIP
        >>> [r["_row"] for r in ds.take_all()]                                    # doctest: +SKIP
        [0, 1]
    """
    return index_rows(ds, column)[0]


def index_rows(ds: Any, column: str = ROW) -> tuple[Any, int]:
    """:func:`with_row_index` and the number of rows. An empty ``ds`` comes back as an
    empty dataset with only the index column (and its own DataContext, like every result)."""
    ray = require_ray()
    number = ray.remote(_number_block)
    refs, start = [], 0
    for bundle in ordered(ds).iter_internal_ref_bundles():
        for ref, meta in _bundle_blocks(bundle):
            refs.append(number.remote(ref, start, column))
            start += int(meta.num_rows)
    if not refs:
        import pyarrow as pa

        return ray.data.from_arrow(pa.table({column: pa.array([], pa.int64())})), 0
    return ray.data.from_arrow_refs(refs), start


def _bundle_blocks(bundle: Any) -> list[tuple[Any, Any]]:
    out = []
    for entry in bundle.blocks:
        ref = getattr(entry, "ref", None)
        meta = getattr(entry, "metadata", None)
        if ref is None:  # older Ray: plain (ref, metadata) tuples
            ref, meta = entry
        out.append((ref, meta))
    return out


def row_chunks(ds: Any, target_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, int, list]]:
    """``ds``'s blocks, in dataset order, grouped into chunks of about ``target_bytes``:
    ``(first row, rows, block refs)`` per chunk. Executes ``ds`` once, streaming: a chunk is
    yielded as soon as its blocks exist, so its work overlaps the rest of the read.

    Example:
        >>> [(s, n) for s, n, _ in row_chunks(ray.data.range(10), 1 << 30)]  # doctest: +SKIP
        [(0, 10)]
    """
    refs, start, rows, size = [], 0, 0, 0
    for bundle in ordered(ds).iter_internal_ref_bundles():
        for ref, meta in _bundle_blocks(bundle):
            if not meta.num_rows:
                continue
            block = int(meta.size_bytes or 0)
            if refs and size + block > target_bytes:  # a block of the target size stands alone
                yield start, rows, refs
                refs, start, rows, size = [], start + rows, 0, 0
            refs.append(ref)
            rows += int(meta.num_rows)
            size += block
    if refs:
        yield start, rows, refs
