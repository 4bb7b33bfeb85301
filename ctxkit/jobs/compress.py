"""``ctxkit compress`` as a function: a text file, or every record, to a token budget."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxkit.compression.options import CompressOptions, check_budget
from ctxkit.errors import InputError, OptionError
from ctxkit.io.outputs import RECORD_FORMATS
from ctxkit.jobs.common import (
    JobReport,
    Progress,
    Source,
    Target,
    as_flags,
    load_models,
    no_progress,
    read_text_file,
    record_query,
    require_records,
)
from ctxkit.jobs.kv import check_kv, kv_note, kv_rows

__all__ = ["CompressReport", "is_records_path", "reason_table", "run_compress"]


def is_records_path(path: Path) -> bool:
    """True for record files (``.jsonl``, ``.json``, ``.parquet``...); other files are text."""
    return path.suffix.lower() in RECORD_FORMATS


def reason_table(codes: Iterable[str | None]) -> list[tuple[str, Any]]:
    """``(code, count)`` rows, most frequent first."""
    counts = Counter(c for c in codes if c)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _dropped_rows(result: Any) -> list[dict[str, Any]]:
    return [{"unit": u.index, "code": u.code, "reason": u.reason, "score": round(u.score, 4),
             "tokens": u.tokens, "text": u.text} for u in result.units if not u.kept or u.reason]


@dataclass
class CompressReport(JobReport):
    """Tokens before and after, and per record the units that were dropped or pruned."""

    budget: int = 0
    records: int = 0
    original_tokens: int = 0
    compressed_tokens: int = 0
    units_kept: int = 0
    units_dropped: int = 0
    ledger: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[tuple[str, Any]] = field(default_factory=list)
    result: Any = None  # the CompressResult of a single text file
    kv: Any = None  # KVCacheChange with --kv-model: every text before and after, summed

    @property
    def ratio(self) -> float:
        return self.compressed_tokens / self.original_tokens if self.original_tokens else 1.0

    def summary(self) -> list[tuple[str, Any]]:
        if self.result is not None:
            rows = [("original tokens", self.original_tokens),
                    ("compressed tokens", self.compressed_tokens), ("budget", self.budget),
                    ("ratio", self.ratio), ("units kept", self.units_kept),
                    ("units dropped", self.units_dropped)]
        else:
            rows = [("records", self.records), ("original tokens", self.original_tokens),
                    ("compressed tokens", self.compressed_tokens), ("ratio", self.ratio)]
        return rows + (kv_rows(self.kv) if self.kv is not None else [])

    def to_dict(self) -> dict[str, Any]:
        kv = {} if self.kv is None else {"kv_cache": self.kv.to_dict()}
        if self.result is not None:
            return {**self.result.to_dict(), **kv}
        return {"input": self.input, "output": self.output, "budget": self.budget,
                "records": self.ledger, "skipped": self.read.to_dict(), **kv}


def run_compress(
    source: Source,
    target: Target,
    *,
    budget: int,
    query: str | None = None,
    query_field: str | None = None,
    scorer: str = CompressOptions.scorer,
    granularity: str = CompressOptions.granularity,
    tokenizer: str = CompressOptions.tokenizer,
    force_keep: tuple[str, ...] | list[str] = CompressOptions.force_keep,
    token_drop: float = CompressOptions.token_drop,
    kv_model: str | None = None,
    kv_dtype: str = "bfloat16",
    progress: Progress = no_progress,
) -> CompressReport:
    """Compress ``source`` to ``budget`` tokens per text and write the result.

    A text file (any suffix but a record format's) gives a text file. A record file gives
    records in the output's format (by suffix), each the input record with its text field
    (``source.field``, default ``text``) replaced, every other field and its id kept; the
    token counts and dropped units are in the report. ``kv_model`` (a preset name,
    ``config.json`` or model directory) adds the KV-cache memory of the texts before and after
    (each text one sequence) in ``kv_dtype``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "in.txt").write_text("Keep the code 4417. " + "Filler words here. " * 20)
        >>> rep = run_compress(Source(d / "in.txt"), Target(d / "out.txt"), budget=12,
        ...                    query="What is the code?")
        >>> rep.compressed_tokens <= 12, "4417" in (d / "out.txt").read_text()
        (True, True)
    """
    from ctxkit.compression.text.pipeline import compress
    from ctxkit.io.outputs import record_format, write_json, write_records
    from ctxkit.kvcache.accounting import kv_cache_change

    budget = as_flags(check_budget, budget)
    opts = as_flags(CompressOptions, tokenizer=tokenizer, scorer=scorer,
                    granularity=granularity, force_keep=tuple(force_keep),
                    token_drop=token_drop)
    if query is not None and query_field is not None:
        raise InputError("give either --query or --query-field, not both")
    records = is_records_path(source.path)
    if records:
        record_format(target.output)
    elif is_records_path(target.output):
        raise InputError(f"{source.path} is a text file, so the output is text; give -o a text "
                         f"file name, not {target.output.name}")
    elif query_field is not None:
        raise OptionError("--query-field", "--query-field names a field of records; "
                                           f"{source.path} is a text file (use --query)")
    if source.template is not None:
        raise OptionError("--template", "compress works on one text field; use --field")
    kv_shape = check_kv(kv_model, kv_dtype)
    opts = load_models(opts)  # once per run, so model-backed scorers load once
    source.check()
    target.check((source.path,))
    report = CompressReport(command="compress", input=str(source.path),
                            output=str(target.output), budget=budget, title="compress")

    def run(text: str, q: str | None, where: str) -> Any:
        try:
            return compress(text, budget, query=q, options=opts)
        except (ValueError, TypeError) as exc:
            raise InputError(f"{where}: {exc}") from None

    with target.staged() as (staged, report_tmp):
        out_tmp = staged.path(target.output)
        if not records:
            res = run(read_text_file(source.path), query, str(source.path))
            out_tmp.write_text(res.text, encoding="utf-8")
            report.result, report.records = res, 1
            report.original_tokens, report.compressed_tokens = (res.original_tokens,
                                                                res.compressed_tokens)
            report.units_kept, report.units_dropped = len(res.kept), len(res.dropped)
            if kv_shape is not None:
                report.kv = res.kv_cache(kv_shape, dtype=kv_dtype)
            codes = [u.code for u in res.dropped]
        else:
            text_field = source.field or "text"
            codes = []
            counts: list[tuple[int, int]] = []

            def rows() -> Iterator[dict[str, Any]]:
                with progress("compressing") as advance:
                    for rec in source.records(report.read):
                        q = record_query(rec, query, query_field, required=True)
                        res = run(rec.text, q, f"{source.path}: record {rec.id}")
                        report.ledger.append({
                            "id": rec.id, "original_tokens": res.original_tokens,
                            "compressed_tokens": res.compressed_tokens,
                            "dropped": _dropped_rows(res)})
                        codes.extend(u.code for u in res.dropped)
                        report.original_tokens += res.original_tokens
                        report.compressed_tokens += res.compressed_tokens
                        counts.append((res.original_tokens, res.compressed_tokens))
                        advance()
                        yield {**rec.raw, text_field: res.text}

            report.records = write_records(out_tmp, rows(), fmt=target.output.suffix)
            require_records(report.records, source, report.read)
            if kv_shape is not None:
                before, after = zip(*counts, strict=True)
                report.kv = kv_cache_change(kv_shape, before, after, kv_dtype)
        if report.kv is not None:
            report.notes.append(kv_note(report.kv.before, tokenizer))
        report.reasons = reason_table(codes)
        if report.reasons:
            report.tables.append(("dropped units by reason", report.reasons))
        if report_tmp is not None:
            write_json(report_tmp, report.to_dict())
    return report
