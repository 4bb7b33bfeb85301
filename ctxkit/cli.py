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


# ===== compression commands (compress, chat, density) =====

_TEXT_SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet", ".pq")


def _read_text_file(path: Path) -> str:
    if not path.exists():
        fail(f"input file not found: {path}")
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"{path}: not valid UTF-8 (byte {exc.start}); convert it to UTF-8 first")
    return ""


def _compress_error(exc: Exception, where: str) -> None:
    fail(f"{where}: {exc}")


def _dropped_rows(result) -> list[dict]:
    return [{"unit": u.index, "reason": u.reason, "score": round(u.score, 4), "tokens": u.tokens,
             "text": u.text} for u in result.units if not u.kept or u.reason]


def _print_reasons(title: str, reasons: list[str]) -> None:
    from collections import Counter

    counts = Counter(r.split(" (")[0].rstrip("0123456789 ") for r in reasons)
    if counts:
        print_table(title, sorted(counts.items(), key=lambda kv: -kv[1]))


@app.command("compress")
def compress_cmd(
    path: Path = typer.Argument(..., help="A text file, or JSONL/JSON/Parquet records."),
    budget: int = typer.Option(..., "--budget", "-b", help="Token budget per text."),
    output: Path = typer.Option(..., "-o", "--output", help="Compressed text, or JSONL."),
    query: str | None = typer.Option(None, "--query", "-q", help="Keep what answers this."),
    query_field: str | None = typer.Option(None, help="Per-record query field (records)."),
    scorer: str = typer.Option("idf", help="idf | embedding | lm"),
    granularity: str = typer.Option("sentence", help="sentence | token | chunk"),
    tokenizer: str = typer.Option("cl100k_base", help="Tokenizer the budget is counted in."),
    force_keep: list[str] = typer.Option([], "--force-keep", help="Text that must survive."),
    token_drop: float = typer.Option(0.0, help="Share of words to drop inside kept units."),
    field: str | None = typer.Option(None, help="Text field of records (default: text)."),
    id_field: str | None = typer.Option(None, help="Record id field."),
    report: Path | None = typer.Option(None, help="Write the ledger of dropped units here."),
    skip_bad: bool = typer.Option(False, help="Skip bad records and list them."),
) -> None:
    """Compress a text (or each record) to --budget tokens; report what was dropped."""
    from ctxkit.prune import compress
    from ctxkit.records import ReadReport, atomic_write, write_json, write_jsonl

    options = {"tokenizer": tokenizer, "scorer": scorer, "granularity": granularity,
               "force_keep": force_keep, "token_drop": token_drop}
    try:
        from ctxkit.scorers import get_scorer

        options["scorer"] = get_scorer(scorer)  # once, so model-backed scorers load once
    except (ValueError, ImportError) as exc:
        fail(str(exc))
    if path.suffix.lower() not in _TEXT_SUFFIXES:
        text = _read_text_file(path)
        try:
            res = compress(text, budget, query=query, **options)
        except (ValueError, TypeError) as exc:
            _compress_error(exc, str(path))
        with atomic_write(output) as fh:
            fh.write(res.text)
        if report is not None:
            write_json(report, res.to_dict())
        print_table("compress", [("original tokens", res.original_tokens),
                                 ("compressed tokens", res.compressed_tokens),
                                 ("budget", budget), ("ratio", res.ratio),
                                 ("units kept", len(res.kept)),
                                 ("units dropped", len(res.dropped))])
        _print_reasons("dropped units by reason", [u.reason for u in res.dropped])
        return

    read_report = ReadReport()
    rows, ledger, totals, reasons = [], [], [0, 0], []
    records = iter_input(path, field=field, template=None, id_field=id_field,
                         skip_bad=skip_bad, report=read_report)
    with progress_bar("compressing") as advance:
        for rec in records:
            q = query
            if query_field is not None:
                q = rec.raw.get(query_field)
                if q is not None and not isinstance(q, str):
                    fail(f"{path}: record {rec.id}: query field {query_field!r} is not text")
            try:
                res = compress(rec.text, budget, query=q, **options)
            except (ValueError, TypeError) as exc:
                _compress_error(exc, f"{path}: record {rec.id}")
            rows.append({"id": rec.id, "text": res.text, "original_tokens": res.original_tokens,
                         "compressed_tokens": res.compressed_tokens})
            ledger.append({"id": rec.id, "dropped": _dropped_rows(res)})
            reasons.extend(u.reason for u in res.dropped)
            totals[0] += res.original_tokens
            totals[1] += res.compressed_tokens
            advance()
    write_jsonl(output, rows)
    if report is not None:
        write_json(report, {"records": ledger, "skipped": read_report.to_dict()})
    print_table("compress", [("records", len(rows)), ("original tokens", totals[0]),
                             ("compressed tokens", totals[1]),
                             ("ratio", totals[1] / totals[0] if totals[0] else 1.0)])
    _print_reasons("dropped units by reason", reasons)
    print_skipped(read_report)


def _load_conversations(path: Path) -> tuple[list, str]:
    """Conversations from a .json file (one message list, or objects with messages) or JSONL."""
    import json

    if not path.exists():
        fail(f"input file not found: {path}")
    keys = ("messages", "conversations", "conversation", "dialog")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            fail(f"{path}: not valid UTF-8 (byte {exc.start})")
        except json.JSONDecodeError as exc:
            fail(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}")
        if isinstance(data, list) and all(isinstance(m, dict) and not any(k in m for k in keys)
                                          for m in data):
            return [("0", data, None)], "single"
        items = data if isinstance(data, list) else [data]
        out = []
        for i, obj in enumerate(items):
            key = next((k for k in keys if isinstance(obj, dict) and k in obj), None)
            if key is None:
                fail(f"{path}: conversation {i} has none of the keys {', '.join(keys)}")
            out.append((str(obj.get("id", i)), obj[key], (obj, key)))
        return out, "list"
    out = []
    for rec in iter_input(path, field=None, template="messages"):
        key = next(k for k in keys if k in rec.raw)
        out.append((rec.id, rec.raw[key], (rec.raw, key)))
    return out, "jsonl"


@app.command("chat")
def chat_cmd(
    path: Path = typer.Argument(..., help="A JSON message list (OpenAI or ShareGPT), or "
                                          "JSON/JSONL conversations with a messages key."),
    budget: int = typer.Option(..., "--budget", "-b", help="Token budget per conversation."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the result."),
    keep_last: int = typer.Option(2, help="Last messages kept verbatim."),
    keep_system: bool = typer.Option(True, help="Keep system messages verbatim."),
    query: str | None = typer.Option(None, "--query", "-q",
                                        help="Relevance target (default: last user turn)."),
    scorer: str = typer.Option("idf", help="idf | embedding | lm"),
    tokenizer: str = typer.Option("cl100k_base", help="Tokenizer the budget is counted in."),
    report: Path | None = typer.Option(None, help="Write the ledger here (JSON)."),
) -> None:
    """Compress chat histories to --budget tokens, keeping the system prompt and last turns."""
    from ctxkit.chat import compress_chat
    from ctxkit.records import write_json, write_jsonl
    from ctxkit.scorers import get_scorer

    try:
        sc = get_scorer(scorer)
    except (ValueError, ImportError) as exc:
        fail(str(exc))
    convs, layout = _load_conversations(path)
    results, ledgers, totals = [], [], [0, 0]
    for cid, messages, holder in convs:
        try:
            res = compress_chat(messages, budget, keep_last=keep_last, keep_system=keep_system,
                                query=query, tokenizer=tokenizer, scorer=sc)
        except (ValueError, TypeError) as exc:
            fail(f"{path}: conversation {cid}: {exc}")
        totals[0] += res.original_tokens
        totals[1] += res.compressed_tokens
        ledgers.append({"id": cid, **{k: v for k, v in res.to_dict().items() if k != "messages"}})
        if holder is None:
            results.append(res.messages)
        else:
            obj, key = holder
            results.append({**obj, key: res.messages})
    if layout == "single":
        write_json(output, results[0])
    elif layout == "list":
        write_json(output, results)
    else:
        write_jsonl(output, results)
    if report is not None:
        write_json(report, {"conversations": ledgers})
    changes = [c for led in ledgers for c in led["ledger"]]
    print_table("chat", [("conversations", len(convs)), ("original tokens", totals[0]),
                         ("compressed tokens", totals[1]),
                         ("ratio", totals[1] / totals[0] if totals[0] else 1.0),
                         ("messages dropped", sum(c["action"] == "dropped" for c in changes)),
                         ("messages shortened", sum(c["action"] == "shortened"
                                                    for c in changes))])
    _print_reasons("changed messages by reason", [c["reason"] for c in changes])


@app.command("density")
def density_cmd(
    path: Path = typer.Argument(..., help="JSONL/JSON/Parquet records, or a text file."),
    output: Path = typer.Option(..., "-o", "--output", help="Report (JSON)."),
    field: str | None = typer.Option(None, help="Text field of records (default: text)."),
    template: str | None = typer.Option(None, help="alpaca | messages"),
    id_field: str | None = typer.Option(None, help="Record id field."),
    scorer: str | None = typer.Option("idf", help="idf | lm | embedding | none"),
    tokenizer: str = typer.Option("cl100k_base", help="Tokenizer tokens are counted in."),
    semantic: bool = typer.Option(False, help="Also semantic novelty (embeddings)."),
    threshold: float = typer.Option(0.8, help="Near-duplicate Jaccard threshold."),
    skip_bad: bool = typer.Option(False, help="Skip bad records and list them."),
) -> None:
    """Information density per text and for the corpus: redundancy, dedup savings, clusters."""
    from ctxkit.density import density
    from ctxkit.records import ReadReport, write_json

    read_report = ReadReport()
    if path.suffix.lower() in _TEXT_SUFFIXES:
        records = list(iter_input(path, field=field, template=template, id_field=id_field,
                                  skip_bad=skip_bad, report=read_report))
        ids, texts = [r.id for r in records], [r.text for r in records]
    else:
        ids, texts = ["0"], [_read_text_file(path)]
    try:
        rep = density(texts, tokenizer=tokenizer,
                      scorer=None if scorer in (None, "none") else scorer,
                      threshold=threshold, semantic=semantic)
    except (ValueError, TypeError, ImportError) as exc:
        fail(str(exc))
    data = rep.to_dict()
    for row, rid in zip(data["texts"], ids):
        row["id"] = rid
    for cluster in data["clusters"]:
        cluster["keep"] = ids[cluster["keep"]]
        cluster["duplicates"] = [ids[i] for i in cluster["duplicates"]]
    data["skipped"] = read_report.to_dict()
    write_json(output, data)
    summary = rep.summary()
    rows = [("texts", len(texts)), ("tokens", rep.total_tokens),
            ("near-duplicate share", rep.near_duplicate_share),
            ("tokens dedup would save", rep.dedup_saved_tokens)]
    rows += [(f"{name} (mean)", stats["mean"]) for name, stats in summary.items()
             if name != "tokens"]
    print_table("density", rows)
    print_skipped(read_report)



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
