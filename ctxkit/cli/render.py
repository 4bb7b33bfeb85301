"""How the ``ctxkit`` command shows a job: rich tables and progress bars on the terminal."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from ctxkit.io.records import ReadReport
from ctxkit.jobs import JobReport

__all__ = ["console", "out", "print_table", "progress_bar", "render"]

# soft_wrap: a line is never cut at the terminal width, nor at 80 columns when not a terminal
console = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)


def progress_bar(enabled: bool = True):
    """A :class:`ctxkit.jobs.Progress` drawing a rich bar on stderr when it is a terminal."""

    @contextlib.contextmanager
    def bar(description: str, total: int | None = None) -> Iterator[Any]:
        if not enabled or not console.is_terminal:
            yield lambda n=1: None
            return
        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TimeRemainingColumn()]
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task(description, total=total)
            yield lambda n=1: progress.advance(task, n)

    return bar


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:,.4f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_table(title: str, rows: list[tuple[str, object]]) -> None:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    for key, value in rows:
        table.add_row(escape(str(key)), escape(_cell(value)))
    out.print(table)


def print_skipped(report: ReadReport, limit: int = 10) -> None:
    if report.n_skipped:
        console.print(f"[yellow]skipped {report.n_skipped} bad record(s):[/yellow]")
        for err in report.skipped[:limit]:
            console.print(f"  {escape(str(err))}", highlight=False)
        if report.n_skipped > limit:
            console.print(f"  ... and {report.n_skipped - limit} more (listed in the report)")


def render(report: JobReport) -> None:
    """Print a job's report: summary table, breakdowns, record ids, skipped records, notes."""
    print_table(report.title or report.command, report.summary())
    for title, rows in report.tables:
        print_table(title, rows)
    for name, ids in report.id_lists:
        if ids:
            shown = ", ".join(ids[:10])
            more = f" ... and {len(ids) - 10} more" if len(ids) > 10 else ""
            console.print(f"[yellow]{name} record ids:[/yellow] {escape(shown)}{more}",
                          highlight=False)
    print_skipped(report.read)
    for note in report.notes:
        out.print(escape(note), highlight=False)
