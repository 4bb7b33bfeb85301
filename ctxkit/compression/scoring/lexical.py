"""Query relevance of text units: lexical (BM25), dense (MiniLM) and their hybrid.

API (plain lists in, arrays out; callers that keep units across calls pass embeddings in):

- :func:`bm25` ``(units, query) -> [n]`` Okapi BM25, unnormalised, 0 for no shared word;
- :func:`embed` ``(texts) -> [n, 384]`` unit-normalised all-MiniLM-L6-v2 vectors;
- :func:`hybrid_relevance` ``(units, query, *, embeddings=None, query_embedding=None,
  lexical_weight=0.4, neighbors=0.0) -> Relevance``: the ranking ``compress`` and
  ``compress_chat`` use by default. ``embeddings`` (``[n, dim]``, normalised, aligned with
  ``units``) and ``query_embedding`` skip the encoder for what the caller cached;
- :func:`lexical_relevance` ``(units, query) -> Relevance``: BM25 alone, same shape.

``Relevance.scores`` is in [0, 1] (1 = most relevant unit); ``Relevance.order`` ranks units best
first. Hybrid fusion standardises each signal over the units of the call (z-scores), so neither
the cosine's narrow range nor BM25's unbounded one dominates, and adds them with the dense
signal first: small embedders blur names and numbers, which BM25 catches, while BM25 misses
paraphrases. ``neighbors`` > 0 lets a unit borrow that share of its best neighbour's relevance
(for units in reading order, such as chat turns, where a fact's question or reply sits beside
it). Rationale and measurements: ``docs/compression.md``.

Example:
    >>> units = ["Paris is the capital of France.", "Bananas are yellow.", "The sky is blue."]
    >>> rel = lexical_relevance(units, "capital of France")
    >>> int(rel.order[0]), float(rel.scores[0])
    (0, 1.0)
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import Stemmer

from ctxkit.compression.scoring.cache import DEFAULT_CACHE_SIZE, TextCache
from ctxkit.embedding.vectors import DEFAULT_DIM, embed  # noqa: F401  (embed re-exported)
from ctxkit.errors import InputError
from ctxkit.options import bad_option

__all__ = [
    "EMBEDDING_DIM",
    "Relevance",
    "TermIndex",
    "bm25",
    "embed",
    "hybrid_relevance",
    "lexical_relevance",
    "spread_to_neighbors",
    "standardise",
    "terms",
    "unit_range",
]

EMBEDDING_DIM = DEFAULT_DIM  # all-MiniLM-L6-v2


@dataclass
class Relevance:
    """Relevance of each unit: ``scores`` in [0, 1] and the signals they were fused from."""

    scores: np.ndarray
    lexical: np.ndarray  # BM25, unnormalised
    dense: np.ndarray | None = None  # cosine to the query; None when not computed

    @property
    def order(self) -> np.ndarray:
        """Unit indices, most relevant first (ties: earlier unit first)."""
        return np.argsort(-self.scores, kind="stable")


_WORD = re.compile(r"(?u)\b\w+\b")
# Snowball stemmers are not thread-safe: one per thread
_STEMMERS = threading.local()


def terms(text: str) -> list[str]:
    """The words of ``text`` as BM25 counts them: lowercased, accents folded, Snowball-stemmed
    (English), so that "played" matches "play" and "variants" matches "variant".

    Example:
        >>> terms("He played for the Eagles in Kolozsvár")
        ['he', 'play', 'for', 'the', 'eagl', 'in', 'kolozsvar']
    """
    return _stem(_words(text))


def _words(text: str) -> list[str]:
    from sklearn.feature_extraction.text import strip_accents_unicode

    return _WORD.findall(strip_accents_unicode(text.lower()))


def _stem(words: list[str]) -> list[str]:
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = Stemmer.Stemmer("english")
    return stemmer.stemWords(words)


def bm25(units: Sequence[str], query: str, k1: float = 1.5, b: float = 0.75,
         index: TermIndex | None = None) -> np.ndarray:
    """Okapi BM25 score of each unit for ``query`` (Robertson & Zaragoza 2009), unnormalised,
    over stemmed words (:func:`terms`); English stop words of the query are ignored when it
    has other words.

    Example:
        >>> s = bm25(["the cat sat", "a dog ran", "cats and a cat"], "cat")
        >>> bool(s[2] > s[0] > s[1])
        True
    """
    if not units:
        return np.zeros(0)
    return (index if index is not None else TermIndex(cache_size=0)).bm25(units, query, k1, b)


def _query_words(query: str) -> list[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    words = _words(query)
    # "who", "did", "the" in a question match every unit a little: rank by the content words
    # (scikit-learn's English stop words), unless the query has nothing else
    return [w for w in words if w not in ENGLISH_STOP_WORDS] or words


class TermIndex:
    """Texts as BM25 reads them: each text's :func:`terms` as integer ids of a vocabulary that
    grows with the texts seen, cached by text (``cache_size`` texts), so a scorer that ranks
    the same turns again (a chat history, every turn) stems each text once.

    Accents are folded on both sides (a query typed "Kolozsvar" matches "Kolozsvár") and words
    stemmed on both sides (a question's "play" matches an answer's "played";
    docs/compression.md).

    Example:
        >>> index = TermIndex()
        >>> s = index.bm25(["the cat sat", "a dog ran", "cats and a cat"], "cat")
        >>> bool(s[2] > s[0] > s[1]), len(index.cache)
        (True, 3)
    """

    def __init__(self, cache_size: int = DEFAULT_CACHE_SIZE):
        self.cache = TextCache(cache_size)
        self.vocab: dict[str, int] = {}
        self._lock = threading.Lock()

    def ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's terms as vocabulary ids, in order."""
        return self.cache.values(list(texts), self._encode)

    def _encode(self, texts: list[str]) -> list[np.ndarray]:
        analysed = [terms(t) for t in texts]
        with self._lock:
            vocab = self.vocab
            return [np.fromiter((vocab.setdefault(w, len(vocab)) for w in words), np.int64,
                                len(words)) for words in analysed]

    def bm25(self, units: Sequence[str], query: str, k1: float = 1.5, b: float = 0.75
             ) -> np.ndarray:
        """Okapi BM25 of each unit for ``query`` (see :func:`bm25`)."""
        n = len(units)
        if n == 0:
            return np.zeros(0)
        ids = self.ids(units)
        lengths = np.fromiter(map(len, ids), np.int64, n)
        if not lengths.any():
            return np.zeros(n)
        flat = np.concatenate(ids)
        with self._lock:
            # the query's words that any text seen has, in the order of the words themselves
            # (a vocabulary fitted on the units sorts them so; the sums below keep that order)
            words = sorted({w for w in _stem(_query_words(query)) if w in self.vocab})
            q_ids = np.array([self.vocab[w] for w in words], dtype=np.int64)
        # a lookup table over the vocabulary: each term's column among the query's, or -1
        column = np.full(max(int(flat.max()), int(q_ids.max(initial=0))) + 1, -1, np.int64)
        column[q_ids] = np.arange(len(q_ids))
        cols = column[flat]
        hit = cols >= 0
        if not hit.any():
            return np.zeros(n)
        rows = np.repeat(np.arange(n), lengths)[hit]
        cols = cols[hit]
        k = len(q_ids)
        sub = np.bincount(rows * k + cols, minlength=n * k).reshape(n, k).astype(np.float64)
        present = sub.any(axis=0)
        sub = sub[:, present]  # a word no unit has is not in a vocabulary fitted on the units
        if sub.shape[1] == 0:
            return np.zeros(n)
        doc_len = lengths.astype(np.float64)
        avg = doc_len.mean() or 1.0
        df = (sub > 0).sum(axis=0)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        norm = k1 * (1 - b + b * doc_len / avg)
        return ((sub * (k1 + 1)) / (sub + norm[:, None]) * idf).sum(axis=1)


def standardise(x: np.ndarray) -> np.ndarray:
    """``x`` as z-scores over its entries (all 0 when they are equal): how relevance signals
    of different ranges are put on one scale before they are fused.

    Example:
        >>> standardise(np.array([1.0, 3.0])).tolist()
        [-1.0, 1.0]
    """
    sd = x.std()
    return (x - x.mean()) / sd if sd > 1e-12 else np.zeros_like(x)


def unit_range(x: np.ndarray) -> np.ndarray:
    """``x`` scaled to [0, 1] over its entries (all 1 when they are equal): relevance as every
    scorer returns it.

    Example:
        >>> unit_range(np.array([2.0, 4.0, 3.0])).tolist()
        [0.0, 1.0, 0.5]
    """
    if x.size == 0:
        return x.astype(np.float64)
    lo, hi = x.min(), x.max()
    return (x - lo) / (hi - lo) if hi - lo > 1e-12 else np.ones_like(x, dtype=np.float64)


def spread_to_neighbors(scores: np.ndarray, weight: float) -> np.ndarray:
    """``scores`` plus ``weight`` times the better of each unit's two neighbours' scores.

    Example:
        >>> spread_to_neighbors(np.array([0.0, 1.0, 0.0, 0.0]), 0.5).tolist()
        [0.5, 1.0, 0.5, 0.0]
    """
    if weight <= 0 or scores.size < 2:
        return scores
    left = np.r_[-np.inf, scores[:-1]]
    right = np.r_[scores[1:], -np.inf]
    return scores + weight * np.maximum(left, right)


def lexical_relevance(units: Sequence[str], query: str, neighbors: float = 0.0,
                      index: TermIndex | None = None) -> Relevance:
    """BM25 relevance of each unit, scaled to [0, 1] (all 0 when no unit shares a word);
    ``index``: a :class:`TermIndex` that keeps the units' terms across calls."""
    lex = bm25(units, query, index=index)
    if lex.size == 0 or lex.max() <= 0:
        return Relevance(np.zeros(len(units)), lex)
    return Relevance(unit_range(spread_to_neighbors(lex / lex.max(), neighbors)), lex)


def hybrid_relevance(units: Sequence[str], query: str, *, embeddings: np.ndarray | None = None,
                     query_embedding: np.ndarray | None = None, lexical_weight: float = 0.4,
                     neighbors: float = 0.0, index: TermIndex | None = None) -> Relevance:
    """Dense + lexical relevance, fused on standardised scores (see the module docstring).

    ``fused = z(cos) + lexical_weight * z(bm25)``, then ``neighbors`` spreading, then scaled to
    [0, 1]. Pass ``embeddings`` / ``query_embedding`` (normalised) to reuse cached vectors,
    and ``index`` to reuse the units' terms.

    Example:
        >>> units = ["The Eiffel Tower is in Paris.", "Bananas are yellow."]
        >>> hybrid_relevance(units, "Which city has the Eiffel Tower?").order.tolist()
        [0, 1]
    """
    if lexical_weight < 0:
        raise bad_option("lexical_weight", f" must be >= 0, got {lexical_weight}")
    n = len(units)
    if embeddings is not None and len(embeddings) != n:
        raise InputError(f"embeddings has {len(embeddings)} rows for {n} units")
    lex = bm25(units, query, index=index)
    if n == 0:
        return Relevance(np.zeros(0), lex, np.zeros(0))
    if embeddings is None:
        embeddings = embed(list(units))
    if query_embedding is None:
        query_embedding = embed([query])[0]
    cos = np.asarray(embeddings, dtype=np.float64) @ np.asarray(query_embedding, np.float64)
    fused = standardise(cos) + lexical_weight * standardise(lex)
    return Relevance(unit_range(spread_to_neighbors(fused, neighbors)), lex, cos)
