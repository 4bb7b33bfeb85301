"""MinHash near-duplicate removal on a Ray dataset, identical to ``ctxkit.dedup(method="minhash")``.

The stages are the single-machine ones from :mod:`ctxkit.deduplication.minhash`, run where
the data is:

1. number the rows (:func:`~ctxkit.distributed.rows.with_row_index`, one ordered pass);
2. ``map_batches``: :func:`~ctxkit.deduplication.minhash.signatures` (the same vectorised code, so
   the same signatures for the same seed) and :func:`~ctxkit.deduplication.minhash.band_keys`;
3. one hash shuffle of ``(band, key, row)`` triples on ``(band, key)``: every LSH bucket
   lands whole in one partition, where :func:`~ctxkit.deduplication.minhash.candidate_pairs` turns
   its buckets into candidate pairs (bucket-local, so the union over partitions is exactly the
   single-machine candidate set: all pairs of a small bucket, a star around a hub drawn from
   row number and band in a large one);
4. verification: the candidate list (16 bytes per pair) goes to the driver and back out as a
   broadcast, split into partitions (a pair goes with the smaller of its rows, so a
   cluster's star stays together); one shuffle sends every involved signature to the
   partitions that need it (at most once per partition, however many pairs it is in) and
   :func:`~ctxkit.deduplication.minhash.estimate_jaccard` scores each partition's pairs; with
   ``verify="exact"`` (the single-machine default) the pairs whose estimate lies near the
   threshold are re-scored by the exact Jaccard of their shingle sets
   (:func:`~ctxkit.deduplication.minhash.pair_jaccard`), routing those pairs' texts the same way,
   in the rounds of :func:`~ctxkit.deduplication.linking.link_pairs` (pairs inside an already
   linked large component are skipped, so templated corpora stay linear);
5. connected components: **union-find on the driver** (scipy's C connected components over
   the verified edge list, :func:`~ctxkit.deduplication.unionfind.connected_components`). It needs
   about 8 bytes per document plus 16 per verified pair on the driver: 100 M documents with
   10 M verified pairs is about 1 GiB. Beyond that a distributed label propagation would be
   needed; it is not implemented (see ``docs/scaling.md``);
6. representatives by the same rule (:func:`~ctxkit.deduplication.unionfind.representatives`), their
   similarities by the same pair machinery, then a filtered dataset and a report dataset.

Example:
    >>> out = minhash_dedup(ray.data.from_items([{"text": t} for t in texts]))  # doctest: +SKIP
    >>> out.kept.count(), out.report.take(1)                                    # doctest: +SKIP
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
from ctxkit.distributed.errors import WorkerInputError
from ctxkit.distributed.rows import ROW, index_rows
from ctxkit.errors import InputError, InternalError, OptionError

__all__ = ["DistributedDedup", "minhash_dedup"]

COMPONENTS = "union-find on the driver (scipy connected components over the verified pairs)"


@dataclass
class DistributedDedup:
    """What :func:`minhash_dedup` returns.

    Attributes:
        kept: the input rows that survive, in their original columns (lazy dataset).
        report: one row per removed input: ``id`` and ``duplicate_of`` (values of
            ``id_column``, or row numbers), ``row``, ``duplicate_of_row`` (the kept row),
            ``method``, ``matched_row`` (the row it was found similar to, which can differ
            from the kept row: clusters are transitive) and ``similarity`` (Jaccard to
            ``matched_row``, exact or estimated as ``verify`` says).
        result: the driver-side :class:`ctxkit.dedup.DedupResult` over row numbers, equal to
            ``ctxkit.dedup(texts, method="minhash", ...)`` on the same rows.
        info: parameters, counts and how the components were found.
    """

    kept: Any
    report: Any
    result: Any
    info: dict[str, Any] = field(default_factory=dict)


def _text_list(batch: dict[str, np.ndarray], column: str) -> list[str]:
    texts = batch[column]
    out = texts.tolist()
    for i, t in enumerate(out):
        if not isinstance(t, str):
            row = int(batch[ROW][i])
            raise WorkerInputError(
                f"row {row}: column {column!r} must hold text, got {type(t).__name__}", row)
    return out


def _sign_block(
    batch: dict[str, np.ndarray], column: str, params: dict[str, Any], score_column: str | None
) -> dict[str, np.ndarray]:
    from ctxkit.deduplication.signatures import signatures

    texts = _text_list(batch, column)
    sig = signatures(texts, **params)
    out = {ROW: np.asarray(batch[ROW], dtype=np.int64), "sig": sig,
           "_len": np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))}
    if score_column is not None:
        out["_score"] = np.asarray(batch[score_column], dtype=np.float64)
    return out


def _band_rows(batch: dict[str, np.ndarray], bands: int, rows: int) -> dict[str, np.ndarray]:
    from ctxkit.deduplication.lsh import band_keys
    from ctxkit.deduplication.signatures import empty_rows

    sig = np.asarray(batch["sig"])
    live = ~empty_rows(sig)  # texts without shingles are never candidates, as on one machine
    keys = band_keys(sig[live], bands, rows)
    ids = np.asarray(batch[ROW], dtype=np.int64)[live]
    return {
        "band": np.tile(np.arange(bands, dtype=np.int32), len(ids)),
        "key": keys.reshape(-1),
        ROW: np.repeat(ids, bands),
    }


def _bucket_pairs(batch: dict[str, np.ndarray], max_bucket: int) -> dict[str, np.ndarray]:
    """Candidate pairs of whole buckets (every (band, key) here is complete), in global rows:
    :func:`~ctxkit.deduplication.minhash.candidate_pairs` draws each large bucket's hub from
    the row number and band alone, so the pairs are the single-machine ones."""
    from ctxkit.deduplication.lsh import candidate_pairs

    band = np.asarray(batch["band"])
    key = np.asarray(batch["key"], dtype=np.uint64)
    row = np.asarray(batch[ROW], dtype=np.int64)
    order = np.argsort(band, kind="stable")
    band, key, row = band[order], key[order], row[order]
    cuts = np.flatnonzero(np.diff(band)) + 1
    found = []
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(band)]):
        pairs = candidate_pairs(key[lo:hi, None], max_bucket=max_bucket, ids=row[lo:hi],
                                first_band=int(band[lo]))
        if len(pairs):
            found.append(pairs)
    pairs = np.concatenate(found) if found else np.empty((0, 2), np.int64)
    return {"a": pairs[:, 0].copy(), "b": pairs[:, 1].copy()}


def _pair_plan(pairs: np.ndarray, parts: int) -> dict[str, np.ndarray]:
    """Split pairs into ``parts`` partitions and list the rows each partition needs.

    A pair goes to partition ``min(a, b) % parts``, so the pairs of a cluster's star (all
    sharing the representative) land together; a row's payload is then copied to at most
    ``parts`` partitions however many pairs it is in, instead of once per pair.
    """
    owner = np.minimum(pairs[:, 0], pairs[:, 1]) % parts
    order = np.argsort(owner, kind="stable")
    offsets = np.searchsorted(owner[order], np.arange(parts + 1))
    base = int(pairs.max()) + 1
    need = np.unique(np.concatenate([owner * base + pairs[:, 0], owner * base + pairs[:, 1]]))
    row, part = need % base, need // base
    by_row = np.argsort(row, kind="stable")
    return {"pairs": pairs, "order": order, "offsets": offsets,
            "need_row": row[by_row], "need_part": part[by_row]}


def _route_rows(batch: dict[str, np.ndarray], plan: Broadcast, payload: str) -> dict[str, Any]:
    """Each row of this block, once per partition that has a pair involving it."""
    p = plan.get()
    rows = np.asarray(batch[ROW], dtype=np.int64)
    pos, owner = expand_ranges(np.searchsorted(p["need_row"], rows, "left"),
                               np.searchsorted(p["need_row"], rows, "right"))
    return {"part": p["need_part"][pos], ROW: rows[owner],
            "value": np.asarray(batch[payload])[owner]}


def _score_partition(
    batch: dict[str, np.ndarray], plan: Broadcast, kind: str, params: dict[str, Any]
) -> dict[str, Any]:
    """Every row a partition's pairs need is in this block: score them with the
    single-machine code. ``kind="estimate"``: the fraction of equal signature entries
    (:func:`~ctxkit.deduplication.minhash.estimate_jaccard`); ``"exact"``: the exact Jaccard of the
    two texts' shingle sets (:func:`~ctxkit.deduplication.minhash.pair_jaccard`)."""
    from ctxkit.deduplication.jaccard import pair_jaccard, shingle_sets
    from ctxkit.deduplication.signatures import hash_values
    from ctxkit.deduplication.verify import estimate_jaccard

    p = plan.get()
    part = np.asarray(batch["part"], dtype=np.int64)
    rows = np.asarray(batch[ROW], dtype=np.int64)
    values = np.asarray(batch["value"])
    out_pair, out_score = [], []
    for q in np.unique(part):
        mine = np.flatnonzero(part == q)
        mine = mine[np.argsort(rows[mine], kind="stable")]
        local_rows, local_values = rows[mine], values[mine]
        idx = p["order"][p["offsets"][q]:p["offsets"][q + 1]]
        local = np.searchsorted(local_rows, p["pairs"][idx])
        if (local >= len(local_rows)).any() or \
                not (local_rows[np.minimum(local, len(local_rows) - 1)] == p["pairs"][idx]).all():
            raise InternalError(f"partition {q} is missing rows its pairs need")
        if kind == "estimate":
            scores = estimate_jaccard(local_values, local)
        else:
            h, off = hash_values(local_values.tolist(), **params)
            scores = pair_jaccard(*shingle_sets(h, off), local)
        out_pair.append(idx)
        out_score.append(np.asarray(scores, dtype=np.float64))
    if not out_pair:
        return {"pair": np.empty(0, np.int64), "score": np.empty(0)}
    return {"pair": np.concatenate(out_pair), "score": np.concatenate(out_score)}


def _pair_scores(
    ds: Any, payload: str, pairs: np.ndarray, kind: str, params: dict[str, Any],
    num_partitions: int | None, row_bytes: int,
) -> np.ndarray:
    """Score row pairs where the payload (signatures or texts) lives: one shuffle that sends
    each involved row to the few partitions needing it, then a vectorised pass per partition."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if len(pairs) == 0:
        return np.empty(0, dtype=np.float64)
    involved = len(np.unique(pairs))
    parts = hash_partitions(involved, row_bytes, num_partitions)
    plan = Broadcast(_pair_plan(pairs, parts))
    routed = ds.map_batches(_route_rows, fn_kwargs={"plan": plan, "payload": payload},
                            batch_format="numpy")
    scored = map_key_groups(routed, ["part"], _score_partition, parts,
                            fn_kwargs={"plan": plan, "kind": kind, "params": params})
    got = collect_columns(scored, ["pair", "score"])
    out = np.full(len(pairs), np.nan)
    out[got["pair"].astype(np.int64)] = got["score"]
    if np.isnan(out).any():
        raise InternalError("some pairs were not scored (a row number is missing)")
    return out


def pair_similarity(
    sig_ds: Any, pairs: np.ndarray, num_partitions: int | None = None, row_bytes: int = 1100
) -> np.ndarray:
    """Estimated Jaccard of each row pair, computed where the signatures are.

    ``sig_ds`` has columns ``_row`` and ``sig``; ``pairs`` is ``(m, 2)`` row numbers on the
    driver (broadcast to the workers). One shuffle sends each involved signature to the
    partitions whose pairs need it (at most ``num_partitions`` copies, however many pairs
    a row is in); the result is in ``pairs`` order, equal to ``estimate_jaccard(sig, pairs)``.
    """
    return _pair_scores(sig_ds, "sig", pairs, "estimate", {}, num_partitions, row_bytes)


def _keep_rows(batch: dict[str, np.ndarray], kept: Broadcast) -> dict[str, np.ndarray]:
    mask = kept.get()[np.asarray(batch[ROW], dtype=np.int64)]
    return {k: v[mask] for k, v in batch.items() if k != ROW}


def _needed_ids(batch: dict[str, np.ndarray], need: Broadcast, id_column: str):
    rows = np.asarray(batch[ROW], dtype=np.int64)
    mask = need.get()[rows]
    return {ROW: rows[mask], "id": batch[id_column][mask]}


def minhash_dedup(
    ds: Any,
    column: str = "text",
    threshold: float | None = None,
    *,
    id_column: str | None = None,
    keep: str = "first",
    score_column: str | None = None,
    num_partitions: int | None = None,
    shuffle: str | None = "auto",
    options: Any = None,
    **option_values: Any,
) -> DistributedDedup:
    """Near-duplicate removal by MinHash + LSH on a Ray dataset.

    The MinHash options are :class:`~ctxkit.deduplication.options.MinHashOptions`, the same
    object and keywords as ``ctxkit.dedup(texts, method="minhash", ...)`` (``threshold``,
    default 0.7 Jaccard of character 5-grams, ``num_perm``, ``ngram``, ``unit``, ``seed``,
    ``bands``/``rows``, ``min_recall``, ``max_bucket``, ``normalization``, ``hashfunc``,
    ``scheme``, ``verify``), and the results are the same: signatures, band keys, candidate
    pairs (all pairs of a small bucket, a star around the hub of a large one), verification
    rounds and representatives (``keep``: ``"first"``, ``"last"``, ``"longest"``; or the
    highest ``score_column``). ``id_column`` names the report's ids (row numbers
    otherwise). ``num_partitions`` sets the shuffle width (default: one per CPU, blocks of at
    most ~128 MiB); ``shuffle`` picks Ray's hash shuffle (``"hash"``) or its task-based sort
    shuffle (``"sort"``; cheaper to start); ``"auto"`` takes sort below 20 M band rows
    (documents x bands), hash above; ``None`` keeps the current DataContext's strategy (see
    ``docs/scaling.md``). ``boilerplate`` (template-line stripping) needs line counts over the
    whole corpus and is not distributed: it is rejected here.

    Example:
        >>> ds = ray.data.from_items([{"text": "a b c d e f"},
        ...                           {"text": "a b c d e f!"}])        # doctest: +SKIP
        >>> minhash_dedup(ds, threshold=0.7).result.duplicate_of.tolist()  # doctest: +SKIP
        [-1, 0]
    """
    ray = require_ray()
    from ctxkit.deduplication.linking import link_pairs
    from ctxkit.deduplication.options import MinHashOptions
    from ctxkit.deduplication.result import result_from_representatives
    from ctxkit.deduplication.unionfind import connected_components, keep_priority, representatives
    from ctxkit.deduplication.verify import verify_margin

    opts = MinHashOptions.build(options, threshold=threshold, **option_values)
    if opts.boilerplate is not None:
        raise OptionError("boilerplate", "boilerplate stripping counts lines over the whole "
                          "corpus and does not run on Ray; strip templates first (or pick the "
                          "varying field)")
    threshold, num_perm = opts.threshold, opts.num_perm
    names = ds.columns() or []
    given = ((column, "column"), (id_column, "id_column"), (score_column, "score_column"))
    for name, what in given:
        if name is not None and name not in names:
            raise InputError(f"{what} {name!r} is not a column of the dataset (columns: "
                             f"{names})")
    bands, rows = opts.banding()
    params = opts.signing()

    indexed, n = index_rows(ds)
    set_shuffle(indexed, shuffle, n * bands)
    if n == 0:
        return _empty(ray, indexed, threshold, bands, rows, num_perm)
    sig_ds = indexed.map_batches(
        _sign_block, fn_kwargs={"column": column, "params": params, "score_column": score_column},
        batch_format="numpy", batch_size=4096,
    ).materialize()
    side = collect_columns(sig_ds, [ROW, "_len"] + (["_score"] if score_column else []))
    order = np.argsort(side[ROW])
    lengths = side["_len"][order]
    scores = side["_score"][order] if score_column else None

    # Candidates: one shuffle of (band, key, row) on (band, key).
    band_ds = sig_ds.map_batches(_band_rows, fn_kwargs={"bands": bands, "rows": rows},
                                 batch_format="numpy")
    parts = hash_partitions(n * bands, 24, num_partitions)
    pair_ds = map_key_groups(band_ds, ["band", "key"], _bucket_pairs, parts,
                             fn_kwargs={"max_bucket": opts.max_bucket})
    found = collect_columns(pair_ds, ["a", "b"])
    code = np.unique(found["a"].astype(np.int64) * max(n, 1) + found["b"].astype(np.int64))
    cand = np.stack([code // max(n, 1), code % max(n, 1)], axis=1)

    # Verification, as on one machine: estimates for all candidates; with verify="exact"
    # rounds of exact Jaccard (texts shuffled to the pair) for those near the threshold.
    row_bytes = 16 + 8 * int(num_perm)

    def exact(p: np.ndarray) -> np.ndarray:
        return _pair_scores(indexed, column, p, "exact", opts.shingling(), num_partitions,
                            16 + 2048)

    def estimate(p: np.ndarray) -> np.ndarray:
        return _pair_scores(sig_ds, "sig", p, "estimate", {}, num_partitions, row_bytes)

    exact_scores = exact if opts.verify == "exact" else None
    pairs, pair_scores = link_pairs(n, cand, estimate(cand), threshold,
                                    verify_margin(threshold, num_perm), exact_scores,
                                    big=opts.max_bucket)
    labels = connected_components(n, pairs)
    priority = keep_priority(keep, n, lengths=lengths if keep == "longest" else None,
                             scores=scores)
    rep = representatives(labels, priority)
    similarity = np.ones(n)
    moved = np.flatnonzero(rep != np.arange(n))
    if len(moved):
        similarity[moved] = (exact_scores or estimate)(np.stack([moved, rep[moved]], axis=1))
    info = {
        "method": "minhash", "threshold": threshold, "num_perm": int(num_perm),
        "bands": int(bands), "rows": int(rows), "ngram": opts.ngram, "unit": opts.unit,
        "seed": opts.seed, "max_bucket": opts.max_bucket, "candidates": len(cand),
        "verified": len(pairs), "verify": opts.verify, "partitions": parts,
        "components": COMPONENTS,
    }
    result = result_from_representatives(rep, similarity, "minhash", pairs, pair_scores, info)

    kept_mask = Broadcast(rep == np.arange(n))
    kept = indexed.map_batches(_keep_rows, fn_kwargs={"kept": kept_mask}, batch_format="numpy")
    report = _report(ray, indexed, result, id_column)
    return DistributedDedup(kept=kept, report=report, result=result, info=info)


def _empty(ray: Any, indexed: Any, threshold: float, bands: int, rows: int, num_perm: int):
    from ctxkit.deduplication.result import result_from_representatives

    info = {"method": "minhash", "threshold": threshold, "num_perm": int(num_perm),
            "bands": int(bands), "rows": int(rows), "candidates": 0, "verified": 0,
            "components": COMPONENTS}
    result = result_from_representatives(np.empty(0, np.int64), np.empty(0), "minhash", info=info)
    return DistributedDedup(kept=indexed.drop_columns([ROW]), report=ray.data.from_items([]),
                            result=result, info=info)


def _report(ray: Any, indexed: Any, result: Any, id_column: str | None) -> Any:
    import pyarrow as pa

    removed = result.removed
    dup = result.duplicate_of[removed]
    table = {
        "row": removed, "duplicate_of_row": dup,
        "method": [result.method[i] for i in removed],
        "matched_row": result.matched[removed],
        "similarity": np.round(result.similarity[removed], 6),
    }
    if id_column is None:
        ids, dup_ids = removed, dup
    else:
        need = np.zeros(result.n, dtype=bool)
        need[removed] = True
        need[dup] = True
        got = collect_columns(
            indexed.map_batches(_needed_ids, fn_kwargs={"need": Broadcast(need),
                                                        "id_column": id_column},
                                batch_format="numpy"), [ROW, "id"])
        lookup = dict(zip(got[ROW].tolist(), got["id"].tolist()))
        ids = [lookup[int(i)] for i in removed]
        dup_ids = [lookup[int(i)] for i in dup]
    table = {"id": ids, "duplicate_of": dup_ids, **table}
    return ray.data.from_arrow(pa.table({k: pa.array(list(v) if not isinstance(v, np.ndarray)
                                                     else v) for k, v in table.items()}))
