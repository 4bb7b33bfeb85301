"""``ctxkit dedup`` out of core: the same kept records and report as the in-memory job, in
memory bounded by a budget instead of by the corpus.

The input is read twice (once into spill files, once to write the kept records); between
the two, the stages run on the spill files (:mod:`ctxkit.deduplication.external`), in a
private folder beside the output (or ``--tmp-dir``) that is removed however the run ends.
It runs exact dedup, MinHash, or exact then MinHash; semantic dedup runs in memory.
Memory per record: offsets of its text and id (16 bytes) and the stages' integer arrays
(about 60 bytes more while MinHash clusters); everything else is a partition of a spill file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.deduplication.external.boiler import common_lines
from ctxkit.deduplication.external.budget import Budget
from ctxkit.deduplication.external.exact import exact_representatives
from ctxkit.deduplication.external.outcome import chain, entries
from ctxkit.deduplication.external.scan import Scan, scan_records
from ctxkit.deduplication.external.spill import spill_dir
from ctxkit.deduplication.external.stage import minhash_stage
from ctxkit.deduplication.normalize import Normalization
from ctxkit.deduplication.options import MinHashOptions
from ctxkit.deduplication.pipeline import _threshold
from ctxkit.errors import InputError, OptionError
from ctxkit.io.outputs import write_json_rows, write_records
from ctxkit.jobs.common import Progress, Source, require_records

__all__ = ["OUT_OF_CORE_METHODS", "run_out_of_core", "use_out_of_core", "write_kept"]

OUT_OF_CORE_METHODS = (["exact", "minhash"], ["minhash"], ["exact"])


def use_out_of_core(flag: bool | None, stages: list[str], keep: str, budget: Budget,
                    source: Source) -> bool:
    """Whether the job runs out of core: as ``flag`` says, or (``None``) when the stages
    allow it and the in-memory path would not fit ``budget``. Exact dedup alone keeping the
    first record streams in one pass already and stays there unless asked."""
    if flag is False:
        return False
    if stages not in OUT_OF_CORE_METHODS:
        if flag:
            raise OptionError("--out-of-core", f"--out-of-core runs exact, minhash or "
                              f"exact,minhash; --method {','.join(stages)} runs in memory")
        return False
    if flag:
        return True
    if stages == ["exact"] and keep == "first":
        return False
    return not budget.fits(source.path.stat().st_size)


def run_out_of_core(source: Source, out_tmp: Path, report_tmp: Path | None, report: Any,
                    *, stages: list[str], threshold: float | Mapping[str, float] | None,
                    keep: str, norm: Normalization, minhash: dict[str, Any], budget: Budget,
                    tmp_dir: Path, fmt: str, progress: Progress) -> None:
    """Fill ``report`` (a :class:`~ctxkit.jobs.dedup.DedupReport`) and write the kept
    records to ``out_tmp`` and the report JSON to ``report_tmp``, streaming its entries."""
    opts = None
    if "minhash" in stages:
        try:
            opts = MinHashOptions.build(threshold=_threshold(threshold, "minhash"),
                                        normalization=norm, **minhash)
        except (ValueError, TypeError) as exc:
            raise InputError(str(exc)) from None
    with spill_dir(tmp_dir) as folder:
        with progress("reading") as advance:
            scan = scan_records(source, folder, digests="exact" in stages,
                                lines=opts is not None and opts.boilerplate is not None,
                                norm=norm, read=report.read, advance=advance)
        try:
            require_records(scan.n, source, report.read)
            out = _stages(scan, stages, keep, opts, folder, budget, progress)
            # exact dedup alone keeping the first runs in one pass in memory; its report
            # has no stages and no matched ids, and this one matches it
            one_pass = stages == ["exact"] and keep == "first"
            if not one_pass:
                found = {"exact": {"method": "exact"}, "minhash": out[1]}
                report.stages = {k: found[k] for k in stages}
            report.warnings = out[0].warnings()
            report.notes += [f"warning: {w}" for w in report.warnings]
            report.records = scan.n
            report.kept = write_kept(source, out_tmp, out[0].duplicate_of < 0, fmt, progress)
            report.removed_count = int((out[0].duplicate_of >= 0).sum())
            if report_tmp is not None:
                head = {k: v for k, v in report.to_dict().items() if k != "duplicates"}
                write_json_rows(report_tmp, head, "duplicates",
                                entries(out[0], scan.ids, scan.wheres.load(),
                                        matched=not one_pass))
        finally:
            scan.release()


def _stages(scan: Scan, stages: list[str], keep: str, opts: MinHashOptions | None,
            folder: Path, budget: Budget, progress: Progress) -> tuple[Any, dict[str, Any]]:
    n = scan.n
    rep = None
    alive = np.arange(n, dtype=np.int64)
    if "exact" in stages:
        lengths = scan.lengths.load() if keep == "longest" else None
        rep = exact_representatives(scan.digests, n, keep, lengths, budget)
        alive = np.flatnonzero(rep == alive)
    result = None
    if opts is not None:
        common = None
        if opts.boilerplate is not None:
            common = common_lines(scan.lines, alive, n, opts.boilerplate, scan.texts, budget)
        with progress("dedup (minhash)", len(alive)) as advance:
            result = minhash_stage(scan.texts, alive, opts, keep, folder, budget, common,
                                   advance)
    return chain(n, rep, alive, result), {} if result is None else result.info


def write_kept(source: Source, path: Path, keep_mask: Any, fmt: str, progress: Progress) -> int:
    """The records of ``source`` where ``keep_mask`` is True, unchanged, to ``path``: a
    second pass over the input, whose records come back in the same order."""
    def kept_rows() -> Iterator[dict]:
        with progress("writing", len(keep_mask)) as advance:
            for i, rec in enumerate(source.records()):
                advance()
                if keep_mask[i]:
                    yield rec.raw

    return write_records(path, kept_rows(), fmt=fmt)
