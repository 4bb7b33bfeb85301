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
    field: str | None,
    template: str | None,
    id_field: str | None = None,
    skip_bad: bool = False,
    report: ReadReport | None = None,
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


# ===== compression commands (compress, chat, density) =====


# ===== evaluation commands =====


@app.command("eval")
def eval_cmd(
    input_path: Path = typer.Argument(..., metavar="IN", help="JSONL, JSON or Parquet records"),
    output_dir: Path = typer.Option(Path("report"), "-o", "--out", help="report directory"),
    field: str | None = typer.Option(None, "--field", help="text field (default: text)"),
    template: str | None = typer.Option(None, "--template", help="alpaca | messages"),
    capacity: int = typer.Option(2048, "--capacity", min=1, help="context window in tokens"),
    tokenizer: str = typer.Option("cl100k_base", "--tokenizer"),
    embedding: bool = typer.Option(
        False, "--embedding", help="also time packed vs padded embedding"
    ),
    embed_sample: int = typer.Option(256, "--embed-sample", min=1),
    no_density: bool = typer.Option(False, "--no-density", help="skip the density section"),
    no_dedup: bool = typer.Option(False, "--no-dedup", help="skip the redundancy section"),
    seed: int = typer.Option(0, "--seed"),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="skip and list bad records"),
) -> None:
    """How much of the context budget is wasted, and what each stage would save."""
    from ctxkit.evaluate import evaluate
    from ctxkit.records import write_json

    report_read = ReadReport()
    texts = [r.text for r in iter_input(input_path, field=field, template=template,
                                        skip_bad=skip_bad, report=report_read)]
    print_skipped(report_read)
    if not texts:
        fail(f"{input_path}: no usable records")
    sections = ["lengths", "utilization"]
    sections += [] if no_dedup else ["redundancy"]
    sections += [] if no_density else ["density"]
    sections += ["embedding"] if embedding else []
    with progress_bar("evaluating", total=len(sections) + 1) as advance:
        def step(message: str) -> None:
            console.print(f"[dim]{message}[/dim]") if not console.is_terminal else None
            advance(1)

        try:
            report = evaluate(texts, capacity=capacity, tokenizer=tokenizer, sections=sections,
                              embed_sample=embed_sample, seed=seed, name=input_path.name,
                              progress=step)
        except ValueError as exc:
            fail(str(exc))
    report.dataset["skipped_records"] = report_read.to_dict()["skipped"]
    plots = report.plot(output_dir)
    write_json(output_dir / "report.json", report.to_dict())
    from ctxkit.records import atomic_write

    with atomic_write(output_dir / "report.md") as fh:
        fh.write(report.to_markdown([str(p) for p in plots]))
    util = report.sections.get("utilization", {})
    rows: list[tuple[str, object]] = [("texts", len(texts))]
    if util:
        rows.append(("lower bound (windows)", util["lower_bound"]))
        for name, figures in util["methods"].items():
            rows.append((f"{name}: windows / utilization",
                         f"{figures['windows']:,} / {figures['utilization']:.1%}"))
    print_table(f"ctxkit eval: {input_path.name} @ {capacity} tokens", rows)
    out.print(f"wrote {output_dir / 'report.md'}, {output_dir / 'report.json'} "
              f"and {len(plots)} plot(s)")


def main(argv: list[str] | None = None) -> int:
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
