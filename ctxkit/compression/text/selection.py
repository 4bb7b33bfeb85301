"""Scoring and selecting units under a budget: utility per token, coarse-to-fine scores and
greedy selection with an MMR redundancy penalty (formulas in
:mod:`ctxkit.compression.text.pipeline`).

Example:
    >>> import numpy as np
    >>> picked, _ = greedy_mmr(np.array([0.9, 0.5, 0.8]), np.array([5, 5, 5]),
    ...                        np.ones(3, bool), np.zeros(3, bool), 10, None, 0.5)
    >>> picked.tolist()
    [True, False, True]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxkit.compression.scoring.base import Scorer
from ctxkit.compression.scoring.lexical import lexical_relevance
from ctxkit.compression.text.multihop import bridge_relevance, chunk_names, chunk_texts

__all__ = ["SENTENCE_WEIGHT", "TIGHT_SENTENCE_WEIGHT", "coarse_to_fine_scores", "greedy_mmr",
           "unit_scores", "utility"]

# coarse-to-fine: how much a sentence's own relevance adds to its chunk's (both in [0, 1])
SENTENCE_WEIGHT = 0.25
# under two average chunks of budget: the sentence's own relevance first, its chunk's at half
# weight as the prior (docs/compression.md, "Constants")
TIGHT_SENTENCE_WEIGHT = 2.0


def _to_max_one(x: np.ndarray) -> np.ndarray:
    return x / x.max() if x.size and x.max() > 0 else x


def utility(bits: np.ndarray, tokens: np.ndarray, relevance: np.ndarray | None,
            query_weight: float) -> np.ndarray:
    """Utility per token of each unit, the one formula of text and chat compression (the
    text pipeline's module docstring): information per token, scaled to a maximum of 1, mixed
    with relevance to the query (also scaled) when there is one.

    Example:
        >>> utility(np.array([8.0, 4.0]), np.array([2, 2]), np.array([0.0, 1.0]), 0.5).tolist()
        [0.5, 0.75]
    """
    info = _to_max_one(np.asarray(bits, dtype=np.float64) / np.maximum(tokens, 1))
    if relevance is None:
        return info
    rel = _to_max_one(np.asarray(relevance, dtype=np.float64))
    return (1.0 - query_weight) * info + query_weight * rel


def unit_scores(texts: Sequence[str], tokens: np.ndarray, scorer: Scorer, query: str | None,
                query_weight: float = 0.95) -> tuple[np.ndarray, list[np.ndarray]]:
    """Utility per token of each unit (:func:`utility`) and its per-atom bits."""
    bits = scorer.information(texts)
    totals = np.array([b.sum() for b in bits])
    rel = scorer.relevance(texts, query) if query else None
    return utility(totals, tokens, rel, query_weight), bits


def coarse_to_fine_scores(pairs: Sequence[tuple[str, str]], owner: Sequence[int],
                          info: np.ndarray, scorer: Scorer, query: str,
                          sentence_weight: float = SENTENCE_WEIGHT, budget: int | None = None,
                          tokens: np.ndarray | None = None) -> np.ndarray:
    """Score of each sentence: its chunk's relevance, plus ``sentence_weight`` times its own,
    plus its information density (0.01 times, to break ties only); a chunk's first sentence
    scores as its best one, just below it when that is another sentence.

    Chunks (list items, or a string's paragraphs) are ranked first with ``scorer.relevance``
    (LongLLMLingua's coarse step), so whole relevant chunks keep their context; a sentence's
    own relevance is BM25 among all the sentences and decides what survives of the chunks at
    the budget's edge (one model pass over the chunks, none over the sentences). Chunks that
    relevant sentences name are raised to the relevance of what names them
    (:func:`~ctxkit.compression.text.multihop.bridge_relevance`: the second hop of a multi-hop
    question). When ``budget`` holds fewer than two chunks of the average size (``tokens``:
    each sentence's), two pieces of evidence can only both survive as sentences: the
    sentence's own relevance then leads (:data:`TIGHT_SENTENCE_WEIGHT`) and its chunk's is
    the prior. A chunk's first sentence names what the chunk is about (a title, a lead), so it
    is kept with the first sentence kept from its chunk; it ranks just below the sentence it
    borrows its score from, so that when only one of the two fits, the evidence is kept.
    """
    own = np.asarray(owner)
    n_chunks = int(own.max()) + 1 if own.size else 0
    texts = [b for b, _ in pairs]
    chunk_rel = np.ones(max(n_chunks, 1))
    sent_rel = lexical_relevance(texts, query).scores
    if n_chunks < 2:
        return chunk_rel[own] + sentence_weight * sent_rel + 0.01 * info
    chunks = chunk_texts(pairs, own)
    chunk_rel = np.asarray(scorer.relevance(chunks, query), dtype=np.float64)
    top = chunk_rel.max()
    chunk_rel = chunk_rel / top if top > 0 else chunk_rel
    raised = bridge_relevance(chunk_rel, chunk_names(chunks), texts, own, sent_rel, query)
    hops = bool(np.any(raised > chunk_rel + 1e-9))  # the evidence spans two chunks
    chunk_rel = raised
    if hops and budget is not None and tokens is not None and tokens.size:
        if budget * n_chunks < 2 * int(np.sum(tokens)):
            sentence_weight = TIGHT_SENTENCE_WEIGHT
    score = chunk_rel[own] + sentence_weight * sent_rel + 0.01 * info
    best = np.full(n_chunks, -np.inf)
    np.maximum.at(best, own, score)
    first = np.r_[True, own[1:] != own[:-1]]
    # a first sentence scoring as its chunk's best sentence ranks just below it: when only one
    # of the two fits, the one whose own relevance earned the score is kept
    borrowed = first & (score < best[own])
    return np.where(first, best[own] - 1e-9 * borrowed, score)


def greedy_mmr(scores: np.ndarray, tokens: np.ndarray, candidates: np.ndarray,
                chosen: np.ndarray, room: int, sim: np.ndarray | None, redundancy: float
                ) -> tuple[np.ndarray, dict[int, tuple[int, float]]]:
    """Pick candidates by ``score - redundancy * max sim to picked`` while they fit ``room``.

    Returns the picked mask and, for candidates whose penalty was what kept them out, the unit
    they were redundant with.
    """
    picked = chosen.copy()
    open_ = candidates.copy()
    n = len(scores)
    maxsim = np.zeros(n)
    nearest = np.full(n, -1)
    if sim is not None and picked.any():
        idx = np.flatnonzero(picked)
        sub = sim[:, idx]
        maxsim = sub.max(axis=1)
        nearest = idx[sub.argmax(axis=1)]
    while True:
        open_ &= tokens <= room
        if not open_.any():
            break
        adjusted = np.where(open_, scores - redundancy * maxsim, -np.inf)
        best = int(np.argmax(adjusted))
        picked[best] = True
        open_[best] = False
        room -= int(tokens[best])
        if sim is not None:
            closer = sim[:, best] > maxsim
            maxsim = np.where(closer, sim[:, best], maxsim)
            nearest = np.where(closer, best, nearest)
    blamed = {}
    for i in np.flatnonzero(candidates & ~picked):
        if sim is not None and nearest[i] >= 0 and maxsim[i] >= 0.5:
            blamed[int(i)] = (int(nearest[i]), float(maxsim[i]))
    return picked, blamed
