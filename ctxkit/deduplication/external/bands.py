"""The second pass: the MinHash stage's records read back, signed, and their LSH band keys
written as one run per band.

Records come back from the text blob in order (the exact stage's survivors), stripped of
boilerplate when asked, and are signed as the in-memory path signs them. Signatures go to
one file (``num_perm`` x 4 bytes per record, read back by row for verification); each band's
``(key, record)`` pairs go to that band's run (12 bytes per record and band), skipping texts
without shingles, as :func:`~ctxkit.deduplication.lsh.candidate_pairs` does.

Example:
    >>> import tempfile
    >>> from ctxkit.deduplication.external.spill import TextBlob
    >>> d = Path(tempfile.mkdtemp())
    >>> blob = TextBlob(d / "t"); blob.extend(["the cat sat", "", "the cat sat!"]); blob.close()
    >>> s = sign_records(blob, np.arange(3), MinHashOptions(num_perm=16), d)
    >>> s.empty.tolist(), [b.rows for b in s.bands][:2]
    ([False, True, False], [2, 2])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ctxkit.deduplication.boilerplate import strip_lines
from ctxkit.deduplication.external.spill import Appender, TextBlob
from ctxkit.deduplication.lsh import band_keys
from ctxkit.deduplication.options import MinHashOptions
from ctxkit.deduplication.signatures import empty_rows, signatures
from ctxkit.errors import InputError

__all__ = ["KEY", "Signed", "record_texts", "sign_records", "strip_text"]

KEY = np.dtype([("k", "<u8"), ("i", "<u4")])  # a band key and the record's stage index
BATCH = 4096


@dataclass
class Signed:
    """What the second pass wrote: signatures, band runs, and per record of the stage
    whether it has no shingles, its (stripped) length, and what stripping did."""

    sig: Appender
    bands: list[Appender]
    empty: np.ndarray
    lengths: np.ndarray
    stripped: np.ndarray
    whole: np.ndarray


def record_texts(texts: TextBlob, alive: np.ndarray, common: frozenset[str] | None,
                 batch: int = BATCH) -> Iterator[tuple[int, list[str], np.ndarray, np.ndarray]]:
    """``(first stage index, texts, stripped, whole)`` for consecutive batches of the records
    ``alive`` (sorted blob indices), with ``common`` lines left out when given."""
    for s in range(0, len(alive), batch):
        idx = alive[s : s + batch]
        block = texts.read_range(int(idx[0]), int(idx[-1]) + 1)
        got = [block[i] for i in (idx - idx[0]).tolist()]
        stripped = np.zeros(len(got), dtype=bool)
        whole = np.zeros(len(got), dtype=bool)
        if common:
            for k, t in enumerate(got):
                got[k], stripped[k], whole[k] = strip_text(t, common)
        yield s, got, stripped, whole


def strip_text(text: str, common: frozenset[str]) -> tuple[str, bool, bool]:
    """:func:`~ctxkit.deduplication.boilerplate.strip_lines` of one whole text."""
    return strip_lines(text, [line.strip() for line in text.split("\n")], common)


def sign_records(texts: TextBlob, alive: np.ndarray, opts: MinHashOptions, folder: Path,
                 common: frozenset[str] | None = None,
                 advance: Callable[[int], None] | None = None) -> Signed:
    """Sign the records ``alive`` of ``texts`` and write their band runs under ``folder``."""
    bands, rows = opts.banding()
    m = len(alive)
    if m >= 1 << 32:  # band runs and candidate codes hold 32-bit record numbers
        raise InputError(f"MinHash dedup handles fewer than 2**32 records per run, got {m:,}")
    out = Signed(Appender(folder / "sig", np.uint32),
                 [Appender(folder / f"band{k}", KEY) for k in range(bands)],
                 np.zeros(m, dtype=bool), np.zeros(m, dtype=np.int64),
                 np.zeros(m, dtype=bool), np.zeros(m, dtype=bool))
    for s, got, stripped, whole in record_texts(texts, alive, common):
        e = s + len(got)
        sig = signatures(got, **opts.signing())
        out.sig.append(sig.ravel())
        out.empty[s:e] = empty_rows(sig)
        out.lengths[s:e] = [len(t) for t in got]
        out.stripped[s:e], out.whole[s:e] = stripped, whole
        live = np.flatnonzero(~out.empty[s:e])
        keys = band_keys(sig[live], bands, rows)
        for k, run in enumerate(out.bands):
            part = np.empty(len(live), dtype=KEY)
            part["k"], part["i"] = keys[:, k], live + s
            run.append(part)
        if advance is not None:
            advance(len(got))
    out.sig.close()
    for run in out.bands:
        run.close()
    return out
