"""Run the whole benchmark suite: ``python -m evals [--quick] [--only a,b] [--out DIR]``.

Each benchmark runs as its own process (``python -m evals.<name>``) so one benchmark's memory
and threads never disturb the next. Every ``<name>.json`` it writes is stamped with the
command, the git commit and the machine. A run that is not ``--quick`` and writes to
``evals/results`` ends by regenerating ``docs/benchmarks.md`` and the README's headline table
(``python -m evals.benchmarks_page``). ``--quick`` is the CI smoke mode: seconds per
benchmark, on generated data when ``../shared/data`` is absent, so the harness cannot rot unnoticed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evals._common import machine_info
from evals.benchmarks_page import RESULTS, write

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ("packing", "dedup", "dedup_scale", "embedding", "compression", "public_compression",
              "chat_memory", "chat_latency", "chat_scaling", "distributed", "classify", "balance",
              "training")


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def available() -> list[str]:
    return [name for name in BENCHMARKS if (ROOT / "evals" / f"{name}.py").exists()]


def stamp(json_path: Path, command: str, quick: bool) -> None:
    """Add command, commit and machine to a benchmark's JSON (atomically)."""
    from ctxkit.io.records import write_json

    data = json.loads(json_path.read_text(encoding="utf-8"))
    data.setdefault("machine", machine_info())
    data["command"] = command
    data["git_commit"] = git_commit()
    data["quick"] = quick
    write_json(json_path, data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run ctxkit's benchmark suite.")
    parser.add_argument("--quick", action="store_true", help="smoke mode: seconds, small data")
    parser.add_argument("--only", default="", help="subset of " + ",".join(BENCHMARKS))
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default: evals/results; with --quick a fresh "
                             "temporary folder, so a smoke run never replaces measured results)")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="ctxkit-quick-")) if args.quick else RESULTS
    names = available()
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            parser.error(f"unknown or missing benchmark(s): {unknown}; available: {names}")
        names = wanted
    failures = []
    for name in names:
        cmd = [sys.executable, "-m", f"evals.{name}", "--out", str(args.out)]
        if args.quick:
            cmd.append("--quick")
        shown = f"python -m evals.{name}" + (" --quick" if args.quick else "")
        print(f"== {shown}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT)
        seconds = time.perf_counter() - t0
        result = args.out / f"{name}.json"
        if proc.returncode != 0 or not result.exists():
            failures.append(name)
            print(f"!! {name} failed (exit {proc.returncode}) after {seconds:.1f} s", flush=True)
            continue
        stamp(result, shown, args.quick)
        print(f"   {name} done in {seconds:.1f} s -> {result}", flush=True)
    if not args.quick and args.out.resolve() == RESULTS.resolve():
        for path in write():
            print(f"   regenerated {path.relative_to(ROOT)}", flush=True)
    if failures:
        print(f"failed: {', '.join(failures)}")
        return 1
    print(f"benchmarks: {len(names)} ran, none failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
