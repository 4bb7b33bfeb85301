"""A JSON lines file read by many Ray tasks at once, in chunks of whole lines.

Ray Data reads one file with one task, so a single large ``.jsonl`` keeps one core busy
while the others wait for its blocks. Here the driver finds line boundaries about every
:data:`~ctxkit.distributed.rows.CHUNK_BYTES` bytes (a seek and one ``readline`` each, no
parsing) and each task parses its byte range with Arrow's JSON reader, the reader Ray Data
uses; the blocks come back in file order.

Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.jsonl")
    >>> _ = open(path, "w").write('{"t": "a"}\\n{"t": "b"}\\n{"t": "c"}\\n')
    >>> line_ranges(path, 12)
    [(0, 22), (22, 33)]
    >>> parse_range(path, 22, 33).to_pylist()
    [{'t': 'c'}]
"""

from __future__ import annotations

import os
from typing import Any

from ctxkit.distributed.rows import CHUNK_BYTES

__all__ = ["line_ranges", "parse_range", "read_jsonl"]


def line_ranges(path: str | os.PathLike, chunk_bytes: int = CHUNK_BYTES) -> list[tuple[int, int]]:
    """Byte ranges of whole lines, each about ``chunk_bytes`` long (one line at least)."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as fh:
        while cuts[-1] + chunk_bytes < size:
            fh.seek(cuts[-1] + chunk_bytes - 1)
            fh.readline()  # to the end of the line that holds the target byte
            if fh.tell() >= size:
                break
            cuts.append(fh.tell())
    cuts.append(size)
    return [(lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:]) if hi > lo]


def parse_range(path: str | os.PathLike, lo: int, hi: int) -> Any:
    """The records of bytes ``lo:hi`` of a JSON lines file as one Arrow table."""
    import pyarrow as pa
    import pyarrow.json as pj

    with open(path, "rb") as fh:
        fh.seek(lo)
        data = fh.read(hi - lo)
    # one block for the whole range: a record never straddles two, and the column types
    # are inferred from every record of the range
    options = pj.ReadOptions(block_size=max(len(data) + 1, 1 << 20), use_threads=False)
    return pj.read_json(pa.BufferReader(data), read_options=options)


def read_jsonl(path: str | os.PathLike, chunk_bytes: int = CHUNK_BYTES) -> Any:
    """A Ray dataset over a local JSON lines file, parsed by one task per byte range."""
    from ctxkit.distributed.cluster import require_ray

    ray = require_ray()
    parse = ray.remote(parse_range)
    refs = [parse.remote(str(path), lo, hi) for lo, hi in line_ranges(path, chunk_bytes)]
    if not refs:
        return ray.data.from_items([])
    return ray.data.from_arrow_refs(refs)
