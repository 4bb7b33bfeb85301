"""Semantic dedup: paraphrases found by cosine similarity of sentence embeddings.

Texts are embedded (by default with the bundled all-MiniLM-L6-v2 through the packed
encoder, :class:`ctxkit.PackedEncoder`; any object with ``encode(texts) -> array`` works,
such as a ``SentenceTransformer``), L2-normalized, and every pair with cosine >= ``threshold`` is
linked; clusters are the connected components, as for MinHash.

Two ways to find the pairs:

- ``"exact"``: all pairs, in ``block x block`` tiles of the similarity matrix, so memory
  stays bounded (``block**2`` floats) while the work is n**2/2 dot products.
- ``"kmeans"``: SemDeDup (Abbas et al., 2023, arXiv:2303.09540): spherical k-means splits
  the embeddings into about sqrt(n) clusters and pairs are searched only inside clusters.
  Each text joins its ``n_assign`` nearest clusters, so a pair that straddles a boundary is
  still found when both sit near it. The recall loss against ``"exact"`` is measured by
  ``python -m evals.dedup`` (its semantic table). ``"auto"`` uses exact up to ``exact_max`` texts.

Example:
    >>> emb = np.array([[1.0, 0.0], [0.99, 0.141], [0.0, 1.0]], dtype=np.float32)
    >>> semantic_dedup(["a", "b", "c"], threshold=0.9, embeddings=emb).duplicate_of.tolist()
    [-1, 0, -1]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ctxkit.deduplication.options import DEFAULT_SEMANTIC_THRESHOLD, PARTITIONS, SemanticOptions
from ctxkit.deduplication.result import DedupResult, result_from_representatives
from ctxkit.deduplication.unionfind import connected_components, keep_priority, representatives
from ctxkit.embedding.vectors import Encoder, default_encoder, embed
from ctxkit.embedding.vectors import unit_rows as _normalize
from ctxkit.errors import InputError

__all__ = [
    "PARTITIONS",
    "Encoder",
    "default_encoder",
    "embed",
    "pairs_exact",
    "pairs_kmeans",
    "semantic_dedup",
]

DEFAULT_THRESHOLD = DEFAULT_SEMANTIC_THRESHOLD


def pairs_exact(
    emb: np.ndarray, threshold: float, block: int = 2048, ids: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """All pairs ``i < j`` with cosine >= threshold, tile by tile; returns (pairs, cosines).

    ``emb`` must be L2-normalized. ``ids`` maps rows to the indices reported (default: rows).

    Example:
        >>> e = np.eye(3, dtype=np.float32); e[2] = e[0]
        >>> pairs_exact(e, 0.9)[0].tolist()
        [[0, 2]]
    """
    n = len(emb)
    ids = np.arange(n, dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
    found, scores = [], []
    for s in range(0, n, block):
        a = emb[s : s + block]
        for t in range(s, n, block):
            sims = a @ emb[t : t + block].T
            i, j = np.nonzero(sims >= threshold)
            upper = (j + t) > (i + s)
            i, j = i[upper], j[upper]
            found.append(np.stack([ids[i + s], ids[j + t]], axis=1))
            scores.append(sims[i, j].astype(np.float64))
    if not found:
        return np.empty((0, 2), np.int64), np.empty(0)
    pairs, sc = np.concatenate(found), np.concatenate(scores)
    pairs.sort(axis=1)
    return pairs, sc


def pairs_kmeans(
    emb: np.ndarray,
    threshold: float,
    n_clusters: int | None = None,
    n_assign: int = 2,
    seed: int = 1,
    block: int = 2048,
) -> tuple[np.ndarray, np.ndarray]:
    """SemDeDup pairs: cosine >= threshold searched only within k-means clusters.

    Deterministic for a given ``seed``. Returns (pairs, cosines), pairs unique and sorted.
    """
    from sklearn.cluster import KMeans, MiniBatchKMeans

    n = len(emb)
    k = n_clusters or max(1, round(math.sqrt(n)))
    k = min(k, n)
    if k <= 1 or n < 3:
        return _sorted_unique(*pairs_exact(emb, threshold, block))
    # Lloyd's k-means while it is cheap; mini-batches (Sculley 2010) for large n.
    if n <= 50_000:
        km = KMeans(n_clusters=k, random_state=seed, n_init=1, max_iter=100)
    else:
        km = MiniBatchKMeans(n_clusters=k, random_state=seed, n_init=1, batch_size=8192)
    km.fit(emb)
    centers = _normalize(km.cluster_centers_)
    n_assign = max(1, min(n_assign, k))
    # Nearest n_assign centers by cosine (centers normalized: spherical k-means assignment).
    near = np.empty((n, n_assign), dtype=np.int64)
    for s in range(0, n, 8192):
        sims = emb[s : s + 8192] @ centers.T
        near[s : s + 8192] = np.argsort(-sims, axis=1, kind="stable")[:, :n_assign]
    member = near.ravel()
    rows = np.repeat(np.arange(n), n_assign)
    order = np.lexsort((rows, member))
    member, rows = member[order], rows[order]
    cuts = np.flatnonzero(np.diff(member)) + 1
    found, scores = [], []
    for group in np.split(rows, cuts):
        if len(group) > 1:
            p, sc = pairs_exact(emb[group], threshold, block, ids=group)
            found.append(p)
            scores.append(sc)
    if not found:
        return np.empty((0, 2), np.int64), np.empty(0)
    return _sorted_unique(np.concatenate(found), np.concatenate(scores))


def _sorted_unique(pairs: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(pairs) == 0:
        return pairs.reshape(0, 2).astype(np.int64), scores
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    pairs, scores = pairs[order], scores[order]
    keep = np.ones(len(pairs), dtype=bool)
    keep[1:] = (pairs[1:] != pairs[:-1]).any(axis=1)
    return pairs[keep], scores[keep]


def semantic_dedup(
    texts: Sequence[str],
    threshold: float = DEFAULT_THRESHOLD,
    *,
    encoder: Encoder | None = None,
    embeddings: np.ndarray | None = None,
    partition: str = "auto",
    exact_max: int = 20_000,
    n_clusters: int | None = None,
    n_assign: int = 2,
    seed: int = 1,
    block: int = 2048,
    keep: str = "first",
    scores: Sequence[float] | None = None,
    options: SemanticOptions | None = None,
) -> DedupResult:
    """Remove paraphrases: texts whose embeddings have cosine >= ``threshold``.

    Args:
        texts: the texts.
        threshold: cosine similarity (default 0.9; 0.8 also merges looser paraphrases).
        encoder: any object with ``encode(texts) -> array [n, dim]`` (default: the bundled
            all-MiniLM-L6-v2 on the CPU, loaded once).
        embeddings: precomputed embeddings (skips the encoder).
        partition: ``"exact"``, ``"kmeans"`` (SemDeDup) or ``"auto"`` (exact up to
            ``exact_max`` texts).
        keep, scores: the representative rule, as for every dedup method.
        options: a :class:`~ctxkit.deduplication.options.SemanticOptions` (``threshold``,
            ``partition``, ``exact_max``, ``n_clusters``, ``n_assign``, ``seed``, ``block``);
            a keyword given with a value other than its default overrides it.

    Example:
        >>> class Toy:
        ...     def encode(self, texts):
        ...         return np.array([[len(t), 1.0] for t in texts])
        >>> semantic_dedup(["aa", "bb", "a" * 50], encoder=Toy(), threshold=0.99).keep.tolist()
        [0, 2]
    """
    opts = SemanticOptions.resolve(
        options, threshold=threshold, partition=partition, exact_max=exact_max,
        n_clusters=n_clusters, n_assign=n_assign, seed=seed, block=block)
    threshold, block = opts.threshold, opts.block
    n = len(texts)
    emb = embed(texts, encoder) if embeddings is None else _normalize(embeddings)
    if len(emb) != n:
        raise InputError(f"embeddings have {len(emb)} rows for {n} texts")
    use = "exact" if opts.partition == "exact" or (
        opts.partition == "auto" and n <= opts.exact_max) else "kmeans"
    if n < 2:
        pairs, cos = np.empty((0, 2), np.int64), np.empty(0)
    elif use == "exact":
        pairs, cos = pairs_exact(emb, threshold, block)
        pairs, cos = _sorted_unique(pairs, cos)
    else:
        pairs, cos = pairs_kmeans(emb, threshold, opts.n_clusters, opts.n_assign, opts.seed, block)
    labels = connected_components(n, pairs)
    lengths = [len(t) for t in texts] if keep == "longest" and scores is None else None
    rep = representatives(labels, keep_priority(keep, n, lengths=lengths, scores=scores))
    similarity = np.ones(n)
    moved = np.flatnonzero(rep != np.arange(n))
    if len(moved):
        similarity[moved] = np.einsum("ij,ij->i", emb[moved], emb[rep[moved]]).astype(np.float64)
    info = {"method": "semantic", "threshold": threshold, "partition": use, "pairs": len(pairs)}
    return result_from_representatives(rep, similarity, "semantic", pairs, cos, info)
