"""The ``ctxkit`` command. I/O, progress and printing live here; algorithms live in modules.

Each stage has a subcommand (``ctxkit --help`` lists them). Errors about the user's input
(a bad record, a budget too small, a sequence over the window) exit with status 2 and one
clear line naming the record, instead of a traceback.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from ctxkit.records import ReadReport, Record, RecordError, read_records

app = typer.Typer(
    name="ctxkit",
    help="Make every token of a context window count: dedup, compress, score, pack, embed.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)
out = Console()


class UserError(Exception):
    """An error in the user's input or options: printed as one line, exit status 2."""


def fail(message: str) -> None:
    raise UserError(message)


@contextlib.contextmanager
def progress_bar(description: str, total: int | None = None, enabled: bool = True):
    """A rich progress bar on stderr; ``advance(n)`` is a no-op when disabled or not a TTY."""
    if not enabled or not console.is_terminal:
        yield lambda n=1: None
        return
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


def iter_input(
    path: Path,
    *,
    field: Optional[str],
    template: Optional[str],
    id_field: Optional[str] = None,
    skip_bad: bool = False,
    report: Optional[ReadReport] = None,
) -> Iterator[Record]:
    """Records from ``path``; a bad record is a UserError unless ``skip_bad``."""
    if not path.exists():
        fail(f"input file not found: {path}")
    try:
        yield from read_records(
            path, field=field, template=template, id_field=id_field,
            on_error="skip" if skip_bad else "raise", report=report,
        )
    except RecordError as exc:
        fail(f"bad record at {exc} (use --skip-bad to skip and list such records)")


def print_table(title: str, rows: list[tuple[str, object]]) -> None:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    for key, value in rows:
        table.add_row(key, f"{value:,.4f}" if isinstance(value, float) else f"{value:,}"
                      if isinstance(value, int) else str(value))
    out.print(table)


def print_skipped(report: ReadReport, limit: int = 10) -> None:
    if report.n_skipped:
        console.print(f"[yellow]skipped {report.n_skipped} bad record(s):[/yellow]")
        for err in report.skipped[:limit]:
            console.print(f"  {err}")
        if report.n_skipped > limit:
            console.print(f"  ... and {report.n_skipped - limit} more (listed in the report)")


@app.callback()
def _root() -> None:
    """Make every token of a context window count: dedup, compress, score, pack, embed."""


@app.command("tokenizers")
def tokenizers_cmd() -> None:
    """List the tokenizer names --tokenizer accepts."""
    from ctxkit.tokenize import available_tokenizers

    for name in available_tokenizers():
        out.print(name)


# ===== packing commands (pack, demo) =====


# ===== dedup commands =====


# ===== embedding commands =====


from typing import Annotated  # here, not at the top: this block is all the embed command owns


def _write_npy_stream(path: Path, chunks: Iterator, dim: int) -> int:
    """Write float32 rows arriving in chunks to ``.npy`` with bounded memory.

    Rows go to a scratch file first (the header needs the final row count), then header and
    rows are copied into the atomically written target.
    """
    import shutil
    import tempfile

    import numpy as np

    from ctxkit.records import atomic_write

    n = 0
    with tempfile.TemporaryFile(dir=path.parent if path.parent.exists() else None) as raw:
        for part in chunks:
            raw.write(np.ascontiguousarray(part, dtype="<f4").tobytes())
            n += len(part)
        raw.seek(0)
        with atomic_write(path, "wb") as fh:
            header = {"descr": "<f4", "fortran_order": False, "shape": (n, dim)}
            np.lib.format.write_array_header_1_0(fh, header)
            shutil.copyfileobj(raw, fh, 1 << 22)
    return n


@app.command("embed")
def embed_cmd(
    input: Annotated[Path, typer.Argument(help="JSONL, JSON or Parquet records.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="vectors.npy or .parquet")],
    field: Annotated[str | None, typer.Option(help="Text field of each record.")] = "text",
    template: Annotated[str | None, typer.Option(help="alpaca | messages")] = None,
    ids: Annotated[bool, typer.Option(help="Also write record ids (a parquet column, or "
                                      "<output>.ids.jsonl beside a .npy).")] = False,
    id_field: Annotated[str | None, typer.Option(help="Field holding the id.")] = None,
    model: Annotated[Path | None, typer.Option(help="Local sentence-transformers directory "
                                               "(default: bundled all-MiniLM-L6-v2).")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16")] = "auto",
    batch_tokens: Annotated[int | None, typer.Option(min=1, help="Token slots per forward "
                                                     "pass.")] = None,
    chunk_size: Annotated[int, typer.Option(min=1, help="Texts read, packed and written at "
                                            "a time (bounds memory).")] = 8192,
    normalize: Annotated[bool | None, typer.Option("--normalize/--no-normalize",
                                                   help="Default: as the model does.")] = None,
    skip_bad: Annotated[bool, typer.Option(help="Skip and list bad records.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    summary_json: Annotated[Path | None, typer.Option(help="Also write the summary as "
                                                      "JSON.")] = None,
) -> None:
    """Embed every record's text with packed passes; same vectors as sentence-transformers."""
    import itertools
    import json
    import time

    from ctxkit.embed import EncodeStats, PackedEncoder
    from ctxkit.records import atomic_write, write_json, write_parquet

    suffix = output.suffix.lower()
    if suffix not in (".npy", ".parquet"):
        fail(f"output must end in .npy or .parquet, got {output.name!r}")
    if template is not None:
        field = None
    try:
        enc = PackedEncoder(model, device=device, dtype=dtype)
    except (ValueError, TypeError) as exc:
        fail(str(exc))
    report = ReadReport()
    records = iter_input(input, field=field, template=template, id_field=id_field,
                         skip_bad=skip_bad, report=report)
    total = EncodeStats()
    t0 = time.perf_counter()
    ids_path = output.with_name(output.name + ".ids.jsonl") if ids and suffix == ".npy" else None

    def chunks() -> Iterator[tuple]:
        with progress_bar("embedding", None, enabled=progress) as advance:
            while True:
                batch = list(itertools.islice(records, chunk_size))
                if not batch:
                    return
                vecs = enc.encode([r.text for r in batch], batch_tokens=batch_tokens,
                                  normalize=normalize)
                total.add(enc.last_stats)
                advance(len(batch))
                yield [r.id for r in batch], vecs

    if suffix == ".npy":
        id_fh = None
        with contextlib.ExitStack() as stack:
            if ids_path is not None:
                id_fh = stack.enter_context(atomic_write(ids_path))

            def vectors() -> Iterator:
                for chunk_ids, vecs in chunks():
                    if id_fh is not None:
                        id_fh.writelines(json.dumps(i, ensure_ascii=False) + "\n"
                                         for i in chunk_ids)
                    yield vecs

            _write_npy_stream(output, vectors(), enc.dim)
    else:
        import pyarrow as pa

        def tables() -> Iterator:
            for chunk_ids, vecs in chunks():
                flat = pa.array(vecs.reshape(-1), type=pa.float32())
                cols = {"embedding": pa.FixedSizeListArray.from_arrays(flat, enc.dim)}
                yield pa.table({"id": chunk_ids, **cols} if ids else cols)

        try:
            write_parquet(output, tables())
        except ValueError as exc:  # no records at all: write an empty, typed table
            if "nothing to write" not in str(exc):
                raise
            empty = pa.FixedSizeListArray.from_arrays(pa.array([], pa.float32()), enc.dim)
            cols = {"embedding": empty}
            write_parquet(output, pa.table({"id": pa.array([], pa.string()), **cols}
                                           if ids else cols))
    seconds = time.perf_counter() - t0
    rows = [
        ("texts", total.texts), ("tokens", total.tokens), ("rows", total.rows),
        ("utilization", total.utilization), ("texts/s", total.texts / seconds if seconds else 0.0),
        ("empty texts", total.empty), (f"truncated (> {enc.max_seq_length} tokens)",
                                       total.truncated),
        ("skipped records", report.n_skipped), ("output", str(output)),
    ]
    if ids_path is not None:
        rows.append(("ids", str(ids_path)))
    print_table("ctxkit embed", rows)
    print_skipped(report)
    if summary_json is not None:
        write_json(summary_json, {**total.to_dict(), "wall_seconds": seconds,
                                  "skipped": report.to_dict()["skipped"],
                                  "output": str(output), "dim": enc.dim,
                                  "max_seq_length": enc.max_seq_length})



# ===== compression commands (compress, chat, density) =====


# ===== evaluation commands =====


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point of the ``ctxkit`` console script; returns the exit status."""
    try:
        app(args=argv, prog_name="ctxkit")  # standalone mode: click reports usage errors
    except UserError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
