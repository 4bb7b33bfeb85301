"""The result every dedup method returns, and how staged results combine."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "LARGE_CLUSTER",
    "DedupResult",
    "best_matches",
    "cluster_warnings",
    "combine_stages",
    "large_cluster_warnings",
    "result_from_representatives",
]

# A cluster holding at least this share of the input (and at least 20 items) is reported:
# on real data it almost always means the records share a template, not that they repeat.
LARGE_CLUSTER = 0.1


@dataclass
class DedupResult:
    """What a dedup pass kept and why it removed the rest.

    Attributes:
        keep: sorted indices of the kept items (cluster representatives and singletons).
        duplicate_of: per item, -1 when kept, else the index of the *kept* item it duplicates.
        clusters: every group of two or more items, representative first, then the removed
            members in ascending order.
        method: per item, the stage that removed it (``"exact"``, ``"minhash"``,
            ``"semantic"``), ``""`` when kept.
        similarity: per item, its similarity to ``matched`` (1.0 for exact; for MinHash the
            Jaccard of the shingle sets, exact or estimated as its ``verify`` option says;
            cosine for semantic), at or above the stage's threshold; NaN when kept.
        matched: per item, the item it was found similar to at the stage that removed it:
            the stage's representative of its cluster when that pair was verified, else the
            member of its best verified pair. Clusters are transitive (an item joins through
            a chain of pairs), so the representative, ``duplicate_of``, can be less similar
            than the threshold; ``matched`` and ``similarity`` say why the item went. -1 when
            kept.
        pairs: ``(m, 2)`` verified similar pairs ``i < j`` (empty for exact). For MinHash,
            the verified links the clusters were built from: all candidate pairs of clusters
            of up to ``max_bucket`` items, fewer in larger ones (a pair whose two items are
            already linked there is not verified again, see ``docs/dedup.md``).
        pair_scores: the similarity of each pair.
        info: the parameters and counts of each stage.
        warnings: plain-language findings a caller should see, e.g. that one cluster
            swallowed a large share of the input (a shared template rather than repetition).

    Example:
        >>> sims = np.array([1.0, 1.0, np.nan])
        >>> r = result_from_representatives(np.array([0, 0, 2]), sims, "exact")
        >>> r.keep.tolist(), r.duplicate_of.tolist(), r.clusters
        ([0, 2], [-1, 0, -1], [[0, 1]])
    """

    keep: np.ndarray
    duplicate_of: np.ndarray
    clusters: list[list[int]]
    method: list[str]
    similarity: np.ndarray
    matched: np.ndarray
    pairs: np.ndarray = field(default_factory=lambda: np.empty((0, 2), dtype=np.int64))
    pair_scores: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float64))
    info: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.duplicate_of)

    @property
    def removed(self) -> np.ndarray:
        """Indices of removed items, ascending."""
        return np.flatnonzero(self.duplicate_of >= 0)

    @property
    def n_removed(self) -> int:
        return int((self.duplicate_of >= 0).sum())

    def ledger(self, ids: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """One entry per removed item: its id, the kept id it duplicates, method, similarity.

        ``ids`` maps indices to user ids (defaults to the indices).

        Example:
            >>> r = result_from_representatives(np.array([0, 0]), np.array([1.0, 1.0]), "exact")
            >>> r.ledger(ids=["a", "b"])
            [{'id': 'b', 'duplicate_of': 'a', 'method': 'exact', 'matched': 'a', 'similarity': 1.0}]

        ``duplicate_of`` is the kept representative of the item's cluster; ``matched`` the
        item it was found similar to and ``similarity`` that similarity (see the attributes).
        """
        name = (lambda i: int(i)) if ids is None else (lambda i: ids[int(i)])
        return [{"id": name(i), "duplicate_of": name(self.duplicate_of[i]),
                 "method": self.method[i], "matched": name(self.matched[i]),
                 "similarity": round(float(self.similarity[i]), 6)} for i in self.removed]


def _clusters(duplicate_of: np.ndarray) -> list[list[int]]:
    removed = np.flatnonzero(duplicate_of >= 0)
    if len(removed) == 0:
        return []
    reps = duplicate_of[removed]
    order = np.lexsort((removed, reps))
    reps, removed = reps[order], removed[order]
    cuts = np.flatnonzero(np.diff(reps)) + 1
    return [
        [int(r[0]), *map(int, m)] for r, m in zip(np.split(reps, cuts), np.split(removed, cuts))
    ]


def cluster_warnings(clusters: list[list[int]], n: int) -> list[str]:
    """A warning when the largest cluster holds at least :data:`LARGE_CLUSTER` of ``n`` items.

    Example:
        >>> cluster_warnings([list(range(30))], 100)[0][:37]
        'one cluster holds 30 of 100 items (30'
    """
    big = max(clusters, key=len, default=[])
    return large_cluster_warnings(len(big), big[0] if big else -1, n)


def large_cluster_warnings(size: int, kept: int, n: int) -> list[str]:
    """:func:`cluster_warnings` of a largest cluster of ``size`` items that keeps ``kept``.

    Example:
        >>> large_cluster_warnings(5, 0, 100)
        []
    """
    if n == 0 or size < max(20, LARGE_CLUSTER * n):
        return []
    return [f"one cluster holds {size:,} of {n:,} items ({size / n:.0%}, kept item "
            f"{kept}): the items probably share a template rather than repeat; compare the "
            "part that varies (MinHash boilerplate=0.01, a --field, or --strip-boilerplate) "
            "or raise the threshold"]


def result_from_representatives(
    rep: np.ndarray,
    similarity: np.ndarray,
    method: str,
    pairs: np.ndarray | None = None,
    pair_scores: np.ndarray | None = None,
    info: dict[str, Any] | None = None,
) -> DedupResult:
    """Build a :class:`DedupResult` from each item's representative (itself when kept).

    ``similarity`` is each item's similarity to its representative; an item with a verified
    pair in ``pairs`` is reported against its best pair instead (:func:`best_matches`).
    """
    rep = np.asarray(rep, dtype=np.int64)
    n = len(rep)
    idx = np.arange(n, dtype=np.int64)
    kept = rep == idx
    duplicate_of = np.where(kept, -1, rep)
    sim = np.where(kept, np.nan, np.asarray(similarity, dtype=np.float64))
    matched = duplicate_of.copy()
    if pairs is not None and pair_scores is not None and len(pair_scores):
        matched, sim = best_matches(rep, np.asarray(pairs, np.int64).reshape(-1, 2),
                                    np.asarray(pair_scores, np.float64), matched, sim)
    clusters = _clusters(duplicate_of)
    return DedupResult(
        keep=idx[kept],
        duplicate_of=duplicate_of,
        clusters=clusters,
        method=["" if k else method for k in kept],
        similarity=sim,
        matched=matched,
        pairs=np.empty((0, 2), np.int64)
        if pairs is None
        else np.asarray(pairs, np.int64).reshape(-1, 2),
        pair_scores=np.empty(0) if pair_scores is None else np.asarray(pair_scores, np.float64),
        info=dict(info or {}),
        warnings=cluster_warnings(clusters, n),
    )


def best_matches(rep: np.ndarray, pairs: np.ndarray, scores: np.ndarray, matched: np.ndarray,
                 similarity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each removed item's match among the verified ``pairs``: its pair with the
    representative ``rep[i]`` when there is one, else its most similar pair (the lower index
    on a tie). Items without a pair keep their ``matched`` and ``similarity``.

    Example:
        >>> rep = np.array([0, 0, 0])  # 2 joined 0 through 1: the pair (0, 2) is not similar
        >>> m, s = best_matches(rep, np.array([[0, 1], [1, 2]]), np.array([0.9, 0.8]),
        ...                     np.array([-1, 0, 0]), np.array([np.nan, 0.9, 0.6]))
        >>> m.tolist(), s.tolist()
        ([-1, 0, 1], [nan, 0.9, 0.8])
    """
    src = np.concatenate([pairs[:, 0], pairs[:, 1]])
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
    score = np.concatenate([scores, scores])
    use = rep[src] != src  # links of removed items
    src, dst, score = src[use], dst[use], score[use]
    to_rep = dst == rep[src]
    order = np.lexsort((dst, -score, ~to_rep, src))  # per item: the representative, best score
    src, dst, score = src[order], dst[order], score[order]
    first = np.ones(len(src), dtype=bool)
    first[1:] = src[1:] != src[:-1]
    matched, similarity = matched.copy(), similarity.copy()
    matched[src[first]] = dst[first]
    similarity[src[first]] = score[first]
    return matched, similarity


def combine_stages(n: int, stages: list[tuple[np.ndarray, DedupResult]]) -> DedupResult:
    """Chain stage results: stage k ran on the items ``alive_k`` that survived stage k-1.

    Each removed item first points at the survivor it matched; later stages may remove that
    survivor too, so pointers are followed until they reach an item that is finally kept.
    """
    matched = np.full(n, -1, dtype=np.int64)
    reps = np.full(n, -1, dtype=np.int64)
    similarity = np.full(n, np.nan)
    method = [""] * n
    pairs, scores = [], []
    info: dict[str, Any] = {}
    for alive, res in stages:
        local = res.removed
        glob = alive[local]
        reps[glob] = alive[res.duplicate_of[local]]
        matched[glob] = alive[res.matched[local]]
        similarity[glob] = res.similarity[local]
        for g in glob:
            method[g] = _stage_name(res)
        pairs.append(alive[res.pairs] if len(res.pairs) else np.empty((0, 2), np.int64))
        scores.append(res.pair_scores)
        info[_stage_name(res)] = res.info
    duplicate_of = reps
    while True:  # each pass moves every pointer one stage forward; at most len(stages) passes
        removed = duplicate_of >= 0
        nxt = np.where(removed, duplicate_of, 0)
        hop = removed & (duplicate_of[nxt] >= 0)
        if not hop.any():
            break
        duplicate_of[hop] = duplicate_of[nxt[hop]]
    idx = np.arange(n, dtype=np.int64)
    clusters = _clusters(duplicate_of)
    return DedupResult(
        keep=idx[duplicate_of < 0],
        duplicate_of=duplicate_of,
        clusters=clusters,
        method=method,
        similarity=similarity,
        matched=matched,
        pairs=np.concatenate(pairs) if pairs else np.empty((0, 2), np.int64),
        pair_scores=np.concatenate(scores) if scores else np.empty(0),
        info=info,
        warnings=cluster_warnings(clusters, n),
    )


def _stage_name(res: DedupResult) -> str:
    return str(res.info.get("method", ""))
