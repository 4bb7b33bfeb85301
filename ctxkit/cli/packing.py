"""``ctxkit pack`` and ``ctxkit demo``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ctxkit.cli.app import (
    DEFAULT_TOKENIZER,
    CapacityOpt,
    FieldOpt,
    IdFieldOpt,
    InPlaceOpt,
    ProgressOpt,
    RayOpt,
    ReportOpt,
    SkipBadOpt,
    TemplateOpt,
    TokenizerOpt,
    app,
    check_seed,
    run_stage,
)
from ctxkit.cli.render import out, print_table, render
from ctxkit.errors import InputError
from ctxkit.jobs import Source, Target
from ctxkit.packing.options import PackOptions

__all__ = ["demo_cmd", "pack_cmd"]


@app.command("pack")
def pack_cmd(
    input_path: Annotated[Path, typer.Argument(
        metavar="IN", help="JSONL, JSON or Parquet records.")],
    capacity: CapacityOpt,
    output: Annotated[Path, typer.Option("--output", "-o", help="OUT.parquet, .jsonl or .json")],
    tokenizer: TokenizerOpt = DEFAULT_TOKENIZER,
    strategy: Annotated[str, typer.Option(
        help="bfd, ffd, wrapped, greedy or optimal.")] = PackOptions.strategy,
    template: TemplateOpt = None,
    field: FieldOpt = None,
    id_field: IdFieldOpt = None,
    separator: Annotated[str, typer.Option(
        help="Appended after each record: eos, none or a token id.")] = "eos",
    overflow: Annotated[str, typer.Option(
        help="Records over capacity: error, split, truncate or drop.")] = PackOptions.overflow,
    layout: Annotated[str, typer.Option(
        help="padded: rows of exactly capacity; flat: one unpadded row per window "
        "(padding-free training).")] = PackOptions.layout,
    seed: Annotated[int | None, typer.Option(
        help="Shuffle windows deterministically (>= 0).")] = PackOptions.seed,
    pad_id: Annotated[int, typer.Option(help="Token id used for padding.")] = PackOptions.pad_id,
    train_on_prompt: Annotated[bool, typer.Option(
        help="alpaca: keep prompt tokens in the loss.")] = False,
    label_separators: Annotated[bool, typer.Option(
        help="Train on the separator (EOS) token.")] = PackOptions.label_separators,
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
    capacity: CapacityOpt = PackOptions.capacity,
    seed: Annotated[int, typer.Option(
        help="Seed of the generated data and the window order (>= 0).")] = 0,
    tokenizer: TokenizerOpt = DEFAULT_TOKENIZER,
    embed_texts: Annotated[int, typer.Option(
        help="Prompts to embed in the embedding stage (0 skips it).")] = 128,
    write_data: Annotated[Path | None, typer.Option(
        help="Also write the generated records (.jsonl, .json or .parquet), each with a "
             "`text` field: `ctxkit dedup FILE` finds what the demo found; `--template "
             "alpaca` reads prompt and response.")] = None,
) -> None:
    """Run every stage on generated data: dedup, chat compression, packing, packed embedding."""
    from ctxkit.demo import file_records, run_demo
    from ctxkit.io.outputs import write_records
    from ctxkit.jobs.common import check_capacity
    from ctxkit.jobs.pack import batch_report

    if n <= 0:
        raise InputError(f"--n must be a positive number of records, got {n}")
    check_capacity(capacity)
    check_seed(seed)
    if write_data is not None:
        Target(write_data).check()
    try:
        res = run_demo(n=n, capacity=capacity, seed=seed, tokenizer=tokenizer,
                       embed_texts=embed_texts)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if write_data is not None:
        write_records(write_data, file_records(res.data.records))
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
