"""``ctxkit embed`` and ``ctxkit classify``: packed passes of a local model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ctxkit.cli.app import (
    BatchTokensOpt,
    ChunkSizeOpt,
    DeviceOpt,
    DtypeOpt,
    FieldOpt,
    IdFieldOpt,
    InPlaceOpt,
    ProgressOpt,
    QueryFieldOpt,
    RayOpt,
    ReportOpt,
    SkipBadOpt,
    TemplateOpt,
    app,
    quiet_transformers,
    run_stage,
)
from ctxkit.cli.render import progress_bar, render
from ctxkit.embedding.options import ClassifyOptions, EmbedOptions
from ctxkit.jobs import Source, Target

__all__ = ["classify_cmd", "embed_cmd"]


@app.command("embed")
def embed_cmd(
    input_path: Annotated[Path, typer.Argument(metavar="IN", help="JSONL, JSON or Parquet "
                                               "records.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="vectors.npy or .parquet")],
    field: FieldOpt = None,
    template: TemplateOpt = None,
    ids: Annotated[bool, typer.Option(help="Also write record ids (a parquet column, or "
                                      "<output>.ids.jsonl beside a .npy).")] = False,
    id_field: IdFieldOpt = None,
    model: Annotated[Path | None, typer.Option(help="Local sentence-transformers directory "
                                               "(default: bundled all-MiniLM-L6-v2).")] = None,
    device: DeviceOpt = EmbedOptions.device,
    dtype: DtypeOpt = EmbedOptions.dtype,
    batch_tokens: BatchTokensOpt = EmbedOptions.batch_tokens,
    chunk_size: ChunkSizeOpt = EmbedOptions.chunk_size,
    normalize: Annotated[bool | None, typer.Option(
        "--normalize/--no-normalize", help="Default: as the model does.")
    ] = EmbedOptions.normalize,
    skip_bad: SkipBadOpt = False,
    in_place: InPlaceOpt = False,
    progress: ProgressOpt = True,
    report: ReportOpt = None,
    ray_address: RayOpt = None,
) -> None:
    """Embed every record's text with packed passes; same vectors as sentence-transformers."""
    run_stage("embed", ray_address, Source(input_path, field, template, id_field, skip_bad),
              Target(output, report, in_place), progress,
              ids=ids, model=model, device=device, dtype=dtype, batch_tokens=batch_tokens,
              chunk_size=chunk_size, normalize=normalize)


@app.command("classify")
def classify_cmd(
    input_path: Annotated[Path, typer.Argument(metavar="IN", help="JSONL, JSON or Parquet "
                                               "records.")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Labels and scores, one record per input (.jsonl, .json or "
                               ".parquet).")],
    model: Annotated[Path, typer.Option(help="Local sequence-classifier or cross-encoder "
                                        "directory.")],
    query: Annotated[str | None, typer.Option(
        "--query", "-q", help="Score (query, text) pairs with this query (cross-encoders).")
    ] = None,
    query_field: QueryFieldOpt = None,
    field: FieldOpt = None,
    template: TemplateOpt = None,
    id_field: IdFieldOpt = None,
    device: DeviceOpt = ClassifyOptions.device,
    dtype: DtypeOpt = ClassifyOptions.dtype,
    batch_tokens: BatchTokensOpt = ClassifyOptions.batch_tokens,
    chunk_size: ChunkSizeOpt = ClassifyOptions.chunk_size,
    max_length: Annotated[int | None, typer.Option(
        help="Truncate inputs to this many tokens (default: the model's).")
    ] = ClassifyOptions.max_length,
    report: ReportOpt = None,
    skip_bad: SkipBadOpt = False,
    in_place: InPlaceOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """Classify every record (or rerank (query, text) pairs) with packed passes; same logits
    as the unpacked model."""
    from ctxkit.jobs import run_classify

    with quiet_transformers(not progress):
        job = run_classify(
            Source(input_path, field, template, id_field, skip_bad),
            Target(output, report, in_place),
            model=model, query=query, query_field=query_field, device=device, dtype=dtype,
            batch_tokens=batch_tokens, chunk_size=chunk_size, max_length=max_length,
            progress=progress_bar(progress))
    render(job)
