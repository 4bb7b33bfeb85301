"""Writing outputs atomically: records by file suffix, JSON reports, ``.npy`` arrays.

Every writer goes through :func:`atomic_write` (a temporary file beside the target, renamed
over it only on success), so an interrupted run leaves the previous output intact and no
scratch file behind. A job that writes several files (output and report) stages them with
:func:`staged_outputs` so that either all of them are replaced or none is.

Example:
    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "out.json")
    >>> write_records(path, [{"id": "a"}, {"id": "b"}])
    2
    >>> json.load(open(path))
    [{'id': 'a'}, {'id': 'b'}]
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ctxkit.errors import InputError

__all__ = [
    "RECORD_FORMATS",
    "StagedOutputs",
    "atomic_write",
    "record_format",
    "staged_outputs",
    "write_json",
    "write_json_rows",
    "write_jsonl",
    "write_npy",
    "write_parquet",
    "write_records",
]

# output suffix -> format written
RECORD_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet",
                  ".pq": "parquet"}


def record_format(path: str | os.PathLike) -> str:
    """The format records written to ``path`` get: ``jsonl``, ``json`` or ``parquet``.

    ``path`` may also be just a suffix (``".jsonl"``).

    Example:
        >>> record_format("kept.pq"), record_format(".ndjson")
        ('parquet', 'jsonl')
    """
    text = str(path)
    suffix = text.lower() if text.startswith(".") and "/" not in text else \
        Path(path).suffix.lower()
    fmt = RECORD_FORMATS.get(suffix)
    if suffix != text.lower() and Path(path).is_dir():
        raise InputError(f"output {path} is a directory; give a file name")
    if fmt is None:
        raise InputError(f"output must end in .jsonl, .json or .parquet, got {Path(path).name}")
    return fmt


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temp_beside(path: Path) -> str:
    """A new empty temporary file beside ``path`` with the mode ``open()`` would give it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    # mkstemp makes the file private (0600); give it the mode a plain open() would have
    os.chmod(tmp, path.stat().st_mode & 0o777 if path.is_file() else 0o666 & ~_umask())
    return tmp


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8"):
    """Open a temporary file beside ``path``; rename it over ``path`` only on success.

    Example:
        >>> import tempfile, os
        >>> target = os.path.join(tempfile.mkdtemp(), "out.txt")
        >>> with atomic_write(target) as fh:
        ...     _ = fh.write("done")
        >>> open(target).read()
        'done'
    """
    path = Path(path)
    tmp = _temp_beside(path)
    try:
        kwargs = {} if "b" in mode else {"encoding": encoding, "newline": "\n"}
        with open(tmp, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class StagedOutputs:
    """Files a job writes, renamed into place together by :meth:`commit`.

    :meth:`path` creates the temporary file at once, so a target that cannot be written fails
    before any work is done (and before any other output is replaced).
    """

    def __init__(self) -> None:
        self._staged: list[tuple[str, Path]] = []

    def path(self, target: str | os.PathLike) -> Path:
        """A temporary path to write ``target``'s content to."""
        target = Path(target)
        try:
            tmp = _temp_beside(target)
        except OSError as exc:
            raise InputError(f"cannot write {target}: {exc.strerror or exc}") from None
        self._staged.append((tmp, target))
        return Path(tmp)

    def adopt(self, tmp: str | os.PathLike, target: str | os.PathLike) -> None:
        """Also move the already written file ``tmp`` to ``target`` on commit."""
        self._staged.append((str(tmp), Path(target)))

    def commit(self) -> None:
        for tmp, target in self._staged:
            os.replace(tmp, target)
        self._staged.clear()

    def discard(self) -> None:
        for tmp, _ in self._staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._staged.clear()


@contextlib.contextmanager
def staged_outputs() -> Iterator[StagedOutputs]:
    """Stage outputs; commit them if the block succeeds, delete the temporaries otherwise
    (also on ``KeyboardInterrupt`` and ``SystemExit``, which the CLI raises on SIGTERM).

    Example:
        >>> import os, tempfile
        >>> target = os.path.join(tempfile.mkdtemp(), "a.txt")
        >>> with staged_outputs() as staged:
        ...     _ = staged.path(target).write_text("new")
        >>> open(target).read()
        'new'
    """
    staged = StagedOutputs()
    try:
        yield staged
        staged.commit()
    except BaseException:
        staged.discard()
        raise


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def write_jsonl(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> int:
    """Write rows as JSON lines atomically; returns the number written."""
    n = 0
    with atomic_write(path) as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=_jsonable))
            fh.write("\n")
            n += 1
    return n


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write one JSON document atomically (indented, UTF-8)."""
    with atomic_write(path) as fh:
        json.dump(obj, fh, ensure_ascii=False, indent=2, default=_jsonable)
        fh.write("\n")


def write_json_rows(path: str | os.PathLike, head: Mapping[str, Any], key: str,
                    rows: Iterable[Any]) -> int:
    """Write ``{**head, key: list(rows)}`` atomically, byte for byte as :func:`write_json`
    would, with ``rows`` streamed (never held); returns the number of rows.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "r.json")
        >>> write_json_rows(path, {"n": 1}, "rows", iter([{"a": 1}]))
        1
        >>> json.loads(open(path).read())
        {'n': 1, 'rows': [{'a': 1}]}
    """
    text = json.dumps({**head, key: []}, ensure_ascii=False, indent=2, default=_jsonable)
    prefix = text[: -len("[]\n}")]
    n = 0
    with atomic_write(path) as fh:
        fh.write(prefix)
        for row in rows:
            fh.write(",\n    " if n else "[\n    ")
            fh.write(json.dumps(row, ensure_ascii=False, indent=2, default=_jsonable)
                     .replace("\n", "\n    "))
            n += 1
        fh.write("\n  ]\n}\n" if n else "[]\n}\n")
    return n


def _write_json_array(path: str | os.PathLike, rows: Iterable[Any]) -> int:
    """Rows as a JSON array, one element per line, streamed."""
    n = 0
    with atomic_write(path) as fh:
        fh.write("[")
        for row in rows:
            fh.write(",\n" if n else "\n")
            fh.write(json.dumps(row, ensure_ascii=False, default=_jsonable))
            n += 1
        fh.write("\n]\n" if n else "]\n")
    return n


def write_parquet(path: str | os.PathLike, columns_or_batches: Any, schema: Any = None) -> int:
    """Write a dict of columns, a pyarrow Table, or an iterable of either, atomically.

    An iterable is written batch by batch, so output can be streamed. With no batch at all,
    ``schema`` (a ``pyarrow.Schema``) gives the empty file its columns.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    def as_table(obj: Any) -> pa.Table:
        return obj if isinstance(obj, pa.Table) else pa.table(obj)

    if isinstance(columns_or_batches, (Mapping, pa.Table)):
        columns_or_batches = [columns_or_batches]
    n = 0
    writer = None
    with atomic_write(path, "wb") as fh:
        try:
            for part in columns_or_batches:
                table = as_table(part)
                if writer is None:
                    writer = pq.ParquetWriter(fh, table.schema)
                elif table.schema != writer.schema:
                    table = table.select(writer.schema.names).cast(writer.schema) \
                        if set(table.schema.names) == set(writer.schema.names) else table
                writer.write_table(table)
                n += table.num_rows
            if writer is None:
                if schema is None:
                    raise ValueError("nothing to write")
                writer = pq.ParquetWriter(fh, schema)
                writer.write_table(schema.empty_table())
        finally:
            if writer is not None:  # closed while the file is open, also on failure
                writer.close()
    return n


def _columns(rows: list[Mapping[str, Any]], keys: list[str]) -> dict[str, list]:
    return {k: [r.get(k) for r in rows] for k in keys}


def _parquet_records(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]],
                     batch_size: int) -> int:
    import pyarrow as pa

    keys: list[str] | None = None
    written = 0

    def columns(batch: list[Mapping[str, Any]]) -> dict[str, list]:
        nonlocal keys, written
        if keys is None:  # the schema: every field of the first batch
            keys = list(dict.fromkeys(k for r in batch for k in r))
        else:
            known = set(keys)
            for i, r in enumerate(batch):
                extra = [k for k in r if k not in known]
                if extra:  # a column cannot be added once rows are written: never drop it
                    raise InputError(f"record {written + i} has field(s) {extra} that the first "
                                     f"{batch_size:,} records lack, and a Parquet file has one "
                                     "set of columns; write .jsonl instead")
        written += len(batch)
        return _columns(batch, keys)

    def tables() -> Iterator[dict[str, list]]:
        batch: list[Mapping[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) == batch_size:
                yield columns(batch)
                batch = []
        if batch:
            yield columns(batch)

    try:
        return write_parquet(path, tables(), schema=pa.schema([]))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InputError(f"cannot write these records as Parquet ({exc}); "
                         "write .jsonl instead") from None


def write_records(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]],
                  batch_size: int = 8192, fmt: str | None = None) -> int:
    """Write records in the format ``path``'s suffix names (:func:`record_format`), atomically.

    ``fmt`` (a suffix such as ``".parquet"``) overrides the suffix, for writing to a staged
    temporary file. Parquet columns are the fields of the first ``batch_size`` records; a field
    missing from a record is null. Returns the number of records written.
    """
    fmt = record_format(fmt if fmt is not None else path)
    if fmt == "jsonl":
        return write_jsonl(path, rows)
    if fmt == "json":
        return _write_json_array(path, rows)
    return _parquet_records(path, rows, batch_size)


def write_npy(path: str | os.PathLike, chunks: Iterable[Any], dim: int,
              dtype: str = "<f4") -> int:
    """Write 2-D rows arriving in chunks to a ``.npy`` file with bounded memory; returns rows.

    Rows go to a scratch file first (the header holds the final row count), then into a
    ``numpy.lib.format`` memory map of the atomically written target.

    Example:
        >>> import numpy as np, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "v.npy")
        >>> write_npy(path, [np.ones((2, 3)), np.zeros((1, 3))], dim=3)
        3
        >>> np.load(path).shape
        (3, 3)
    """
    import numpy as np

    path = Path(path)
    width = np.dtype(dtype).itemsize * dim
    n = 0
    with tempfile.TemporaryFile(dir=path.parent if path.parent.exists() else None) as raw:
        for part in chunks:
            arr = np.ascontiguousarray(part, dtype=dtype).reshape(-1, dim)
            raw.write(arr.tobytes())
            n += len(arr)
        tmp = _temp_beside(path)
        try:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(n, dim))
            raw.seek(0)
            step = max(1, (1 << 22) // max(width, 1))
            for start in range(0, n, step):
                rows = min(step, n - start)
                out[start:start + rows] = np.frombuffer(raw.read(rows * width), dtype=dtype
                                                        ).reshape(rows, dim)
            out.flush()
            del out
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    return n
