"""MinHash near-duplicate removal on a Ray dataset, identical to ``ctxkit.dedup(method="minhash")``.

The stages are the single-machine ones (:mod:`ctxkit.deduplication.minhash`), run as Ray
tasks on chunks of about 16 MB of input (:func:`~ctxkit.distributed.rows.row_chunks`) and on
partitions whose count comes from the data (:mod:`ctxkit.distributed.exchange`); the worker
functions are in :mod:`ctxkit.distributed.stages`:

1. read once; per chunk: number the rows, sign them, cut the signatures into bands;
2. one shuffle of ``(band, key, row)`` triples, hash-partitioned on the key: every LSH bucket
   lies whole in one partition, which lists its candidate pairs (the single-machine
   ``candidate_pairs``, a star around the hub of a large bucket), de-duplicates them and
   splits them by range of the smaller row, so that each pair has one owner;
3. per pair partition, the owner de-duplicates the pairs (one pair can come from several
   buckets), asks each chunk for the signatures of the rows they name (a row goes once to
   each partition that needs it) and scores them (``estimate_jaccard``); pairs above
   ``threshold - margin`` survive;
4. ``verify="exact"``: one more routed pass sends the shingle values of every surviving
   pair's texts (each text hashed once, in its chunk) to the pair's owner, which scores the
   exact Jaccard of all survivors, as the single-machine scorer does;
5. on the driver, the single-machine rounds of :func:`~ctxkit.deduplication.linking.link_pairs`
   over the survivors (their exact scores already known), connected components and the
   representatives; a removed row's similarity to its representative is looked up among the
   survivors, the few others scored by a routed pass like 3-4;
6. the kept rows: per chunk, its table filtered (no shuffle).

**What the driver holds.** Never texts, signatures or kept rows: per row about 230 bytes at
the peak of its steps (component labels, representatives, similarities, matched rows, the
``keep`` rule's sort keys, the result's per-row arrays; lengths or scores for
``keep="longest"`` or ``score_column``), per surviving pair 32 bytes, and the report's rows
(ids of the removed rows). Its steps are linear in those: 10 M rows need about 2.5 GB.
Beyond that, the components would need a distributed label propagation, which is not
implemented (``docs/scaling.md``).

Example:
    >>> out = minhash_dedup(ray.data.from_items([{"text": t} for t in texts]))  # doctest: +SKIP
    >>> out.kept.count(), out.report.take(1)                                    # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit.distributed import stages
from ctxkit.distributed.blocks import hash_partitions
from ctxkit.distributed.cluster import require_ray
from ctxkit.distributed.exchange import call, exchange
from ctxkit.distributed.rows import row_chunks
from ctxkit.errors import InputError, OptionError

__all__ = ["DistributedDedup", "minhash_dedup", "pair_similarity"]

COMPONENTS = "union-find on the driver (scipy connected components over the verified pairs)"
STAGES = ("read and sign", "candidate pairs", "estimates", "exact scores",
          "components", "similarity", "kept rows", "report")


@dataclass
class DistributedDedup:
    """What :func:`minhash_dedup` returns.

    Attributes:
        kept: the input rows that survive, in their original columns (a dataset).
        report: one row per removed input: ``id``, ``duplicate_of`` and ``matched`` (values
            of ``id_column``, or row numbers), ``row``, ``duplicate_of_row`` (the kept row),
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


@dataclass
class _Chunks:
    """The prepared chunks: first rows (and the total last), and per chunk its refs."""

    starts: np.ndarray
    table: list[Any]
    sig: list[Any]
    bands: list[Any]
    side: dict[str, np.ndarray]
    ids: list[Any] = field(default_factory=list)

    @property
    def n(self) -> int:
        return int(self.starts[-1])


def _prepare(start: int, column: str, params: dict, bands: int, rows: int,
             score_column: str | None, named: tuple, *blocks: Any) -> tuple:
    """:func:`~ctxkit.distributed.stages.prepare_chunk`, and the chunk's report ids
    (``named``: ``(id_column, record_ids)``) as a small Arrow array of their own, so the
    report reads them and not the whole table (which may have gone to disk by then)."""
    import pyarrow as pa
    from ray.data.block import BlockAccessor

    tables = [BlockAccessor.for_block(b).to_arrow() for b in blocks]
    c = stages.prepare_chunk(start, column, params, bands, rows, score_column, *tables)
    ids = None
    if named[0] is not None or named[1]:
        every = np.arange(start, start + c.table.num_rows)
        ids = pa.array(stages.row_ids(start, c.table, *named, every))
    return c.table, c.sig, c.side, c.bands, ids


def _read(ds: Any, args: tuple, check: Callable[[list[str]], None]) -> _Chunks:
    """Step 1: one streaming read; each chunk is signed as soon as its blocks exist."""
    ray = require_ray()
    from ray.data.block import BlockAccessor

    ends, refs = [], []
    for start, rows, blocks in row_chunks(ds):
        if not refs:
            check(BlockAccessor.for_block(ray.get(blocks[0])).to_arrow().column_names)
        ends.append(start + rows)
        refs.append(call(_prepare, 5, start, *args, *blocks))
    if not refs:
        check(ds.columns() or [])
    sides = ray.get([r[2] for r in refs])
    side = {k: np.concatenate([s[k] for s in sides]) for k in (sides[0] if sides else {})}
    return _Chunks(np.r_[0, ends].astype(np.int64), [r[0] for r in refs],
                   [r[1] for r in refs], [r[3] for r in refs], side, [r[4] for r in refs])


def _split(triples: Any, parts: int) -> list:
    return stages.split_bands(triples, parts)


def _owners(max_bucket: int, bounds: np.ndarray, *parts: Any) -> list:
    return stages.bucket_pairs(max_bucket, bounds, *parts)


def _pairs(starts: np.ndarray, *codes: np.ndarray) -> list:
    unique = np.unique(np.concatenate([np.empty(0, np.uint64), *codes]))
    return [unique, *stages.requests(unique, starts)]


def _estimates(floor: float, starts: np.ndarray, codes: np.ndarray, *served: Any) -> list:
    kept, asked = stages.score_estimates(floor, starts, codes, *served)
    return [kept["code"], kept["estimate"], len(codes), *asked]


def _exact(codes: np.ndarray, *served: Any) -> list:
    return [stages.score_exact(codes, *served)]


def _route(ch: _Chunks, pairs: list[list], serve: Callable, payload: list, serve_args: tuple,
           score: Callable, returns: int, *score_args: Any) -> list[list]:
    """One routed pass: ``pairs[q]`` is partition q's ``[codes, asks of chunk 0, ...]``;
    each chunk serves every partition's asks at once, then each partition scores its codes
    (``score(*score_args, codes, *served)``, ``returns`` objects)."""
    served = [call(serve, len(pairs), int(ch.starts[i]), payload[i], *serve_args,
                   *(p[1 + i] for p in pairs)) for i in range(len(ch.table))]
    return [call(score, returns, *score_args, p[0], *(s[q] for s in served))
            for q, p in enumerate(pairs)]


def _candidates(ch: _Chunks, max_bucket: int, parts: int) -> list[list]:
    """Step 2: per pair partition, ``[codes, asks of chunk 0, ...]`` (refs)."""
    split = [call(_split, parts, b, parts) for b in ch.bands]
    # the object store frees what no ref names once the tasks reading it are done: the
    # triples go as soon as they are split, the split parts when the buckets are paired
    ch.bands = []
    bounds = np.linspace(0, ch.n, parts + 1).astype(np.int64)
    owned = exchange(split, _owners, parts, max_bucket, bounds)
    return exchange(owned, _pairs, 1 + len(ch.table), ch.starts)


def _exact_refs(ch: _Chunks, pairs: list[list], column: str, shingling: dict) -> list:
    """Exact Jaccard of each partition's codes (refs, one per partition)."""
    out = _route(ch, pairs, stages.serve_shingles, ch.table, (column, shingling), _exact, 1)
    return [o[0] for o in out]


def _settle(refs: list, timed: bool) -> None:
    """Wait for ``refs`` when stages are timed (otherwise they overlap the next stage)."""
    if timed and refs:
        require_ray().wait(refs, num_returns=len(refs), fetch_local=False)


@dataclass
class _Survivors:
    """The candidate pairs above ``threshold - margin``, on the driver, sorted by code."""

    code: np.ndarray
    estimate: np.ndarray
    exact: np.ndarray | None
    candidates: int

    def lookup(self, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``pairs`` among the survivors, and which of them are there."""
        code = stages.encode(pairs)
        at = np.minimum(np.searchsorted(self.code, code), max(len(self.code) - 1, 0))
        return at, (self.code[at] == code) if len(self.code) else np.zeros(len(code), bool)


def _verify(ch: _Chunks, opts: Any, parts: int, column: str, stage: Callable,
            timed: bool) -> _Survivors:
    """Steps 2-4: candidates, estimates and (``verify="exact"``) exact scores."""
    ray = require_ray()
    from ctxkit.deduplication.verify import verify_margin

    floor = opts.threshold - verify_margin(opts.threshold, opts.num_perm)
    with stage("candidate pairs"):
        pairs = _candidates(ch, opts.max_bucket, parts)
        _settle([p[0] for p in pairs], timed)
    with stage("estimates"):
        est = _route(ch, pairs, stages.serve_signatures, ch.sig, (), _estimates,
                     3 + len(ch.table), floor, ch.starts)
        del pairs
        if opts.verify == "exact":  # every later score is exact: the signatures can go
            ch.sig = []
        _settle([e[0] for e in est], timed)
    exact = None
    with stage("exact scores"):
        if opts.verify == "exact":
            exact = ray.get(_exact_refs(ch, [[e[0], *e[3:]] for e in est], column,
                                        opts.shingling()))
            exact = np.concatenate([np.empty(0), *exact])
    codes, estimates, counts = (ray.get([e[i] for e in est]) for i in range(3))
    return _Survivors(np.concatenate([np.empty(0, np.uint64), *codes]),
                      np.concatenate([np.empty(0), *estimates]), exact, int(sum(counts)))


def _similarity(ch: _Chunks, surv: _Survivors, pairs: np.ndarray, opts: Any, column: str,
                parts: int) -> np.ndarray:
    """Similarity of each row pair (the removed rows and their representatives), exact or
    estimated as ``verify`` says: looked up among the survivors, the rest routed."""
    ray = require_ray()
    known = surv.exact if surv.exact is not None else surv.estimate
    at, found = surv.lookup(pairs)
    out = np.where(found, known[at] if len(known) else 0.0, np.nan)
    missing = np.flatnonzero(~found)
    if len(missing) == 0:
        return out
    codes = np.unique(stages.encode(pairs[missing]))
    bounds = np.linspace(0, ch.n, parts + 1).astype(np.int64)
    routed = [[ray.put(c), *map(ray.put, stages.requests(c, ch.starts))]
              for c in stages._by_range(codes, bounds) if len(c)]
    if surv.exact is not None:
        scores = ray.get(_exact_refs(ch, routed, column, opts.shingling()))
    else:
        est = _route(ch, routed, stages.serve_signatures, ch.sig, (), _estimates,
                     3 + len(ch.table), -1.0, ch.starts)
        scores = ray.get([e[1] for e in est])
    # the partitions are ranges of the sorted codes: their scores laid end to end follow them
    out[missing] = np.concatenate(scores)[np.searchsorted(codes, stages.encode(pairs[missing]))]
    return out


def _components(ch: _Chunks, surv: _Survivors, opts: Any, keep: str, score_column: str | None,
                stage: Callable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 5 on the driver: the single-machine linking rounds over the survivors (an
    exact score is a lookup), components, representatives. Returns the linked pairs, their
    scores and each row's representative."""
    from ctxkit.deduplication.linking import link_pairs
    from ctxkit.deduplication.unionfind import connected_components, keep_priority, representatives
    from ctxkit.deduplication.verify import verify_margin

    n = ch.n
    cand = stages.decode(surv.code)
    exact = None
    if surv.exact is not None:
        def exact(p: np.ndarray) -> np.ndarray:
            return surv.exact[surv.lookup(p)[0]]
    with stage("components"):
        pairs, scores = link_pairs(n, cand, surv.estimate, opts.threshold,
                                   verify_margin(opts.threshold, opts.num_perm), exact,
                                   big=opts.max_bucket)
        labels = connected_components(n, pairs)
        lengths = ch.side["len"] if keep == "longest" else None
        priority = keep_priority(keep, n, lengths=lengths,
                                 scores=ch.side.get("score") if score_column else None)
        return pairs, scores, representatives(labels, priority)


def minhash_dedup(
    ds: Any,
    column: str = "text",
    threshold: float | None = None,
    *,
    id_column: str | None = None,
    keep: str = "first",
    score_column: str | None = None,
    num_partitions: int | None = None,
    record_ids: bool = False,
    on_stage: Callable[[str], Any] | None = None,
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
    and representatives (``keep``: ``"first"``, ``"last"``, ``"longest"``; or the highest
    ``score_column``). ``id_column`` names the report's ids (row numbers otherwise);
    ``record_ids`` names them as ``ctxkit dedup`` does (``id_column`` as text, else a
    record's own ``id`` when it is a string or an integer, else its row number).
    ``num_partitions`` sets the width of the shuffles (default: one per CPU, more when a
    partition would pass 128 MB). ``on_stage(name)`` returns a context manager each stage
    runs in (names: :data:`STAGES`); stages are then awaited one by one, so a timer sees
    each. ``boilerplate`` (template-line stripping) needs line counts over the whole corpus
    and is not distributed: it is rejected here.

    Example:
        >>> ds = ray.data.from_items([{"text": "a b c d e f"},
        ...                           {"text": "a b c d e f!"}])        # doctest: +SKIP
        >>> minhash_dedup(ds, threshold=0.7).result.duplicate_of.tolist()  # doctest: +SKIP
        [-1, 0]
    """
    from contextlib import nullcontext

    from ctxkit.deduplication.options import MinHashOptions

    require_ray()
    opts = MinHashOptions.build(options, threshold=threshold, **option_values)
    if opts.boilerplate is not None:
        raise OptionError("boilerplate", "boilerplate stripping counts lines over the whole "
                          "corpus and does not run on Ray; strip templates first (or pick the "
                          "varying field)")
    stage = on_stage or (lambda name: nullcontext())
    bands, rows = opts.banding()
    given = ((column, "column"), (id_column, "id_column"), (score_column, "score_column"))
    with stage("read and sign"):
        ch = _read(ds, (column, opts.signing(), bands, rows, score_column,
                        (id_column, record_ids)),
                   lambda names: _check_columns(names, given))
    if ch.n == 0:
        return _empty(ds, opts, bands, rows)
    parts = hash_partitions(ch.n * bands, 21, num_partitions)
    surv = _verify(ch, opts, parts, column, stage, on_stage is not None)
    pairs, pair_scores, rep = _components(ch, surv, opts, keep, score_column, stage)
    with stage("similarity"):
        similarity = np.ones(ch.n)
        moved = np.flatnonzero(rep != np.arange(ch.n))
        if len(moved):
            similarity[moved] = _similarity(ch, surv, np.stack([moved, rep[moved]], axis=1),
                                            opts, column, parts)
    info = _info(opts, bands, rows, surv.candidates, len(pairs), parts)
    from ctxkit.deduplication.result import result_from_representatives

    result = result_from_representatives(rep, similarity, "minhash", pairs, pair_scores, info)
    with stage("kept rows"):
        kept = _kept(ch, rep == np.arange(ch.n))
    with stage("report"):
        report = _report(ch, result, id_column is not None or record_ids)
    return DistributedDedup(kept=kept, report=report, result=result, info=info)


def _check_columns(names: list[str], given: tuple) -> None:
    for name, what in given:
        if name is not None and name not in names:
            raise InputError(f"{what} {name!r} is not a column of the dataset (columns: "
                             f"{names})")


def _info(opts: Any, bands: int, rows: int, candidates: int, verified: int, parts: int) -> dict:
    return {
        "method": "minhash", "threshold": opts.threshold, "num_perm": int(opts.num_perm),
        "bands": int(bands), "rows": int(rows), "ngram": opts.ngram, "unit": opts.unit,
        "seed": opts.seed, "max_bucket": opts.max_bucket, "candidates": candidates,
        "verified": verified, "verify": opts.verify, "partitions": parts,
        "components": COMPONENTS,
    }


def _kept_task(table: Any, keep: np.ndarray) -> list:
    return [stages.kept_rows(table, keep)]


def _kept(ch: _Chunks, keep: np.ndarray) -> Any:
    """Step 6: each chunk's table filtered where it lies."""
    ray = require_ray()
    refs = [call(_kept_task, 1, t, keep[ch.starts[i]:ch.starts[i + 1]])[0]
            for i, t in enumerate(ch.table)]
    return ray.data.from_arrow_refs(refs)


def _ids_task(start: int, ids: Any, rows: np.ndarray) -> list:
    import pyarrow as pa

    return [ids.take(pa.array(rows - start))]


def _report(ch: _Chunks, result: Any, named: bool) -> Any:
    """One row per removed row; the ids of the rows it names come from their chunks' id
    arrays (row numbers unless ``named``)."""
    import pyarrow as pa

    ray = require_ray()
    removed = result.removed
    dup, matched = result.duplicate_of[removed], result.matched[removed]
    # a flag per row and its running count find each named row's id: linear in the rows,
    # where sorting the named rows was not
    flag = np.zeros(ch.n, dtype=bool)
    for rows in (removed, dup, matched):
        flag[rows] = True
    need = np.flatnonzero(flag)
    position = np.cumsum(flag) - 1
    if not named:
        ids = pa.array(need)
    else:
        cuts = np.searchsorted(need, ch.starts)
        got = ray.get([call(_ids_task, 1, int(ch.starts[i]), ids, need[cuts[i]:cuts[i + 1]])[0]
                       for i, ids in enumerate(ch.ids)])
        try:
            ids = pa.concat_arrays(got)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # an id column typed apart per chunk
            ids = pa.array([v for g in got for v in g.to_pylist()])

    def name(rows: np.ndarray) -> Any:
        return ids.take(pa.array(position[rows]))

    table = pa.table({
        "id": name(removed), "duplicate_of": name(dup), "matched": name(matched),
        "row": removed, "duplicate_of_row": dup, "method": pa.array(["minhash"] * len(removed)),
        "matched_row": matched, "similarity": result.similarity[removed]})
    return ray.data.from_arrow(table)


def _empty(ds: Any, opts: Any, bands: int, rows: int) -> DistributedDedup:
    from ctxkit.deduplication.result import result_from_representatives

    ray = require_ray()
    info = {"method": "minhash", "threshold": opts.threshold, "num_perm": int(opts.num_perm),
            "bands": int(bands), "rows": int(rows), "candidates": 0, "verified": 0,
            "components": COMPONENTS}
    result = result_from_representatives(np.empty(0, np.int64), np.empty(0), "minhash", info=info)
    return DistributedDedup(kept=ds, report=ray.data.from_items([]), result=result, info=info)


def _sig_chunk(start: int, *blocks: Any) -> list:
    from ray.data.block import BlockAccessor

    tables = [BlockAccessor.for_block(b).to_arrow() for b in blocks]
    return [np.concatenate([np.stack(t.column("sig").to_numpy(zero_copy_only=False))
                            for t in tables if t.num_rows])]


def pair_similarity(sig_ds: Any, pairs: np.ndarray, num_partitions: int | None = None
                    ) -> np.ndarray:
    """Estimated Jaccard of each row pair, computed where the signatures are.

    ``sig_ds`` has a column ``sig`` (one signature per row, rows numbered in dataset order,
    as :func:`~ctxkit.distributed.rows.with_row_index` numbers them); ``pairs`` is
    ``(m, 2)`` row numbers on the driver. One routed pass sends each involved signature to
    the partitions whose pairs need it (once per partition, however many pairs a row is
    in); the result is in ``pairs`` order, equal to ``estimate_jaccard(sig, pairs)``.
    """
    ray = require_ray()
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if len(pairs) == 0:
        return np.empty(0)
    ends, sigs = [], []
    for start, rows, blocks in row_chunks(sig_ds):
        ends.append(start + rows)
        sigs.append(call(_sig_chunk, 1, start, *blocks)[0])
    ch = _Chunks(np.r_[0, ends].astype(np.int64), sigs, sigs, [], {}, [])
    if pairs.min() < 0 or pairs.max() >= ch.n:
        raise InputError(f"pairs: row numbers must lie in [0, {ch.n})")
    codes = np.unique(stages.encode(pairs))
    parts = hash_partitions(len(codes), 16, num_partitions)
    bounds = np.linspace(0, ch.n, parts + 1).astype(np.int64)
    routed = [[ray.put(c), *map(ray.put, stages.requests(c, ch.starts))]
              for c in stages._by_range(codes, bounds) if len(c)]
    est = _route(ch, routed, stages.serve_signatures, ch.sig, (), _estimates,
                 3 + len(ch.table), -1.0, ch.starts)
    scores = np.concatenate(ray.get([e[1] for e in est]))
    return scores[np.searchsorted(codes, stages.encode(pairs))]
