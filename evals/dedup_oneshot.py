"""One timed ``dedup(texts, "minhash", threshold)`` in a process of its own.

``python -m evals.dedup_oneshot TEXTS.pkl THRESHOLD`` loads a pickled list of texts, warms
up on its first 300, times one run and prints ``{"user_us": .., "system_us": ..}`` per
document as one JSON line. :func:`evals.dedup.bench_scaling` runs it once per size so that
every size starts from the same state, as a ``ctxkit dedup`` command does: in one long
process a small corpus reuses memory that malloc kept from the run before, and a large one
(arrays past malloc's 32 MB reuse limit) takes fresh pages from the kernel every time.
"""

from __future__ import annotations

import json
import pickle
import resource
import sys
from pathlib import Path


def time_once(texts: list[str], threshold: float) -> dict[str, float]:
    """CPU microseconds per document of one minhash dedup, after a short warm-up."""
    from ctxkit.deduplication.pipeline import dedup

    dedup(texts[:300], "minhash", threshold)  # import and first-call costs stay out
    before = resource.getrusage(resource.RUSAGE_SELF)
    dedup(texts, "minhash", threshold)
    after = resource.getrusage(resource.RUSAGE_SELF)
    n = max(1, len(texts))
    return {"user_us": 1e6 * (after.ru_utime - before.ru_utime) / n,
            "system_us": 1e6 * (after.ru_stime - before.ru_stime) / n}


def main(argv: list[str] | None = None) -> None:
    path, threshold = (argv or sys.argv[1:])[:2]
    texts = pickle.loads(Path(path).read_bytes())
    print(json.dumps(time_once(texts, float(threshold))))


if __name__ == "__main__":
    main()
