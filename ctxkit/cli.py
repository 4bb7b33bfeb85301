"""The ``ctxkit`` command: parses arguments, calls a job from :mod:`ctxkit.jobs`, renders it.

Exit status: 0 success; 2 the run could not be done as asked (bad input, options or paths;
one ``error:`` line naming the record or option); 3 an internal error (a bug: one line, the
traceback with ``--debug`` or ``CTXKIT_DEBUG=1``); 130 interrupted (Ctrl-C); 143 terminated
(SIGTERM). Outputs are replaced only when a run succeeds, so none of these loses the input
or the previous output.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
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

from ctxkit.errors import InputError, OptionError, RecordError
from ctxkit.io.records import ReadReport
from ctxkit.jobs import JobReport, Source, Target

app = typer.Typer(
    name="ctxkit",
    help="Make every token of a context window count: dedup, compress, score, pack, embed.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# soft_wrap: a line is never cut at the terminal width, nor at 80 columns when not a terminal
console = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)

EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 3, 130, 143
try:  # recent typer vendors click; older ones re-export click's exceptions
    from typer.exceptions import TyperException as _UsageError
except ImportError:  # pragma: no cover
    from click import ClickException as _UsageError
_state = {"debug": False}


# ===== rendering =====


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


# ===== shared options =====

OutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Output file; its suffix "
                                         "sets the format.")]
ReportOpt = Annotated[Path | None, typer.Option(
    "--report", help="Also write the report as JSON (written only if the run succeeds).")]
FieldOpt = Annotated[str | None, typer.Option("--field", help="Text field (default: text).")]
TemplateOpt = Annotated[str | None, typer.Option("--template", help="alpaca or messages.")]
IdFieldOpt = Annotated[str | None, typer.Option(
    "--id-field", help="Field holding each record's id (default: its position).")]
SkipBadOpt = Annotated[bool, typer.Option(
    "--skip-bad", help="Skip invalid records (counted and listed in the report).")]
InPlaceOpt = Annotated[bool, typer.Option(
    "--in-place", help="Allow the output to replace the input file.")]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress",
                                           help="Show a progress bar.")]
TokenizerOpt = Annotated[str, typer.Option(
    "--tokenizer", "-t", help="cl100k_base, minilm or hf:<local dir>.")]
DeviceOpt = Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")]
DtypeOpt = Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16")]
BatchTokensOpt = Annotated[int | None, typer.Option(min=1, help="Token slots per forward pass.")]
RAY_HELP = ("Run on Ray Data: 'local' (start Ray here), 'auto' (this machine's cluster) or "
            "ray://HOST:10001. IN may be a directory or URI; -o becomes a directory of part files.")
RayOpt = Annotated[str | None, typer.Option("--ray", metavar="ADDRESS", help=RAY_HELP)]
KvModelOpt = Annotated[str | None, typer.Option(
    "--kv-model", metavar="NAME_OR_DIR", help="Also report KV-cache memory for this model: a "
    "preset (llama-3.1-8b, mistral-7b, qwen2.5-7b, gemma-2-9b...), a config.json or a model "
    "directory.")]
KvDtypeOpt = Annotated[str, typer.Option(
    "--kv-dtype", help="KV-cache element type: bfloat16, float16, float32, fp8, int8, int4.")]


def run_stage(command: str, ray_address: str | None, source: Source, target: Target,
              progress: bool, **options: object) -> None:
    """Run a command's job (``ctxkit.jobs.run_<command>``) and print its report, or with
    ``--ray ADDRESS`` run the same stage with the same options on Ray Data."""
    if ray_address is None:
        import ctxkit.jobs as jobs

        job = getattr(jobs, f"run_{command}")
        render(job(source, target, progress=progress_bar(progress), **options))
        return
    from ctxkit.distributed import RayMissingError, run_command

    try:
        rows = run_command(command, ray_address, source.path, target.output,
                           field=source.field, id_field=source.id_field,
                           template=source.template, skip_bad=source.skip_bad,
                           report_path=target.report, **options)
    except (ValueError, RayMissingError) as exc:
        raise InputError(str(exc)) from None
    print_table(f"ctxkit {command} on Ray ({ray_address})", rows)


@app.callback()
def _root(debug: Annotated[bool, typer.Option(
        "--debug", help="Show the traceback of an internal error (also CTXKIT_DEBUG=1).")
          ] = False) -> None:
    """Make every token of a context window count: dedup, compress, score, pack, embed."""
    _state["debug"] = _state["debug"] or debug


@app.command("tokenizers")
def tokenizers_cmd() -> None:
    """List the tokenizer names --tokenizer accepts."""
    from ctxkit.io.tokenizers import available_tokenizers

    for name in available_tokenizers():
        out.print(name)


# ===== packing commands (pack, demo) =====


@app.command("pack")
def pack_cmd(
    input_path: Annotated[Path, typer.Argument(
        metavar="IN", help="JSONL, JSON or Parquet records.")],
    capacity: Annotated[int, typer.Option(
        "--capacity", "-c", help="Tokens per context window.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="OUT.parquet, .jsonl or .json")],
    tokenizer: TokenizerOpt = "cl100k_base",
    strategy: Annotated[str, typer.Option(help="bfd, ffd, wrapped, greedy or optimal.")] = "bfd",
    template: TemplateOpt = None,
    field: Annotated[str | None, typer.Option(
        "--field", "-f", help="Text field to pack.")] = None,
    id_field: IdFieldOpt = None,
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
    skip_bad: SkipBadOpt = False,
    report_path: ReportOpt = None,
    in_place: InPlaceOpt = False,
    progress: ProgressOpt = True,
    ray_address: RayOpt = None,
) -> None:
    """Tokenize records and pack them into full context windows (no cross-contamination)."""
    run_stage("pack", ray_address, Source(input_path, field, template, id_field, skip_bad),
              Target(output, report_path, in_place), progress,
              capacity=capacity, tokenizer=tokenizer, strategy=strategy, separator=separator,
              overflow=overflow, layout=layout, seed=seed, pad_id=pad_id,
              train_on_prompt=train_on_prompt, label_separators=label_separators)


@app.command("demo")
def demo_cmd(
    n: Annotated[int, typer.Option("--n", help="Number of generated instruction records.")] = 2000,
    capacity: Annotated[int, typer.Option(
        "--capacity", "-c", help="Tokens per context window.")] = 2048,
    seed: Annotated[int, typer.Option(
        help="Seed of the generated data and the window order.")] = 0,
    tokenizer: TokenizerOpt = "cl100k_base",
    embed_texts: Annotated[int, typer.Option(
        help="Prompts to embed in the embedding stage (0 skips it).")] = 128,
    write_data: Annotated[Path | None, typer.Option(
        help="Also write the generated records (.jsonl, .json or .parquet; try them with "
             "`ctxkit dedup` or `ctxkit pack`).")] = None,
) -> None:
    """Run every stage on generated data: dedup, chat compression, packing, packed embedding."""
    from ctxkit.demo import run_demo
    from ctxkit.io.outputs import write_records
    from ctxkit.jobs.common import check_capacity
    from ctxkit.jobs.pack import batch_report

    if n <= 0:
        raise InputError(f"--n must be a positive number of records, got {n}")
    check_capacity(capacity)
    if write_data is not None:
        Target(write_data).check()
    try:
        res = run_demo(n=n, capacity=capacity, seed=seed, tokenizer=tokenizer,
                       embed_texts=embed_texts)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if write_data is not None:
        write_records(write_data, res.data.records)
        out.print(f"wrote {n:,} generated records to {write_data}")
    print_table(f"1. dedup (exact, then MinHash) of {n:,} generated alpaca records",
                res.dedup.rows())
    print_table("2. compression: a long chat history to 1/4 of its tokens", res.chat.rows())
    for index, role, action, reason, tokens in res.chat.ledger[:5]:
        out.print(f"   message {index} ({role}, {tokens} tokens): {action}, {reason}")
    if len(res.chat.ledger) > 5:
        out.print(f"   ... and {len(res.chat.ledger) - 5} more in the ledger")
    pack = res.pack
    print_table(f"3. packing the {pack.n_records:,} kept records ({pack.tokenizer})", pack.rows())
    table = Table(title=f"windows of {capacity:,} tokens", title_justify="left")
    for col in ("method", "windows", "utilization", "padding", "plan ms"):
        table.add_column(col, justify="left" if col == "method" else "right", no_wrap=True)
    for row in pack.strategies:
        table.add_row(row.method, f"{row.windows:,}", f"{row.utilization:.2%}",
                      f"{row.padding_tokens:,}", f"{row.seconds * 1e3:.1f}")
    out.print(table)
    ids = [res.data.records[i]["id"] for i in res.dedup.kept]
    render(batch_report(pack.batch, ids, input="", output=""))
    naive = pack.strategies[0].windows
    out.print(f"bfd needs {pack.batch.n_windows:,} windows (lower bound "
              f"{pack.batch.lower_bound:,}) instead of {naive:,} padded rows: "
              f"{naive / max(pack.batch.n_windows, 1):.1f}x fewer forward passes, with no "
              "attention or loss across records.")
    if res.embed is not None:
        print_table("4. packed embedding pass, all-MiniLM-L6-v2 (encode: "
                    "SentenceTransformer.encode, batch_size=32)", res.embed.rows())


# ===== dedup =====


@app.command("dedup")
def dedup_cmd(
    input_path: Annotated[Path, typer.Argument(
        metavar="IN", help="Records: .jsonl (streamed), .json or .parquet.")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Kept records, unchanged (.jsonl, .json or .parquet).")],
    method: Annotated[str, typer.Option(
        "--method", "-m",
        help="Stages in order: exact, minhash, semantic (comma-separated).")] = "exact,minhash",
    threshold: Annotated[str | None, typer.Option(
        "--threshold", "-t",
        help="Similarity for duplicates: one number for every stage, or minhash=0.7,semantic=0.9 "
             "(defaults: MinHash Jaccard 0.7, semantic cosine 0.9).")] = None,
    field: FieldOpt = None,
    template: TemplateOpt = None,
    id_field: IdFieldOpt = None,
    report_path: Annotated[Path | None, typer.Option(
        "--report", help="JSON report of every removal.")] = None,
    keep: Annotated[str, typer.Option(
        "--keep", help="Representative kept: first, last, longest.")] = "first",
    num_perm: Annotated[int, typer.Option("--num-perm", help="MinHash permutations.")] = 128,
    ngram: Annotated[int, typer.Option("--ngram", help="MinHash shingle size.")] = 5,
    unit: Annotated[str, typer.Option(
        "--unit", help="MinHash shingles of char or word n-grams.")] = "char",
    punctuation: Annotated[bool, typer.Option(
        "--ignore-punctuation", help="Strip punctuation first.")] = False,
    seed: Annotated[int, typer.Option(
        "--seed", help="Seed for MinHash permutations and k-means.")] = 1,
    boilerplate: Annotated[float | None, typer.Option(
        "--strip-boilerplate", metavar="SHARE",
        help="MinHash: leave out lines found in at least this share of the records (a shared "
             "template), e.g. 0.01.")] = None,
    skip_bad: SkipBadOpt = False,
    in_place: InPlaceOpt = False,
    progress: ProgressOpt = True,
    ray_address: RayOpt = None,
) -> None:
    """Remove duplicate records (exact, MinHash near-duplicates, semantic paraphrases).

    Every removed record gets a report entry: its id, the id of the kept record it
    duplicates, the method and the similarity.
    """
    from ctxkit.jobs import parse_threshold

    if ray_address is not None and boilerplate is not None:
        raise OptionError("--strip-boilerplate", "--strip-boilerplate counts lines over the "
                          "whole corpus and does not run with --ray; strip templates first "
                          "or pick the varying --field")
    local = {} if ray_address is not None else {"boilerplate": boilerplate}
    run_stage("dedup", ray_address, Source(input_path, field, template, id_field, skip_bad),
              Target(output, report_path, in_place), progress,
              method=method, threshold=parse_threshold(threshold), keep=keep,
              num_perm=num_perm, ngram=ngram, unit=unit, punctuation=punctuation, seed=seed,
              **local)


# ===== embedding =====


@app.command("embed")
def embed_cmd(
    input_path: Annotated[Path, typer.Argument(metavar="IN", help="JSONL, JSON or Parquet "
                                               "records.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="vectors.npy or .parquet")],
    field: FieldOpt = None,
    template: TemplateOpt = None,
    ids: Annotated[bool, typer.Option(help="Also write record ids (a parquet column, or "
                                      "<output>.ids.jsonl beside a .npy).")] = False,
    id_field: IdFieldOpt = None,
    model: Annotated[Path | None, typer.Option(help="Local sentence-transformers directory "
                                               "(default: bundled all-MiniLM-L6-v2).")] = None,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto",
    batch_tokens: BatchTokensOpt = None,
    chunk_size: Annotated[int, typer.Option(min=1, help="Texts read, packed and written at "
                                            "a time (bounds memory).")] = 8192,
    normalize: Annotated[bool | None, typer.Option("--normalize/--no-normalize",
                                                   help="Default: as the model does.")] = None,
    skip_bad: SkipBadOpt = False,
    in_place: InPlaceOpt = False,
    progress: ProgressOpt = True,
    summary_json: Annotated[Path | None, typer.Option(
        "--summary-json", "--report", help="Also write the summary as JSON.")] = None,
    ray_address: RayOpt = None,
) -> None:
    """Embed every record's text with packed passes; same vectors as sentence-transformers."""
    run_stage("embed", ray_address, Source(input_path, field, template, id_field, skip_bad),
              Target(output, summary_json, in_place), progress,
              ids=ids, model=model, device=device, dtype=dtype, batch_tokens=batch_tokens,
              chunk_size=chunk_size, normalize=normalize)


@app.command("classify")
def classify_cmd(
    input_path: Annotated[Path, typer.Argument(metavar="IN", help="JSONL, JSON or Parquet "
                                               "records.")],
    output: Annotated[Path, typer.Option(
        "-o", "--output", help="Labels and scores, one record per input (.jsonl, .json or "
                               ".parquet).")],
    model: Annotated[Path, typer.Option(help="Local sequence-classifier or cross-encoder "
                                        "directory.")],
    query: Annotated[str | None, typer.Option(
        "--query", "-q", help="Score (query, text) pairs with this query (cross-encoders).")
    ] = None,
    query_field: Annotated[str | None, typer.Option(
        help="Per-record query field: (query, text) pairs.")] = None,
    field: FieldOpt = None,
    template: TemplateOpt = None,
    id_field: IdFieldOpt = None,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto",
    batch_tokens: BatchTokensOpt = None,
    chunk_size: Annotated[int, typer.Option(min=1, help="Records read, packed and written at "
                                            "a time (bounds memory).")] = 8192,
    max_length: Annotated[int | None, typer.Option(
        min=2, help="Truncate inputs to this many tokens (default: the model's).")] = None,
    report: ReportOpt = None,
    skip_bad: SkipBadOpt = False,
    in_place: InPlaceOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """Classify every record (or rerank (query, text) pairs) with packed passes; same logits
    as the unpacked model."""
    from ctxkit.jobs import run_classify

    render(run_classify(
        Source(input_path, field, template, id_field, skip_bad),
        Target(output, report, in_place),
        model=model, query=query, query_field=query_field, device=device, dtype=dtype,
        batch_tokens=batch_tokens, chunk_size=chunk_size, max_length=max_length,
        progress=progress_bar(progress)))


# ===== compression (compress, chat, density) =====


@app.command("compress")
def compress_cmd(
    path: Annotated[Path, typer.Argument(help="A text file, or JSONL/JSON/Parquet records.")],
    budget: Annotated[int, typer.Option("--budget", "-b", help="Token budget per text.")],
    output: Annotated[Path, typer.Option(
        "-o", "--output", help="A text file for text input; records (format by suffix) for "
                               "records, each with every field kept.")],
    query: Annotated[str | None, typer.Option(
        "--query", "-q", help="Keep what answers this.")] = None,
    query_field: Annotated[str | None, typer.Option(
        help="Per-record query field (records).")] = None,
    scorer: Annotated[str, typer.Option(help="embedding | idf | lm")] = "embedding",
    granularity: Annotated[str, typer.Option(
        help="coarse-to-fine | sentence | token | chunk")] = "coarse-to-fine",
    tokenizer: Annotated[str, typer.Option(
        help="Tokenizer the budget is counted in.")] = "cl100k_base",
    force_keep: Annotated[list[str] | None, typer.Option(
        "--force-keep", help="Text that must survive.")] = None,
    token_drop: Annotated[float, typer.Option(
        help="Share of words to drop inside kept units.")] = 0.0,
    kv_model: KvModelOpt = None,
    kv_dtype: KvDtypeOpt = "bfloat16",
    field: FieldOpt = None,
    id_field: IdFieldOpt = None,
    report: Annotated[Path | None, typer.Option(
        help="Write the ledger of dropped units here.")] = None,
    skip_bad: SkipBadOpt = False,
    in_place: InPlaceOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """Compress a text (or each record) to --budget tokens; report what was dropped."""
    from ctxkit.jobs import run_compress

    render(run_compress(
        Source(path, field, None, id_field, skip_bad), Target(output, report, in_place),
        budget=budget, query=query, query_field=query_field, scorer=scorer,
        granularity=granularity, tokenizer=tokenizer, force_keep=force_keep or [],
        token_drop=token_drop, kv_model=kv_model, kv_dtype=kv_dtype,
        progress=progress_bar(progress)))


@app.command("chat")
def chat_cmd(
    path: Annotated[Path, typer.Argument(
        help="A JSON message list (OpenAI or ShareGPT), or JSON/JSONL/Parquet conversations "
             "with a messages key.")],
    budget: Annotated[int, typer.Option(
        "--budget", "-b", help="Token budget per conversation.")],
    output: Annotated[Path, typer.Option(
        "-o", "--output", help="Where to write the result (.json, .jsonl or .parquet).")],
    keep_last: Annotated[int, typer.Option(help="Last messages kept verbatim.")] = 2,
    keep_system: Annotated[bool, typer.Option(help="Keep system messages verbatim.")] = True,
    query: Annotated[str | None, typer.Option(
        "--query", "-q", help="Relevance target (default: last user turn).")] = None,
    scorer: Annotated[str, typer.Option(help="embedding | idf | lm")] = "embedding",
    tokenizer: Annotated[str, typer.Option(
        help="Tokenizer the budget is counted in.")] = "cl100k_base",
    alternate: Annotated[bool, typer.Option(
        help="Keep user/assistant turns alternating (for strict chat templates).")] = False,
    shorten: Annotated[bool, typer.Option(
        help="Shorten older turns (low-information words dropped) so more of them fit.")
    ] = True,
    replay: Annotated[bool, typer.Option(
        help="Replay each conversation through ChatMemory, compressing after every message, "
             "and print each turn's history and window tokens.")] = False,
    kv_model: KvModelOpt = None,
    kv_dtype: KvDtypeOpt = "bfloat16",
    id_field: IdFieldOpt = None,
    report: Annotated[Path | None, typer.Option(help="Write the ledger here (JSON).")] = None,
    skip_bad: SkipBadOpt = False,
    in_place: InPlaceOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """Compress chat histories to --budget tokens, keeping the system prompt and last turns."""
    from ctxkit.jobs import run_chat

    render(run_chat(
        Source(path, None, "messages", id_field, skip_bad), Target(output, report, in_place),
        budget=budget, keep_last=keep_last, keep_system=keep_system, query=query,
        scorer=scorer, tokenizer=tokenizer, alternate=alternate, shorten=shorten,
        replay=replay, kv_model=kv_model, kv_dtype=kv_dtype,
        progress=progress_bar(progress)))


@app.command("density")
def density_cmd(
    path: Annotated[Path, typer.Argument(help="JSONL/JSON/Parquet records, or a text file.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Report (.json).")],
    field: FieldOpt = None,
    template: TemplateOpt = None,
    id_field: IdFieldOpt = None,
    scorer: Annotated[str | None, typer.Option(help="idf | lm | embedding | none")] = "idf",
    tokenizer: Annotated[str, typer.Option(
        help="Tokenizer tokens are counted in.")] = "cl100k_base",
    semantic: Annotated[bool, typer.Option(help="Also semantic novelty (embeddings).")] = False,
    threshold: Annotated[float, typer.Option(help="Near-duplicate Jaccard threshold.")] = 0.8,
    skip_bad: SkipBadOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """Information density per text and for the corpus: redundancy, dedup savings, clusters."""
    from ctxkit.jobs import run_density

    render(run_density(
        Source(path, field, template, id_field, skip_bad), Target(output),
        scorer=scorer, tokenizer=tokenizer, semantic=semantic, threshold=threshold,
        progress=progress_bar(progress)))


# ===== evaluation =====


@app.command("eval")
def eval_cmd(
    input_path: Annotated[Path, typer.Argument(
        metavar="IN", help="JSONL, JSON or Parquet records")],
    output_dir: Annotated[Path, typer.Option(
        "-o", "--out", help="Report directory (created; must not be a file).")] = Path("report"),
    field: FieldOpt = None,
    template: TemplateOpt = None,
    capacity: Annotated[int, typer.Option(
        "--capacity", min=1, help="Context window in tokens.")] = 2048,
    tokenizer: Annotated[str, typer.Option("--tokenizer")] = "cl100k_base",
    embedding: Annotated[bool, typer.Option(
        "--embedding", help="Also time packed vs padded embedding.")] = False,
    embed_sample: Annotated[int, typer.Option("--embed-sample", min=1)] = 256,
    no_density: Annotated[bool, typer.Option(
        "--no-density", help="Skip the density section.")] = False,
    no_dedup: Annotated[bool, typer.Option(
        "--no-dedup", help="Skip the redundancy section.")] = False,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    kv_model: KvModelOpt = None,
    kv_dtype: KvDtypeOpt = "bfloat16",
    kv_batch_size: Annotated[int, typer.Option(
        "--kv-batch-size", help="Rows per batch for the padded vs packed KV figures.")] = 8,
    skip_bad: SkipBadOpt = False,
) -> None:
    """How much of the context budget is wasted, and what each stage would save."""
    from ctxkit.jobs import run_eval

    with progress_bar()("evaluating") as advance:
        def step(message: str) -> None:
            if not console.is_terminal:  # no bar to show: say what is happening instead
                console.print(f"[dim]{escape(message)}[/dim]")
            advance(1)

        report = run_eval(
            Source(input_path, field, template, None, skip_bad), Target(output_dir),
            capacity=capacity, tokenizer=tokenizer, embedding=embedding,
            embed_sample=embed_sample, density=not no_density, dedup=not no_dedup, seed=seed,
            kv_model=kv_model, kv_dtype=kv_dtype, kv_batch_size=kv_batch_size, step=step)
    render(report)


# ===== entry point =====


class Terminated(BaseException):
    """SIGTERM, raised where the process is so that staged outputs are cleaned up."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def _error(message: str) -> None:
    """One ``error:`` line on stderr, never wrapped."""
    prefix = "\x1b[31merror:\x1b[0m" if sys.stderr.isatty() else "error:"
    print(f"{prefix} {' '.join(message.split())}", file=sys.stderr)


def _command_params(argv: list[str]) -> set[str]:
    """Option names of the subcommand named in ``argv`` (for hints that name a flag)."""
    group = typer.main.get_command(app)
    name = next((a for a in argv if not a.startswith("-")), None)
    command = getattr(group, "commands", {}).get(name)
    return {opt for p in getattr(command, "params", []) for opt in getattr(p, "opts", [])}


def _input_error(exc: InputError, argv: list[str]) -> str:
    """The error line, with its hint only when the hint's flags are the command's own."""
    hint = exc.hint
    if hint is None and isinstance(exc, RecordError) and exc.index is not None:
        hint = "use --skip-bad to skip and list such records"  # one record, not the file
    if hint and set(re.findall(r"--[a-z][a-z-]*", hint)) <= _command_params(argv):
        return f"{exc} ({hint})"
    return str(exc)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ctxkit`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _state["debug"] = os.environ.get("CTXKIT_DEBUG", "") not in ("", "0")
    previous = None
    with contextlib.suppress(ValueError):  # only the main thread may set handlers
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = app(args=argv, prog_name="ctxkit", standalone_mode=False)
        code = code if isinstance(code, int) else 0
        if code == EXIT_INTERRUPTED:  # typer turns Ctrl-C into this exit code
            _error("interrupted; no output was replaced")
        return code
    except InputError as exc:
        if _state["debug"]:
            traceback.print_exc()
        _error(_input_error(exc, argv))
        return EXIT_INPUT
    except typer.Exit as exc:
        return exc.exit_code
    except _UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # the help (already shown) is the answer
            if exc.format_message().strip():
                exc.show()
            return getattr(exc, "exit_code", EXIT_INPUT)
        ctx = getattr(exc, "ctx", None)
        where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        _error(exc.format_message() + where)
        return getattr(exc, "exit_code", EXIT_INPUT)
    except (typer.Abort, KeyboardInterrupt):
        _error("interrupted; no output was replaced")
        return EXIT_INTERRUPTED
    except Terminated:
        _error("terminated; no output was replaced")
        return EXIT_TERMINATED
    except MemoryError:
        _error("out of memory; try a smaller input, --chunk-size or --capacity")
        return EXIT_INPUT
    except OSError as exc:
        if _state["debug"]:
            traceback.print_exc()
        name = f": {exc.filename}" if exc.filename else ""
        _error(f"{exc.strerror or exc}{name}")
        return EXIT_INPUT
    except Exception as exc:
        if _state["debug"]:
            traceback.print_exc()
            _error(f"internal error: {type(exc).__name__}: {exc}")
        else:
            _error(f"internal error: {type(exc).__name__}: {exc} -- a bug in ctxkit; rerun "
                   "with --debug (or CTXKIT_DEBUG=1) for the traceback and report it")
        return EXIT_INTERNAL
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
