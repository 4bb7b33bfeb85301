"""``ctxkit compress``, ``ctxkit chat`` and ``ctxkit density``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ctxkit.chat.options import ChatOptions
from ctxkit.cli.app import (
    KV_DTYPE,
    BudgetOpt,
    FieldOpt,
    IdFieldOpt,
    InPlaceOpt,
    KvDtypeOpt,
    KvModelOpt,
    ProgressOpt,
    QueryFieldOpt,
    QueryOpt,
    ReportOpt,
    ScorerOpt,
    SkipBadOpt,
    TemplateOpt,
    TokenizerOpt,
    app,
    refuse_unused,
    run_job,
)
from ctxkit.compression.options import CompressOptions, DensityOptions
from ctxkit.jobs import Source, Target

__all__ = ["chat_cmd", "compress_cmd", "density_cmd"]


@app.command("compress")
def compress_cmd(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(
        metavar="IN", help="A text file, or JSONL/JSON/Parquet records.")],
    budget: BudgetOpt,
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="A text file for text input; records (format by suffix) for "
                               "records, each with every field kept.")],
    query: QueryOpt = None,
    query_field: QueryFieldOpt = None,
    scorer: ScorerOpt = CompressOptions.scorer,
    granularity: Annotated[str, typer.Option(
        help="coarse-to-fine | sentence | token | chunk")] = CompressOptions.granularity,
    tokenizer: TokenizerOpt = CompressOptions.tokenizer,
    force_keep: Annotated[list[str] | None, typer.Option(
        "--force-keep", help="Text that must survive.")] = None,
    token_drop: Annotated[float, typer.Option(
        help="Share of words to drop inside kept units.")] = CompressOptions.token_drop,
    kv_model: KvModelOpt = None,
    kv_dtype: KvDtypeOpt = KV_DTYPE,
    field: FieldOpt = None,
    id_field: IdFieldOpt = None,
    report: ReportOpt = None,
    skip_bad: SkipBadOpt = False,
    in_place: InPlaceOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """Compress a text (or each record) to --budget tokens; report what was dropped."""
    from ctxkit.jobs import run_compress

    refuse_unused(ctx, "kv_dtype", "--kv-dtype", "--kv-model", kv_model is not None)

    run_job(run_compress, Source(path, field, None, id_field, skip_bad),
            Target(output, report, in_place), progress,
            budget=budget, query=query, query_field=query_field, scorer=scorer,
            granularity=granularity, tokenizer=tokenizer, force_keep=tuple(force_keep or ()),
            token_drop=token_drop, kv_model=kv_model, kv_dtype=kv_dtype)


@app.command("chat")
def chat_cmd(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(
        metavar="IN", help="A JSON message list (OpenAI or ShareGPT), or JSON/JSONL/Parquet "
                           "conversations with a messages key.")],
    budget: Annotated[int, typer.Option("--budget", "-b",
                                        help="Token budget per conversation.")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Where to write the result (.json, .jsonl or .parquet).")],
    keep_last: Annotated[int, typer.Option(
        help="Last messages kept verbatim.")] = ChatOptions.keep_last,
    keep_system: Annotated[bool, typer.Option(
        help="Keep system messages verbatim.")] = ChatOptions.keep_system,
    query: Annotated[str | None, typer.Option(
        "--query", "-q", help="Relevance target (default: last user turn).")] = None,
    scorer: ScorerOpt = ChatOptions.scorer,
    tokenizer: TokenizerOpt = ChatOptions.tokenizer,
    alternate: Annotated[bool, typer.Option(
        help="Keep user/assistant turns alternating (for strict chat templates).")
    ] = ChatOptions.alternate,
    shorten: Annotated[bool, typer.Option(
        help="Shorten older turns (low-information words dropped) so more of them fit.")
    ] = ChatOptions.shorten,
    replay: Annotated[bool, typer.Option(
        help="Replay each conversation through ChatMemory, compressing after every message, "
             "and print each turn's history, window and prompt-cached tokens.")] = False,
    prefix_cache: Annotated[bool, typer.Option(
        "--prefix-cache", help="With --replay: windows that only grow at their end between "
                               "compactions, so a provider's prompt cache serves them.")
    ] = False,
    summarize: Annotated[str | None, typer.Option(
        "--summarize", help="Fold evicted turns into one summary message: extractive, smollm2 "
                            "or an OpenAI-compatible base URL (with --summary-model).")
    ] = None,
    summary_model: Annotated[str | None, typer.Option(
        "--summary-model", help="The model an endpoint given to --summarize serves.")] = None,
    kv_model: KvModelOpt = None,
    kv_dtype: KvDtypeOpt = KV_DTYPE,
    id_field: IdFieldOpt = None,
    report: ReportOpt = None,
    skip_bad: SkipBadOpt = False,
    in_place: InPlaceOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """Compress chat histories to --budget tokens, keeping the system prompt and last turns."""
    from ctxkit.jobs import run_chat

    refuse_unused(ctx, "kv_dtype", "--kv-dtype", "--kv-model", kv_model is not None)

    run_job(run_chat, Source(path, None, "messages", id_field, skip_bad),
            Target(output, report, in_place), progress,
            budget=budget, keep_last=keep_last, keep_system=keep_system, query=query,
            scorer=scorer, tokenizer=tokenizer, alternate=alternate, shorten=shorten,
            replay=replay, prefix_cache=prefix_cache, summarize=summarize,
            summary_model=summary_model, kv_model=kv_model, kv_dtype=kv_dtype)


@app.command("density")
def density_cmd(
    path: Annotated[Path, typer.Argument(
        metavar="IN", help="JSONL/JSON/Parquet records, or a text file.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Report (.json).")],
    field: FieldOpt = None,
    template: TemplateOpt = None,
    id_field: IdFieldOpt = None,
    scorer: Annotated[str | None, typer.Option(help="idf | lm | embedding | none")
                      ] = DensityOptions.scorer,
    tokenizer: TokenizerOpt = DensityOptions.tokenizer,
    semantic: Annotated[bool, typer.Option(help="Also semantic novelty (embeddings).")
                        ] = DensityOptions.semantic,
    threshold: Annotated[float, typer.Option(help="Near-duplicate Jaccard threshold.")
                         ] = DensityOptions.threshold,
    skip_bad: SkipBadOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """Information density per text and for the corpus: redundancy, dedup savings, clusters."""
    from ctxkit.jobs import run_density

    run_job(run_density, Source(path, field, template, id_field, skip_bad), Target(output),
            progress, scorer=scorer, tokenizer=tokenizer, semantic=semantic,
            threshold=threshold)
