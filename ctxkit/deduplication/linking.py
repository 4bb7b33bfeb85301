"""Which candidate pairs to link: estimates first, exact Jaccard only where it can matter.

Every LSH candidate has a MinHash estimate. Far from the threshold the estimate decides
(beyond ``margin`` it is wrong with probability below 1e-5, see
:func:`ctxkit.deduplication.minhash.verify_margin`); near it the exact Jaccard of the two
shingle sets does, and that is the expensive part: on templated records (a shared tool
description, a prompt preamble) most candidates sit near the threshold.

Exact scores are computed in rounds, the most similar pairs first. Before each round, a pair
whose two texts already lie in one component of more than ``big`` texts is skipped: linking
it cannot change any cluster. Small components (ordinary near-duplicates) still get every
pair verified, so the reported pairs are complete there; a template-sized component gets
about one verification per member instead of one per pair. The clusters are exactly those of
verifying every candidate.

Example:
    >>> pairs = np.array([[0, 1], [0, 2], [1, 2], [2, 3]])
    >>> est = np.array([0.95, 0.72, 0.70, 0.10])
    >>> linked, scores = link_pairs(4, pairs, est, 0.7, 0.1, exact=lambda p: np.full(len(p), 0.75))
    >>> linked.tolist(), scores.tolist()
    ([[0, 1], [0, 2], [1, 2]], [0.95, 0.75, 0.75])
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ctxkit.deduplication.unionfind import connected_components

__all__ = ["FIRST_ROUND", "link_pairs"]

FIRST_ROUND = 1 << 12  # exact scores in the first round; each round doubles


def link_pairs(
    n: int,
    pairs: np.ndarray,
    estimates: np.ndarray,
    threshold: float,
    margin: float,
    exact: Callable[[np.ndarray], np.ndarray] | None = None,
    big: int = 32,
) -> tuple[np.ndarray, np.ndarray]:
    """The pairs to link among ``n`` texts, with their scores, in candidate order.

    ``exact=None`` links by the estimate alone (``estimate >= threshold``). Otherwise pairs
    with ``estimate >= threshold + margin`` are linked, those at or below
    ``threshold - margin`` are not, and the rest are scored by ``exact`` (called with an
    ``(m, 2)`` array, once per round) unless their texts are already in one component of
    more than ``big`` texts. Deterministic: rounds depend only on the estimates.
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    scores = np.asarray(estimates, dtype=np.float64).copy()
    if exact is None:
        ok = scores >= threshold
        return pairs[ok], scores[ok]
    linked = scores >= threshold + margin
    todo = np.flatnonzero(np.abs(scores - threshold) < margin)
    todo = todo[np.argsort(-scores[todo], kind="stable")]
    # Components are kept over the texts that occur in pairs only, and each round merges in
    # just the pairs linked since the last: the rounds grow in number with the log of the
    # pairs, so redoing all ``n`` texts and links every round would make the time per text
    # grow with the corpus.
    local = _local_ids(n, pairs)
    labels = np.arange(local.max() + 1 if len(local) else 0)
    fresh = np.flatnonzero(linked)  # links not yet merged into ``labels``
    members = None  # component sizes, once any link is merged
    # Each round takes the next stretch of pending pairs (each twice the last) and scores
    # those not already inside one big component. A pair is looked at in one round only:
    # filtering every pending pair in every round read them all about log(pairs) times.
    start, size = 0, FIRST_ROUND
    while start < len(todo):
        if len(fresh):
            labels = connected_components(len(labels), labels[local[fresh]])[labels]
            members = np.bincount(labels, minlength=len(labels))
        batch = todo[start : start + size]
        start += size
        size *= 2
        if members is not None:
            a, b = labels[local[batch, 0]], labels[local[batch, 1]]
            batch = batch[(a != b) | (members[a] <= big)]
        if len(batch):
            scores[batch] = exact(pairs[batch])
            linked[batch] = scores[batch] >= threshold
        fresh = batch[linked[batch]]
    return pairs[linked], scores[linked]


def _local_ids(n: int, pairs: np.ndarray) -> np.ndarray:
    """``pairs`` renumbered 0..k-1 over the k distinct texts they name (in text order)."""
    if len(pairs) == 0:
        return pairs
    seen = np.zeros(n, dtype=bool)
    seen[pairs.ravel()] = True
    index = np.cumsum(seen) - 1
    return index[pairs]
