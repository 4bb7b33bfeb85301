"""Candidate pairs out of core: each band's run bucketed one partition at a time, the pairs
of every bucket (a star around the hub in a large one) written as codes, and the codes
sorted and made unique one range of first records at a time.

A bucket is a key of one band, so splitting a band's run by the key's low bits keeps every
bucket whole in one partition; the pairs of a bucket are those
:func:`~ctxkit.deduplication.lsh.candidate_pairs` makes (the same hub, drawn from the ids and
the band). Codes are ``lo << 32 | hi``; split by ``lo`` into ascending ranges, each range
sorted and deduplicated, they come out in the in-memory candidates' order.

Example:
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> run = Appender(d / "band0", KEY)
    >>> rows = np.zeros(4, dtype=KEY); rows["k"] = [1, 1, 2, 1]; rows["i"] = [0, 1, 2, 3]
    >>> run.append(rows); run.close()
    >>> codes = bucket_codes([run], 32, Budget(1 << 20), d)
    >>> [(int(c) >> 32, int(c) & 0xFFFFFFFF) for r in unique_codes(codes, 4, Budget(1 << 20))
    ...  for c in r]
    [(0, 1), (0, 3), (1, 3)]
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ctxkit.deduplication.arrays import _unique
from ctxkit.deduplication.external.bands import KEY
from ctxkit.deduplication.external.budget import Budget
from ctxkit.deduplication.external.spill import Appender, partitioned
from ctxkit.deduplication.lsh import _group_codes, _shared_buckets

__all__ = ["bucket_codes", "unique_codes"]


def bucket_codes(runs: list[Appender], max_bucket: int, budget: Budget, folder: Path,
                 first_band: int = 0) -> Appender:
    """The candidate codes of every bucket of every band's run (repeats across bands kept);
    each run is removed once read."""
    codes = Appender(folder / "codes", np.int64)
    for band, run in enumerate(runs, start=first_band):
        parts = budget.parts(run.rows, KEY.itemsize * 3)
        mask = np.uint64(parts - 1)
        for rows in partitioned(run, parts, lambda r, mask=mask: r["k"] & mask,
                                budget.rows(KEY.itemsize)):
            order, starts, sizes = _shared_buckets(np.ascontiguousarray(rows["k"]))
            if len(starts):
                ids = rows["i"].astype(np.int64)
                codes.append(_group_codes(ids[order], starts, sizes, max_bucket, band))
        run.remove()
    codes.close()
    return codes


def unique_codes(codes: Appender, m: int, budget: Budget) -> Iterator[np.ndarray]:
    """The distinct codes, ascending, one range of first records (``lo``) at a time, among
    ``m`` records; the codes' file is removed at the end."""
    parts = budget.parts(codes.rows, 8 * 3)
    try:
        for part in partitioned(codes, parts, lambda c: (c >> 32) * parts // max(m, 1),
                                budget.rows(8)):
            yield _unique(part)
    finally:
        codes.remove()
