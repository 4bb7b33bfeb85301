"""The first pass of the out-of-core dedup: records stream in once and go to disk.

Each record's text goes to a :class:`~ctxkit.deduplication.external.spill.TextBlob` (read
back by offset for signatures, verification and boilerplate), its id to a second blob and
its location (line, JSON element, Parquet row) to a run (for the report), its exact digest
(16 bytes, with its index) to a run for the exact stage, and, when boilerplate is stripped,
the hash of each of its distinct lines. Nothing per record stays in memory but offsets.

Example:
    >>> import json, tempfile
    >>> from ctxkit.jobs.common import Source
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "in.jsonl").write_text('{"text": "a b"}\\n{"text": "A  b"}\\n')
    >>> scan = scan_records(Source(d / "in.jsonl"), d, digests=True, lines=False)
    >>> hi = scan.digests.load()["hi"]
    >>> len(scan.texts), scan.texts.read([1]), bool(hi[0] == hi[1])
    (2, ['A  b'], True)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.deduplication.exact import text_digests
from ctxkit.deduplication.external.spill import Appender, TextBlob
from ctxkit.deduplication.normalize import Normalization
from ctxkit.io.records import ReadReport, Record

__all__ = ["DIGEST", "LINE", "WHERE", "Scan", "distinct_lines", "line_hashes", "scan_records",
           "where"]

DIGEST = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("i", "<i8")])  # 16-byte digest + index
WHERE = np.dtype([("line", "<i8"), ("element", "<i8"), ("row", "<i8")])  # -1: none
LINE = np.dtype([("h", "<u8"), ("rec", "<i8"), ("pos", "<i8")])  # line hash, record, order
BATCH = 4096


@dataclass
class Scan:
    """What the first pass wrote: texts, ids and locations, digests, line hashes, lengths."""

    texts: TextBlob
    ids: TextBlob
    wheres: Appender
    digests: Appender | None
    lines: Appender | None
    lengths: Appender

    @property
    def n(self) -> int:
        return len(self.texts)

    def release(self) -> None:
        self.texts.release()
        self.ids.release()


def distinct_lines(text: str) -> list[str]:
    """A record's lines, stripped, each once, in order of first sight (as
    :func:`~ctxkit.deduplication.boilerplate.strip_boilerplate` counts them)."""
    return list(dict.fromkeys(line.strip() for line in text.split("\n")))


def line_hashes(lines: Sequence[str]) -> np.ndarray:
    """A 64-bit hash of each line (BLAKE2b: the same in every process)."""
    raw = b"".join(hashlib.blake2b(line.encode("utf-8", "surrogatepass"), digest_size=8)
                   .digest() for line in lines)
    return np.frombuffer(raw, dtype="<u8")


def where(row: np.void) -> dict[str, Any]:
    """A record's location as the report gives it (``line``, then ``element``/``row``)."""
    out: dict[str, Any] = {"line": None if row["line"] < 0 else int(row["line"])}
    for key in ("element", "row"):
        if row[key] >= 0:
            out[key] = int(row[key])
    return out


def _wheres(batch: list[Record]) -> np.ndarray:
    out = np.full(len(batch), -1, dtype=WHERE)
    for k, rec in enumerate(batch):
        loc = rec.location
        out[k] = (-1 if rec.line is None else rec.line,
                  -1 if loc is None or loc.element is None else loc.element,
                  -1 if loc is None or loc.row is None else loc.row)
    return out


def scan_records(source: Any, folder: Path, *, digests: bool, lines: bool,
                 norm: Normalization | None = None, read: ReadReport | None = None,
                 advance: Any = None) -> Scan:
    """Stream ``source`` (a :class:`~ctxkit.jobs.common.Source`) once into spill files under
    ``folder``: the exact stage's digests when ``digests``, line hashes when ``lines``."""
    scan = Scan(TextBlob(folder / "texts"), TextBlob(folder / "ids"),
                Appender(folder / "wheres", WHERE),
                Appender(folder / "digests", DIGEST) if digests else None,
                Appender(folder / "lines", LINE) if lines else None,
                Appender(folder / "lengths", np.int64))
    batch: list[Record] = []
    start = 0
    for rec in source.records(read):
        batch.append(rec)
        if len(batch) == BATCH:
            _flush(scan, batch, start, norm)
            start += len(batch)
            if advance is not None:
                advance(len(batch))
            batch = []
    _flush(scan, batch, start, norm)
    if advance is not None and batch:
        advance(len(batch))
    for part in (scan.texts, scan.ids):
        part.close()
    for app in (scan.wheres, scan.digests, scan.lines, scan.lengths):
        if app is not None:
            app.close()
    return scan


def _flush(scan: Scan, batch: list[Record], start: int, norm: Normalization | None) -> None:
    if not batch:
        return
    texts = [r.text for r in batch]
    scan.texts.extend(texts)
    scan.ids.extend([r.id for r in batch])
    scan.wheres.append(_wheres(batch))
    scan.lengths.append(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)))
    index = np.arange(start, start + len(batch), dtype=np.int64)
    if scan.digests is not None:
        raw = np.frombuffer(b"".join(text_digests(texts, norm)), dtype="<u8").reshape(-1, 2)
        rows = np.empty(len(batch), dtype=DIGEST)
        rows["hi"], rows["lo"], rows["i"] = raw[:, 0], raw[:, 1], index
        scan.digests.append(rows)
    if scan.lines is not None:
        per = [distinct_lines(t) for t in texts]
        counts = np.fromiter(map(len, per), dtype=np.int64, count=len(per))
        rows = np.empty(int(counts.sum()), dtype=LINE)
        rows["h"] = line_hashes([line for lines in per for line in lines])
        rows["rec"] = np.repeat(index, counts)
        rows["pos"] = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        scan.lines.append(rows)
