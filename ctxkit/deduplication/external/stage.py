"""The MinHash stage out of core: sign, bucket, verify, link and cluster the records that
reach it, with the in-memory stage's decisions
(:func:`~ctxkit.deduplication.minhash.minhash_dedup`, ``verify="exact"``).

Per record of the stage it keeps a few integers in memory (its representative, whether it
has shingles, its length); signatures, band runs and candidates live on disk; the pairs that
survive their estimate (near-duplicates and template neighbours, not the corpus) are linked
by :func:`~ctxkit.deduplication.linking.link_pairs` and clustered by
:func:`~ctxkit.deduplication.unionfind.connected_components`, exactly as in memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.deduplication.boilerplate import Boilerplate
from ctxkit.deduplication.external.bands import Signed, sign_records
from ctxkit.deduplication.external.budget import Budget
from ctxkit.deduplication.external.candidates import bucket_codes, unique_codes
from ctxkit.deduplication.external.spill import TextBlob
from ctxkit.deduplication.external.verify import ExactScorer, SignatureRows, estimated_pairs
from ctxkit.deduplication.linking import link_pairs
from ctxkit.deduplication.options import MinHashOptions
from ctxkit.deduplication.result import best_matches
from ctxkit.deduplication.unionfind import connected_components, keep_priority, representatives
from ctxkit.deduplication.verify import verify_margin

__all__ = ["StageResult", "minhash_stage"]


@dataclass
class StageResult:
    """One stage's outcome over its ``m`` records (stage indices): the kept record each
    removed one duplicates (-1 when kept), the one it matched, and that similarity."""

    duplicate_of: np.ndarray
    matched: np.ndarray
    similarity: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)


def minhash_stage(texts: TextBlob, alive: np.ndarray, opts: MinHashOptions, keep: str,
                  folder: Path, budget: Budget, common: tuple[list[str], list[int]] | None = None,
                  advance: Callable[[int], None] | None = None) -> StageResult:
    """MinHash dedup of the records ``alive`` (sorted indices into ``texts``); ``common``:
    the boilerplate lines to leave out and their counts (:mod:`.boiler`)."""
    lines = frozenset(common[0]) if common else None
    signed = sign_records(texts, alive, opts, folder, lines, advance)
    m = len(alive)
    codes = bucket_codes(signed.bands, opts.max_bucket, budget, folder)
    rows = SignatureRows(signed.sig.path, m, opts.num_perm)
    margin = verify_margin(opts.threshold, opts.num_perm)
    chunk = budget.rows(2 * 4 * opts.num_perm, least=256)
    pairs, scores, seen = estimated_pairs(unique_codes(codes, m, budget), rows,
                                          opts.threshold - margin, chunk)
    signed.sig.remove()
    scorer = ExactScorer(texts, alive, opts.shingling(), lines,
                         chunk=budget.rows(8 * 1024, least=4096))
    linked, linked_scores = link_pairs(m, pairs, scores, opts.threshold, margin, scorer,
                                       big=opts.max_bucket)
    del pairs, scores
    labels = connected_components(m, linked)
    if keep == "first":  # every priority equal: the smallest index, the label itself
        rep = labels
    else:
        rep = representatives(labels, keep_priority(keep, m, lengths=signed.lengths))
    del labels
    result = _result(rep, linked, linked_scores, scorer)
    result.info = _info(opts, seen, len(linked), _summary(common, signed))
    return result


def _result(rep: np.ndarray, linked: np.ndarray, scores: np.ndarray,
            scorer: ExactScorer) -> StageResult:
    """:func:`~ctxkit.deduplication.result.result_from_representatives`'s arrays, without
    its per-item Python lists."""
    idx = np.arange(len(rep), dtype=np.int64)
    kept = rep == idx
    similarity = np.full(len(rep), np.nan)
    duplicate_of = np.where(kept, -1, rep)
    matched = duplicate_of.copy()
    if len(scores):
        matched, similarity = best_matches(rep, linked, scores, matched, similarity)
    # A removed record lies in a component of linked pairs, so it has a pair and
    # best_matches gave it that pair's score (in memory the similarity to the representative
    # is computed first and then replaced); score only what it left, none in practice.
    left = np.flatnonzero(~kept & np.isnan(similarity))
    if len(left):
        similarity[left] = scorer(np.stack([left, rep[left]], axis=1))
    return StageResult(duplicate_of, matched, similarity)


def _summary(common: tuple[list[str], list[int]] | None, signed: Signed) -> dict[str, Any]:
    if common is None:
        return {}
    found = Boilerplate(texts=[], lines=common[0], counts=common[1], stripped=signed.stripped,
                        whole=signed.whole)
    return {"boilerplate": found.summary()}


def _info(opts: MinHashOptions, candidates: int, verified: int,
          extra: dict[str, Any]) -> dict[str, Any]:
    bands, rows = opts.banding()
    return {"method": "minhash", "threshold": opts.threshold, "num_perm": opts.num_perm,
            "bands": int(bands), "rows": int(rows), "ngram": opts.ngram, "unit": opts.unit,
            "seed": opts.seed, "max_bucket": opts.max_bucket, "candidates": candidates,
            "verified": verified, "verify": opts.verify, **extra}
