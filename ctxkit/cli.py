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
from typing import Annotated

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

from ctxkit.io.records import ReadReport, Record, RecordError, read_records

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


def run_on_ray(command: str, address: str, *args: object, **options: object) -> None:
    """``--ray ADDRESS``: run the command's stage on Ray Data and print its summary."""
    from ctxkit.distributed import RayMissingError, run_command

    try:
        rows = run_command(command, address, *args, **options)
    except (ValueError, RayMissingError) as exc:
        fail(str(exc))
    print_table(f"ctxkit {command} on Ray ({address})", rows)


RAY_HELP = ("Run on Ray Data: 'local' (start Ray here), 'auto' (this machine's cluster) or "
            "ray://HOST:10001. IN may be a directory or URI; -o becomes a directory of part files.")


@app.callback()
def _root() -> None:
    """Make every token of a context window count: dedup, compress, score, pack, embed."""


@app.command("tokenizers")
def tokenizers_cmd() -> None:
    """List the tokenizer names --tokenizer accepts."""
    from ctxkit.io.tokenizers import available_tokenizers

    for name in available_tokenizers():
        out.print(name)


# ===== packing commands (pack, demo) =====

_PACK_TOKENIZE_BATCH = 1024


def _parse_separator(separator: str, tok) -> int | None:
    value = separator.strip().lower()
    if value == "none":
        return None
    if value == "eos":
        if tok.eos_id is None:
            fail(f"tokenizer {tok.name} has no EOS token; use --separator none or an id")
        return int(tok.eos_id)
    try:
        return int(value)
    except ValueError:
        fail(f"--separator must be 'eos', 'none' or a token id, got {separator!r}")
    return None


def _print_pack_report(batch, read_report: ReadReport | None, ids: list[str]) -> None:
    rows: list[tuple[str, object]] = []
    if read_report is not None:
        rows.append(("records read", read_report.read))
    rows += [
        ("windows", batch.n_windows),
        ("lower bound", batch.lower_bound),
        ("utilization", batch.utilization),
        ("padding tokens", batch.padding_tokens),
        ("packed tokens", batch.total_tokens),
        ("segments", batch.n_segments),
        ("split", int(batch.split.size)),
        ("truncated", f"{batch.truncated.size} ({batch.tokens_truncated:,} tokens cut)"),
        ("dropped", int(batch.dropped.size)),
        ("empty", int(batch.empty.size)),
    ]
    if read_report is not None:
        rows.append(("skipped bad records", read_report.n_skipped))
    print_table(f"packing report ({batch.strategy}, capacity {batch.capacity:,})", rows)
    for name in ("truncated", "dropped", "empty"):
        idx = getattr(batch, name)
        if idx.size:
            shown = ", ".join(ids[i] for i in idx[:10].tolist())
            more = f" ... and {idx.size - 10} more" if idx.size > 10 else ""
            console.print(f"[yellow]{name} record ids:[/yellow] {shown}{more}")
    if read_report is not None:
        print_skipped(read_report)


@app.command("pack")
def pack_cmd(
    input_path: Annotated[Path, typer.Argument(
        metavar="IN", help="JSONL, JSON or Parquet records.")],
    capacity: Annotated[int, typer.Option(
        "--capacity", "-c", help="Tokens per context window.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="OUT.parquet or OUT.jsonl")],
    tokenizer: Annotated[str, typer.Option(
        "--tokenizer", "-t", help="cl100k_base, minilm or hf:<local dir>.")] = "cl100k_base",
    strategy: Annotated[str, typer.Option(help="bfd, ffd, wrapped, greedy or optimal.")] = "bfd",
    template: Annotated[str | None, typer.Option(help="alpaca or messages.")] = None,
    field: Annotated[str | None, typer.Option(
        "--field", "-f", help="Text field to pack.")] = None,
    id_field: Annotated[str | None, typer.Option(
        help="Field holding each record's id (default: its position).")] = None,
    separator: Annotated[str, typer.Option(
        help="Appended after each record: eos, none or a token id.")] = "eos",
    overflow: Annotated[str, typer.Option(
        help="Records over capacity: error, split, truncate or drop.")] = "error",
    layout: Annotated[str, typer.Option(
        help="padded: rows of exactly capacity; flat: one unpadded row per window "
        "(padding-free training).")] = "padded",
    seed: Annotated[int | None, typer.Option(help="Shuffle windows deterministically.")] = None,
    pad_id: Annotated[int, typer.Option(help="Token id used for padding.")] = 0,
    train_on_prompt: Annotated[bool, typer.Option(
        help="alpaca: keep prompt tokens in the loss.")] = False,
    label_separators: Annotated[bool, typer.Option(
        help="Train on the separator (EOS) token.")] = False,
    skip_bad: Annotated[bool, typer.Option(
        help="Skip invalid records (counted and listed in the report).")] = False,
    report_path: Annotated[Path | None, typer.Option(
        "--report", help="Also write the report as JSON.")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    ray_address: Annotated[str | None, typer.Option(
        "--ray", metavar="ADDRESS", help=RAY_HELP)] = None,
) -> None:
    """Tokenize records and pack them into full context windows (no cross-contamination)."""
    if ray_address is not None:
        return run_on_ray("pack", ray_address, input_path, output, field=field,
                          id_field=id_field, capacity=capacity, tokenizer=tokenizer,
                          strategy=strategy, overflow=overflow)
    import numpy as np

    from ctxkit.io.records import write_json, write_jsonl, write_parquet
    from ctxkit.io.tokenizers import get_tokenizer
    from ctxkit.packing.collate import LAYOUTS, pack_arrays
    from ctxkit.packing.hf import packed_table
    from ctxkit.packing.plan import OVERFLOW_POLICIES, STRATEGIES

    if capacity <= 0:
        fail(f"--capacity must be a positive number of tokens, got {capacity}")
    if strategy not in STRATEGIES:
        fail(f"unknown --strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if overflow not in OVERFLOW_POLICIES:
        fail(f"unknown --overflow {overflow!r}; choose one of {', '.join(OVERFLOW_POLICIES)}")
    if layout not in LAYOUTS:
        fail(f"unknown --layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    if template is not None and field is not None:
        fail("give either --template or --field, not both")
    if template is not None and template not in ("alpaca", "messages"):
        fail(f"unknown --template {template!r}; choose alpaca or messages")
    suffix = output.suffix.lower()
    if suffix not in (".parquet", ".jsonl"):
        fail(f"output must end in .parquet or .jsonl, got {output.name}")
    try:
        tok = get_tokenizer(tokenizer)
    except (ValueError, OSError) as exc:
        fail(f"cannot load tokenizer {tokenizer!r}: {exc}")
    sep = _parse_separator(separator, tok)

    read_report = ReadReport()
    ids: list[str] = []
    lines: list[int | None] = []
    chunks: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    lengths: list[int] = []
    use_mask = template == "alpaca" and not train_on_prompt

    def flush(pending: list[Record], advance) -> None:
        if use_mask:
            prompts = tok.encode_batch([r.prompt or "" for r in pending])
            completions = tok.encode_batch([r.completion or "" for r in pending])
            for p, c in zip(prompts, completions):
                chunks.append(np.asarray(p + c, dtype=np.int64))
                masks.append(np.r_[np.zeros(len(p), bool), np.ones(len(c), bool)])
                lengths.append(len(p) + len(c))
        else:
            for ids_ in tok.encode_batch([r.text for r in pending]):
                chunks.append(np.asarray(ids_, dtype=np.int64))
                lengths.append(len(ids_))
        advance(len(pending))

    with progress_bar("tokenizing", enabled=progress) as advance:
        pending: list[Record] = []
        for record in iter_input(input_path, field=field, template=template, id_field=id_field,
                                 skip_bad=skip_bad, report=read_report):
            pending.append(record)
            ids.append(record.id)
            lines.append(record.line)
            if len(pending) >= _PACK_TOKENIZE_BATCH:
                flush(pending, advance)
                pending = []
        if pending:
            flush(pending, advance)
    if not ids:
        fail(f"no records to pack in {input_path}"
             + (f" ({read_report.n_skipped} skipped as bad)" if read_report.n_skipped else ""))

    lens = np.asarray(lengths, dtype=np.int64)
    if overflow == "error" and strategy != "wrapped":  # wrapped cuts every record anyway
        need = lens + (lens > 0) * (1 if sep is not None else 0)
        over = np.flatnonzero(need > capacity)
        if over.size:
            i = int(over[0])
            where = f"{input_path}:{lines[i]}" if lines[i] is not None else str(input_path)
            fail(f"record {ids[i]} ({where}) has {int(need[i]):,} tokens, more than --capacity "
                 f"{capacity:,}; {over.size} record(s) are too long (use --overflow split, "
                 "truncate or drop)")
    tokens = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    mask = np.concatenate(masks) if use_mask and masks else None
    try:
        batch = pack_arrays(tokens, lens, capacity, strategy=strategy, separator_id=sep,
                            completion_mask=mask, overflow=overflow, pad_id=pad_id, seed=seed,
                            layout=layout, label_separators=label_separators)
    except ValueError as exc:
        fail(str(exc))
    table = packed_table(batch, ids=ids)
    if suffix == ".parquet":
        write_parquet(output, table)
    else:
        write_jsonl(output, (row for part in table.to_batches(1024) for row in part.to_pylist()))
    _print_pack_report(batch, read_report, ids)
    out.print(f"wrote {batch.n_windows:,} windows to {output}")
    if report_path is not None:
        write_json(report_path, {
            "input": str(input_path), "output": str(output), "tokenizer": tok.name,
            "capacity": capacity, "strategy": strategy, "overflow": overflow, "layout": layout,
            "separator_id": sep, "records": len(ids), "windows": batch.n_windows,
            "lower_bound": batch.lower_bound, "utilization": batch.utilization,
            "padding_tokens": batch.padding_tokens, "packed_tokens": batch.total_tokens,
            "tokens_truncated": batch.tokens_truncated,
            "split": [ids[i] for i in batch.split.tolist()],
            "truncated": [ids[i] for i in batch.truncated.tolist()],
            "dropped": [ids[i] for i in batch.dropped.tolist()],
            "empty": [ids[i] for i in batch.empty.tolist()],
            "read": read_report.to_dict(),
        })


@app.command("demo")
def demo_cmd(
    n: Annotated[int, typer.Option("--n", help="Number of generated instruction records.")] = 2000,
    capacity: Annotated[int, typer.Option(
        "--capacity", "-c", help="Tokens per context window.")] = 2048,
    seed: Annotated[int, typer.Option(
        help="Seed of the generated data and the window order.")] = 0,
    tokenizer: Annotated[str, typer.Option("--tokenizer", "-t")] = "cl100k_base",
    write_data: Annotated[Path | None, typer.Option(
        help="Also write the generated records as JSONL (try them with `ctxkit pack`).")] = None,
) -> None:
    """Generate an instruction dataset, tokenize it, pack it and print the packing report."""
    from ctxkit.demo import demo_records, run_demo
    from ctxkit.io.records import write_jsonl

    if n <= 0:
        fail(f"--n must be a positive number of records, got {n}")
    if capacity <= 0:
        fail(f"--capacity must be a positive number of tokens, got {capacity}")
    try:
        res = run_demo(n=n, capacity=capacity, seed=seed, tokenizer=tokenizer)
    except ValueError as exc:
        fail(str(exc))
    if write_data is not None:
        write_jsonl(write_data, demo_records(n, seed))
        out.print(f"wrote {n:,} generated records to {write_data}")
    batch = res.batch
    print_table(f"demo data ({res.n_records:,} alpaca records, {res.tokenizer})", [
        ("tokens (prompt + response)", res.total_tokens),
        ("response tokens (trained on)", res.target_tokens),
        ("mean / max length", f"{res.mean_length:,.1f} / {res.max_length:,}"),
        ("tokenize seconds", res.tokenize_seconds),
    ])
    table = Table(title=f"windows of {capacity:,} tokens", title_justify="left")
    for col in ("method", "windows", "utilization", "padding", "plan ms"):
        table.add_column(col, justify="left" if col == "method" else "right", no_wrap=True)
    for row in res.rows:
        table.add_row(row.method, f"{row.windows:,}", f"{row.utilization:.2%}",
                      f"{row.padding_tokens:,}", f"{row.seconds * 1e3:.1f}")
    out.print(table)
    _print_pack_report(batch, None, [f"demo-{i:06d}" for i in range(res.n_records)])
    naive = res.rows[0].windows
    out.print(f"bfd needs {batch.n_windows:,} windows (lower bound {batch.lower_bound:,}) "
              f"instead of {naive:,} padded rows: {naive / max(batch.n_windows, 1):.1f}x fewer "
              "forward passes, with no attention or loss across records.")



# ===== dedup commands =====



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
    from ctxkit.io.records import write_jsonl, write_parquet

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
    input_path: Path = typer.Argument(
        ..., metavar="IN", help="Records: .jsonl (streamed), .json or .parquet."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Kept records (.jsonl or .parquet)."),
    method: str = typer.Option("exact,minhash", "--method", "-m",
                               help="Stages in order: exact, minhash, semantic (comma-separated)."),
    threshold: str | None = typer.Option(
        None, "--threshold", "-t",
        help="Similarity for duplicates: one number for every stage, or minhash=0.7,semantic=0.9 "
             "(defaults: MinHash Jaccard 0.7, semantic cosine 0.9)."),
    field: str | None = typer.Option(None, "--field", help="Text field (default: text)."),
    template: str | None = typer.Option(None, "--template", help="alpaca or messages."),
    id_field: str | None = typer.Option(None, "--id-field", help="Field holding record ids."),
    report_path: Path | None = typer.Option(
        None, "--report", help="JSON report of every removal."
    ),
    keep: str = typer.Option("first", "--keep", help="Representative kept: first, last, longest."),
    num_perm: int = typer.Option(128, "--num-perm", help="MinHash permutations."),
    ngram: int = typer.Option(5, "--ngram", help="MinHash shingle size."),
    unit: str = typer.Option("char", "--unit", help="MinHash shingles of char or word n-grams."),
    punctuation: bool = typer.Option(
        False, "--ignore-punctuation", help="Strip punctuation first."
    ),
    boilerplate: float | None = typer.Option(
        None, "--strip-boilerplate", metavar="SHARE",
        help="MinHash: leave out lines found in at least this share of the records (a shared "
             "template), e.g. 0.01."),
    seed: int = typer.Option(1, "--seed", help="Seed for MinHash permutations and k-means."),
    skip_bad: bool = typer.Option(
        False, "--skip-bad", help="Skip bad records (listed in the report)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    ray_address: str | None = typer.Option(None, "--ray", metavar="ADDRESS", help=RAY_HELP),
) -> None:
    """Remove duplicate records (exact, MinHash near-duplicates, semantic paraphrases).

    Every removed record gets a report entry: its id, the id of the kept record it
    duplicates, the method and the similarity.
    """
    if ray_address is not None:
        if boilerplate is not None:
            fail("--strip-boilerplate counts lines over the whole corpus and does not run with "
                 "--ray; strip templates first or pick the varying --field")
        return run_on_ray("dedup", ray_address, input_path, output, field=field,
                          id_field=id_field, report_path=report_path, method=method,
                          threshold=_parse_threshold(threshold), keep=keep, num_perm=num_perm,
                          ngram=ngram, unit=unit, seed=seed, punctuation=punctuation)
    from ctxkit.deduplication.exact import ExactDeduper
    from ctxkit.deduplication.normalize import Normalization
    from ctxkit.deduplication.pipeline import _check_threshold, _methods, dedup
    from ctxkit.io.records import write_json

    thresholds = _parse_threshold(threshold)
    try:
        stages = _methods(method)
        _check_threshold(thresholds, stages)
    except ValueError as exc:
        fail(str(exc))
    if output.suffix.lower() not in (".jsonl", ".ndjson", ".json", ".parquet", ".pq"):
        fail(f"output must be .jsonl or .parquet, got {output.name}")
    norm = Normalization(punctuation=punctuation)
    read_report = ReadReport()

    def records() -> Iterator[Record]:
        return iter_input(input_path, field=field, template=template, id_field=id_field,
                          skip_bad=skip_bad, report=read_report)

    removed_rows: list[dict] = []
    info: dict = {}
    warnings: list[str] = []
    if keep not in ("first", "last", "longest"):
        fail(f"--keep must be first, last or longest, got {keep!r}")
    if stages == ["exact"] and keep == "first":
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
                        removed_rows.append({
                            "id": rec.id, "line": rec.line, "duplicate_of": first_ids[first],
                            "method": "exact", "similarity": 1.0,
                        })

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
            options.update(num_perm=num_perm, ngram=ngram, unit=unit, boilerplate=boilerplate)
        if {"minhash", "semantic"} & set(stages):
            options["seed"] = seed
        try:
            label = f"dedup ({', '.join(stages)})"
            with progress_bar(label, total=len(stages), enabled=progress) as advance:
                result = dedup(texts, stages, thresholds, keep=keep, **options)
                advance(len(stages))
        except (ValueError, TypeError) as exc:
            fail(str(exc))
        info, warnings = result.info, result.warnings
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
            "stages": info, "warnings": warnings, "duplicates": removed_rows,
        })
    print_skipped(read_report)
    for line in warnings:
        console.print(f"[yellow]warning:[/yellow] {line}")
    print_table("dedup", [("records", n_in), ("kept", n_kept), ("removed", len(removed_rows)),
                          ("skipped (bad)", read_report.n_skipped)])


# ===== embedding commands =====




def _write_npy_stream(path: Path, chunks: Iterator, dim: int) -> int:
    """Write float32 rows arriving in chunks to ``.npy`` with bounded memory.

    Rows go to a scratch file first (the header needs the final row count), then header and
    rows are copied into the atomically written target.
    """
    import shutil
    import tempfile

    import numpy as np

    from ctxkit.io.records import atomic_write

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
    ray_address: Annotated[str | None, typer.Option(
        "--ray", metavar="ADDRESS", help=RAY_HELP)] = None,
) -> None:
    """Embed every record's text with packed passes; same vectors as sentence-transformers."""
    if ray_address is not None:
        return run_on_ray("embed", ray_address, input, output, field=field, id_field=id_field,
                          model=model, batch_size=chunk_size, normalize=normalize,
                          device=device, dtype=dtype, batch_tokens=batch_tokens)
    import itertools
    import json
    import time

    from ctxkit.embedding.encoder import EncodeStats, PackedEncoder
    from ctxkit.io.records import atomic_write, write_json, write_parquet

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
    from ctxkit.compression.prune import compress
    from ctxkit.io.records import ReadReport, atomic_write, write_json, write_jsonl

    options = {"tokenizer": tokenizer, "scorer": scorer, "granularity": granularity,
               "force_keep": force_keep, "token_drop": token_drop}
    try:
        from ctxkit.compression.scorers import get_scorer

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
    from ctxkit.compression.chat import compress_chat
    from ctxkit.compression.scorers import get_scorer
    from ctxkit.io.records import write_json, write_jsonl

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
    from ctxkit.compression.density import density
    from ctxkit.io.records import ReadReport, write_json

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
    from ctxkit.evaluation.harness import evaluate
    from ctxkit.io.records import write_json

    report_read = ReadReport()
    records = list(iter_input(input_path, field=field, template=template, skip_bad=skip_bad,
                              report=report_read))
    texts = [r.text for r in records]
    print_skipped(report_read)
    if not texts:
        fail(f"{input_path}: no usable records")
    sections = ["lengths", "utilization"]
    sections += [] if no_dedup else ["redundancy"]
    sections += [] if no_density else ["density"]
    sections += ["embedding"] if embedding else []
    with progress_bar("evaluating", total=len(sections) + 1) as advance:
        def step(message: str) -> None:
            if not console.is_terminal:  # no bar to show: say what is happening instead
                console.print(f"[dim]{message}[/dim]")
            advance(1)

        try:
            report = evaluate(texts, capacity=capacity, tokenizer=tokenizer, sections=sections,
                              embed_sample=embed_sample, seed=seed, name=input_path.name,
                              content=[r.content for r in records], progress=step)
        except ValueError as exc:
            fail(str(exc))
    report.dataset["skipped_records"] = report_read.to_dict()["skipped"]
    plots = report.plot(output_dir)
    write_json(output_dir / "report.json", report.to_dict())
    from ctxkit.io.records import atomic_write

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
