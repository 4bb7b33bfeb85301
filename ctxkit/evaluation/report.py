"""Rendering an evaluation report (:class:`~ctxkit.evaluation.harness.EvaluateResult`) as Markdown
and PNG plots.

Kept apart from the harness so the measuring code never imports matplotlib. Plots draw on
``matplotlib.figure.Figure`` objects directly: no pyplot state and no backend switch in the
caller's process.

Example:
    >>> import pathlib, tempfile
    >>> from ctxkit.evaluation.harness import evaluate
    >>> rep = evaluate(["a short text", "another one"] * 3, capacity=64,
    ...                sections=("lengths", "utilization"))
    >>> render_markdown(rep).splitlines()[0]
    '# ctxkit report: dataset'
    >>> [p.name for p in plot_report(rep, pathlib.Path(tempfile.mkdtemp()))]
    ['lengths.png', 'utilization.png']
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ctxkit.io.records import atomic_write

__all__ = ["render_markdown", "plot_report"]


class EvaluateResult(Protocol):
    """What rendering reads from a report (the harness's ``EvaluateResult`` has all of it)."""

    dataset: dict[str, Any]
    sections: dict[str, dict[str, Any]]
    notes: dict[str, str]
    lengths: np.ndarray
    extra_arrays: dict[str, np.ndarray]


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.3g}"
        return f"{value:,.4f}".rstrip("0").rstrip(".") if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    return str(value)


_PERCENT_WORDS = ("share", "utilization")
_TITLES = {"kv_cache": "KV-cache memory"}


def _fmt_named(name: str, value: Any) -> str:
    """Shares and utilizations read better as percentages."""
    if isinstance(value, float) and any(w in name for w in _PERCENT_WORDS):
        return f"{value:.2%}"
    return _fmt(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        # a two-column (figure, value) table names each row; wider ones name each column
        names = [str(row[0])] * len(row) if len(header) == 2 else list(header)
        lines.append("| " + " | ".join(_fmt_named(n, v) for n, v in zip(names, row)) + " |")
    return lines


def _flat_rows(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in data.items():
        label = f"{prefix}{key}".replace("_", " ")
        if isinstance(value, dict):
            rows += _flat_rows(value, prefix=f"{label} / ")
        elif isinstance(value, (list, tuple)):
            if value and not isinstance(value[0], (dict, list)):
                rows.append((label, ", ".join(_fmt(v) for v in value[:10])))
        else:
            rows.append((label, value))
    return rows


def _methods_table(methods: dict[str, dict[str, Any]]) -> list[str]:
    columns: list[str] = []
    for figures in methods.values():
        columns += [c for c in figures if c not in columns and not isinstance(figures[c], dict)]
    rows = [[name] + [figures.get(c, "") for c in columns] for name, figures in methods.items()]
    return _table(["method"] + [c.replace("_", " ") for c in columns], rows)


def render_markdown(report: EvaluateResult, plots: Sequence[str] = ()) -> str:
    """The report as a Markdown page: a table per section and how each figure was computed."""
    ds = report.dataset
    lines = [f"# ctxkit report: {ds.get('name', 'dataset')}", ""]
    lines += _table(["setting", "value"], [(k.replace("_", " "), v) for k, v in ds.items()])
    for section, figures in report.sections.items():
        lines += ["", f"## {_TITLES.get(section, section.capitalize())}", ""]
        note = report.notes.get(section)
        if note:
            lines += [f"*How it was computed:* {note}", ""]
        rest = dict(figures)
        for key in [k for k, v in figures.items() if _is_method_map(v)]:
            lines += _methods_table(rest.pop(key)) + [""]
        if rest:
            lines += _table(["figure", "value"], _flat_rows(rest))
        for plot in plots:
            if Path(plot).stem == section:
                lines += ["", f"![{section}]({Path(plot).name})"]
    if report.timings:
        lines += ["", "## Timings", ""]
        # formatted here: a step named "utilization" must not read as a percentage
        lines += _table(["step", "seconds"], [(k, _fmt(v)) for k, v in
                                              sorted(report.timings.items())])
    return "\n".join(lines) + "\n"


def _is_method_map(value: Any) -> bool:
    return (
        isinstance(value, dict) and bool(value)
        and all(isinstance(v, dict) for v in value.values())
        and any(not isinstance(x, dict) for v in value.values() for x in v.values())
    )


def plot_report(report: EvaluateResult, directory: Path) -> list[Path]:
    """One PNG per section with something to draw; returns the written paths."""
    from matplotlib.figure import Figure

    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        path = directory / f"{name}.png"
        fig.tight_layout()
        with atomic_write(path, "wb") as fh:
            fig.savefig(fh, format="png", dpi=110)
        written.append(path)

    capacity = report.dataset.get("capacity")
    lengths = report.lengths
    if "lengths" in report.sections and lengths.size:
        fig = Figure(figsize=(7, 4))
        ax = fig.subplots()
        top = max(int(lengths.max()), 1)
        ax.hist(lengths, bins=min(60, top), color="#4C72B0")
        if capacity:
            ax.axvline(capacity, color="#C44E52", linestyle="--", label=f"window = {capacity}")
            ax.legend()
        ax.set_xlabel("tokens per text")
        ax.set_ylabel("texts")
        ax.set_title(f"Token lengths ({report.dataset.get('tokenizer')})")
        save(fig, "lengths")

    util = report.sections.get("utilization")
    if util:
        names = list(util["methods"])
        values = [util["methods"][n]["utilization"] * 100 for n in names]
        windows = [util["methods"][n]["windows"] for n in names]
        fig = Figure(figsize=(7, 4))
        ax = fig.subplots()
        bars = ax.barh(names, values, color="#55A868")
        for bar, w in zip(bars, windows, strict=False):
            ax.text(bar.get_width() + 0.5, bar.get_y() + bar.get_height() / 2,
                    f"{w:,} windows", va="center", fontsize=8)
        ax.set_xlim(0, 118)
        ax.set_xlabel("utilization (% of window tokens that are real tokens)")
        ax.set_title(f"Packing into windows of {capacity} tokens "
                     f"(lower bound {util['lower_bound']:,} windows)")
        ax.invert_yaxis()
        save(fig, "utilization")

    red = report.sections.get("redundancy")
    if red and red.get("methods"):
        names = list(red["methods"])
        removed = [red["methods"][n]["removed_share"] * 100 for n in names]
        saved = [red["methods"][n]["tokens_saved_share"] * 100 for n in names]
        x = np.arange(len(names))
        fig = Figure(figsize=(7, 4))
        ax = fig.subplots()
        ax.bar(x - 0.2, removed, 0.4, label="texts removed", color="#8172B2")
        ax.bar(x + 0.2, saved, 0.4, label="tokens saved", color="#CCB974")
        ax.set_xticks(x, names)
        ax.set_ylabel("% of the dataset")
        ax.set_title("What each dedup method would remove")
        ax.legend()
        save(fig, "redundancy")

    dens = report.sections.get("density")
    if dens and "score_before" in report.extra_arrays and report.extra_arrays["score_before"].size:
        fig = Figure(figsize=(7, 4))
        ax = fig.subplots()
        before = report.extra_arrays["score_before"]
        after = report.extra_arrays.get("score_after")
        bins = np.linspace(min(before.min(), 0), max(before.max(), 1e-9), 40)
        ax.hist(before, bins=bins, alpha=0.6, label="all texts", color="#4C72B0")
        if after is not None and after.size:
            ax.hist(after, bins=bins, alpha=0.6, label="after dedup", color="#DD8452")
        ax.set_xlabel("composite density score (utility per token)")
        ax.set_ylabel("texts")
        ax.set_title("Information density before and after dedup")
        ax.legend()
        save(fig, "density")

    emb = report.sections.get("embedding")
    if emb and emb.get("methods"):
        names = list(emb["methods"])
        rates = [emb["methods"][n]["texts_per_s"] for n in names]
        fig = Figure(figsize=(7, 3.5))
        ax = fig.subplots()
        ax.barh(names, rates, color="#64B5CD")
        ax.set_xlabel("texts per second (higher is better)")
        ax.set_title(f"Embedding throughput on {emb.get('sample', '?')} texts")
        ax.invert_yaxis()
        save(fig, "embedding")
    return written
