"""Spill files of the out-of-core dedup: a private temporary folder, arrays appended to
files, texts stored back to back and read back by offset, and partitioned reads.

Everything lives in one folder (:func:`spill_dir`) that is removed when the run ends, on
success, on error, on Ctrl-C and on SIGTERM (the CLI turns it into ``SystemExit``), so an
interrupted run leaves nothing behind.

Example:
    >>> import tempfile
    >>> with spill_dir(tempfile.mkdtemp()) as d:
    ...     blob = TextBlob(d / "texts")
    ...     blob.extend(["alpha", "", "gamma"])
    ...     blob.close()
    ...     blob.read([2, 0])
    ['gamma', 'alpha']
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

__all__ = ["Appender", "TextBlob", "partitioned", "spill_dir"]


@contextlib.contextmanager
def spill_dir(parent: str | os.PathLike) -> Iterator[Path]:
    """A fresh folder under ``parent`` (created if missing), removed with all it holds when
    the block ends, however it ends."""
    Path(parent).mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=".ctxkit-dedup-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Appender:
    """Arrays of one dtype appended to a file (``tofile``), then read back whole, in chunks
    or by row windows; ``rows`` counts what was written.

    Example:
        >>> import tempfile
        >>> a = Appender(Path(tempfile.mkdtemp()) / "x", np.int64)
        >>> a.append(np.arange(3)); a.append(np.arange(2)); a.close()
        >>> a.load().tolist(), a.rows
        ([0, 1, 2, 0, 1], 5)
    """

    def __init__(self, path: Path, dtype: np.dtype | type):
        self.path, self.dtype, self.rows = Path(path), np.dtype(dtype), 0
        self._fh = open(self.path, "wb")  # noqa: SIM115 - closed by close()

    def append(self, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr, dtype=self.dtype)
        arr.tofile(self._fh)
        self.rows += len(arr)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def load(self) -> np.ndarray:
        self.close()
        return np.fromfile(self.path, dtype=self.dtype)

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        """The file's arrays ``rows`` at a time, in order (bounded memory)."""
        self.close()
        with open(self.path, "rb") as fh:
            while True:
                part = np.fromfile(fh, dtype=self.dtype, count=rows)
                if len(part) == 0:
                    return
                yield part

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class TextBlob:
    """Texts stored as UTF-8 back to back in one file, read back by index (``os.pread``:
    reading a few texts touches no page of the rest, so memory stays flat).

    Offsets stay in memory, 8 bytes per text.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fh = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._ends: list[np.ndarray] = []
        self._size = 0
        self.offsets = np.zeros(1, dtype=np.int64)
        self._fd: int | None = None

    def extend(self, texts: Sequence[str]) -> None:
        raw = [t.encode("utf-8", "surrogatepass") for t in texts]
        self._fh.write(b"".join(raw))
        ends = np.cumsum(np.fromiter(map(len, raw), dtype=np.int64, count=len(raw)))
        self._ends.append(ends + self._size)
        self._size += int(ends[-1]) if len(ends) else 0

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()
            self.offsets = np.concatenate([np.zeros(1, np.int64), *self._ends])
            self._ends = []
            self._fd = os.open(self.path, os.O_RDONLY)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def read(self, index: Sequence[int] | np.ndarray) -> list[str]:
        """The texts at ``index`` (any order, repeats allowed)."""
        off = self.offsets
        return [os.pread(self._fd, int(off[i + 1] - off[i]), int(off[i])).decode(
            "utf-8", "surrogatepass") for i in np.asarray(index, dtype=np.int64).tolist()]

    def read_range(self, start: int, stop: int) -> list[str]:
        """The texts ``start..stop-1`` with one read."""
        off = self.offsets
        base = int(off[start])
        raw = os.pread(self._fd, int(off[stop]) - base, base)
        cuts = (off[start : stop + 1] - base).tolist()
        return [raw[a:b].decode("utf-8", "surrogatepass") for a, b in zip(cuts[:-1], cuts[1:])]

    def release(self) -> None:
        self.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def partitioned(
    source: Appender, parts: int, part_of: Callable[[np.ndarray], np.ndarray], chunk: int
) -> Iterator[np.ndarray]:
    """``source``'s rows split into ``parts`` groups by ``part_of(rows)`` (an integer per row
    in ``[0, parts)``), one group at a time: with one part, the file read whole; with more,
    scattered to a file per part first, so only one part is ever in memory."""
    if parts <= 1:
        yield source.load()
        return
    outs = [Appender(source.path.with_name(f"{source.path.name}.{p}"), source.dtype)
            for p in range(parts)]
    try:
        for rows in source.chunks(chunk):
            which = np.asarray(part_of(rows), dtype=np.int64)
            order = np.argsort(which, kind="stable")
            cuts = np.searchsorted(which[order], np.arange(parts + 1))
            for p in range(parts):
                if cuts[p + 1] > cuts[p]:
                    outs[p].append(rows[order[cuts[p] : cuts[p + 1]]])
        for out in outs:
            part = out.load()
            out.remove()
            yield part
    finally:
        for out in outs:
            out.remove()
