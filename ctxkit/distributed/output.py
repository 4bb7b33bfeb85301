"""Where ``ctxkit dedup|embed|pack ... --ray`` writes: the file the user named, or part files.

- ``-o out.jsonl`` / ``-o out.parquet`` (a local path): the workers write part files into a
  temporary directory beside it, then the driver joins them into ``out.jsonl`` (parquet row
  group by row group, JSON lines byte for byte, so memory stays bounded), renames the joined
  file into place and removes the directory. A failed run leaves the previous ``out.*`` as it
  was.
- an existing empty directory whose name ends in ``.jsonl`` or ``.parquet``, or a URI
  (``s3://bucket/out.parquet``): the part files themselves, one per block, named by Ray; a
  cloud output is never funnelled through the driver.
- ``.npy`` (embeddings): written by the driver, atomically, in input order.

:func:`check_output` checks all of it (suffix, writable parent, not an existing directory where
a file is meant, not the input, the report apart) before Ray starts, so a bad ``-o`` costs no
cluster time. Part files come in no particular row order: the windows carry ``window`` and
the vectors ``row`` to restore it.

Example:
    >>> import tempfile, os
    >>> where = os.path.join(tempfile.mkdtemp(), "windows.parquet")
    >>> target = check_output(where, (".jsonl", ".parquet"))
    >>> target.kind, target.parts
    ('parquet', False)
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxkit.errors import InputError

__all__ = ["RayOutput", "check_output", "join_parts", "uri", "write_dataset"]

_KINDS = {".jsonl": "json", ".parquet": "parquet", ".npy": "npy"}
_COPY_CHUNK = 1 << 20  # bytes per read when a JSON lines part cannot be sent by the kernel


def uri(path: str | os.PathLike) -> str:
    """``path`` as a string; restores the ``//`` of a URI that ``pathlib.Path`` collapsed.

    Example:
        >>> uri(Path("s3://bucket/out.parquet"))
        's3://bucket/out.parquet'
    """
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)", r"\1://", str(path))


@dataclass(frozen=True)
class RayOutput:
    """A checked ``-o``: ``target`` (a local path or a URI), its ``kind`` (``json``,
    ``parquet`` or ``npy``) and whether it receives part files (``parts``) or one file."""

    target: str
    kind: str
    parts: bool

    @property
    def path(self) -> Path:
        return Path(self.target)


def _choices(suffixes: tuple[str, ...]) -> str:
    return " or ".join(", ".join(suffixes).rsplit(", ", 1))


def check_output(output: str | os.PathLike, suffixes: tuple[str, ...], *,
                 input_path: str | os.PathLike | None = None,
                 report: str | os.PathLike | None = None,
                 ids_file: bool = False) -> RayOutput:
    """The :class:`RayOutput` of ``output`` for a command that writes ``suffixes``; raises
    :class:`~ctxkit.errors.InputError` naming ``-o`` (or ``--report``) when it cannot be
    written as asked. ``ids_file``: a ``.npy`` output also writes ``<output>.ids.jsonl``
    beside it, checked like the output (never on the input).

    Example:
        >>> check_output("out.txt", (".jsonl", ".parquet"))
        Traceback (most recent call last):
        ...
        ctxkit.errors.InputError: -o must end in .jsonl or .parquet, got out.txt
    """
    from ctxkit.jobs.common import Target

    text = uri(output)
    path = Path(text)
    suffix = path.suffix.lower()
    files = tuple(s for s in suffixes if _KINDS[s] != "npy")  # what part files can be
    if "://" in text:
        if suffix not in files:
            raise InputError(f"-o {text} is a URI: it must end in {_choices(files)} (part "
                             "files)")
        if report is not None:
            Target(Path(report)).check()
        return RayOutput(text, _KINDS[suffix], parts=True)
    parts = path.is_dir()
    if parts:
        if suffix not in files:
            raise InputError(
                f"-o {path} is a directory; name a file ending in {_choices(suffixes)}, or a "
                f"directory ending in {_choices(files)} for part files")
        if any(path.iterdir()):
            raise InputError(f"-o {path} is a directory that is not empty; Ray's part files "
                             "would mix with what is there")
    elif suffix not in suffixes:
        raise InputError(f"-o must end in {_choices(suffixes)}, got {path.name or text}")
    source = Path(uri(input_path)) if input_path is not None else None
    inputs = (source,) if source is not None and source.is_file() else ()
    side = (path.with_name(path.name + ".ids.jsonl"),) \
        if ids_file and not parts and _KINDS[suffix] == "npy" else ()
    Target(path, None if report is None else Path(report)).check(inputs, directory=parts,
                                                                 files=side)
    return RayOutput(text, _KINDS[suffix], parts=parts)


def write_dataset(ds: Any, output: RayOutput, on_stage: Any = None) -> str:
    """Write the Ray dataset ``ds`` to ``output``; returns what the summary shows.
    ``on_stage(name)``, a timer's hook, is entered around ``"write parts"`` (the workers)
    and ``"join parts"`` (the driver's streamed copy)."""
    stage = on_stage or (lambda name: contextlib.nullcontext())
    if output.parts:
        with stage("write parts"):
            _write_parts(ds, output.target, output.kind)
        return f"{output.target}/ (part files)"
    path = output.path
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".parts", dir=path.parent)
    try:
        with stage("write parts"):
            _write_parts(ds, parts, output.kind)
        with stage("join parts"):
            join_parts(parts, path, output.kind, schema=_schema(ds))
    finally:
        shutil.rmtree(parts, ignore_errors=True)
    return str(path)


def _write_parts(ds: Any, target: str, kind: str) -> None:
    if kind == "parquet":
        ds.write_parquet(target)
    else:
        ds.write_json(target)


def _schema(ds: Any) -> Any:
    """The dataset's Arrow schema, for an output with no rows (None when Ray has none)."""
    with contextlib.suppress(Exception):
        schema = ds.schema()
        return getattr(schema, "base_schema", None)
    return None


def join_parts(directory: str | os.PathLike, output: str | os.PathLike, kind: str, *,
               schema: Any = None) -> int:
    """Join the part files in ``directory`` (in name order) into the file ``output``,
    atomically; returns the number of part files. ``schema`` (Arrow) types a parquet output
    when there are no parts.

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> for name, rows in (("b.json", '{"x": 2}\\n'), ("a.json", '{"x": 1}')):
        ...     _ = open(os.path.join(d, name), "w").write(rows)
        >>> join_parts(d, os.path.join(d, "out.jsonl"), "json")
        2
        >>> open(os.path.join(d, "out.jsonl")).read()
        '{"x": 1}\\n{"x": 2}\\n'
    """
    from ctxkit.io.outputs import atomic_write

    ext = ".parquet" if kind == "parquet" else ".json"
    parts = sorted(p for p in Path(directory).iterdir() if p.suffix == ext)
    with atomic_write(output, "wb", encoding=None) as fh:
        if kind == "parquet":
            _join_parquet(parts, fh, schema)
        else:
            for part in parts:
                _append_lines(part, fh)
    return len(parts)


def _append_lines(part: Path, fh: Any) -> None:
    """Copy a JSON lines part into ``fh``, ending it with a newline when it lacks one. The
    kernel copies the bytes (``sendfile``) where it can: the driver never reads them."""
    size = part.stat().st_size
    with open(part, "rb") as src:
        if size:
            src.seek(size - 1)
            last = src.read(1)
            src.seek(0)
        else:
            last = b""
        fh.flush()
        sent = 0
        with contextlib.suppress(OSError, AttributeError):
            while sent < size:
                done = os.sendfile(fh.fileno(), src.fileno(), sent, size - sent)
                if done == 0:
                    break
                sent += done
        if sent:  # sendfile wrote past the file object's idea of its position
            fh.seek(0, os.SEEK_END)
        src.seek(sent)
        while chunk := src.read(_COPY_CHUNK):
            fh.write(chunk)
    if last not in (b"", b"\n"):
        fh.write(b"\n")


def _join_parquet(parts: list[Path], fh: Any, schema: Any) -> None:
    """Row groups of every part into one parquet stream; parts whose schema differs only in
    types Arrow can cast (a block of nulls) are cast to the first part's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = [pq.ParquetFile(p) for p in parts]
    if files:
        schema = files[0].schema_arrow
    elif schema is None:
        schema = pa.schema([])
    with pq.ParquetWriter(fh, schema) as writer:
        for f in files:
            for i in range(f.num_row_groups):
                table = f.read_row_group(i)
                writer.write_table(table if table.schema.equals(schema) else
                                   table.cast(schema))
