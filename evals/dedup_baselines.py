"""The baselines a dedup user would pick instead of ctxkit, written the way they would write
them, and how ``python -m evals.dedup`` times everything side by side.

- datasketch: ``MinHash.bulk`` over lower-cased character 5-grams, then ``MinHashLSH``
  insert and query (its own banding for the threshold); its default threshold is 0.9.
- rensa: ``RMinHash`` per document and ``RMinHashLSH`` insert and query (bands: the divisor
  of 128 nearest datasketch's optimum, as rensa needs bands dividing num_perm).
- text-dedup's MinHash recipe (threshold 0.7, 256 permutations, word 5-grams of lower-cased
  alphanumeric tokens, datasketch's optimal banding, every document sharing an LSH bucket is
  a duplicate, no verification), emulated with ctxkit's hashing: only what it removes is
  reported, not its speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "best_timed",
    "char_shingles",
    "datasketch_bulk",
    "datasketch_lsh",
    "datasketch_removed",
    "interleaved",
    "optional_rensa",
    "rensa_bands",
    "rensa_lsh",
    "rensa_minhashes",
    "textdedup_removed",
    "timed",
]


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of this process, result)."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def best_timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """``timed(fn)`` ``repeats`` times: the best wall and CPU seconds, and the last result."""
    wall, cpu, out = timed(fn)
    for _ in range(repeats - 1):
        w, c, out = timed(fn)
        wall, cpu = min(wall, w), min(cpu, c)
    return wall, cpu, out


def interleaved(runs: dict[str, Callable[[], Any]], repeats: int) -> dict[str, dict[str, float]]:
    """Run every method once per round, `repeats` rounds; keep each method's best round
    (``wall_s``, ``cpu_s``) and its median CPU (``median_cpu_s``).

    Every other round runs the methods in reverse order, so a machine that slows down or
    speeds up within a round does not favour the methods that come first. The median is the
    fairer figure across run lengths: a short run fits in a quiet spell of a shared machine
    more often than a long one, so the best round favours short runs."""
    cpus: dict[str, list[float]] = {}
    best: dict[str, dict[str, float]] = {}
    for r in range(repeats):
        for name, fn in list(runs.items())[:: -1 if r % 2 else 1]:
            wall, cpu, _ = timed(fn)
            cpus.setdefault(name, []).append(cpu)
            b = best.setdefault(name, {"wall_s": wall, "cpu_s": cpu})
            b["wall_s"], b["cpu_s"] = min(b["wall_s"], wall), min(b["cpu_s"], cpu)
    for name, b in best.items():
        b["median_cpu_s"] = float(np.median(cpus[name]))
    return best


def char_shingles(text: str, n: int = 5) -> list[str]:
    """What a datasketch or rensa user writes: raw character 5-grams (the text if shorter)."""
    return [text[i : i + n] for i in range(len(text) - n + 1)] or ([text] if text else [])


def optional_rensa() -> Any:
    """rensa comes with the ``[bench]`` extra; without it its rows are left out."""
    try:
        import rensa
    except ImportError:
        return None
    return rensa


def datasketch_bulk(texts: list[str], num_perm: int = 128) -> list:
    from datasketch import MinHash

    return MinHash.bulk([[s.encode() for s in char_shingles(t.lower())] for t in texts],
                        num_perm=num_perm)


def datasketch_lsh(minhashes: list, threshold: float) -> int:
    """Insert every MinHash, then query every one: the candidate count (what a user then
    still has to verify and cluster)."""
    from datasketch import MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=len(minhashes[0].hashvalues))
    with lsh.insertion_session() as session:
        for i, m in enumerate(minhashes):
            session.insert(i, m)
    return sum(len(lsh.query(m)) for m in minhashes)


def datasketch_removed(texts: list[str], threshold: float = 0.9) -> int:
    """datasketch's README recipe: query, then insert if nothing came back; a hit is removed."""
    from datasketch import MinHashLSH

    mh = datasketch_bulk(texts)
    lsh = MinHashLSH(threshold=threshold, num_perm=128)
    removed = 0
    for i, m in enumerate(mh):
        if lsh.query(m):
            removed += 1
        else:
            lsh.insert(i, m)
    return removed


def rensa_bands(threshold: float, num_perm: int = 128) -> int:
    from datasketch.lsh import _optimal_param

    ds_bands, _ = _optimal_param(threshold, num_perm, 0.5, 0.5)
    return min((b for b in range(1, num_perm + 1) if num_perm % b == 0),
               key=lambda b: (abs(b - ds_bands), -b))


def rensa_minhashes(texts: list[str]) -> list:
    import rensa

    out = []
    for t in texts:
        m = rensa.RMinHash(num_perm=128, seed=42)
        m.update(char_shingles(t.lower()))
        out.append(m)
    return out


def rensa_lsh(minhashes: list, threshold: float) -> int:
    import rensa

    lsh = rensa.RMinHashLSH(threshold, 128, rensa_bands(threshold))
    for i, m in enumerate(minhashes):
        lsh.insert(i, m)
    return sum(len(lsh.query(m)) for m in minhashes)


def textdedup_removed(texts: list[str], threshold: float = 0.7, num_perm: int = 256) -> int:
    """What text-dedup's MinHash defaults remove: every LSH bucket is one cluster.

    Bucket membership is transitive there (union-find over bucket members), so the clusters
    are the connected components of "shares a bucket"; a star per bucket has the same
    components, which keeps this linear.
    """
    from datasketch.lsh import _optimal_param

    from ctxkit.deduplication.lsh import band_keys, candidate_pairs
    from ctxkit.deduplication.normalize import Normalization
    from ctxkit.deduplication.signatures import empty_rows, signatures
    from ctxkit.deduplication.unionfind import connected_components

    words = Normalization(punctuation=True)  # lower-cased alphanumeric tokens
    sig = signatures(texts, num_perm=num_perm, ngram=5, unit="word", normalization=words)
    bands, rows = _optimal_param(threshold, num_perm, 0.5, 0.5)
    pairs = candidate_pairs(band_keys(sig, bands, rows), skip=empty_rows(sig), max_bucket=2)
    labels = connected_components(len(texts), pairs)
    return int(len(texts) - len(np.unique(labels)))
