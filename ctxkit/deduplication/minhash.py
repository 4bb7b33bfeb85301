"""MinHash near-duplicate detection: the ``minhash_dedup`` pipeline.

Signatures (:mod:`~ctxkit.deduplication.signatures`) are cut into LSH bands whose buckets
propose candidate pairs (:mod:`~ctxkit.deduplication.lsh`); candidates are verified by their
estimated or exact Jaccard (:mod:`~ctxkit.deduplication.verify`,
:mod:`~ctxkit.deduplication.jaccard`) and clusters are the connected components of the
verified pairs. Design notes: ``docs/dedup.md``.

The building blocks are plain functions on numpy arrays, so they run unchanged inside a
Ray ``map_batches`` (and give identical results for the same seed):
:func:`~ctxkit.deduplication.signatures.signatures` ->
:func:`~ctxkit.deduplication.lsh.band_keys` -> :func:`~ctxkit.deduplication.lsh.candidate_pairs`
-> :func:`~ctxkit.deduplication.verify.verify_pairs` (or
:func:`~ctxkit.deduplication.verify.verify_pairs_exact`, or the rounds of
:func:`ctxkit.deduplication.linking.link_pairs`) ->
:func:`ctxkit.deduplication.unionfind.connected_components` ->
:func:`ctxkit.deduplication.unionfind.representatives`.

Example:
    >>> texts = ["The quick brown fox jumps over the lazy dog.",
    ...          "the quick brown fox jumped over the lazy dog!", "Something else entirely."]
    >>> minhash_dedup(texts, threshold=0.5).duplicate_of.tolist()
    [-1, 0, -1]
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import numpy as np

from ctxkit.deduplication.boilerplate import strip_boilerplate
from ctxkit.deduplication.lsh import band_keys, candidate_pairs
from ctxkit.deduplication.options import MinHashOptions
from ctxkit.deduplication.result import DedupResult, result_from_representatives
from ctxkit.deduplication.signatures import empty_rows, signatures
from ctxkit.deduplication.unionfind import connected_components, keep_priority, representatives
from ctxkit.deduplication.verify import _no_stage, _verify_exact, estimate_jaccard, verify_pairs
from ctxkit.errors import InputError

__all__ = ["STAGES", "StageHook", "minhash_dedup"]

# What ``on_stage`` is called with, in this order (a stage that does not run is not named:
# "boilerplate" only with that option, "signatures" only without ``sig``, the three exact
# steps only with ``verify="exact"``).
STAGES = (
    "boilerplate",
    "signatures",
    "band keys",
    "candidate pairs",
    "estimates",
    "exact scorer build",
    "linking with exact scores",
    "connected components",
    "representatives",
)
StageHook = Callable[[str], AbstractContextManager[Any]]

_SET_HUGE_PAGES = getattr(getattr(getattr(np, "_core", None), "multiarray", None),
                          "_set_madvise_hugepage", None)
_huge_lock = threading.Lock()
_huge_users = 0  # calls inside _huge_pages_off, all threads together
_huge_before = True  # numpy's setting when the first of them entered


@contextmanager
def _huge_pages_off() -> Iterator[None]:
    """numpy's transparent-huge-page advice off while at least one dedup runs, then restored.

    numpy advises the kernel to back every large new array with huge pages. Dedup's working
    arrays are large, short-lived and fresh on every call, and the kernel's time to hand out
    huge pages grows with the corpus while user time stays the same: compare the system
    times of ``NUMPY_MADVISE_HUGEPAGE=1 python -m evals.dedup_stages --copies 1 32`` and the
    same with ``=0``. numpy's switch is process-wide, so concurrent calls share it: the
    first to enter turns it off, the last to leave restores it (a lock and a counter, also
    on error); other threads' arrays go without the advice meanwhile. An explicit
    ``NUMPY_MADVISE_HUGEPAGE`` is left to rule.
    """
    global _huge_users, _huge_before
    if _SET_HUGE_PAGES is None or "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        yield
        return
    with _huge_lock:
        if _huge_users == 0:
            _huge_before = _SET_HUGE_PAGES(False)
        _huge_users += 1
    try:
        yield
    finally:
        with _huge_lock:
            _huge_users -= 1
            if _huge_users == 0:
                _SET_HUGE_PAGES(_huge_before)


def minhash_dedup(
    texts: Sequence[str],
    threshold: float | None = None,
    *,
    keep: str = "first",
    scores: Sequence[float] | None = None,
    sig: np.ndarray | None = None,
    options: MinHashOptions | None = None,
    on_stage: StageHook | None = None,
    **option_values: Any,
) -> DedupResult:
    """Near-duplicate removal by MinHash + LSH, every link verified by Jaccard similarity.

    The options are :class:`~ctxkit.deduplication.options.MinHashOptions`, given as one
    ``options`` object and/or as keywords (``threshold``, ``num_perm``, ``ngram``, ``unit``,
    ``seed``, ``bands``/``rows``, ``min_recall``, ``max_bucket``, ``normalization``,
    ``hashfunc``, ``scheme``, ``verify``, ``boilerplate``); the default threshold is 0.7
    Jaccard of character 5-grams.

    LSH buckets propose candidate pairs, all pairs of a small bucket and a star around a hub
    in a large one (:func:`candidate_pairs`), so the work grows linearly with the corpus even
    when a shared template fills buckets with thousands of records. Candidates are verified
    (``verify="exact"``, the default: the exact Jaccard of the two shingle sets, recomputed
    for pairs whose estimate lies near the threshold; ``"estimate"``: the fraction of equal
    signature entries, about +-0.04 at 128 permutations). Pairs at or above the threshold
    are linked; each connected component keeps one representative chosen by ``keep``
    (``"first"``, ``"last"``, ``"longest"``) or by the highest ``scores``. Texts with no
    shingles (empty after normalization) are never near-duplicates (the exact stage handles
    them). Pass precomputed ``sig`` (of the texts as shingled) to skip hashing. With
    ``boilerplate`` set, template lines shared by many records are left out first
    (:mod:`ctxkit.deduplication.boilerplate`). ``result.warnings`` says when one cluster
    swallowed a large share of the input.

    ``on_stage``, when given, is called with each stage's name before it runs and returns a
    context manager the stage runs inside (the names, in order, are :data:`STAGES`): a
    profiler or a progress display hooks in there without copying this function.

    Example:
        >>> texts = ["a b c d e f g", "a b c d e f g h", "x y z"]
        >>> minhash_dedup(texts, threshold=0.7).keep.tolist()
        [0, 2]
        >>> from contextlib import nullcontext
        >>> seen = []
        >>> _ = minhash_dedup(texts, on_stage=lambda name: seen.append(name) or nullcontext())
        >>> seen[:3]
        ['signatures', 'band keys', 'candidate pairs']
    """
    stage = on_stage or _no_stage
    with _huge_pages_off():
        return _minhash_dedup(texts, threshold, keep, scores, sig, options, stage, option_values)


def _minhash_dedup(
    texts: Sequence[str], threshold: float | None, keep: str, scores: Sequence[float] | None,
    sig: np.ndarray | None, options: MinHashOptions | None, stage: StageHook,
    option_values: dict[str, Any],
) -> DedupResult:
    opts = MinHashOptions.build(options, threshold=threshold, **option_values)
    extra: dict[str, Any] = {}
    if opts.boilerplate is not None:
        with stage("boilerplate"):
            stripped = strip_boilerplate(texts, opts.boilerplate)
        texts = stripped.texts
        extra["boilerplate"] = stripped.summary()
    if sig is None:
        with stage("signatures"):
            sig = signatures(texts, **opts.signing())
    elif len(sig) != len(texts):
        raise InputError(f"sig has {len(sig)} rows for {len(texts)} texts; it needs one per text")
    elif sig.shape[1] != opts.num_perm:
        opts = MinHashOptions.build(opts, num_perm=int(sig.shape[1]))
    bands, rows = opts.banding()
    with stage("band keys"):
        keys = band_keys(sig, bands, rows)
    with stage("candidate pairs"):
        cand = candidate_pairs(keys, skip=empty_rows(sig), max_bucket=opts.max_bucket)
    if opts.verify == "estimate":
        with stage("estimates"):
            pairs, pair_scores = verify_pairs(sig, cand, opts.threshold)
        similarity_of = functools.partial(estimate_jaccard, sig)
    else:
        # the scorer has hashed every cluster member, so the similarity of each removed text
        # to its representative hashes nothing again
        pairs, pair_scores, similarity_of = _verify_exact(
            sig, cand, opts.threshold, texts, opts.shingling(), keep_scorer=True,
            big=opts.max_bucket, stage=stage)
    with stage("connected components"):
        labels = connected_components(len(texts), pairs)
    with stage("representatives"):
        lengths = [len(t) for t in texts] if keep == "longest" and scores is None else None
        rep = representatives(labels, keep_priority(keep, len(texts), lengths=lengths,
                                                    scores=scores))
        similarity = np.ones(len(texts))
        moved = np.flatnonzero(rep != np.arange(len(texts)))
        if len(moved):
            similarity[moved] = similarity_of(np.stack([moved, rep[moved]], axis=1))
    info = {
        "method": "minhash",
        "threshold": opts.threshold,
        "num_perm": opts.num_perm,
        "bands": int(bands),
        "rows": int(rows),
        "ngram": opts.ngram,
        "unit": opts.unit,
        "seed": opts.seed,
        "max_bucket": opts.max_bucket,
        "candidates": len(cand),
        "verified": len(pairs),
        "verify": opts.verify,
        **extra,
    }
    return result_from_representatives(rep, similarity, "minhash", pairs, pair_scores, info)
