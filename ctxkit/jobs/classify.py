"""``ctxkit classify`` as a function: a sequence classifier or cross-encoder over records,
run on packed rows, streamed in chunks."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxkit.errors import InputError
from ctxkit.jobs.common import (
    JobReport,
    Progress,
    Source,
    Target,
    no_progress,
    nonempty_records,
    record_query,
)
from ctxkit.jobs.embed import embed_options

__all__ = ["ClassifyReport", "run_classify"]


@dataclass
class ClassifyReport(JobReport):
    """Labels and scores written, with the packing figures of the passes that made them."""

    stats: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    labels: list[str] = field(default_factory=list)
    label_counts: dict[str, int] = field(default_factory=dict)
    max_seq_length: int = 0
    pairs: bool = False

    def summary(self) -> list[tuple[str, Any]]:
        s = self.stats
        return [
            ("records", s["texts"]), ("input", "(query, text) pairs" if self.pairs else "texts"),
            ("tokens", s["tokens"]), ("rows", s["rows"]), ("utilization", s["utilization"]),
            ("records/s", s["texts"] / self.seconds if self.seconds else 0.0),
            ("empty texts", s["empty"]),
            (f"truncated (> {self.max_seq_length} tokens)", s["truncated"]),
            ("skipped records", self.read.n_skipped), ("output", self.output),
        ]

    def to_dict(self) -> dict[str, Any]:
        return {**self.stats, "wall_seconds": self.seconds, "labels": self.labels,
                "label_counts": self.label_counts, "pairs": self.pairs,
                "max_seq_length": self.max_seq_length,
                "skipped": self.read.to_dict()["skipped"], "output": self.output}


def run_classify(
    source: Source,
    target: Target,
    *,
    model: Path,
    query: str | None = None,
    query_field: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    batch_tokens: int | None = None,
    chunk_size: int = 8192,
    max_length: int | None = None,
    progress: Progress = no_progress,
) -> ClassifyReport:
    """Classify every record's text with ``model`` (a local sequence-classifier or
    cross-encoder directory) and write one record per input record, in input order:
    ``{"id", "label", "score", "logits"}`` in the output's format (by suffix).

    ``query`` (the same for every record) or ``query_field`` (per record) makes the input
    ``(query, text)`` pairs, as a cross-encoder reranker takes them. ``label`` is the
    highest-scoring label's name (``config.id2label``), ``score`` its score (the
    cross-encoder's activation, else transformers' pipeline rule: sigmoid for one label,
    softmax otherwise), ``logits`` the raw logits. The input and the options are checked
    before the model loads.
    """
    from ctxkit.embedding.classifier import PackedClassifier, scores_from_logits
    from ctxkit.io.outputs import record_format, write_json, write_records

    record_format(target.output)
    opts = embed_options(model=model, device=device, dtype=dtype, batch_tokens=batch_tokens,
                         chunk_size=chunk_size)
    if query is not None and query_field is not None:
        raise InputError("give either --query or --query-field, not both")
    source.check()
    target.check((source.path,))
    if not Path(model).is_dir():
        raise InputError(f"--model {model}: model directory not found (no downloads offline)")
    pairs = query is not None or query_field is not None
    report = ClassifyReport(command="classify", input=str(source.path),
                            output=str(target.output), title="ctxkit classify", pairs=pairs)
    records = nonempty_records(source, report.read)

    from ctxkit.embedding.encoder import EncodeStats

    try:
        clf = PackedClassifier(model, options=opts, max_length=max_length)
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc)) from None
    labels = clf.labels
    config = clf.classifier.model.config
    total = EncodeStats()
    counts: Counter[str] = Counter()
    t0 = time.perf_counter()

    def item(rec: Any) -> Any:
        if not pairs:
            return rec.text
        return (record_query(rec, query, query_field, required=True), rec.text)

    def rows() -> Iterator[dict[str, Any]]:
        with progress("classifying") as advance:
            while batch := list(itertools.islice(records, chunk_size)):
                logits = clf.predict([item(r) for r in batch])
                total.add(clf.last_stats)
                scores = scores_from_logits(logits, config, clf.classifier.activation)
                best = scores.argmax(axis=1)
                for rec, k, row_scores, row_logits in zip(batch, best, scores, logits):
                    counts[labels[k]] += 1
                    yield {"id": rec.id, "label": labels[k], "score": float(row_scores[k]),
                           "logits": [float(x) for x in row_logits]}
                advance(len(batch))

    with target.staged() as (staged, report_tmp):
        write_records(staged.path(target.output), rows(), fmt=target.output.suffix)
        report.seconds = time.perf_counter() - t0
        report.stats = total.to_dict()
        report.labels, report.max_seq_length = labels, clf.max_seq_length
        report.label_counts = dict(counts.most_common())
        report.tables.append(("records by label", list(counts.most_common())))
        if report_tmp is not None:
            write_json(report_tmp, report.to_dict())
    return report
