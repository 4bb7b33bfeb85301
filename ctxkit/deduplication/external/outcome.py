"""Stage outcomes chained over the whole corpus, as plain arrays, and the report entries
read back from them one chunk of removed records at a time.

:func:`~ctxkit.deduplication.result.combine_stages` builds Python lists per item (the
method names, the clusters); here the same facts are four arrays (25 bytes per record) and
the report's entries are produced in index order without being held.

Example:
    >>> exact = np.array([0, 0, 2, 3])  # 1 is an exact copy of 0
    >>> minhash = StageResult(np.array([-1, -1, 0]), np.array([-1, -1, 0]),
    ...                       np.array([np.nan, np.nan, 0.8]))
    >>> out = chain(4, exact, np.array([0, 2, 3]), minhash)
    >>> out.duplicate_of.tolist(), out.method.tolist()  # 3 goes to 0, which 1 also joins
    ([-1, 0, -1, 0], [0, 1, 0, 2])
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxkit.deduplication.external.scan import where
from ctxkit.deduplication.external.spill import TextBlob
from ctxkit.deduplication.external.stage import StageResult
from ctxkit.deduplication.result import large_cluster_warnings

__all__ = ["METHODS", "Outcome", "chain", "entries"]

METHODS = ("", "exact", "minhash")  # what ``Outcome.method`` codes mean


@dataclass
class Outcome:
    """Per record: the kept record it duplicates (-1 when kept), the one it matched, that
    similarity, and the stage that removed it (a code into :data:`METHODS`)."""

    duplicate_of: np.ndarray
    matched: np.ndarray
    similarity: np.ndarray
    method: np.ndarray

    def warnings(self) -> list[str]:
        """:func:`~ctxkit.deduplication.result.cluster_warnings` of the final clusters."""
        removed = self.duplicate_of[self.duplicate_of >= 0]
        if len(removed) == 0:
            return []
        sizes = np.bincount(removed)
        rep = int(np.argmax(sizes))  # the first largest: the smallest representative
        return large_cluster_warnings(int(sizes[rep]) + 1, rep, len(self.duplicate_of))


def chain(n: int, exact: np.ndarray | None, alive: np.ndarray,
          minhash: StageResult | None) -> Outcome:
    """The exact stage's representatives (``None`` when it did not run), then the MinHash
    stage's result over the survivors ``alive``; pointers end at records finally kept."""
    out = Outcome(np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64),
                  np.full(n, np.nan), np.zeros(n, dtype=np.int8))
    if exact is not None:
        gone = np.flatnonzero(exact != np.arange(n))
        out.duplicate_of[gone] = out.matched[gone] = exact[gone]
        out.similarity[gone] = 1.0
        out.method[gone] = METHODS.index("exact")
    if minhash is not None:
        local = np.flatnonzero(minhash.duplicate_of >= 0)
        gone = alive[local]
        out.duplicate_of[gone] = alive[minhash.duplicate_of[local]]
        out.matched[gone] = alive[minhash.matched[local]]
        out.similarity[gone] = minhash.similarity[local]
        out.method[gone] = METHODS.index("minhash")
        # one hop: an exact copy of a record MinHash removed goes to that record's keeper
        hop = np.flatnonzero(out.duplicate_of >= 0)
        target = out.duplicate_of[hop]
        onward = out.duplicate_of[target] >= 0
        out.duplicate_of[hop[onward]] = out.duplicate_of[target[onward]]
    return out


def entries(out: Outcome, ids: TextBlob, wheres: np.ndarray, matched: bool = True,
            chunk: int = 1 << 15) -> Iterator[dict[str, Any]]:
    """The report entry of every removed record, in index order, as the in-memory job
    writes them: its id, the kept id, method, matched id, similarity, then its location
    (``wheres``: :data:`~.scan.WHERE` rows); without ``matched``, as its one-pass exact dedup
    does (id, location, kept id, method, similarity)."""
    removed = np.flatnonzero(out.duplicate_of >= 0)
    for s in range(0, len(removed), chunk):
        idx = removed[s : s + chunk]
        dup, mat = out.duplicate_of[idx], out.matched[idx]
        need = np.unique(np.concatenate([idx, dup, mat]))
        id_of = dict(zip(need.tolist(), ids.read(need)))
        for i, d, m, sim, code in zip(idx.tolist(), dup.tolist(), mat.tolist(),
                                      out.similarity[idx].tolist(), out.method[idx].tolist()):
            if not matched:
                yield {"id": id_of[i], **where(wheres[i]), "duplicate_of": id_of[d],
                       "method": METHODS[code], "similarity": sim}
                continue
            yield {"id": id_of[i], "duplicate_of": id_of[d], "method": METHODS[code],
                   "matched": id_of[m], "similarity": round(float(sim), 6), **where(wheres[i])}
