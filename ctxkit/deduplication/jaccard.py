"""Exact Jaccard similarity of shingle sets, for the candidate pairs MinHash proposes.

Each text's distinct shingle values are one sorted run of ``text << 32 | value`` keys
(:func:`shingle_sets`), so an intersection is a batch of binary searches
(:func:`pair_jaccard`). :class:`_ExactJaccard` scores pairs over a fixed set of texts with
the shingles common to a group kept as bits, which is what verification uses.

Example:
    >>> round(float(exact_pair_jaccard(["abcdef", "abcdeg"], [[0, 1]])[0]), 3)
    0.333
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxkit.deduplication import kernels
from ctxkit.deduplication.arrays import _checked_pairs, _dense, _distinct_ids, _unique_keys
from ctxkit.deduplication.normalize import Normalization
from ctxkit.deduplication.signatures import hash_values
from ctxkit.deduplication.unionfind import connected_components
from ctxkit.errors import InputError

__all__ = ["exact_pair_jaccard", "pair_jaccard", "shingle_sets"]


def shingle_sets(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each text's distinct shingle values in one sorted key array, for :func:`pair_jaccard`.

    Keys are ``text << 32 | value`` (values folded to 32 bits), so every text's set is a
    sorted run and a membership test for any (text, value) is one ``searchsorted``.
    Returns ``(keys, set_offsets)``.
    """
    values = np.asarray(values)
    if values.dtype == np.uint64:
        values = (values >> np.uint64(32)).astype(np.uint32)
    n = len(offsets) - 1
    if n >= 1 << 32:
        raise InputError("offsets: shingle_sets handles fewer than 2**32 texts per call")
    doc = np.repeat(np.arange(n, dtype=np.uint64), np.diff(offsets))
    keys = _unique_keys((doc << np.uint64(32)) | values.astype(np.uint64))
    set_offsets = np.searchsorted(keys, np.arange(n + 1, dtype=np.uint64) << np.uint64(32))
    return keys, set_offsets.astype(np.int64)


def pair_jaccard(
    keys: np.ndarray, set_offsets: np.ndarray, pairs: np.ndarray, chunk: int = 1 << 18
) -> np.ndarray:
    """Exact Jaccard of each pair's shingle sets (from :func:`shingle_sets`), vectorized.

    The smaller set of each pair is looked up in the larger one with one ``searchsorted``
    over all pairs at once. Two empty sets have Jaccard 1.

    Example:
        >>> v, off = hash_values(["abcdef", "abcdeg", ""], scheme="affine32")
        >>> keys, so = shingle_sets(v, off)
        >>> pair_jaccard(keys, so, np.array([[0, 1], [0, 2], [2, 2]])).round(3).tolist()
        [0.333, 0.0, 1.0]
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    sizes = np.diff(set_offsets)
    inter = _intersections(keys, set_offsets, pairs, chunk)
    return _jaccard(inter, sizes[pairs[:, 0]] + sizes[pairs[:, 1]])


def _jaccard(inter: np.ndarray, size_sum: np.ndarray) -> np.ndarray:
    union = size_sum - inter
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def _intersections(
    keys: np.ndarray, set_offsets: np.ndarray, pairs: np.ndarray, chunk: int = 1 << 18
) -> np.ndarray:
    """``|A & B|`` for each pair of :func:`shingle_sets` sets: the smaller set of each pair is
    looked up in the larger one, in chunks of about ``chunk`` lookups."""
    if kernels.NUMBA:
        inter = np.empty(len(pairs), dtype=np.int64)
        kernels.intersection_sizes(keys, set_offsets, _checked_pairs(pairs, len(set_offsets) - 1),
                                   inter)
        return inter
    sizes = np.diff(set_offsets)
    a, b = pairs[:, 0], pairs[:, 1]
    swap = sizes[a] > sizes[b]
    small, large = np.where(swap, b, a), np.where(swap, a, b)
    inter = np.zeros(len(pairs), dtype=np.int64)
    if len(keys) == 0:
        return inter
    # pairs in order of the larger set make the lookups ascending, so the binary searches
    # walk ``keys`` front to back through the cache instead of jumping across all of it
    by_large = np.lexsort((small, large))
    small, large = small[by_large], large[by_large]
    counts = sizes[small]
    # Chunks of pairs whose query elements total about `chunk`.
    bounds = np.searchsorted(
        np.cumsum(counts), np.arange(chunk, counts.sum() + chunk, chunk), side="right"
    )
    lo = 0
    low32 = np.uint64(0xFFFFFFFF)
    for hi in np.unique(np.concatenate([bounds, [len(pairs)]])):
        if hi <= lo:
            continue
        c = counts[lo:hi]
        pid = np.repeat(np.arange(lo, hi), c)
        pos = np.repeat(set_offsets[small[lo:hi]], c) + (
            np.arange(c.sum()) - np.repeat(np.cumsum(c) - c, c)
        )
        query = (large[pid].astype(np.uint64) << np.uint64(32)) | (keys[pos] & low32)
        # the larger sets of these pairs are one stretch of ``keys`` (pairs come in order of
        # their larger set): searching that stretch alone keeps the search in cache however
        # large the corpus grows
        hay = keys[set_offsets[large[lo]] : set_offsets[large[hi - 1] + 1]]
        if len(hay) == 0:
            lo = hi
            continue
        found = np.searchsorted(hay, query)
        hit = hay[np.minimum(found, len(hay) - 1)] == query
        inter[by_large[lo:hi]] = np.bincount(pid[hit] - lo, minlength=hi - lo)
        lo = hi
    return inter


def exact_pair_jaccard(
    texts: Sequence[str] | dict[int, str],
    pairs: np.ndarray,
    ngram: int = 5,
    unit: str = "char",
    normalization: Normalization | None = None,
    hashfunc: str = "fast",
    scheme: str = "affine32",
) -> np.ndarray:
    """Exact Jaccard of each pair's shingle sets, hashing only the texts the pairs involve.

    ``texts`` may be a sequence or a mapping from index to text (e.g. the texts of one batch
    of pairs in a distributed run).
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return _ExactJaccard(texts, pairs.ravel(), pairs, ngram=ngram, unit=unit,
                         normalization=normalization, hashfunc=hashfunc, scheme=scheme)(pairs)


class _ExactJaccard:
    """Exact pair Jaccard over a fixed set of texts, each hashed once however many calls ask.

    Shingles shared by many of the texts (a template's, or a language's commonest 5-grams)
    are kept as one bit each in a small per-text bitmap, so their part of an intersection is
    an AND and a popcount over a few machine words; only the rarer shingles are looked up
    one by one. On templated records that is most of every set (``docs/dedup.md``).

    Given the ``pairs`` it will score, the scorer picks the bitmap's shingles per connected
    component of those pairs (each component of at least ``group_min`` texts on its own, the
    small ones pooled): a bitmap of a few thousand shingles then covers each template
    family, however many families a corpus holds (one choice for all texts would cover
    fewer of each family's shingles the more families there are, and the time per pair
    would grow with the corpus: ``python -m evals.dedup_stages``, "exact scorer build").
    Any pair is exact, also across components (a slower path).
    """

    bitmap_bytes = 64 << 20  # memory for the frequent-shingle bitmaps, all texts together
    group_min = 64  # texts a component needs to get frequent shingles of its own

    def __init__(
        self, texts: Sequence[str] | dict[int, str], ids: np.ndarray,
        pairs: np.ndarray | None = None, **options: Any,
    ):
        """``options`` are :func:`hash_values`' shingling options; ``pairs`` (in ids), when
        given, the pairs to be scored, whose components choose the frequent shingles."""
        self.ids = _distinct_ids(np.asarray(ids, dtype=np.int64))
        n = len(self.ids)
        # where ids are dense (the texts of a corpus's pairs), a table finds an id's position
        # (later its row) in one lookup; a binary search per pair end cost more than the
        # exact scores
        table = None
        if n and _dense(int(self.ids[-1]), n):
            table = np.full(int(self.ids[-1]) + 1, -1, dtype=np.int64)
            table[self.ids] = np.arange(n)
        group = np.zeros(n, dtype=np.int64)  # 0: the pool of small components
        component = np.arange(n)
        if pairs is not None and n:
            pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
            local = table[pairs] if table is not None else np.searchsorted(self.ids, pairs)
            labels = connected_components(n, local)
            big = np.bincount(labels, minlength=n)[labels] >= self.group_min
            group[big] = labels[big] + 1
            component = labels
        # rows are laid out group by group, each group's texts hashed together with its own
        # frequent shingles; inside a group, component by component (then by id), so the two
        # texts of a pair have rows close together
        order = np.lexsort((np.arange(n), component, group))
        self.row = np.empty(n, dtype=np.int64)  # row of the text at each position of ``ids``
        self.row[order] = np.arange(n)
        self._row_of = table  # an id's row, where the table exists
        if table is not None:
            table[self.ids] = self.row
        self.group = group[order]

        # The texts are hashed again here, a block at a time, rather than kept from the
        # signature pass: only those in surviving pairs are needed (about a fifth of a
        # templated corpus), and every text's hashes would take more memory than the
        # signatures themselves, fresh pages whose cost grows with the corpus.
        def hashes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            values, offsets = hash_values([texts[i] for i in self.ids[order[rows]].tolist()],
                                          **options)
            return _fold32(values), offsets

        words = min(64, self.bitmap_bytes // (8 * max(n, 1)))
        self.bits = np.zeros((n, max(words, 1)), dtype=np.uint64)
        self.frequent: dict[int, np.ndarray] = {}
        # a direct-mapped table on the top 17 bits (the values are uniform hashes) finds each
        # frequent shingle's bit in two cache-resident lookups; a frequent value that
        # collides with a more frequent one is simply treated as rare. One table serves every
        # group in turn: only the slots a group set are cleared after it.
        table = np.full(1 << 17, -1, dtype=np.int32)
        # texts per hashing block, small for the same reason as :func:`signatures`' batches
        # (still a count of texts, not of characters as there)
        step = 256
        cuts = (np.flatnonzero(np.diff(self.group)) + 1).tolist()
        spans = list(zip([0, *cuts], [*cuts, n])) if n else []
        # First each group's frequent shingles: those of a spread-out sample of the group
        # stand for it (a template's shingles are in every sample, and any choice keeps the
        # result exact). The samples also size the key buffer.
        chosen = []
        reserve = 1024
        for g0, g1 in spans:
            size = g1 - g0
            k = min(size, 256 if self.group[g0] == 0 else max(16, min(256, size // 4)))
            sample = np.unique(np.linspace(g0, g1 - 1, k).astype(np.int64))
            values = hashes(sample)[0]
            # without bitmap words there is nothing to choose
            chosen.append(_frequent_values(values, words * 64) if words
                          else np.empty(0, dtype=np.uint32))
            # a group's rare keys are at most its shingles: the sample's per text, scaled
            reserve += int(1.25 * size * len(values) / len(sample))
        # Room reserved for every key, filled in place: pages past the last key are never
        # touched, and no key is copied a second time (parts joined at the end would be).
        rare = np.empty(reserve, dtype=np.uint64)
        filled = 0
        # Blocks of texts keep every temporary cache-sized, and each block's rare keys sort on
        # their own (in pieces, :func:`_unique_keys`): blocks come in row order, so their
        # sorted runs laid end to end are one sorted array, and the work per text does not
        # grow with the corpus.
        for (g0, g1), frequent in zip(spans, chosen):
            home = None
            if len(frequent):
                self.frequent[int(self.group[g0])] = frequent
                home = (frequent >> np.uint32(15)).astype(np.int64)
                # the most frequent wins a shared slot
                table[home[::-1]] = np.arange(len(frequent), dtype=np.int32)[::-1]
            for d0 in range(g0, g1, step):
                d1 = min(d0 + step, g1)
                v, offsets = hashes(np.arange(d0, d1))
                doc = np.repeat(np.arange(d0, d1, dtype=np.uint64), np.diff(offsets))
                if home is not None:
                    slot = table[v >> np.uint32(15)]
                    common = (slot >= 0) & (frequent[np.maximum(slot, 0)] == v)
                    self._set_bits(d0, (doc[common] - np.uint64(d0)).astype(np.intp),
                                   slot[common])
                    doc, v = doc[~common], v[~common]
                part = _unique_keys((doc << np.uint64(32)) | v.astype(np.uint64))
                if filled + len(part) > len(rare):  # a sample that understated its group
                    grown = np.empty(max(2 * len(rare), filled + len(part)), dtype=np.uint64)
                    grown[:filled] = rare[:filled]
                    rare = grown
                rare[filled : filled + len(part)] = part
                filled += len(part)
            if home is not None:
                table[home] = -1
        rare = rare[:filled]
        rare_offsets = np.searchsorted(rare, np.arange(n + 1, dtype=np.uint64) << np.uint64(32))
        self.rare = (rare, rare_offsets.astype(np.int64))
        self.sizes = np.bitwise_count(self.bits).sum(axis=1, dtype=np.int64) + np.diff(
            self.rare[1])

    def _rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ids that are among ``self.ids``: one lookup where the ids are dense."""
        if self._row_of is not None:
            return self._row_of[ids]
        return self.row[np.searchsorted(self.ids, ids)]

    def _set_bits(self, d0: int, doc: np.ndarray, slot: np.ndarray, texts: int = 128) -> None:
        """Set bit ``slot`` of text ``d0 + doc`` for each (ascending) ``doc``: through a
        boolean block of ``texts`` texts at a time (an assignment, so a shingle repeated
        inside a text is harmless; the block stays cache-sized), then packed."""
        if len(doc) == 0:
            return
        width = self.bits.shape[1] * 64
        cuts = np.searchsorted(doc, np.arange(0, int(doc[-1]) + texts + 1, texts))
        for b in range(len(cuts) - 1):
            if cuts[b + 1] == cuts[b]:
                continue
            block = np.zeros((texts, width), dtype=bool)
            block[doc[cuts[b] : cuts[b + 1]] - b * texts, slot[cuts[b] : cuts[b + 1]]] = True
            rows = min(texts, len(self.bits) - d0 - b * texts)
            packed = np.packbits(block[:rows], axis=1, bitorder="little").view(np.uint64)
            self.bits[d0 + b * texts : d0 + b * texts + rows] = packed

    def __call__(self, pairs: np.ndarray, chunk: int | None = None) -> np.ndarray:
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        # scored in row order, results put back in the caller's: rows of a component lie
        # together, so each pair's sets are read near the last pair's; the callers' order
        # (most similar first) jumps across all rows, a cache miss per read on a large corpus
        rows = self._rows(pairs)
        by = np.argsort(rows[:, 0])
        pairs = rows[by]
        inter = _intersections(*self.rare, pairs)
        # bitmap rows are copied about 2 MB at a time, within malloc's reuse: a larger copy
        # is fresh memory from the kernel on every call, a cost that grows with the corpus
        chunk = chunk or max(1, (1 << 21) // (8 * self.bits.shape[1]))
        for s in range(0, len(pairs), chunk):
            p = pairs[s : s + chunk]
            both = np.take(self.bits, p[:, 0], axis=0) & np.take(self.bits, p[:, 1], axis=0)
            inter[s : s + chunk] += np.bitwise_count(both).sum(axis=1, dtype=np.int64)
        # bits mean different shingles in different groups: such pairs are counted anew
        for i in np.flatnonzero(self.group[pairs[:, 0]] != self.group[pairs[:, 1]]).tolist():
            a, b = pairs[i].tolist()
            inter[i] = len(np.intersect1d(self._set(a), self._set(b), assume_unique=True))
        out = np.empty(len(pairs), dtype=np.float64)
        out[by] = _jaccard(inter, self.sizes[pairs[:, 0]] + self.sizes[pairs[:, 1]])
        return out

    def _set(self, row: int) -> np.ndarray:
        """The shingle values of one row: its rare keys' values and its bits' shingles."""
        rare, offsets = self.rare
        own = (rare[offsets[row] : offsets[row + 1]] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        bits = np.flatnonzero(np.unpackbits(self.bits[row].view(np.uint8), bitorder="little"))
        if len(bits) == 0:
            return own
        return np.concatenate([own, self.frequent[int(self.group[row])][bits]])


def _fold32(values: np.ndarray) -> np.ndarray:
    """Shingle values as the 32-bit values sets are compared on (as :func:`shingle_sets`)."""
    if values.dtype == np.uint64:
        return (values >> np.uint64(32)).astype(np.uint32)
    return values


def _frequent_values(values: np.ndarray, k: int) -> np.ndarray:
    """The (at most) ``k`` values that occur most often, at least twice, most frequent first
    (ties by value, so the choice is deterministic)."""
    if k == 0 or len(values) == 0:
        return values[:0]
    v = np.sort(values)
    starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])
    counts = np.diff(np.r_[starts, len(v)])
    top = np.lexsort((v[starts], -counts))[:k]
    return v[starts[top[counts[top] >= 2]]]
