"""``ctxkit dedup`` as a function: keep one record of each duplicate cluster, report the rest."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxkit.deduplication.options import MinHashOptions
from ctxkit.errors import InputError, OptionError
from ctxkit.jobs.common import (
    JobReport,
    Progress,
    Source,
    Target,
    no_progress,
    require_records,
)

__all__ = ["DedupReport", "parse_threshold", "run_dedup"]

KEEP_RULES = ("first", "last", "longest")


def parse_threshold(value: str | None) -> float | dict[str, float] | None:
    """``"0.8"`` for every stage, or ``"minhash=0.5,semantic=0.85"`` per stage."""
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
        raise OptionError("--threshold", "--threshold must be a number or method=number pairs, "
                                         f"got {value!r}") from None


def _where(rec: Any) -> dict[str, Any]:
    """``line`` (None for Parquet) and the JSON element or Parquet row of a record."""
    return {"line": rec.line, **(rec.location.to_dict() if rec.location else {})}


@dataclass
class DedupReport(JobReport):
    """Records in, kept, and one entry per removed record (its id, line, the kept id it
    duplicates, method and similarity)."""

    method: list[str] = field(default_factory=list)
    threshold: Any = None
    keep: str = "first"
    records: int = 0
    kept: int = 0
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    stages: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> list[tuple[str, Any]]:
        return [("records", self.records), ("kept", self.kept),
                ("removed", len(self.duplicates)), ("skipped (bad)", self.read.n_skipped)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input, "output": self.output, "method": self.method,
            "threshold": self.threshold, "keep": self.keep, "records": self.records,
            "kept": self.kept, "removed": len(self.duplicates),
            "skipped": self.read.to_dict()["skipped"], "stages": self.stages,
            "warnings": self.warnings, "duplicates": self.duplicates,
        }


def run_dedup(
    source: Source,
    target: Target,
    *,
    method: str = "exact,minhash",
    threshold: float | Mapping[str, float] | None = None,
    keep: str = KEEP_RULES[0],
    num_perm: int = MinHashOptions.num_perm,
    ngram: int = MinHashOptions.ngram,
    unit: str = MinHashOptions.unit,
    punctuation: bool = False,
    seed: int = MinHashOptions.seed,
    boilerplate: float | None = MinHashOptions.boilerplate,
    progress: Progress = no_progress,
) -> DedupReport:
    """Remove duplicate records of ``source`` and write the kept ones, unchanged, to
    ``target.output`` (format by suffix).

    ``method`` lists the stages in order (``exact``, ``minhash``, ``semantic``). With
    ``exact`` alone and ``keep="first"`` the input is streamed once (16 bytes of memory per
    distinct text); otherwise texts are read, deduplicated, and the input is read again to
    write the kept records.

    Example:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> d = Path(tempfile.mkdtemp())
        >>> rows = [{"text": "same"}, {"text": "same"}, {"text": "other"}]
        >>> _ = (d / "in.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
        >>> rep = run_dedup(Source(d / "in.jsonl"), Target(d / "out.jsonl"), method="exact")
        >>> rep.kept, [(e["id"], e["duplicate_of"]) for e in rep.duplicates]
        (2, [('1', '0')])
    """
    from ctxkit.deduplication.exact import ExactDeduper
    from ctxkit.deduplication.normalize import Normalization
    from ctxkit.deduplication.pipeline import check_threshold, dedup, parse_methods
    from ctxkit.io.outputs import record_format, write_json, write_records

    try:
        stages = parse_methods(method)
    except ValueError as exc:
        raise OptionError("--method", f"--method: {exc}") from None
    try:
        check_threshold(threshold, stages)
    except ValueError as exc:
        raise OptionError("--threshold", f"--{exc}") from None
    idle = sorted(set(threshold) - set(stages)) if isinstance(threshold, Mapping) else []
    if idle:
        raise OptionError("--threshold", f"--threshold names {', '.join(idle)}, which --method "
                                         f"{','.join(stages)} does not run")
    if keep not in KEEP_RULES:
        raise OptionError("--keep", f"--keep must be first, last or longest, got {keep!r}")
    record_format(target.output)
    source.check()
    target.check((source.path,))
    norm = Normalization(punctuation=punctuation)
    report = DedupReport(command="dedup", input=str(source.path), output=str(target.output),
                         method=stages, threshold=threshold, keep=keep, title="dedup")
    suffix = target.output.suffix
    with target.staged() as (staged, report_tmp):
        out_tmp = staged.path(target.output)
        if stages == ["exact"] and keep == "first":
            deduper = ExactDeduper(norm)
            first_ids: list[str] = []

            def streamed() -> Iterator[dict]:
                with progress("dedup (exact)") as advance:
                    for rec in source.records(report.read):
                        first = deduper.add(rec.text)
                        first_ids.append(rec.id)
                        advance()
                        if first is None:
                            yield rec.raw
                        else:
                            report.duplicates.append({
                                "id": rec.id, **_where(rec), "duplicate_of": first_ids[first],
                                "method": "exact", "similarity": 1.0})

            report.kept = write_records(out_tmp, streamed(), fmt=suffix)
            report.records = report.read.read
        else:
            texts, ids, wheres = [], [], []
            with progress("reading") as advance:
                for rec in source.records(report.read):
                    texts.append(rec.text)
                    ids.append(rec.id)
                    wheres.append(_where(rec))
                    advance()
            require_records(len(texts), source, report.read)
            options: dict[str, Any] = {"normalization": norm} \
                if {"exact", "minhash"} & set(stages) else {}
            if "minhash" in stages:
                options.update(num_perm=num_perm, ngram=ngram, unit=unit,
                               boilerplate=boilerplate)
            if {"minhash", "semantic"} & set(stages):
                options["seed"] = seed
            with progress(f"dedup ({', '.join(stages)})", len(stages)) as advance:
                try:
                    result = dedup(texts, method=stages, threshold=threshold, keep=keep, **options)
                except (ValueError, TypeError) as exc:
                    raise InputError(str(exc)) from None
                advance(len(stages))
            report.stages, report.warnings = result.info, result.warnings
            report.notes += [f"warning: {w}" for w in result.warnings]
            # ledger() lists removed items in index order, as result.removed does
            for row, i in zip(result.ledger(ids), result.removed):
                report.duplicates.append({**row, **wheres[i]})
            keep_mask = result.duplicate_of < 0

            def kept_rows() -> Iterator[dict]:
                # second pass over the input: records come back in the same order
                with progress("writing", len(texts)) as advance:
                    for i, rec in enumerate(source.records()):
                        advance()
                        if keep_mask[i]:
                            yield rec.raw

            report.kept = write_records(out_tmp, kept_rows(), fmt=suffix)
            report.records = len(texts)
        require_records(report.records, source, report.read)
        if report_tmp is not None:
            write_json(report_tmp, report.to_dict())
    return report
