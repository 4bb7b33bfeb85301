"""``ctxkit eval`` as a function: what each stage would save on a dataset, as a report
directory (``report.json``, ``report.md`` and plots)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxkit.errors import InputError, OptionError
from ctxkit.jobs.common import JobReport, Source, Target, check_capacity, require_records
from ctxkit.jobs.kv import check_kv

__all__ = ["EvalJobReport", "run_eval"]


@dataclass
class EvalJobReport(JobReport):
    """The :class:`~ctxkit.evaluation.harness.EvaluateResult` and the files written."""

    capacity: int = 0
    texts: int = 0
    evaluation: Any = None
    files: list[str] = field(default_factory=list)

    def summary(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [("texts", self.texts)]
        util = self.evaluation.sections.get("utilization", {})
        if util:
            rows.append(("lower bound (windows)", util["lower_bound"]))
            for name, figures in util["methods"].items():
                rows.append((f"{name}: windows / utilization",
                             f"{figures['windows']:,} / {figures['utilization']:.1%}"))
        kv = self.evaluation.sections.get("kv_cache", {})
        if kv:
            from ctxkit.kvcache.accounting import format_bytes

            rows.append((f"KV per token ({kv['model']}, {kv['dtype']}; batches of "
                         f"{kv['batch_rows']} rows)", format_bytes(kv["per_token_bytes"])))
            for name, figures in kv["methods"].items():
                rows.append((f"{name}: KV per batch (mean) / one pass",
                             f"{format_bytes(figures['mean_kv_per_batch_mib'] * 2**20)} / "
                             f"{format_bytes(figures['kv_over_pass_gib'] * 2**30)}"))
            stages = kv.get("stages", {})
            for first, then, label in (("all texts", "after dedup", "all texts -> after dedup"),
                                       ("compression sample", "compression sample at 1/2",
                                        "compression sample -> at 1/2")):
                if then in stages:
                    rows.append((f"KV of {label}",
                                 f"{format_bytes(stages[first]['kv_gib'] * 2**30)} -> "
                                 f"{format_bytes(stages[then]['kv_gib'] * 2**30)} "
                                 f"(saves {stages[then]['kv_saved_share']:.1%})"))
        return rows

    def to_dict(self) -> dict[str, Any]:
        return self.evaluation.to_dict()


def run_eval(
    source: Source,
    target: Target,
    *,
    capacity: int = 2048,
    tokenizer: str = "cl100k_base",
    embedding: bool = False,
    embed_sample: int = 256,
    density: bool = True,
    dedup: bool = True,
    seed: int = 0,
    kv_model: str | None = None,
    kv_dtype: str = "bfloat16",
    kv_batch_size: int = 8,
    step: Callable[[str], None] | None = None,
) -> EvalJobReport:
    """Evaluate ``source`` and write ``report.json``, ``report.md`` and one PNG per section
    into the directory ``target.output`` (created if needed; files already there with other
    names are left alone). ``step(message)`` is called as each section starts. ``kv_model``
    adds the KV-cache section: padded vs packed KV memory per batch of ``kv_batch_size`` rows."""
    from ctxkit.evaluation.harness import evaluate
    from ctxkit.io.outputs import write_json

    check_capacity(capacity)
    kv_shape = check_kv(kv_model, kv_dtype)
    if kv_batch_size <= 0:
        raise OptionError("--kv-batch-size", f"--kv-batch-size must be >= 1, got {kv_batch_size}")
    sections = ["lengths", "utilization"]
    sections += ["redundancy"] if dedup else []
    sections += ["density"] if density else []
    sections += ["embedding"] if embedding else []
    source.check()
    out = target.output
    if out.suffix.lower() in (".md", ".json", ".html", ".png", ".txt") and not out.is_dir():
        raise OptionError("--output", f"--output names the report folder (eval writes "
                                      f"report.json, report.md and plots into it), not a file: "
                                      f"{out.name}; try -o {out.with_suffix('')}")
    written = ("report.json", "report.md", *(f"{s}.png" for s in sections))  # plots by section
    target.check((source.path,), directory=True, files=tuple(out / name for name in written))
    report = EvalJobReport(command="eval", input=str(source.path), output=str(target.output),
                           capacity=capacity,
                           title=f"ctxkit eval: {source.path.name} @ {capacity} tokens")
    records = list(source.records(report.read))
    require_records(len(records), source, report.read)
    try:
        ev = evaluate([r.text for r in records], capacity=capacity, tokenizer=tokenizer,
                      sections=sections, embed_sample=embed_sample, seed=seed,
                      name=source.path.name, content=[r.content for r in records],
                      progress=step, kv_model=kv_shape, kv_dtype=kv_dtype,
                      kv_batch_size=kv_batch_size)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    ev.dataset["skipped_records"] = report.read.to_dict()["skipped"]
    report.evaluation, report.texts = ev, len(records)
    out.mkdir(parents=True, exist_ok=True)
    with target.staged() as (staged, _), tempfile.TemporaryDirectory(dir=out) as scratch:
        plots = ev.plot(scratch)
        for plot in plots:
            staged.adopt(plot, out / Path(plot).name)
        json_tmp, md_tmp = staged.path(out / "report.json"), staged.path(out / "report.md")
        write_json(json_tmp, ev.to_dict())
        md_tmp.write_text(ev.to_markdown([Path(p).name for p in plots]), encoding="utf-8")
        report.files = [str(out / "report.md"), str(out / "report.json")] + \
            [str(out / Path(p).name) for p in plots]
        staged.commit()  # before the scratch directory holding the plots goes
    report.notes.append(f"wrote {out / 'report.md'}, {out / 'report.json'} and "
                        f"{len(plots)} plot(s)")
    return report
