"""Boilerplate lines found out of core: the lines of many records, counted from the line
hashes of the first pass, one partition of hashes at a time.

The rule is :func:`~ctxkit.deduplication.boilerplate.strip_boilerplate`'s (a line counts once
per record; boilerplate when in at least :func:`min_records` of the records; ranked by count,
then by first sight), over the records that reach the MinHash stage, so stripping each record
with the lines found here gives the in-memory texts.

Example:
    >>> rows = np.zeros(3, dtype=LINE)
    >>> rows["h"], rows["rec"], rows["pos"] = [9, 9, 4], [0, 1, 1], [0, 0, 1]
    >>> frequent_hashes(rows, need=2, empty=np.uint64(0))
    ([9], [2], [0], [0])
"""

from __future__ import annotations

import numpy as np

from ctxkit.deduplication.boilerplate import min_records
from ctxkit.deduplication.external.budget import Budget
from ctxkit.deduplication.external.scan import LINE, distinct_lines, line_hashes
from ctxkit.deduplication.external.spill import Appender, TextBlob, partitioned

__all__ = ["common_lines", "frequent_hashes"]


def frequent_hashes(rows: np.ndarray, need: int, empty: np.uint64
                    ) -> tuple[list[int], list[int], list[int], list[int]]:
    """Hashes in at least ``need`` rows (:data:`LINE`, one per record and line), except the
    empty line's: ``(hashes, counts, first record, position there)``."""
    if len(rows) == 0:
        return [], [], [], []
    order = np.lexsort((rows["pos"], rows["rec"], rows["h"]))
    h = rows["h"][order]
    first = np.flatnonzero(np.r_[True, h[1:] != h[:-1]])
    counts = np.diff(np.r_[first, len(h)])
    hit = (counts >= need) & (h[first] != empty)
    at = order[first[hit]]
    return (h[first[hit]].tolist(), counts[hit].tolist(), rows["rec"][at].tolist(),
            rows["pos"][at].tolist())


def common_lines(lines: Appender, alive: np.ndarray, n: int, share: float, texts: TextBlob,
                 budget: Budget) -> tuple[list[str], list[int]]:
    """The boilerplate lines among the records ``alive`` (sorted indices of ``n``), most
    frequent first (ties: first sight), and the records each appears in."""
    live = np.zeros(n, dtype=bool)
    live[alive] = True
    need = min_records(share, len(alive))
    empty = line_hashes([""])[0]
    parts = budget.parts(lines.rows, LINE.itemsize * 3)
    mask = np.uint64(parts - 1)
    found: list[tuple[int, int, int]] = []  # (count, record, position)
    for rows in partitioned(lines, parts, lambda r: r["h"] & mask, budget.rows(LINE.itemsize)):
        _, counts, recs, pos = frequent_hashes(rows[live[rows["rec"]]], need, empty)
        found += zip(counts, recs, pos)
    found.sort(key=lambda f: (-f[0], f[1], f[2]))
    text_of = dict(zip(sorted({r for _, r, _ in found}),
                       texts.read(sorted({r for _, r, _ in found}))))
    return ([distinct_lines(text_of[r])[p] for _, r, p in found], [c for c, _, _ in found])
