"""``ctxkit density`` as a function: density per text and for the corpus, as a JSON report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxkit.compression.options import DensityOptions
from ctxkit.errors import InputError
from ctxkit.jobs.common import (
    JobReport,
    Progress,
    Source,
    Target,
    as_flags,
    check_suffix,
    no_progress,
    read_text_file,
    require_records,
)
from ctxkit.jobs.compress import is_records_path

__all__ = ["DensityJobReport", "run_density"]


@dataclass
class DensityJobReport(JobReport):
    """The :class:`~ctxkit.compression.density.DensityResult` with record ids attached."""

    data: dict[str, Any] = field(default_factory=dict)
    density: Any = None

    def summary(self) -> list[tuple[str, Any]]:
        rep = self.density
        rows = [("texts", len(rep.texts)), ("tokens", rep.total_tokens),
                ("near-duplicate share", rep.near_duplicate_share),
                ("tokens dedup would save", rep.dedup_saved_tokens)]
        rows += [(f"{name} (mean, {UNITS.get(name, 'share')})", stats["mean"])
                 for name, stats in rep.summary().items() if name != "tokens"]
        return rows

    def to_dict(self) -> dict[str, Any]:
        return self.data


# what each per-text metric counts in (docs/density.md); ratios not listed are shares in [0, 1]
UNITS = {"compression_ratio": "compressed / raw bytes", "entropy": "bits per token",
         "self_information": "bits per token", "score": "bits per token",
         "semantic_novelty": "1 - max cosine"}


def run_density(
    source: Source,
    target: Target,
    *,
    scorer: str | None = DensityOptions.scorer,
    tokenizer: str = DensityOptions.tokenizer,
    semantic: bool = DensityOptions.semantic,
    threshold: float = DensityOptions.threshold,
    progress: Progress = no_progress,
) -> DensityJobReport:
    """Score the information density of ``source`` (records, or one text file) and write the
    report to ``target.output`` (``.json``): per text (with its record id), the corpus summary
    and the near-duplicate clusters (by id)."""
    from ctxkit.compression.density import density
    from ctxkit.io.outputs import write_json

    check_suffix(target.output, (".json",), "the density report")
    as_flags(DensityOptions, scorer=None if scorer in (None, "none") else scorer,
             tokenizer=tokenizer, semantic=semantic, threshold=threshold)
    source.check()
    target.check((source.path,))
    report = DensityJobReport(command="density", input=str(source.path),
                              output=str(target.output), title="density")
    with target.staged() as (staged, _):
        out_tmp = staged.path(target.output)
        if is_records_path(source.path):
            records = list(source.records(report.read))
            require_records(len(records), source, report.read)
            ids, texts = [r.id for r in records], [r.text for r in records]
        else:
            ids, texts = ["0"], [read_text_file(source.path)]
        with progress("scoring", 1) as advance:
            try:
                rep = density(texts, tokenizer=tokenizer,
                              scorer=None if scorer in (None, "none") else scorer,
                              threshold=threshold, semantic=semantic)
            except (ValueError, TypeError, ImportError) as exc:
                raise InputError(str(exc)) from None
            advance()
        data = rep.to_dict()
        for row, rid in zip(data["texts"], ids):
            row["id"] = rid
        for cluster in data["clusters"]:
            cluster["keep"] = ids[cluster["keep"]]
            cluster["duplicates"] = [ids[i] for i in cluster["duplicates"]]
        data["skipped"] = report.read.to_dict()
        report.data, report.density = data, rep
        write_json(out_tmp, data)
    return report
