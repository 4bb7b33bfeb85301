"""``ctxkit eval``: how much of the context budget a dataset wastes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ctxkit.cli.app import (
    DEFAULT_TOKENIZER,
    KV_DTYPE,
    CapacityOpt,
    FieldOpt,
    KvDtypeOpt,
    KvModelOpt,
    SkipBadOpt,
    TemplateOpt,
    TokenizerOpt,
    app,
    check_seed,
    refuse_unused,
)
from ctxkit.cli.render import console, progress_bar, render
from ctxkit.jobs import Source, Target
from ctxkit.packing.options import PackOptions

__all__ = ["eval_cmd"]


@app.command("eval")
def eval_cmd(
    ctx: typer.Context,
    input_path: Annotated[Path, typer.Argument(
        metavar="IN", help="JSONL, JSON or Parquet records")],
    output_dir: Annotated[Path, typer.Option(
        "--output", "-o", help="Report directory (created; must not be a file).")
    ] = Path("report"),
    field: FieldOpt = None,
    template: TemplateOpt = None,
    capacity: CapacityOpt = PackOptions.capacity,
    tokenizer: TokenizerOpt = DEFAULT_TOKENIZER,
    embedding: Annotated[bool, typer.Option(
        "--embedding", help="Also time packed vs padded embedding.")] = False,
    embed_sample: Annotated[int, typer.Option("--embed-sample", min=1)] = 256,
    no_density: Annotated[bool, typer.Option(
        "--no-density", help="Skip the density section.")] = False,
    no_dedup: Annotated[bool, typer.Option(
        "--no-dedup", help="Skip the redundancy section.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (>= 0).")] = 0,
    kv_model: KvModelOpt = None,
    kv_dtype: KvDtypeOpt = KV_DTYPE,
    kv_batch_size: Annotated[int, typer.Option(
        "--kv-batch-size", help="Rows per batch for the padded vs packed KV figures.")] = 8,
    skip_bad: SkipBadOpt = False,
) -> None:
    """How much of the context budget is wasted, and what each stage would save."""
    from ctxkit.jobs import run_eval
    from ctxkit.jobs.common import check_capacity

    check_capacity(capacity)
    check_seed(seed)
    refuse_unused(ctx, "kv_dtype", "--kv-dtype", "--kv-model", kv_model is not None)
    refuse_unused(ctx, "kv_batch_size", "--kv-batch-size", "--kv-model", kv_model is not None)
    refuse_unused(ctx, "embed_sample", "--embed-sample", "--embedding", embedding)
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
