"""``ctxkit dedup``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ctxkit.cli.app import (
    FieldOpt,
    IdFieldOpt,
    InPlaceOpt,
    ProgressOpt,
    RayOpt,
    ReportOpt,
    SkipBadOpt,
    TemplateOpt,
    app,
    check_seed,
    run_stage,
)
from ctxkit.deduplication.options import MinHashOptions
from ctxkit.errors import OptionError
from ctxkit.jobs import Source, Target
from ctxkit.jobs.dedup import KEEP_RULES

__all__ = ["dedup_cmd"]


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
        "--threshold",
        help="Similarity for duplicates: one number for every stage, or minhash=0.7,semantic=0.9 "
             "(defaults: MinHash Jaccard 0.7, semantic cosine 0.9); a method named must run.")
    ] = None,
    field: FieldOpt = None,
    template: TemplateOpt = None,
    id_field: IdFieldOpt = None,
    report_path: ReportOpt = None,
    keep: Annotated[str, typer.Option(
        "--keep", help="Representative kept: first, last, longest.")] = KEEP_RULES[0],
    num_perm: Annotated[int, typer.Option(
        "--num-perm", help="MinHash permutations.")] = MinHashOptions.num_perm,
    ngram: Annotated[int, typer.Option(
        "--ngram", help="MinHash shingle size.")] = MinHashOptions.ngram,
    unit: Annotated[str, typer.Option(
        "--unit", help="MinHash shingles of char or word n-grams.")] = MinHashOptions.unit,
    punctuation: Annotated[bool, typer.Option(
        "--ignore-punctuation", help="Strip punctuation first.")] = False,
    seed: Annotated[int, typer.Option(
        "--seed", help="Seed for MinHash permutations and k-means (>= 0).")
    ] = MinHashOptions.seed,
    boilerplate: Annotated[float | None, typer.Option(
        "--strip-boilerplate", metavar="SHARE",
        help="MinHash: leave out lines found in at least this share of the records (a shared "
             "template), e.g. 0.01.")] = MinHashOptions.boilerplate,
    memory: Annotated[str | None, typer.Option(
        "--memory", metavar="SIZE",
        help="Memory budget, e.g. 2G (default: a quarter of this machine's RAM); an input "
             "whose in-memory dedup would not fit it is deduplicated out of core.")] = None,
    tmp_dir: Annotated[Path | None, typer.Option(
        "--tmp-dir", help="Where out-of-core spill files go (default: beside the output); "
                          "removed when the run ends.")] = None,
    out_of_core: Annotated[bool | None, typer.Option(
        "--out-of-core/--in-memory",
        help="Force the out-of-core path (exact and MinHash, bounded memory, the same "
             "result) or the in-memory one (default: by --memory).")] = None,
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

    check_seed(seed)
    if ray_address is not None and boilerplate is not None:
        raise OptionError("--strip-boilerplate", "--strip-boilerplate counts lines over the "
                          "whole corpus and does not run with --ray; strip templates first "
                          "or pick the varying --field")
    local = {} if ray_address is not None else {
        "boilerplate": boilerplate, "memory": memory, "tmp_dir": tmp_dir,
        "out_of_core": out_of_core}
    if ray_address is not None and (memory, tmp_dir, out_of_core) != (None, None, None):
        raise OptionError("--memory", "--memory, --tmp-dir and --out-of-core/--in-memory "
                          "choose this machine's path and do not run with --ray")
    run_stage("dedup", ray_address, Source(input_path, field, template, id_field, skip_bad),
              Target(output, report_path, in_place), progress,
              method=method, threshold=parse_threshold(threshold), keep=keep,
              num_perm=num_perm, ngram=ngram, unit=unit, punctuation=punctuation, seed=seed,
              **local)
