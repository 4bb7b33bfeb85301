"""The shortlist: which units a model-backed scorer runs its model on.

A model (a bi-encoder, a reranker) costs most of a cold call; most units of a long input
cannot be kept anyway, so the model ranks only the units a cheap first stage puts on the
shortlist, and every other unit ranks below all of them. Every model-backed scorer derives from
:class:`ShortlistedScorer` and so uses the one :class:`Shortlist`, with two rules:

- the caller knows how many tokens it can keep (``relevance_within``, as ``compress_chat``
  does): the first stage (:func:`first_stage`: the cosine of the mean of the model's *input*
  word-piece vectors, fused with BM25) ranks every unit, and its best units whose tokens fill
  that room :data:`CANDIDATE_ROOMS` times (at least :data:`CANDIDATE_FLOOR` units) are the
  shortlist; the others keep half their first-stage score, below every model-ranked unit;
- it does not (``relevance``): up to :data:`COUNT_FLOOR` units all go to the model; above it,
  BM25's best ``max(COUNT_FLOOR, n // COUNT_SHARE)``, the others scoring 0.

The model-ranked units score ``0.5 + 0.5 * relevance`` in [0.5, 1]. ``candidates`` on a scorer
overrides both rules (0: every unit; k: BM25's best k). Why one room and which first stage:
``docs/chat.md`` ("A cold call"), measured by ``python -m evals.chat_latency``.

Example:
    >>> pick_candidates(np.array([0.1, 0.9, 0.5, 0.7]), np.array([10, 10, 10, 10]), 15,
    ...                 floor=1).tolist()
    [1, 3]
    >>> Shortlist().count(5000)
    1250
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ctxkit.compression.scoring.cache import DEFAULT_CACHE_SIZE, TextCache
from ctxkit.compression.scoring.idf import IdfScorer
from ctxkit.compression.scoring.lexical import (
    TermIndex,
    bm25,
    spread_to_neighbors,
    standardise,
    unit_range,
)
from ctxkit.embedding.vectors import Encoder, ranking_encoder, unit_rows
from ctxkit.options import bad_option

__all__ = ["CANDIDATE_FLOOR", "CANDIDATE_ROOMS", "COUNT_FLOOR", "COUNT_SHARE", "Shortlist",
           "ShortlistedScorer", "WordPieces", "first_stage", "pick_candidates"]

CANDIDATE_ROOMS = 1.0  # candidates' tokens fill the caller's free room this many times
CANDIDATE_FLOOR = 64  # units the model always ranks: histories this short are not cascaded
COUNT_FLOOR = 1024  # without a room: units ranked by the model with no first stage
COUNT_SHARE = 4  # above the floor, BM25's best n // COUNT_SHARE units are ranked by the model


class WordPieces:
    """Unit-length mean of an encoder's input word-piece embeddings per text (no transformer
    layer runs; a text with no word piece is zero), cached by text in ``cache``. The
    tokenizer's Rust core reads the word pieces and ``embedding_bag`` sums the fp32 table's
    rows (:attr:`~ctxkit.embedding.model.PackedModel.word_pieces`), with no ``[tokens, dim]``
    gather.

    Example:
        >>> v = WordPieces()(["a red car", "a red automobile", "tax law"])
        >>> bool(v[0] @ v[1] > v[0] @ v[2])
        True
    """

    def __init__(self, encoder: Encoder | None = None, cache: TextCache | None = None):
        self.encoder = encoder
        self.cache = cache if cache is not None else TextCache()

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.cache.rows(list(texts), self._vectors)

    def dots(self, texts: Sequence[str], vector: np.ndarray) -> np.ndarray:
        """Each text's vector times ``vector`` (cosines, for a unit-length ``vector``)."""
        return self.cache.dots(list(texts), vector, self._vectors)

    def _vectors(self, texts: list[str]) -> np.ndarray:
        import torch
        import torch.nn.functional as F

        enc = ranking_encoder() if self.encoder is None else self.encoder
        tokenizer, table = enc.backbone.word_pieces
        limit = enc.max_seq_length
        ids = [e.ids[:limit] for e in tokenizer.encode_batch_fast(texts)]
        lengths = np.fromiter((len(x) for x in ids), np.int64, len(ids))
        flat = torch.from_numpy(np.fromiter((t for x in ids for t in x), np.int64,
                                            int(lengths.sum()))).to(table.device)
        offsets = torch.from_numpy(np.cumsum(lengths) - lengths).to(table.device)
        with torch.inference_mode():
            out = F.embedding_bag(flat, table, offsets, mode="sum")
        return unit_rows(out.cpu().numpy())


def first_stage(units: Sequence[str], query: str, *, lexical_weight: float = 0.4,
                vectors: Callable[[list[str]], np.ndarray] | None = None,
                index: TermIndex | None = None) -> np.ndarray:
    """Cheap relevance of each unit to ``query`` in [0, 1]: word-piece cosine fused with BM25
    on z-scores (``lexical_weight`` on BM25), as the full signals are fused; ``vectors`` maps
    texts to unit-length rows (default: a fresh :class:`WordPieces`); ``index`` keeps BM25's
    terms across calls.

    Example:
        >>> def bag(texts):  # a stand-in for the word pieces: "sea" lies near "tide"
        ...     return unit_rows(np.array([[("tide" in t) + ("sea" in t), "bread" in t, 0.5]
        ...                                for t in texts]))
        >>> first_stage(["high tide", "the sea rose", "bread"], "when is high tide?",
        ...             vectors=bag).round(2).tolist()
        [1.0, 0.71, 0.0]
    """
    units = list(units)
    if not units:
        return np.zeros(0)
    vectors = vectors or WordPieces()
    q = np.asarray(vectors([query]))[0]
    # the cosine in the vectors' own precision (float32); a cache's rows are read in place
    dots = getattr(vectors, "dots", None)
    cosine = (dots(units, q) if dots is not None else np.asarray(vectors(units)) @ q
              ).astype(np.float64)
    lexical = bm25(units, query, index=index)
    fused = standardise(cosine) + lexical_weight * standardise(lexical)
    return unit_range(fused)


def pick_candidates(scores: np.ndarray, tokens: np.ndarray, volume: int,
                    floor: int = CANDIDATE_FLOOR) -> np.ndarray:
    """Indices (ascending) of the best ``scores`` whose ``tokens`` first reach ``volume``
    (the unit that crosses it included), and at least ``floor`` units.

    Example:
        >>> pick_candidates(np.array([0.2, 0.8, 0.4]), np.array([5, 5, 5]), 1, floor=2).tolist()
        [1, 2]
    """
    order = np.argsort(-np.asarray(scores), kind="stable")
    reach = int(np.searchsorted(np.cumsum(np.asarray(tokens)[order]), volume)) + 1
    return np.sort(order[:max(reach, floor)])


@dataclass(frozen=True)
class Shortlist:
    """The shortlist rules (module docstring). ``candidates``: ``None`` for the rules, 0 for
    every unit, k for BM25's best k; ``lexical_weight``: BM25's weight in the first stage."""

    candidates: int | None = None
    lexical_weight: float = 0.4

    def __post_init__(self) -> None:
        c = self.candidates
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 0):
            raise bad_option("candidates", f" must be None or an int >= 0, got {c!r}")
        if self.lexical_weight < 0:
            raise bad_option("lexical_weight", f" must be >= 0, got {self.lexical_weight}")

    def count(self, n: int) -> int:
        """Units the model ranks out of ``n`` when no room is known."""
        if self.candidates is not None:
            return n if self.candidates == 0 else min(n, self.candidates)
        return n if n <= COUNT_FLOOR else max(COUNT_FLOOR, n // COUNT_SHARE)

    def pick(self, units: list[str], query: str, *, tokens: Sequence[int] | None = None,
             room: int | None = None, neighbors: float = 0.0,
             vectors: Callable[[list[str]], np.ndarray] | None = None,
             index: TermIndex | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """``(shortlisted indices, scores of the others in [0, 0.5])``, or None when the model
        ranks every unit. ``tokens`` and ``room``: what the caller can keep; ``neighbors``:
        its spreading of scores to neighbouring units; ``vectors``: the first stage's;
        ``index``: BM25's terms, kept across calls."""
        n = len(units)
        if room is not None and tokens is not None and self.candidates is None \
                and n > CANDIDATE_FLOOR:
            first = first_stage(units, query, lexical_weight=self.lexical_weight,
                                vectors=vectors, index=index)
            top = pick_candidates(spread_to_neighbors(first, neighbors), np.asarray(tokens),
                                  int(CANDIDATE_ROOMS * room))
            return None if len(top) >= n else (top, 0.5 * first)
        k = self.count(n)
        if k >= n:
            return None
        lexical = bm25(units, query, index=index)
        return np.sort(np.argsort(-lexical, kind="stable")[:k]), np.zeros(n)


class ShortlistedScorer(IdfScorer):
    """Base of the scorers whose relevance runs a model: the model ranks the
    :class:`Shortlist`'s units only. Subclasses give :meth:`model_relevance`; information
    per word is the ``idf`` scorer's. ``cache_size``: entries of each of the scorer's caches
    (:class:`~ctxkit.compression.scoring.cache.TextCache`; 0 keeps nothing)."""

    def __init__(self, *, candidates: int | None = None, lexical_weight: float = 0.4,
                 cache_size: int = DEFAULT_CACHE_SIZE, table: dict[str, float] | None = None):
        super().__init__(table=table)
        self.shortlist = Shortlist(candidates, lexical_weight)
        self.word_pieces = WordPieces(cache=TextCache(cache_size))
        self.terms = TermIndex(cache_size)

    @property
    def candidates(self) -> int | None:
        return self.shortlist.candidates

    @property
    def lexical_weight(self) -> float:
        return self.shortlist.lexical_weight

    def model_relevance(self, units: list[str], query: str) -> np.ndarray:
        """The model's relevance of each unit to ``query`` in [0, 1]."""
        raise NotImplementedError

    def clear_cache(self) -> None:
        """Forget everything computed (a cold call follows)."""
        self.word_pieces.cache.clear()
        self.terms.cache.clear()

    def prepare(self, units: Sequence[str]) -> None:
        """Compute now, in one batch, what ranking ``units`` later needs and does not depend
        on a query (their first-stage vectors and BM25 terms here; subclasses add their
        model's), so a store that keeps units across calls (``ChatMemory``) pays each unit
        once."""
        self.word_pieces(list(units))
        self.terms.ids(list(units))

    def relevance(self, units: Sequence[str], query: str) -> np.ndarray:
        return self.relevance_within(units, query)

    def relevance_within(self, units: Sequence[str], query: str,
                         tokens: Sequence[int] | None = None, room: int | None = None,
                         neighbors: float = 0.0) -> np.ndarray:
        """:meth:`relevance` for a caller that keeps at most ``room`` tokens of ``units``
        (``tokens`` each) and spreads scores to ``neighbors`` as it ranks (module
        docstring).

        Example:
            >>> from ctxkit.compression.scoring.embedding import EmbeddingScorer
            >>> r = EmbeddingScorer().relevance_within(
            ...     ["Paris is in France.", "Cats purr."], "Where is Paris?", [6, 4], room=6)
            >>> bool(r[0] > r[1])
            True
        """
        if not units:
            return np.zeros(0)
        units = list(units)
        picked = self.shortlist.pick(units, query, tokens=tokens, room=room,
                                     neighbors=neighbors, vectors=self.word_pieces,
                                     index=self.terms)
        if picked is None:
            return self.model_relevance(units, query)
        top, below = picked
        out = np.asarray(below, dtype=np.float64).copy()
        out[top] = 0.5 + 0.5 * self.model_relevance([units[i] for i in top], query)
        return out
