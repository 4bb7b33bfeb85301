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

from typing import Annotated  # the dedup block of this shared file keeps its own import


def _parse_threshold(value: str | None) -> object | None:
    """``0.8`` for every stage, or ``minhash=0.5,semantic=0.85`` per stage."""
    if value is None:
        return None
    try:
        if "=" not in value:
            return float(value)
        out = {}
        for part in value.split(","):
            name, _, num = part.partition("=")
            out[name.strip()] = float(num)
        return out
    except ValueError:
        fail(f"--threshold must be a number or method=number pairs, got {value!r}")


def _write_rows(path: Path, rows: Iterator[dict]) -> int:
    from ctxkit.records import write_jsonl, write_parquet

    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        def tables(batch_size: int = 8192) -> Iterator[dict]:
            batch: list[dict] = []
            for row in rows:
                batch.append(row)
                if len(batch) == batch_size:
                    yield _columns(batch)
                    batch = []
            if batch:
                yield _columns(batch)

        return write_parquet(path, tables())
    if suffix not in (".jsonl", ".ndjson", ".json"):
        fail(f"output must be .jsonl or .parquet, got {path.name}")
    return write_jsonl(path, rows)


def _columns(rows: list[dict]) -> dict[str, list]:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return {k: [r.get(k) for r in rows] for k in keys}


@app.command("dedup")
def dedup_cmd(
    input_path: Annotated[Path, typer.Argument(
        metavar="IN", help="Records: .jsonl (streamed), .json or .parquet.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Kept records (.jsonl or .parquet).")],
    method: str = typer.Option("exact,minhash", "--method", "-m",
                               help="Stages in order: exact, minhash, semantic (comma-separated)."),
    threshold: str | None = typer.Option(
        None, "--threshold", "-t",
        help="Similarity for duplicates: one number for every stage, or minhash=0.5,semantic=0.9 "
             "(defaults: MinHash Jaccard 0.5, semantic cosine 0.9)."),
    field: str | None = typer.Option(None, "--field", help="Text field (default: text)."),
    template: str | None = typer.Option(None, "--template", help="alpaca or messages."),
    id_field: str | None = typer.Option(None, "--id-field", help="Field holding record ids."),
    report_path: Annotated[Path | None, typer.Option(
        "--report", help="JSON report of every removal.")] = None,
    keep: str = typer.Option("first", "--keep", help="Representative kept: first, last, longest."),
    num_perm: int = typer.Option(128, "--num-perm", help="MinHash permutations."),
    ngram: int = typer.Option(5, "--ngram", help="MinHash shingle size."),
    unit: str = typer.Option("char", "--unit", help="MinHash shingles of char or word n-grams."),
    punctuation: bool = typer.Option(False, "--ignore-punctuation", help="Strip punctuation first."),
    seed: int = typer.Option(1, "--seed", help="Seed for MinHash permutations and k-means."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip bad records (listed in the report)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Remove duplicate records (exact, MinHash near-duplicates, semantic paraphrases).

    Every removed record gets a report entry: its id, the id of the kept record it
    duplicates, the method and the similarity.
    """
    from ctxkit.dedup import dedup
    from ctxkit.dedup.exact import ExactDeduper
    from ctxkit.dedup.normalize import Normalization
    from ctxkit.dedup.pipeline import _methods
    from ctxkit.records import write_json

    try:
        stages = _methods(method)
    except ValueError as exc:
        fail(str(exc))
    thresholds = _parse_threshold(threshold)
    if output.suffix.lower() not in (".jsonl", ".ndjson", ".json", ".parquet", ".pq"):
        fail(f"output must be .jsonl or .parquet, got {output.name}")
    norm = Normalization(punctuation=punctuation)
    read_report = ReadReport()

    def records() -> Iterator[Record]:
        return iter_input(input_path, field=field, template=template, id_field=id_field,
                          skip_bad=skip_bad, report=read_report)

    removed_rows: list[dict] = []
    info: dict = {}
    if stages == ["exact"]:
        # One streaming pass: memory holds 16 bytes per distinct text, output is written as read.
        deduper = ExactDeduper(norm)
        first_ids: list[str] = []

        def kept_rows() -> Iterator[dict]:
            with progress_bar("dedup (exact)", enabled=progress) as advance:
                for rec in records():
                    first = deduper.add(rec.text)
                    first_ids.append(rec.id)
                    advance()
                    if first is None:
                        yield rec.raw
                    else:
                        removed_rows.append({"id": rec.id, "line": rec.line, "duplicate_of": first_ids[first],
                                             "method": "exact", "similarity": 1.0})

        n_kept = _write_rows(output, kept_rows())
        n_in = read_report.read
    else:
        texts, ids, lines = [], [], []
        with progress_bar("reading", enabled=progress) as advance:
            for rec in records():
                texts.append(rec.text)
                ids.append(rec.id)
                lines.append(rec.line)
                advance()
        options: dict = {"normalization": norm} if {"exact", "minhash"} & set(stages) else {}
        if "minhash" in stages:
            options.update(num_perm=num_perm, ngram=ngram, unit=unit)
        if {"minhash", "semantic"} & set(stages):
            options["seed"] = seed
        try:
            with progress_bar(f"dedup ({', '.join(stages)})", total=len(stages), enabled=progress) as advance:
                result = dedup(texts, stages, thresholds, keep=keep, **options)
                advance(len(stages))
        except (ValueError, TypeError) as exc:
            fail(str(exc))
        info = result.info
        # ledger() lists removed items in index order, as result.removed does.
        for row, i in zip(result.ledger(ids), result.removed):
            removed_rows.append({**row, "line": lines[i]})
        keep_mask = result.duplicate_of < 0

        def kept_rows() -> Iterator[dict]:
            # Second pass over the input: records come back in the same order.
            with progress_bar("writing", total=len(texts), enabled=progress) as advance:
                for i, rec in enumerate(iter_input(input_path, field=field, template=template,
                                                   id_field=id_field, skip_bad=skip_bad)):
                    advance()
                    if keep_mask[i]:
                        yield rec.raw

        n_kept = _write_rows(output, kept_rows())
        n_in = len(texts)
    if report_path is not None:
        write_json(report_path, {
            "input": str(input_path), "output": str(output), "method": stages,
            "threshold": thresholds, "keep": keep, "records": n_in, "kept": n_kept,
            "removed": len(removed_rows), "skipped": read_report.to_dict()["skipped"],
            "stages": info, "duplicates": removed_rows,
        })
    print_skipped(read_report)
    print_table("dedup", [("records", n_in), ("kept", n_kept), ("removed", len(removed_rows)),
                          ("skipped (bad)", read_report.n_skipped)])


# ===== embedding commands =====


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
