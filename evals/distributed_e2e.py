"""``ctxkit dedup IN --method minhash`` against the same with ``--ray local``, stage by stage.

Each run is its own process (``python -m evals.distributed_e2e local|ray IN OUT_DIR``), so
its peak RSS is the command's own (for Ray: the driver's; the workers are other processes)
and Ray starts fresh: the Ray total includes start-up. The two runs of a size alternate in
one call of :func:`compare`, on a corpus from :mod:`evals.ray_corpus`, and their outputs are
checked equal (the kept records, and the report's entries but for the local ``line``).

Stages. Local: ``reading``, ``dedup (minhash)``, ``writing`` (the job's own progress
phases). Ray: ``start-up`` (``init_ray``), then the stages of
:func:`ctxkit.distributed.minhash.minhash_dedup` (each awaited before the next) and the
command's ``write parts``, ``join parts`` (the driver's streamed copy) and ``report file``.
Serial on the driver: ``components``, ``report``, ``join parts`` and ``report file``.

Example:
    >>> timer = StageTimer()
    >>> with timer("x"):
    ...     pass
    >>> list(timer.seconds)
    ['x']
"""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["DRIVER_STAGES", "StageTimer", "compare", "run_one"]

# Ray stages that run on the driver alone (their time caps a cluster's throughput)
DRIVER_STAGES = ("components", "report", "join parts", "report file")


class StageTimer:
    """A stage hook (``hook(name)`` is a context manager) that adds up seconds per name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str, total: int | None = None) -> Iterator[Any]:
        start = time.perf_counter()
        try:
            yield lambda n=1: None
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


def run_one(kind: str, path: str, out_dir: str, workers: int | None = None) -> dict[str, Any]:
    """One ``ctxkit dedup`` run in this process: ``kind`` ``local`` or ``ray`` (a local Ray
    instance of ``workers`` CPUs, default all)."""
    start = time.perf_counter()
    timer = StageTimer()
    out, report = Path(out_dir) / f"{kind}.jsonl", Path(out_dir) / f"{kind}.json"
    if kind == "local":
        from ctxkit.jobs.common import Source, Target
        from ctxkit.jobs.dedup import run_dedup

        run_dedup(Source(Path(path), "text"), Target(out, report), method="minhash",
                  progress=timer)
    else:
        from ctxkit.distributed.cluster import init_ray
        from ctxkit.distributed.command import run_command

        with timer("start-up"):
            init_ray(None, num_cpus=workers)
        run_command("dedup", "local", path, out, field="text", report_path=report,
                    method="minhash", on_stage=timer)
    return {"kind": kind, "seconds": time.perf_counter() - start, "stages": timer.seconds,
            "peak_rss_mb": peak_rss_mb()}


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB: ``VmHWM``, which starts afresh at
    ``exec`` (``ru_maxrss`` keeps the parent's peak at the fork, which a child can never go
    below); ``ru_maxrss`` where ``/proc`` is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _spawn(kind: str, path: Path, out_dir: Path, workers: int) -> dict[str, Any]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "evals.distributed_e2e", kind, str(path),
                           str(out_dir), str(workers)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} run failed:\n{proc.stderr[-3000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    got["wall"] = time.perf_counter() - start  # with the interpreter's start and imports
    return got


def _same_output(out_dir: Path) -> dict[str, Any]:
    """Kept records equal as sets of lines' records, report entries equal but ``line``."""
    def records(name: str) -> list[str]:
        with open(out_dir / name, encoding="utf-8") as fh:
            return sorted(json.dumps(json.loads(x), sort_keys=True) for x in fh)

    local, ray = (json.loads((out_dir / f"{k}.json").read_text()) for k in ("local", "ray"))
    entries = [{k: v for k, v in e.items() if k != "line"} for e in local["duplicates"]]
    kept = records("local.jsonl") == records("ray.jsonl")
    return {"kept_equal": kept, "report_equal": entries == ray["duplicates"],
            "kept": local["kept"], "removed": local["removed"]}


def compare(path: Path, out_dir: Path, records: int, workers: int) -> dict[str, Any]:
    """Local then Ray on ``path`` (``records`` records), outputs checked equal."""
    out_dir.mkdir(parents=True, exist_ok=True)
    local = _spawn("local", path, out_dir, workers)
    ray = _spawn("ray", path, out_dir, workers)
    check = _same_output(out_dir)
    driver = sum(ray["stages"].get(s, 0.0) for s in DRIVER_STAGES)
    return {
        "records": records, "input_mb": round(path.stat().st_size / 2**20, 1),
        "local": local, "ray": ray, **check,
        "ratio": ray["wall"] / local["wall"],
        "local_per_core": records / local["wall"],
        "ray_per_core": records / (ray["wall"] * workers),
        "driver_seconds": driver,
    }


if __name__ == "__main__":
    print(json.dumps(run_one(*sys.argv[1:4], workers=int(sys.argv[4]))))
