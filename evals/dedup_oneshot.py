"""One timed ``dedup(texts, method="minhash", threshold=threshold)`` in a process of its own.

``python -m evals.dedup_oneshot TEXTS.pkl THRESHOLD`` loads a pickled list of texts, warms
up on its first 300, times one run and prints ``{"user_us": .., "system_us": ..}`` per
document (and the run's LSH candidates per document) as one JSON line.
:func:`evals.dedup_scaling.bench_scaling` runs it once per size so that every size starts from the
same state, as a ``ctxkit dedup`` command does: in one long process a small corpus reuses
memory that malloc kept from the run before, and a large one (arrays past malloc's 32 MB
reuse limit) takes fresh pages from the kernel every time.
"""

from __future__ import annotations

import argparse
import json
import pickle
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cpu_us_per_doc(run: Callable[[], Any], docs: int) -> tuple[float, float]:
    """User and system CPU microseconds per document of one call of ``run``."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    run()
    after = resource.getrusage(resource.RUSAGE_SELF)
    docs = max(1, docs)
    return (1e6 * (after.ru_utime - before.ru_utime) / docs,
            1e6 * (after.ru_stime - before.ru_stime) / docs)


def time_once(texts: list[str], threshold: float) -> dict[str, float]:
    """CPU microseconds per document of one minhash dedup, after a short warm-up."""
    from ctxkit.deduplication.pipeline import dedup

    # import and first-call costs stay out of the timing
    dedup(texts[:300], method="minhash", threshold=threshold)
    result = []
    user, system = cpu_us_per_doc(
        lambda: result.append(dedup(texts, method="minhash", threshold=threshold)), len(texts))
    return {"user_us": user, "system_us": system,
            "candidates_per_doc": result[0].info["minhash"]["candidates"] / max(1, len(texts))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("texts", type=Path, help="a pickled list of texts")
    ap.add_argument("threshold", type=float)
    args = ap.parse_args(argv)
    texts = pickle.loads(args.texts.read_bytes())
    print(json.dumps(time_once(texts, args.threshold)))


if __name__ == "__main__":
    main()
