"""The ``idf`` scorer: word self-information from an offline reference table.

Example:
    >>> IdfScorer({"the": 1.0}, default=20.0).information(["the quasar"])[0].tolist()
    [1.0, 20.0]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from ctxkit.compression.atoms import _WORD, atoms
from ctxkit.compression.scoring.base import _Lexical

__all__ = ["MAX_BITS", "PUNCT_BITS", "IdfScorer"]


MAX_BITS = 24.0  # cap: a word seen once in ~16M words; unknown words get this


PUNCT_BITS = 1.0  # punctuation carries little content; wordfreq has no entry for it


@functools.lru_cache(maxsize=200_000)
def _wordfreq_bits(word: str) -> float:
    from wordfreq import word_frequency

    freq = word_frequency(word, "en")
    return MAX_BITS if freq <= 0 else min(MAX_BITS, -math.log2(freq))


def _wordfreq_available() -> bool:
    try:
        import wordfreq  # noqa: F401
    except ImportError:
        return False
    return True


class IdfScorer(_Lexical):
    """Word self-information from an offline reference table.

    ``table`` maps lowercase words to bits. ``None`` means the ``wordfreq`` English table
    (-log2 of the word's frequency) when that package is installed; without it, each call
    fits IDF on the texts it is given (a document's own sentences as the reference corpus).
    Unknown words get :data:`MAX_BITS`, punctuation :data:`PUNCT_BITS`.

    Example:
        >>> s = IdfScorer.fit(["the cat sat", "the dog ran", "the end"])
        >>> bits = s.information(["the cat"])[0]
        >>> bool(bits[0] < bits[1])
        True
    """

    name = "idf"

    def __init__(self, table: dict[str, float] | None = None, default: float | None = None):
        self.table = table
        self.default = MAX_BITS if default is None else float(default)
        self.use_wordfreq = table is None and _wordfreq_available()

    @classmethod
    def fit(cls, corpus: Sequence[str]) -> IdfScorer:
        """IDF (in bits) of every word in ``corpus``, fitted with scikit-learn.

        A word in every document gets ~0 bits, a word in one of N documents ~log2(N) bits;
        words never seen get one bit more than the rarest seen word.
        """
        table, default = _fit_idf(corpus)
        return cls(table=table, default=default)

    def information(self, texts: Sequence[str]) -> list[np.ndarray]:
        table, default = self.table, self.default
        if table is None and not self.use_wordfreq:
            table, default = _fit_idf(texts)
        out = []
        for text in texts:
            bits = np.empty(0) if not text else np.array(
                [self._bits(a, table, default) for _, _, a in atoms(text)], dtype=np.float64)
            out.append(bits)
        return out

    def _bits(self, atom: str, table: dict[str, float] | None, default: float) -> float:
        if not _WORD.search(atom):
            return PUNCT_BITS
        word = atom.lower()
        if table is None:
            return _wordfreq_bits(word)
        return table.get(word, default)


def _fit_idf(corpus: Sequence[str]) -> tuple[dict[str, float], float]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = [t for t in corpus if t and _WORD.search(t)]
    if not docs:
        return {}, MAX_BITS
    vec = TfidfVectorizer(lowercase=True, analyzer=lambda t: [a.lower() for _, _, a in atoms(t)
                                                             if _WORD.search(a)],
                          smooth_idf=True)
    vec.fit(docs)
    # sklearn's smoothed idf is ln((1+N)/(1+df)) + 1; drop the +1 and move to bits
    bits = (vec.idf_ - 1.0) / math.log(2)
    table = dict(zip(vec.get_feature_names_out().tolist(), bits.tolist()))
    return table, float(bits.max()) + 1.0
