"""The near-duplicate finder of one call: which of a few texts repeat each other.

``compress`` (units of one input), ``density`` (the texts of a report) and ``compress_chat``
(the turns of a history) all ask it. Texts are compared as sets of word 3-gram shingles after
the normalization ``dedup`` uses (case, whitespace and punctuation folded), with the exact
Jaccard similarity of every pair that shares a shingle (one sparse product,
:func:`similar_pairs`); a text under three words is one shingle, and texts that normalize to
the same string (nothing included) are copies. Where the pairs would be too many to list (a
large corpus with shared boilerplate: the product's work is the sum over shingles of their
document frequency squared), the corpus-scale MinHash pipeline (:func:`ctxkit.dedup`)
answers instead, with the same normalization and threshold.

Example:
    >>> near_duplicates(["Thanks!", "thanks", "the cat sat on the mat today",
    ...                  "The cat sat on the mat today!"])
    [-1, 0, -1, 2]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxkit.deduplication.normalize import Normalization, normalize_texts
from ctxkit.deduplication.shingle import shingles
from ctxkit.deduplication.signatures import hash_values
from ctxkit.deduplication.unionfind import connected_components
from ctxkit.options import bad_option

__all__ = ["EXACT_PAIR_WORK", "SMALL_CHARS", "SMALL_TEXTS", "GrowingPairs", "near_duplicates",
           "shingle_sets", "similar_pairs"]

# pairs of shared shingles the exact product may visit; above it MinHash answers
EXACT_PAIR_WORK = 20_000_000
# up to this many texts and characters (the sentences of one chat turn, a few passages),
# Python sets of word tuples answer: the sparse product's fixed cost would outweigh the work
SMALL_TEXTS = 64
SMALL_CHARS = 20_000
_NORM = Normalization(punctuation=True)


def shingle_sets(texts: Sequence[str]) -> list[np.ndarray]:
    """Each text's distinct word 3-gram shingle hashes (64-bit), after case, whitespace and
    punctuation folding; a text under three words is one shingle, an empty one none.

    Example:
        >>> [len(s) for s in shingle_sets(["the cat sat on", "Hi!", "?!"])]
        [2, 1, 0]
    """
    values, offsets = hash_values(list(texts), ngram=3, unit="word", normalization=_NORM,
                                  scheme="affine64")
    return [np.unique(values[offsets[k]:offsets[k + 1]]) for k in range(len(texts))]


def _pair_work(sets: Sequence[np.ndarray]) -> int:
    if not sets:
        return 0
    _, df = np.unique(np.concatenate(sets), return_counts=True)
    return int((df.astype(np.int64) * (df - 1) // 2).sum())


def similar_pairs(sets: Sequence[np.ndarray], threshold: float
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(i, j, jaccard)`` of every pair ``i < j`` whose shingle sets have exact Jaccard
    similarity at least ``threshold`` (texts without shingles match nothing).

    Example:
        >>> i, j, jac = similar_pairs([np.array([1, 2, 3]), np.array([2, 3]), np.array([9])],
        ...                           0.5)
        >>> i.tolist(), j.tolist(), jac.round(2).tolist()
        ([0], [1], [0.67])
    """
    if not 0.0 < threshold <= 1.0:
        raise bad_option("threshold", f" must be in (0, 1], got {threshold}")
    n = len(sets)
    sizes = np.array([len(s) for s in sets], dtype=np.int64)
    empty = np.zeros(0, dtype=np.int64)
    if n < 2 or not sizes.any():
        return empty, empty, np.zeros(0)
    from scipy import sparse

    flat = np.concatenate(sets)
    _, cols = np.unique(flat, return_inverse=True)
    rows = np.repeat(np.arange(n), sizes)
    mat = sparse.csr_matrix((np.ones(len(flat), dtype=np.int32), (rows, cols.ravel())),
                            shape=(n, int(cols.max()) + 1))
    inter = sparse.triu(mat @ mat.T, k=1).tocoo()
    i, j, common = inter.row, inter.col, inter.data.astype(np.float64)
    jac = common / (sizes[i] + sizes[j] - common)
    hit = jac >= threshold - 1e-12
    order = np.lexsort((j[hit], i[hit]))
    return (i[hit][order].astype(np.int64), j[hit][order].astype(np.int64),
            jac[hit][order])


class GrowingPairs:
    """:func:`similar_pairs` of a list of shingle sets that grows at its end: each new set is
    compared once with the sets before it, through an inverted index of their shingles, so a
    history that gains a turn pays for that turn only. The first sets go through
    :func:`similar_pairs` at once; the index is built when the list first grows.

    Example:
        >>> pairs = GrowingPairs(0.5)
        >>> pairs.extend([np.array([1, 2, 3]), np.array([7])])[0].tolist()
        []
        >>> i, j, _ = pairs.extend([np.array([2, 3])])
        >>> i.tolist(), j.tolist(), len(pairs)
        ([0], [2], 3)
    """

    def __init__(self, threshold: float):
        if not 0.0 < threshold <= 1.0:
            raise bad_option("threshold", f" must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self._sizes = _Column()
        self._sets: list[np.ndarray] = []
        self._postings: dict[int, _Column] | None = None

    @property
    def sizes(self) -> np.ndarray:
        """Each set's number of shingles."""
        return self._sizes.view()

    def __len__(self) -> int:
        return self._sizes.n

    def extend(self, sets: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Append ``sets``; returns the new pairs ``(i, j, jaccard)`` (``j`` a new set)."""
        first = len(self)
        for s in sets:
            self._sizes.append(len(s))
        if first == 0:
            self._sets.extend(sets)
            return similar_pairs(list(sets), self.threshold)
        if self._postings is None:
            self._postings = {}
            for k, s in enumerate(self._sets):
                for h in s.tolist():
                    self._postings.setdefault(h, _Column()).append(k)
            self._sets = []  # the index holds them now
        out_i, out_j, out_jac = [], [], []
        sizes = self._sizes.view()
        for k, s in enumerate(sets, start=first):
            postings = [self._postings.setdefault(h, _Column()) for h in s.tolist()]
            earlier = [p.view() for p in postings if p.n]
            if earlier:
                # shingles shared with each earlier set (a set's shingles are distinct), counted
                # in C: the posting lists of common shingles grow with the history
                common = np.bincount(np.concatenate(earlier), minlength=k)
                other = np.flatnonzero(common)
                shared = common[other]
                jac = shared / (sizes[other] + sizes[k] - shared)
                hit = jac >= self.threshold - 1e-12
                out_i.append(other[hit])
                out_j.append(np.full(int(hit.sum()), k, np.int64))
                out_jac.append(jac[hit])
            for p in postings:
                p.append(k)
        if not out_i:
            return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
        return np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_jac)


class _Column:
    """A growing array of integers (amortised appends, read as a view)."""

    __slots__ = ("data", "n")

    def __init__(self) -> None:
        self.data = np.zeros(4, np.int64)
        self.n = 0

    def append(self, value: int) -> None:
        if self.n == len(self.data):
            self.data = np.concatenate([self.data, np.zeros(len(self.data), np.int64)])
        self.data[self.n] = value
        self.n += 1

    def view(self) -> np.ndarray:
        return self.data[:self.n]


def near_duplicates(texts: Sequence[str], threshold: float = 0.8) -> list[int]:
    """For each text, the earliest text of its cluster when it nearly duplicates an earlier
    one, else -1: clusters are connected components of the pairs at word 3-gram Jaccard
    ``threshold`` or above (``1.0``: exact copies only), so each cluster keeps its earliest
    member, as ``dedup(keep="first")`` does.

    Example:
        >>> near_duplicates(["a b c d", "x y z", "A b c d!"], threshold=0.9)
        [-1, -1, 0]
    """
    if not 0.0 < threshold <= 1.0:
        raise bad_option("threshold", f" must be in (0, 1], got {threshold}")
    texts = list(texts)
    if len(texts) < 2:
        return [-1] * len(texts)
    normalized = normalize_texts(texts, _NORM)
    first: dict[str, int] = {}  # normalized text -> its first index: exact copies
    edges = [(j, k) for k, t in enumerate(normalized) if (j := first.setdefault(t, k)) != k]
    if threshold < 1.0:
        if len(texts) <= SMALL_TEXTS and sum(map(len, normalized)) <= SMALL_CHARS:
            edges += _small_pairs(normalized, threshold)
        else:
            sets = shingle_sets(texts)
            if _pair_work(sets) > EXACT_PAIR_WORK:
                return _by_minhash(texts, threshold)
            i, j, _ = similar_pairs(sets, threshold)
            edges += list(zip(i.tolist(), j.tolist()))
    if not edges:
        return [-1] * len(texts)
    labels = connected_components(len(texts), np.array(edges, dtype=np.int64))
    return [-1 if int(r) == k else int(r) for k, r in enumerate(labels)]


def _small_pairs(normalized: list[str], threshold: float) -> list[tuple[int, int]]:
    """:func:`similar_pairs` for a few short texts (already normalized), with Python sets of
    word tuples: the same pairs, without the sparse product's fixed cost."""
    sets = [set(shingles(t, 3, "word")) for t in normalized]
    return [(i, j) for i in range(len(sets)) for j in range(i + 1, len(sets))
            if sets[i] and sets[j] and not sets[i].isdisjoint(sets[j])
            and len(sets[i] & sets[j]) / len(sets[i] | sets[j]) >= threshold - 1e-12]


def _by_minhash(texts: list[str], threshold: float) -> list[int]:
    from ctxkit.deduplication.pipeline import dedup

    methods = ["exact"] if threshold >= 1.0 else ["exact", "minhash"]
    options = {} if threshold >= 1.0 else {"unit": "word", "ngram": 3}
    res = dedup(texts, method=methods, threshold={"minhash": threshold}, keep="first",
                punctuation=True, **options)
    return [int(d) for d in res.duplicate_of]
