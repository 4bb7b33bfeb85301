"""The worker side of the distributed MinHash: plain functions on Arrow tables and numpy arrays.

Each runs as one Ray task on one chunk of rows or one partition of pairs
(:mod:`ctxkit.distributed.minhash` wires them up); none imports Ray, so each can be called
and tested in one process. Pairs travel as ``uint64`` codes ``a << 32 | b`` (``a < b``, row
numbers below 2**32), sorted, so a partition's pairs are a sorted array and a range
partition on ``a`` keeps the global order.

Example:
    >>> import pyarrow as pa
    >>> t = pa.table({"text": ["a b c d e f", "a b c d e f!", "zzz"]})
    >>> chunk = prepare_chunk(0, "text", {"num_perm": 16}, 4, 4, None, t)
    >>> chunk.sig.shape, chunk.table.column_names
    ((3, 16), ['text', '_row'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxkit.distributed.blocks import expand_ranges
from ctxkit.distributed.errors import WorkerInputError
from ctxkit.distributed.rows import ROW

__all__ = ["Chunk", "bucket_pairs", "decode", "prepare_chunk", "split_bands"]

_LOW = np.uint64(0xFFFFFFFF)


def decode(codes: np.ndarray) -> np.ndarray:
    """``(m, 2)`` int64 row pairs of ``a << 32 | b`` codes.

    Example:
        >>> decode(np.array([(1 << 32) | 5], dtype=np.uint64)).tolist()
        [[1, 5]]
    """
    codes = np.asarray(codes, dtype=np.uint64)
    return np.stack([codes >> np.uint64(32), codes & _LOW], axis=1).astype(np.int64)


def encode(pairs: np.ndarray) -> np.ndarray:
    """The codes of ``(m, 2)`` row pairs, smaller row first (the inverse of :func:`decode`)."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    a, b = pairs[:, 0], pairs[:, 1]  # np.minimum of two columns, not min(axis=1): 20x faster
    return (np.minimum(a, b).astype(np.uint64) << np.uint64(32)) | np.maximum(a, b).astype(
        np.uint64)


@dataclass
class Chunk:
    """What :func:`prepare_chunk` makes of one chunk of rows: the rows numbered (``table``,
    kept in the object store for the texts and the output), their signatures, the
    per-row values the driver ranks by (``side``: text lengths, scores) and the live rows'
    ``(band, key, row)`` triples."""

    table: Any
    sig: np.ndarray
    side: dict[str, np.ndarray]
    bands: dict[str, np.ndarray]


def _texts(table: Any, column: str, start: int) -> list[str]:
    texts = table.column(column).to_pylist()
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise WorkerInputError(
                f"row {start + i}: column {column!r} must hold text, got {type(t).__name__}",
                start + i)
    return texts


def prepare_chunk(start: int, column: str, params: dict[str, Any], bands: int, rows: int,
                  score_column: str | None, *tables: Any) -> Chunk:
    """Number a chunk's rows from ``start``, sign its texts and cut the signatures into
    bands: the single-machine :func:`~ctxkit.deduplication.signatures.signatures` and
    :func:`~ctxkit.deduplication.lsh.band_keys`, so the same seed gives the same keys."""
    import pyarrow as pa

    from ctxkit.deduplication.lsh import band_keys
    from ctxkit.deduplication.signatures import empty_rows, signatures

    table = pa.concat_tables([t for t in tables if t.num_rows], promote_options="permissive") \
        if len(tables) > 1 else tables[0]
    n = table.num_rows
    ids = np.arange(start, start + n, dtype=np.int64)
    table = table.append_column(ROW, pa.array(ids))
    texts = _texts(table, column, start)
    sig = signatures(texts, **params)
    side = {"len": np.fromiter(map(len, texts), dtype=np.int64, count=n)}
    if score_column is not None:
        side["score"] = table.column(score_column).to_numpy(zero_copy_only=False).astype(
            np.float64)
    live = ~empty_rows(sig)  # texts without shingles are never candidates, as on one machine
    keys = band_keys(sig[live], bands, rows)
    triples = {"band": np.tile(np.arange(bands, dtype=np.uint8 if bands < 256 else np.int32),
                               int(live.sum())),
               "key": keys.reshape(-1), "row": np.repeat(ids[live], bands)}
    return Chunk(table, sig, side, triples)


def split_bands(triples: dict[str, np.ndarray], parts: int) -> list[dict[str, np.ndarray]]:
    """The triples in ``parts`` hash partitions of their key: a bucket ``(band, key)`` lies
    whole in one partition."""
    part = (triples["key"] % np.uint64(parts)).astype(np.int64)
    order = np.argsort(part, kind="stable")
    cuts = np.searchsorted(part[order], np.arange(parts + 1))
    return [{k: v[order[cuts[q]:cuts[q + 1]]] for k, v in triples.items()}
            for q in range(parts)]


def bucket_pairs(max_bucket: int, bounds: np.ndarray, *parts: dict[str, np.ndarray]
                 ) -> list[np.ndarray]:
    """Candidate pairs of whole buckets, de-duplicated here and split by range of their
    smaller row (``bounds``, one partition per range). The single-machine
    :func:`~ctxkit.deduplication.lsh.candidate_pairs` runs band by band; it draws a large
    bucket's hub from the row numbers and the band alone, so the union over partitions is
    exactly the single-machine candidate set."""
    from ctxkit.deduplication.lsh import candidate_pairs

    band = np.concatenate([p["band"] for p in parts])
    key = np.concatenate([p["key"] for p in parts])
    row = np.concatenate([p["row"] for p in parts])
    order = np.argsort(band, kind="stable")
    band, key, row = band[order], key[order], row[order]
    cuts = np.flatnonzero(np.diff(band)) + 1
    found = [np.empty(0, np.uint64)]
    for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(band)].tolist()):
        if hi > lo:
            pairs = candidate_pairs(key[lo:hi, None], max_bucket=max_bucket, ids=row[lo:hi],
                                    first_band=int(band[lo]))
            found.append(encode(pairs))
    codes = np.unique(np.concatenate(found))
    return _by_range(codes, bounds)


def _by_range(codes: np.ndarray, bounds: np.ndarray) -> list[np.ndarray]:
    """Sorted codes split by their smaller row at ``bounds`` (row numbers)."""
    cuts = np.searchsorted(codes, np.asarray(bounds, dtype=np.uint64) << np.uint64(32))
    return [codes[cuts[q]:cuts[q + 1]] for q in range(len(bounds) - 1)]


def requests(codes: np.ndarray, starts: np.ndarray) -> list[np.ndarray]:
    """The distinct rows that ``codes`` name, split by the chunks (row ``starts``, with
    the end last) that hold them."""
    pairs = decode(codes)
    need = np.unique(pairs)
    cuts = np.searchsorted(need, starts)
    return [need[cuts[m]:cuts[m + 1]] for m in range(len(starts) - 1)]


def serve_signatures(start: int, sig: np.ndarray, *asked: np.ndarray) -> list[dict]:
    """For each partition, the signature rows it asked this chunk for."""
    return [{"row": r, "value": sig[r - start]} for r in asked]


def serve_shingles(start: int, table: Any, column: str, shingling: dict[str, Any],
                   *asked: np.ndarray) -> list[dict]:
    """For each partition, the distinct 32-bit shingle values of the texts it asked for.
    Every asked text is hashed once, however many partitions ask for it."""
    from ctxkit.deduplication.jaccard import shingle_sets
    from ctxkit.deduplication.signatures import hash_values

    union = np.unique(np.concatenate([np.empty(0, np.int64), *asked]))
    texts = table.column(column).take(union - start).to_pylist()
    keys, offsets = shingle_sets(*hash_values(texts, **shingling))
    out = []
    for r in asked:
        at = np.searchsorted(union, r)
        take, _ = expand_ranges(offsets[at], offsets[at + 1])
        out.append({"row": r, "value": (keys[take] & _LOW).astype(np.uint32),
                    "size": offsets[at + 1] - offsets[at]})
    return out


def _local(codes: np.ndarray, served: tuple[dict, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Positions of each pair's rows among the served rows (concatenated in chunk order,
    hence sorted), and those rows."""
    rows = np.concatenate([s["row"] for s in served]) if served else np.empty(0, np.int64)
    return np.searchsorted(rows, decode(codes)), rows


def score_estimates(floor: float, starts: np.ndarray, codes: np.ndarray, *served: dict
                    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """Estimated Jaccard of a partition's pairs (the single-machine
    :func:`~ctxkit.deduplication.verify.estimate_jaccard`); those above ``floor`` survive.
    Also returns which rows each chunk must send for the survivors' exact scores."""
    from ctxkit.deduplication.verify import estimate_jaccard

    local, _ = _local(codes, served)
    sig = np.concatenate([s["value"] for s in served]) if served else np.empty((0, 1))
    est = estimate_jaccard(sig, local) if len(codes) else np.empty(0)
    at = est > floor
    kept = codes[at]
    return {"code": kept, "estimate": est[at], "candidates": np.array([len(codes)])}, \
        requests(kept, starts)


def score_exact(codes: np.ndarray, *served: dict) -> np.ndarray:
    """Exact Jaccard of a partition's pairs from the served shingle values: the
    single-machine formula (:func:`~ctxkit.deduplication.jaccard.pair_jaccard`) on the
    intersections of the sorted value runs."""
    from ctxkit.deduplication import kernels
    from ctxkit.deduplication.jaccard import _jaccard, pair_jaccard

    if len(codes) == 0:
        return np.empty(0)
    local, rows = _local(codes, served)
    values = np.concatenate([s["value"] for s in served])
    sizes = np.concatenate([s["size"] for s in served])
    offsets = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    if kernels.NUMBA:  # the merge compares the low 32 bits: the values need no row prefix
        inter = np.empty(len(local), dtype=np.int64)
        kernels.intersection_sizes(values, offsets, local, inter)
        return _jaccard(inter, sizes[local[:, 0]] + sizes[local[:, 1]])
    doc = np.repeat(np.arange(len(rows), dtype=np.uint64), sizes)
    return pair_jaccard((doc << np.uint64(32)) | values.astype(np.uint64), offsets, local)


def kept_rows(table: Any, keep: np.ndarray) -> Any:
    """The rows of a chunk's table whose ``keep`` flag is set, without the row numbers."""
    import pyarrow as pa

    return table.drop_columns([ROW]).filter(pa.array(np.asarray(keep, dtype=bool)))


def row_ids(start: int, table: Any, id_column: str | None, record_ids: bool,
            rows: np.ndarray) -> list:
    """The ids of a chunk's ``rows``: ``id_column``'s values (as text with ``record_ids``),
    else, with ``record_ids``, the rule of :func:`~ctxkit.io.records.record_id` on a
    record's own ``id``, else the row numbers."""
    from ctxkit.io.records import ID_FIELD, record_id

    rows = np.asarray(rows, dtype=np.int64)
    if id_column is not None:
        values = table.column(id_column).take(rows - start).to_pylist()
        return [str(v) for v in values] if record_ids else values
    if record_ids and ID_FIELD in table.column_names:
        values = table.column(ID_FIELD).take(rows - start).to_pylist()
        return [record_id(v, r) for v, r in zip(values, rows.tolist())]
    return [str(r) for r in rows.tolist()] if record_ids else rows.tolist()
