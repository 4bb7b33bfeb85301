"""Verification out of core: candidates' estimates from signature rows read back in
windows, and exact Jaccard from texts read back by offset.

Only what a chunk of candidates needs is in memory: the signature rows of its records (each
window of the signature file is mapped, read and unmapped, so the rows of other chunks never
stay resident) and, for exact scores, the texts of one chunk of pairs. The decisions are the
in-memory ones: the same estimates
(:func:`~ctxkit.deduplication.verify.estimate_jaccard`) against the same floor, the same
exact Jaccard (:func:`~ctxkit.deduplication.jaccard.exact_pair_jaccard`).

Example:
    >>> import tempfile
    >>> from ctxkit.deduplication.external.spill import Appender
    >>> d = Path(tempfile.mkdtemp())
    >>> sig = Appender(d / "sig", np.uint32); sig.append(np.array([1, 2, 1, 3, 1, 2])); sig.close()
    >>> SignatureRows(sig.path, 3, 2, window=2).take(np.array([0, 2])).tolist()
    [[1, 2], [1, 2]]
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.deduplication.external.bands import strip_text
from ctxkit.deduplication.external.spill import TextBlob
from ctxkit.deduplication.jaccard import exact_pair_jaccard
from ctxkit.deduplication.verify import _estimates_at_least

__all__ = ["ExactScorer", "SignatureRows", "estimated_pairs"]


class SignatureRows:
    """Rows of an ``m x width`` uint32 signature file, fetched by index a window at a time."""

    def __init__(self, path: Path, m: int, width: int, window: int = 1 << 16):
        self.path, self.m, self.width, self.window = Path(path), m, width, window

    def take(self, ids: np.ndarray) -> np.ndarray:
        """The rows ``ids`` (sorted, distinct)."""
        out = np.empty((len(ids), self.width), dtype=np.uint32)
        cuts = np.flatnonzero(np.diff(ids // self.window)) + 1
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(ids)]):
            if a == b:
                continue
            w0 = int(ids[a]) // self.window * self.window
            w1 = min(self.m, w0 + self.window)
            view = np.memmap(self.path, dtype=np.uint32, mode="r",
                             offset=w0 * self.width * 4, shape=(w1 - w0, self.width))
            out[a:b] = view[ids[a:b] - w0]
            del view  # unmapped: the window's pages leave this process's memory
        return out


def estimated_pairs(ranges: Iterable[np.ndarray], rows: SignatureRows, floor: float,
                    chunk: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The candidate pairs (codes ``lo << 32 | hi``, ascending) whose estimated Jaccard is
    above ``floor``, with their estimates, and the number of candidates seen."""
    pairs, scores, seen = [], [], 0
    low = np.int64(0xFFFFFFFF)
    for codes in ranges:
        seen += len(codes)
        for s in range(0, len(codes), chunk):
            c = codes[s : s + chunk]
            both = np.stack([c >> 32, c & low], axis=1)
            ids, local = np.unique(both, return_inverse=True)
            at, est = _estimates_at_least(rows.take(ids), local.reshape(-1, 2), floor,
                                          strict=True)
            pairs.append(both[at])
            scores.append(est)
    if not pairs:
        return np.empty((0, 2), dtype=np.int64), np.empty(0), seen
    return np.concatenate(pairs), np.concatenate(scores), seen


class ExactScorer:
    """Exact Jaccard of pairs of stage records, their texts read back (and stripped of the
    ``common`` lines) ``chunk`` pairs at a time; a callable as
    :func:`~ctxkit.deduplication.linking.link_pairs` takes."""

    def __init__(self, texts: TextBlob, alive: np.ndarray, shingling: dict[str, Any],
                 common: frozenset[str] | None = None, chunk: int = 1 << 14):
        self.texts, self.alive, self.shingling = texts, alive, shingling
        self.common, self.chunk = common, chunk

    def _texts(self, ids: np.ndarray) -> dict[int, str]:
        got = self.texts.read(self.alive[ids])
        if self.common:
            got = [strip_text(t, self.common)[0] for t in got]
        return dict(zip(ids.tolist(), got))

    def __call__(self, pairs: np.ndarray) -> np.ndarray:
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        out = np.empty(len(pairs), dtype=np.float64)
        for s in range(0, len(pairs), self.chunk):
            p = pairs[s : s + self.chunk]
            out[s : s + self.chunk] = exact_pair_jaccard(self._texts(np.unique(p)), p,
                                                         **self.shingling)
        return out

