"""``ctxkit dedup`` as a function: keep one record of each duplicate cluster, report the rest."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
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
    # set when the entries went straight to the --report file (out of core), not to duplicates
    removed_count: int | None = None

    @property
    def removed(self) -> int:
        return len(self.duplicates) if self.removed_count is None else self.removed_count

    def summary(self) -> list[tuple[str, Any]]:
        return [("records", self.records), ("kept", self.kept),
                ("removed", self.removed), ("skipped (bad)", self.read.n_skipped)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input, "output": self.output, "method": self.method,
            "threshold": self.threshold, "keep": self.keep, "records": self.records,
            "kept": self.kept, "removed": self.removed,
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
    memory: str | int | None = None,
    tmp_dir: str | os.PathLike | None = None,
    out_of_core: bool | None = None,
    progress: Progress = no_progress,
) -> DedupReport:
    """Remove duplicate records of ``source`` and write the kept ones, unchanged, to
    ``target.output`` (format by suffix).

    ``method`` lists the stages in order (``exact``, ``minhash``, ``semantic``). With
    ``exact`` alone and ``keep="first"`` the input is streamed once (16 bytes of memory per
    distinct text); otherwise texts are read, deduplicated, and the input is read again to
    write the kept records.

    Out of core (:mod:`ctxkit.jobs.dedup_external`) the same records are kept and the same
    report is written, in bounded memory: it runs when ``out_of_core`` is True, or when it
    is None and the in-memory path would not fit ``memory`` (bytes or a size such as
    ``"2G"``; default a quarter of the machine's RAM). Its spill files go to a private
    folder in ``tmp_dir`` (default: the output's folder), removed however the run ends.
    Its report's entries are streamed to ``target.report``; the returned report then
    holds their count (``removed``), not the entries.

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
    from ctxkit.deduplication.external.budget import Budget, default_memory, parse_memory
    from ctxkit.deduplication.normalize import Normalization
    from ctxkit.io.outputs import record_format, write_json
    from ctxkit.jobs.dedup_external import run_out_of_core, use_out_of_core

    stages = _check_stages(method, threshold, keep)
    budget = Budget(default_memory() if memory is None else parse_memory(memory))
    record_format(target.output)
    source.check()
    target.check((source.path,))
    external = use_out_of_core(out_of_core, stages, keep, budget, source)
    norm = Normalization(punctuation=punctuation)
    minhash = {"num_perm": num_perm, "ngram": ngram, "unit": unit, "seed": seed,
               "boilerplate": boilerplate}
    report = DedupReport(command="dedup", input=str(source.path), output=str(target.output),
                         method=stages, threshold=threshold, keep=keep, title="dedup")
    suffix = target.output.suffix
    with target.staged() as (staged, report_tmp):
        out_tmp = staged.path(target.output)
        if external:
            run_out_of_core(source, out_tmp, report_tmp, report, stages=stages,
                            threshold=threshold, keep=keep, norm=norm, minhash=minhash,
                            budget=budget, tmp_dir=Path(tmp_dir or target.output.absolute()
                                                        .parent), fmt=suffix, progress=progress)
            return report
        if stages == ["exact"] and keep == "first":
            _stream_exact(source, out_tmp, report, norm, suffix, progress)
        else:
            options = _stage_options(stages, norm, minhash)
            _in_memory(source, out_tmp, report, options, suffix, progress)
        require_records(report.records, source, report.read)
        if report_tmp is not None:
            write_json(report_tmp, report.to_dict())
    return report


def _check_stages(method: str, threshold: float | Mapping[str, float] | None,
                  keep: str) -> list[str]:
    """The stages of ``--method``, checked against ``--threshold`` and ``--keep``."""
    from ctxkit.deduplication.pipeline import check_threshold, parse_methods

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
    return stages


def _stage_options(stages: list[str], norm: Any, minhash: dict[str, Any]) -> dict[str, Any]:
    """The keyword options of ``dedup()`` for these stages."""
    options: dict[str, Any] = {"normalization": norm} \
        if {"exact", "minhash"} & set(stages) else {}
    if "minhash" in stages:
        options.update({k: v for k, v in minhash.items() if k != "seed"})
    if {"minhash", "semantic"} & set(stages):
        options["seed"] = minhash["seed"]
    return options


def _stream_exact(source: Source, out_tmp: Path, report: DedupReport, norm: Any, fmt: str,
                  progress: Progress) -> None:
    """Exact dedup keeping the first record, in one pass: 16 bytes per distinct text."""
    from ctxkit.deduplication.exact import ExactDeduper
    from ctxkit.io.outputs import write_records

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

    report.kept = write_records(out_tmp, streamed(), fmt=fmt)
    report.records = report.read.read


def _in_memory(source: Source, out_tmp: Path, report: DedupReport, options: dict[str, Any],
               fmt: str, progress: Progress) -> None:
    """Read every text, run ``dedup()`` on them, then write the kept records."""
    from ctxkit.deduplication.pipeline import dedup
    from ctxkit.jobs.dedup_external import write_kept

    stages = report.method
    texts, ids, wheres = [], [], []
    with progress("reading") as advance:
        for rec in source.records(report.read):
            texts.append(rec.text)
            ids.append(rec.id)
            wheres.append(_where(rec))
            advance()
    require_records(len(texts), source, report.read)
    with progress(f"dedup ({', '.join(stages)})", len(stages)) as advance:
        try:
            result = dedup(texts, method=stages, threshold=report.threshold, keep=report.keep,
                           **options)
        except (ValueError, TypeError) as exc:
            raise InputError(str(exc)) from None
        advance(len(stages))
    report.stages, report.warnings = result.info, result.warnings
    report.notes += [f"warning: {w}" for w in result.warnings]
    # ledger() lists removed items in index order, as result.removed does
    for row, i in zip(result.ledger(ids), result.removed):
        report.duplicates.append({**row, **wheres[i]})
    report.kept = write_kept(source, out_tmp, result.duplicate_of < 0, fmt, progress)
    report.records = len(texts)
