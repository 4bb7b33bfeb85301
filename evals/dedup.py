"""Dedup benchmark: MinHash throughput, quality and LSH speed next to datasketch and rensa,
semantic exact-vs-partitioned recall, and removals on gpteacher toolformer.

Run from the repository root::

    python -m evals.dedup            # the full run (about 200k documents for the LSH timing)
    python -m evals.dedup --quick    # a few seconds, for CI smoke tests

Writes ``dedup.json`` (numbers and machine info), ``dedup.md`` (tables) and ``dedup.png``
under ``--out`` (default ``evals/results``). Every comparison runs the methods side by side
in one process, interleaved, best of a few repeats, and reports ratios, so machine load
affects all sides alike. CPU time is reported next to wall time because the machine is
shared. Data: ``../shared/data`` (or ``$CTXKIT_DATA``); generated text when it is absent.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import random
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.deduplication.exact import exact_dedup
from ctxkit.deduplication.interop import to_datasketch
from ctxkit.deduplication.lsh import band_keys, candidate_pairs, choose_bands
from ctxkit.deduplication.minhash import minhash_dedup
from ctxkit.deduplication.normalize import Normalization
from ctxkit.deduplication.options import DEFAULT_THRESHOLD
from ctxkit.deduplication.signatures import empty_rows, signatures
from ctxkit.deduplication.unionfind import connected_components
from ctxkit.deduplication.verify import verify_pairs
from evals import _common
from evals.dedup_baselines import (
    best_timed,
    char_shingles,
    datasketch_bulk,
    datasketch_lsh,
    datasketch_removed,
    interleaved,
    optional_rensa,
    rensa_bands,
    rensa_lsh,
    rensa_minhashes,
    textdedup_removed,
    timed,
)
from evals.dedup_corpus import (
    data_dir,
    disjoint_replicas,
    exact_jaccard_join,
    inject_near_duplicates,
    load_sources,
    synthetic_templated,
    synthetic_texts,
)

RAW = Normalization(nfkc=False, case=False, whitespace=False)
SECTION_SECONDS: dict[str, float] = {}


def section(name: str):
    """Decorator: add the wall time of each call to SECTION_SECONDS[name]."""

    def wrap(fn):
        def inner(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                SECTION_SECONDS[name] = SECTION_SECONDS.get(name, 0.0) + time.perf_counter() - t

        return inner

    return wrap


# ---------------------------------------------------------------- helpers


def machine_info() -> dict[str, Any]:
    """The shared machine record plus the versions of the libraries compared here."""
    info = _common.machine_info()
    for pkg in ("datasketch", "rensa", "scikit-learn", "sentence-transformers"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[pkg] = None
    return info


def prf(pred: set, gold: set) -> dict[str, float]:
    tp = len(pred & gold)
    p = tp / len(pred) if pred else 1.0
    r = tp / len(gold) if gold else 1.0
    return {
        "precision": round(p, 4),
        "recall": round(r, 4),
        "f1": round(2 * p * r / (p + r), 4) if p + r else 0.0,
        "predicted": len(pred),
        "gold": len(gold),
    }


# ---------------------------------------------------------------- corpora


@section("originals")
def originals(sources: dict[str, list[str]], n: int, rng: random.Random) -> list[str]:
    """Texts of every source but toolformer (benchmarked apart), natural near-duplicates out."""
    pool = [
        t for name, texts in sources.items() if name != "toolformer" for t in texts if t.strip()
    ]
    rng.shuffle(pool)
    pool = pool[:n]
    # Drop every text with a natural near-duplicate (exact Jaccard >= 0.4) so that the
    # injected copies are the whole ground truth.
    pairs, _ = exact_jaccard_join(pool, 0.4)[0.4]
    labels = connected_components(len(pool), pairs)
    return [t for i, t in enumerate(pool) if labels[i] == i]


def gold_removed(truth: np.ndarray) -> set[int]:
    """With keep-first, every member of a ground-truth cluster except the earliest."""
    label = np.where(truth >= 0, truth, np.arange(len(truth)))
    first: dict[int, int] = {}
    for i, lab in enumerate(label.tolist()):
        first.setdefault(lab, i)
    return {i for i, lab in enumerate(label.tolist()) if first[lab] != i}


# ---------------------------------------------------------------- benchmarks


@section("bench_throughput")
def bench_throughput(texts: list[str], repeats: int) -> dict[str, Any]:
    """Raw text to 128-permutation signatures of character 5-grams, docs/s."""
    from datasketch import MinHash

    rensa = optional_rensa()

    ds_texts = texts[: max(200, len(texts) // 4)]  # datasketch is ~10x slower: a quarter suffices

    def datasketch_bulk():
        return MinHash.bulk(
            [[s.encode("utf-8") for s in char_shingles(t)] for t in ds_texts], num_perm=128
        )

    def rensa_loop():
        out = []
        for t in texts:
            m = rensa.RMinHash(num_perm=128, seed=42)
            m.update(char_shingles(t))
            out.append(m.digest())
        return out

    def rensa_matrix():
        return rensa.RMinHash.digest_matrix_from_token_sets(
            [char_shingles(t) for t in texts], 128, 42
        )

    runs = {
        "ctxkit": lambda: signatures(texts, num_perm=128, ngram=5),
        "ctxkit (no normalization)": lambda: signatures(
            texts, num_perm=128, ngram=5, normalization=RAW
        ),
        "datasketch MinHash.bulk": datasketch_bulk,
    }
    if rensa is not None:  # the optional [bench] extra
        runs["rensa RMinHash"] = rensa_loop
        runs["rensa digest_matrix"] = rensa_matrix
    best = interleaved(runs, repeats)
    out: dict[str, Any] = {
        "docs": len(texts),
        "datasketch_docs": len(ds_texts),
        "mean_chars": round(float(np.mean([len(t) for t in texts])), 1),
        "methods": {},
    }
    for name, b in best.items():
        n = len(ds_texts) if name.startswith("datasketch") else len(texts)
        out["methods"][name] = {
            **{k: round(v, 4) for k, v in b.items()},
            "docs_per_s": round(n / b["wall_s"], 1),
            "docs_per_cpu_s": round(n / b["cpu_s"], 1),
        }
    ref = out["methods"]["ctxkit"]
    for m in out["methods"].values():
        m["ctxkit_speedup_wall"] = round(ref["docs_per_s"] / m["docs_per_s"], 2)
        m["ctxkit_speedup_cpu"] = round(ref["docs_per_cpu_s"] / m["docs_per_cpu_s"], 2)
    return out


def datasketch_dedup(texts: list[str], threshold: float) -> tuple[set, set, set, float]:
    """The datasketch recipe: removed set by query-then-insert, and all LSH candidate pairs."""
    from datasketch import MinHashLSH

    t0 = time.perf_counter()
    mh = datasketch_bulk(texts)
    lsh = MinHashLSH(threshold=threshold, num_perm=128)
    removed = set()
    for i, m in enumerate(mh):
        if lsh.query(m):
            removed.add(i)
        else:
            lsh.insert(i, m)
    full = MinHashLSH(threshold=threshold, num_perm=128)
    for i, m in enumerate(mh):
        full.insert(i, m)
    pairs = {(min(i, j), max(i, j)) for i, m in enumerate(mh) for j in full.query(m) if j != i}
    verified = {(i, j) for i, j in pairs if mh[i].jaccard(mh[j]) >= threshold}
    return removed, pairs, verified, time.perf_counter() - t0


def rensa_pairs(texts: list[str], threshold: float) -> set[tuple[int, int]]:
    """rensa's LSH (datasketch's banding for t), candidates verified by rensa's estimate."""
    import rensa

    mh = rensa_minhashes(texts)
    lsh = rensa.RMinHashLSH(threshold, 128, rensa_bands(threshold))
    for i, m in enumerate(mh):
        lsh.insert(i, m)
    pairs = {(min(i, j), max(i, j)) for i, m in enumerate(mh) for j in lsh.query(m) if j != i}
    return {(i, j) for i, j in pairs if mh[i].jaccard(mh[j]) >= threshold}


@section("bench_quality")
def bench_quality(texts: list[str], truth: np.ndarray, thresholds: list[float]) -> dict[str, Any]:
    """P/R/F1 of the removed set against the injected ground truth."""
    gold = gold_removed(truth)
    rows: list[dict[str, Any]] = []
    sig_char = signatures(texts)
    sig_word = signatures(texts, unit="word")
    for t in thresholds:
        for label, sig, unit in (
            ("ctxkit char 5-gram", sig_char, "char"),
            ("ctxkit word 5-gram", sig_word, "word"),
        ):
            for verify in ("exact", "estimate"):
                wall, _, res = timed(
                    lambda t=t, sig=sig, unit=unit, verify=verify: minhash_dedup(
                        texts, t, sig=sig, unit=unit, verify=verify
                    )
                )
                rows.append(
                    {
                        "method": f"{label}, {verify} verify",
                        "threshold": t,
                        **prf(set(res.removed.tolist()), gold),
                        "seconds": round(wall, 3),
                    }
                )
        removed, _, _, wall = datasketch_dedup(texts, t)
        rows.append(
            {
                "method": "datasketch MinHashLSH char 5-gram",
                "threshold": t,
                **prf(removed, gold),
                "seconds": round(wall, 3),
            }
        )
    ex = exact_dedup(texts)
    rows.append(
        {
            "method": "ctxkit exact",
            "threshold": 1.0,
            **prf(set(ex.removed.tolist()), gold),
            "seconds": None,
        }
    )
    best = max((r for r in rows if r["method"].startswith("ctxkit char")), key=lambda r: r["f1"])
    return {
        "docs": len(texts),
        "injected_copies": int((truth >= 0).sum()),
        "gold_removed": len(gold),
        "rows": rows,
        "best_ctxkit": best,
    }


@section("bench_pair_f1")
def bench_pair_f1(texts: list[str], thresholds: list[float]) -> dict[str, Any]:
    """Pair F1 against the exact Jaccard join (every pair with true Jaccard >= t)."""
    wall, _, joins = timed(lambda: exact_jaccard_join(texts, thresholds))
    sig = signatures(texts)
    rows = []
    for t in thresholds:
        gold = {tuple(p) for p in joins[t][0].tolist()}
        for label, kwargs in (
            ("ctxkit (exact verify)", {}),
            ("ctxkit (exact verify, all pairs of every bucket)", {"max_bucket": 10**9}),
            ("ctxkit (estimate verify)", {"verify": "estimate"}),
        ):
            res = minhash_dedup(texts, t, sig=sig, **kwargs)
            rows.append(
                {
                    "method": label,
                    "threshold": t,
                    **prf({tuple(p) for p in res.pairs.tolist()}, gold),
                }
            )
        _, ds_pairs, ds_verified, _ = datasketch_dedup(texts, t)
        rows.append({"method": "datasketch MinHashLSH", "threshold": t, **prf(ds_pairs, gold)})
        rows.append(
            {"method": "datasketch MinHashLSH + verify", "threshold": t, **prf(ds_verified, gold)}
        )
        if optional_rensa() is not None:
            rows.append(
                {
                    "method": "rensa RMinHashLSH + verify",
                    "threshold": t,
                    **prf(rensa_pairs(texts, t), gold),
                }
            )
    return {"docs": len(texts), "join_seconds": round(wall, 2), "rows": rows}


@section("scale_corpus")
def scale_corpus(n: int, sources: dict[str, list[str]], rng: random.Random) -> list[str]:
    """About n documents for the LSH timing: 90% unrelated, 10% edited copies.

    Unrelated documents draw words from the real texts' unigram distribution and lengths
    from their length distribution, so character 5-gram overlaps between unrelated
    documents look like those between real ones (mostly short common words).
    """
    from collections import Counter

    per_source = max(200, min(5000, n // 10))
    real = [t.split() for texts in sources.values() for t in texts[:per_source] if t.strip()]
    if len(real) < 100:
        real = [t.split() for t in synthetic_texts(2000, rng)]
    freq = Counter(w for ws in real for w in ws)
    vocab = np.array(sorted(freq), dtype=object)
    counts = np.array([freq[w] for w in vocab], dtype=np.float64)
    lengths = np.array([len(ws) for ws in real])
    gen = np.random.default_rng(rng.randrange(2**32))
    n_base = int(n / 1.1)
    doc_len = np.clip(gen.choice(lengths, size=n_base), 5, 400)
    words = vocab[gen.choice(len(vocab), size=int(doc_len.sum()), p=counts / counts.sum())]
    cuts = np.cumsum(doc_len)[:-1]
    base = [" ".join(ws) for ws in np.split(words, cuts)]
    texts, _ = inject_near_duplicates(base, rng, dup_fraction=0.05, max_variants=3)
    return texts[:n]


@section("bench_lsh_speed")
def bench_lsh_speed(texts: list[str], threshold: float, repeats: int) -> dict[str, Any]:
    """Candidate generation + verification: ctxkit vs datasketch MinHashLSH insert + query."""
    from datasketch import MinHashLSH

    sw, sc, sig = timed(lambda: signatures(texts))
    bands, rows = choose_bands(threshold, 128)

    def ctxkit_estimate():
        cand = candidate_pairs(band_keys(sig, bands, rows), skip=empty_rows(sig))
        return verify_pairs(sig, cand, threshold)

    def ctxkit_full_exact():
        return minhash_dedup(texts, threshold, sig=sig, verify="exact")

    lean = to_datasketch(sig)  # conversion not timed: the index gets the same signatures

    def datasketch_insert_query():
        lsh = MinHashLSH(threshold=threshold, num_perm=128)
        with lsh.insertion_session() as session:
            for i, m in enumerate(lean):
                session.insert(i, m)
        return sum(len(lsh.query(m)) for m in lean)

    best = interleaved(
        {
            "ctxkit LSH + estimate verify": ctxkit_estimate,
            "ctxkit minhash_dedup (exact verify, clusters)": ctxkit_full_exact,
        },
        repeats,
    )
    best.update(interleaved({"datasketch MinHashLSH insert+query": datasketch_insert_query}, 1))
    ref = best["datasketch MinHashLSH insert+query"]["wall_s"]
    ref_cpu = best["datasketch MinHashLSH insert+query"]["cpu_s"]
    out = {
        "docs": len(texts),
        "threshold": threshold,
        "bands": bands,
        "rows": rows,
        "signature_seconds": round(sw, 2),
        "signature_docs_per_s": round(len(texts) / sw, 1),
        "signature_docs_per_cpu_s": round(len(texts) / sc, 1),
        "methods": {},
    }
    for name, b in best.items():
        out["methods"][name] = {
            "wall_s": round(b["wall_s"], 3),
            "cpu_s": round(b["cpu_s"], 3),
            "speedup_vs_datasketch_wall": round(ref / b["wall_s"], 1),
            "speedup_vs_datasketch_cpu": round(ref_cpu / b["cpu_s"], 1),
        }
    res = ctxkit_full_exact()
    out["candidates"], out["verified_pairs"], out["removed"] = (
        res.info["candidates"],
        res.info["verified"],
        res.n_removed,
    )
    return out


class HashingEncoder:
    """A stand-in encoder for --quick runs: character 3-gram counts, no model to load."""

    def encode(self, texts: list[str]) -> np.ndarray:
        from sklearn.feature_extraction.text import HashingVectorizer

        vec = HashingVectorizer(
            analyzer="char_wb", ngram_range=(3, 3), n_features=512, alternate_sign=False
        )
        return vec.transform(texts).toarray().astype(np.float32)


@section("bench_semantic")
def bench_semantic(texts: list[str], thresholds: list[float], encoder: Any) -> dict[str, Any]:
    """Recall of the SemDeDup partition against exact all-pairs, on real embeddings."""
    from ctxkit.deduplication.semantic import embed, pairs_exact, pairs_kmeans

    embed(texts[:8], encoder)  # load the model outside the timing
    ew, _, emb = timed(lambda: embed(texts, encoder))
    rows = []
    for t in thresholds:
        xw, _, (exact_pairs, _) = timed(lambda t=t: pairs_exact(emb, t))
        gold = {tuple(p) for p in exact_pairs.tolist()}
        rows.append(
            {
                "method": "exact all-pairs (tiled)",
                "threshold": t,
                "pairs": len(gold),
                "recall": 1.0,
                "seconds": round(xw, 3),
            }
        )
        for n_assign in (1, 2):
            kw, _, (kp, _) = timed(lambda t=t, k=n_assign: pairs_kmeans(emb, t, n_assign=k, seed=1))
            found = {tuple(p) for p in kp.tolist()}
            rows.append(
                {
                    "method": f"k-means partition, {n_assign} cluster(s) per text",
                    "threshold": t,
                    "pairs": len(found),
                    "recall": round(len(found & gold) / max(1, len(gold)), 4),
                    "false_pairs": len(found - gold),
                    "seconds": round(kw, 3),
                }
            )
    return {
        "docs": len(texts),
        "embed_seconds": round(ew, 2),
        "embed_docs_per_s": round(len(texts) / ew, 1),
        "clusters": round(float(np.sqrt(len(texts)))),
        "rows": rows,
    }


@section("templated_mix")
def templated_mix(
    n: int, sources: dict[str, list[str]], tool: list[str], rng: random.Random, full: int
) -> list[str]:
    """One resample of ``n`` documents: 90% the LSH-timing corpus, 10% templated toolformer
    records, shuffled together. Each size is drawn afresh with the same shape: the templated
    part is drawn with replacement from a random share ``n / full`` of the records, so a
    record comes back about as often at every size (as templated records repeat in practice)
    and the duplicate share does not grow with ``n`` as it would in prefixes of one corpus."""
    base = scale_corpus(n - n // 10, sources, rng)
    pool = rng.sample(tool, max(1, round(len(tool) * min(1.0, n / full))))
    texts = base + [pool[rng.randrange(len(pool))] for _ in range(n - len(base))]
    rng.shuffle(texts)
    return texts


@section("bench_templated_speed")
def bench_templated_speed(
    runs: list[tuple[str, list[str], bool]], thresholds: list[float], repeats: int
) -> dict[str, Any]:
    """Whole pipelines side by side on templated corpora, CPU seconds, best of ``repeats``.

    ``runs``: (corpus name, texts, whether the baselines run too). ctxkit:
    ``dedup(texts, method="minhash", threshold=t)`` (signatures, LSH, verification,
    clusters), timed in ``repeats`` rounds that each visit every corpus and threshold, so a
    slow spell of a shared machine lands on all sizes alike rather than on one, and the time
    per document can be compared across sizes. datasketch: ``MinHash.bulk`` + ``MinHashLSH``
    insert and query (no verification, no clusters). rensa: ``RMinHash`` + ``RMinHashLSH``
    insert and query. A baseline's signatures are computed once per size and counted in each
    threshold's time; baselines run ``repeats`` times up to 10,000 documents, once above.
    """
    from ctxkit.deduplication.pipeline import dedup

    dedup(runs[0][1][:300], "minhash")  # warm caches and code paths
    mine = interleaved({(i, t): functools.partial(dedup, texts, "minhash", t)
                        for i, (_, texts, _) in enumerate(runs) for t in thresholds}, repeats)
    rows = []
    for i, (name, texts, baselines) in enumerate(runs):
        rows += _speed_rows(name, texts, thresholds, {t: mine[(i, t)] for t in thresholds},
                            baselines, repeats if len(texts) <= 10_000 else 1)
    return {"thresholds": thresholds, "rows": rows, "ctxkit_rounds": repeats}


def _speed_rows(
    name: str, texts: list[str], thresholds: list[float], best: dict[float, dict[str, float]],
    baselines: bool, repeats: int,
) -> list[dict[str, Any]]:
    from ctxkit.deduplication.pipeline import dedup

    n = len(texts)
    sigs: dict[str, tuple[float, float, Any]] = {}
    if baselines:
        sigs["datasketch"] = best_timed(functools.partial(datasketch_bulk, texts), repeats)
        if optional_rensa() is not None:
            sigs["rensa"] = best_timed(functools.partial(rensa_minhashes, texts), repeats)
    lsh = {"datasketch": datasketch_lsh, "rensa": rensa_lsh}
    rows = []
    for t in thresholds:
        mine = best[t]
        res = dedup(texts, "minhash", t)
        row = {"corpus": name, "docs": n, "threshold": t,
               "ctxkit_cpu_s": round(mine["cpu_s"], 3), "ctxkit_wall_s": round(mine["wall_s"], 3),
               "ctxkit_us_per_doc_cpu": round(1e6 * mine["cpu_s"] / n, 1),
               "ctxkit_median_us_per_doc_cpu": round(1e6 * mine["median_cpu_s"] / n, 1),
               "removed": res.n_removed,
               "candidates_per_doc": round(res.info["minhash"]["candidates"] / n, 2),
               "largest_cluster": max((len(c) for c in res.clusters), default=0)}
        for lib, (sw, sc, minhashes) in sigs.items():
            lw, lc, _ = best_timed(functools.partial(lsh[lib], minhashes, t), repeats)
            row[f"{lib}_cpu_s"] = round(sc + lc, 3)
            row[f"{lib}_wall_s"] = round(sw + lw, 3)
            row[f"{lib}_us_per_doc_cpu"] = round(1e6 * (sc + lc) / n, 1)
            row[f"speedup_vs_{lib}_cpu"] = round((sc + lc) / mine["cpu_s"], 1)
        rows.append(row)
    return rows


def sandwiched(run: Callable[[int], float], sizes: list[int], rnd: int) -> dict[int, float]:
    """One round of the scaling check: ``run(n)`` (a time per document) for the smallest of
    ``sizes`` just before and just after each larger one, every other round (odd ``rnd``)
    largest first so a drift over a round favours neither end. Returns each larger size's
    *paired ratio*: its time over the mean of its two neighbours, from which a slow spell
    of a shared machine (longer than three runs) mostly divides out.

    Example:
        >>> times = iter([10.0, 30.0, 10.0, 48.0, 14.0])
        >>> sandwiched(lambda n: next(times), [1, 3, 4], 0)
        {3: 3.0, 4: 4.0}
    """
    small, *larger = sizes
    ratios = {}
    before = run(small)
    for n in larger[:: -1 if rnd % 2 else 1]:
        this = run(n)
        after = run(small)
        ratios[n] = this / ((before + after) / 2)
        before = after
    return ratios


def scaling_reference(
    replicas: dict[int, list[str]], threshold: float, rounds: int,
    method: Callable[[list[str], float], int] | None = None, name: str = "rensa",
) -> dict[str, Any] | None:
    """The scaling check's in-process runs for a baseline on the same equal-work replicas:
    how much the time per document of another implementation grows on this machine, to
    read ctxkit's growth against. ``method(texts, threshold)`` returns the candidate count
    (for rensa, query results, each document's own included);
    the default is rensa's ``RMinHash`` signatures + ``RMinHashLSH`` insert and query (the
    fastest baseline; no verification, no clusters), left out (``None``) without rensa."""
    from evals.dedup_oneshot import cpu_us_per_doc

    if method is None:
        if optional_rensa() is None:
            return None

        def method(texts: list[str], t: float) -> int:
            return rensa_lsh(rensa_minhashes(texts), t)

    smallest = min(replicas)
    method(replicas[smallest][:300], threshold)  # warm up, as ctxkit's runs
    runs: dict[int, list[tuple[float, float]]] = {}
    paired: dict[int, list[float]] = {}
    candidates: dict[int, float] = {}

    def run(n: int) -> float:
        found = []
        times = cpu_us_per_doc(lambda: found.append(method(replicas[n], threshold)), n)
        candidates[n] = found[0] / max(1, n)
        runs.setdefault(n, []).append(times)
        return sum(times)

    for r in range(rounds):
        for n, ratio in sandwiched(run, sorted(replicas), r).items():
            paired.setdefault(n, []).append(ratio)
    rows = [_scaling_row({"mode": "in_process", "corpus": "replicas", "threshold": threshold,
                          "docs": n}, runs[n], paired.get(n), candidates[n])
            for n in sorted(runs)]
    return {"method": name, "threshold": threshold, "rounds": rounds, "rows": rows}


def _scaling_row(key: dict[str, Any], times: list[tuple[float, float]],
                 ratios: list[float] | None, candidates: float) -> dict[str, Any]:
    """One size's row of the scaling check from its (user, system) us per document, in the
    order they ran, and its paired ratios (``None`` for the smallest size)."""
    totals = [u + s for u, s in times]
    user, system = min(times, key=sum)
    ratios = ratios or [1.0] * len(totals)
    return {**key, "candidates_per_doc": round(candidates, 2),
            "best_us_per_doc": round(min(totals), 1),
            "median_us_per_doc": round(float(np.median(totals)), 1),
            "best_user_us": round(user, 1), "best_system_us": round(system, 1),
            "rounds_us_per_doc": [round(x, 1) for x in totals],
            "median_paired_ratio": round(float(np.median(ratios)), 3),
            "paired_ratios": [round(x, 3) for x in ratios]}


def bench_scaling(
    corpora: dict[str, dict[int, list[str]]], thresholds: list[float], rounds: int
) -> dict[str, Any]:
    """Time per document of ``dedup(texts, "minhash", t)`` as the corpus grows, two ways.

    ``corpora`` maps a corpus name to its texts at each size. ``fresh``: each run in a
    process of its own (``evals.dedup_oneshot``), every size from the same start, as the
    ``ctxkit dedup`` command runs. ``in_process``: all runs one after another in this
    process, as a library caller in a loop; there a small corpus reuses the memory malloc
    kept from the run before while a large one takes fresh pages from the kernel each time,
    so its system time grows. ``rounds`` rounds each visit every corpus, threshold, mode and
    larger size (in alternating order), with the smallest size run just before and just
    after each larger one: a larger run's *paired ratio* is its time over the mean of those
    two neighbours, from which a slow spell of the shared machine mostly divides out. User
    and system CPU are kept apart; each row also gives the LSH candidates per document, the
    work that grows with the data.
    """
    import subprocess
    import tempfile

    from ctxkit.deduplication.pipeline import dedup
    from evals.dedup_oneshot import cpu_us_per_doc

    first = next(iter(corpora.values()))
    dedup(next(iter(first.values()))[:300], "minhash")  # warm caches and code paths
    runs: dict[tuple[str, str, float, int], list[tuple[float, float]]] = {}
    paired: dict[tuple[str, str, float, int], list[float]] = {}
    candidates: dict[tuple[str, float, int], float] = {}
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for name, resamples in corpora.items():
            for n, texts in resamples.items():
                files[name, n] = Path(tmp) / f"{name}-{n}.pkl"
                files[name, n].write_bytes(pickle.dumps(texts, protocol=pickle.HIGHEST_PROTOCOL))

        def run(mode: str, name: str, t: float, n: int) -> float:
            """One timed run; its user + system us per document."""
            if mode == "fresh":
                out = subprocess.run(
                    [sys.executable, "-m", "evals.dedup_oneshot", str(files[name, n]), str(t)],
                    cwd=root, check=True, capture_output=True, text=True).stdout
                one = json.loads(out.strip().splitlines()[-1])
                candidates[name, t, n] = one["candidates_per_doc"]
                times = (one["user_us"], one["system_us"])
            else:
                times = cpu_us_per_doc(
                    functools.partial(dedup, corpora[name][n], "minhash", t), n)
            runs.setdefault((mode, name, t, n), []).append(times)
            return sum(times)

        for r in range(rounds):
            for name, resamples in corpora.items():
                for t in thresholds:
                    for mode in ("fresh", "in_process"):
                        ratios = sandwiched(functools.partial(run, mode, name, t),
                                            sorted(resamples), r)
                        for n, ratio in ratios.items():
                            paired.setdefault((mode, name, t, n), []).append(ratio)
    rows = [_scaling_row({"mode": mode, "corpus": name, "threshold": t, "docs": n}, times,
                         paired.get((mode, name, t, n)), candidates[name, t, n])
            for (mode, name, t, n), times in runs.items()]
    order = list(corpora)
    rows.sort(key=lambda r: (order.index(r["corpus"]), r["mode"] != "fresh", r["threshold"],
                             r["docs"]))
    for r in rows:
        same = [s for s in rows if (s["mode"], s["corpus"], s["threshold"])
                == (r["mode"], r["corpus"], r["threshold"])]
        small = min(same, key=lambda s: s["docs"])
        r["best_vs_smallest"] = round(r["best_us_per_doc"] / small["best_us_per_doc"], 3)
        r["median_vs_smallest"] = round(r["median_us_per_doc"] / small["median_us_per_doc"], 3)
    return {"rounds": rounds, "thresholds": thresholds, "corpora": order, "rows": rows}


def markdown_scaling(sc: dict[str, Any]) -> str:
    header = ["corpus", "run", "threshold", "docs", "candidates / doc", "best us/doc",
              "median us/doc", "user us", "system us", "every round", "x smallest (median)",
              "x smallest, every round"]
    runs = {"fresh": "own process", "in_process": "one process"}
    body = [[r["corpus"], runs[r["mode"]], r["threshold"], f"{r['docs']:,}",
             r["candidates_per_doc"], r["best_us_per_doc"], r["median_us_per_doc"],
             r["best_user_us"], r["best_system_us"],
             ", ".join(f"{x:g}" for x in r["rounds_us_per_doc"]),
             f"**{r['median_paired_ratio']:.2f}**",
             ", ".join(f"{x:.2f}" for x in r["paired_ratios"])] for r in sc["rows"]]
    sizes = {c: sorted({r["docs"] for r in sc["rows"] if r["corpus"] == c}) for c in sc["corpora"]}
    replica_sizes = sizes.get("replicas", [1])
    copies = ", ".join(str(n // replica_sizes[0]) for n in replica_sizes)
    # the median paired ratios side by side, one line per corpus, run and threshold (in the
    # rows' order): a flat time per document reads about 1 at every size
    columns = sorted({n for ns in sizes.values() for n in ns})
    median = {(r["corpus"], r["mode"], r["threshold"], r["docs"]): r["median_paired_ratio"]
              for r in sc["rows"]}
    groups = dict.fromkeys((r["corpus"], r["mode"], r["threshold"]) for r in sc["rows"])
    summary = [[c, runs[m], t] + [f"{median[c, m, t, n]:.2f}" if (c, m, t, n) in median else "-"
                                  for n in columns] for c, m, t in groups]
    # how far runs of one size (and the paired ratios of a larger size) spread, max over min:
    # the noise the paired ratios are there to divide out
    run_spread = [max(r["rounds_us_per_doc"]) / min(r["rounds_us_per_doc"]) - 1
                  for r in sc["rows"]]
    smallest = {c: ns[0] for c, ns in sizes.items()}
    ratio_spread = [max(r["paired_ratios"]) / min(r["paired_ratios"]) - 1
                    for r in sc["rows"] if r["docs"] != smallest[r["corpus"]]] or [0.0]
    spread = (f"Runs of one size spread by {np.median(run_spread):.0%} in the median row "
              f"({min(run_spread):.0%}-{max(run_spread):.0%}), the paired ratios of one size "
              f"by {np.median(ratio_spread):.0%} ({min(ratio_spread):.0%}-"
              f"{max(ratio_spread):.0%}); max over min.")
    return "\n".join([
        "# Dedup time per document as the corpus grows", "",
        f"`dedup(texts, method=\"minhash\")`, CPU microseconds per document, {sc['rounds']} "
        "rounds that each visit every corpus, threshold, run and larger size, with the "
        "smallest size run just before and just after each larger one (every run in order; "
        "the best run's user and system CPU). *x smallest*: each run of a larger size over "
        "the mean of the smallest-size runs beside it, so a slow spell of the shared machine "
        "mostly divides out, and their median. *mix*: templated resamples (`templated_mix`: "
        "90% the LSH-timing corpus, 10% toolformer records, drawn afresh at each size with "
        "the same duplicate share); a larger resample holds more of the toolformer set, so "
        "each record finds more near-duplicate partners (candidates / doc). *replicas*: the "
        f"smallest mix resample in {copies} copies that share no letter or digit "
        "(`disjoint_replicas`), so every size holds the same work per document and any growth"
        " is the implementation's or the machine's. *Own process*: each run alone in a new "
        "process after a 300-text warm-up, as the `ctxkit dedup` command runs. *One process*: "
        "every run one after another in the same process; there a small corpus reuses memory "
        "malloc kept from the previous run, while a large one takes fresh pages from the "
        "kernel each time (its system time).", "",
        "Median x smallest by size:", "",
        *_table(["corpus", "run", "threshold"] + [f"{n:,}" for n in columns], summary), "",
        spread, "",
        *_markdown_reference(sc.get("reference")),
        "Every run:", "",
        *_table(header, body)]) + "\n"


def _markdown_reference(ref: dict[str, Any] | None) -> list[str]:
    """The baseline's growth on the same replicas (:func:`scaling_reference`), if it ran."""
    if not ref:
        return []
    rows = ref["rows"]
    copies = ", ".join(str(r["docs"] // rows[0]["docs"]) for r in rows)
    return [
        f"The same replicas ({copies} copies) through {ref['method']} in one process, at "
        f"{ref['threshold']}, {ref['rounds']} rounds of the same sandwich (after all ctxkit "
        "runs): signatures and LSH insert and query, without verification or clusters. How "
        "much another implementation's time per document grows on this machine with equal "
        "work:", "",
        *_table(["docs", "candidates / doc", "best us/doc", "median us/doc", "user us",
                 "system us", "x smallest (median)", "x smallest, every round"],
                [[f"{r['docs']:,}", r["candidates_per_doc"], r["best_us_per_doc"],
                  r["median_us_per_doc"], r["best_user_us"], r["best_system_us"],
                  f"**{r['median_paired_ratio']:.2f}**",
                  ", ".join(f"{x:.2f}" for x in r["paired_ratios"])] for r in rows]), ""]


@section("bench_real_data")
def bench_real_data(
    sources: dict[str, list[str]], thresholds: list[float], boundary: list[float]
) -> dict[str, Any]:
    """What each threshold removes on the shared instruction datasets, whole records and with
    template lines stripped, next to datasketch's and text-dedup's defaults, with samples of
    pairs just above the boundary."""
    from ctxkit.deduplication.boilerplate import strip_boilerplate

    rows, samples = [], []
    for name in ("toolformer", "codealpaca", "gsm8k"):
        texts = sources.get(name)
        if not texts:
            continue
        row: dict[str, Any] = {"dataset": name, "records": len(texts),
                               "exact": exact_dedup(texts).n_removed,
                               "datasketch_0.9": datasketch_removed(texts, 0.9),
                               "textdedup_0.7": textdedup_removed(texts, 0.7)}
        sig = signatures(texts)
        stripped = strip_boilerplate(texts)
        row["boilerplate_lines"] = len(stripped.lines)
        sig_stripped = signatures(stripped.texts)
        for t in thresholds:
            whole = minhash_dedup(texts, t, sig=sig)
            varying = minhash_dedup(stripped.texts, t, sig=sig_stripped)
            row[f"whole_{t}"] = whole.n_removed
            row[f"varying_{t}"] = varying.n_removed
            row[f"largest_{t}"] = max((len(c) for c in whole.clusters), default=0)
            if t in boundary:
                for label, res, work in (("whole", whole, texts),
                                         ("varying", varying, stripped.texts)):
                    if label == "varying" and not row["boilerplate_lines"]:
                        continue
                    near = [(i, j, sc) for (i, j), sc in zip(res.pairs.tolist(),
                                                             res.pair_scores.tolist())
                            if sc < t + 0.03]
                    random.Random(1).shuffle(near)
                    for i, j, sc in near[:2]:
                        samples.append({"dataset": name, "threshold": t, "compared": label,
                                        "jaccard": round(sc, 3), "a": work[i], "b": work[j]})
        rows.append(row)
    return {"thresholds": thresholds, "rows": rows, "samples": samples}


@section("bench_linear_recall")
def bench_linear_recall(texts: list[str], thresholds: list[float]) -> dict[str, Any]:
    """What the hub stars cost on templated records: removals and co-cluster pairs against
    verifying every pair of every LSH bucket (``max_bucket`` unbounded, quadratic)."""
    rows = []
    for t in thresholds:
        fw, fc, full = timed(lambda t=t: minhash_dedup(texts, t, max_bucket=10**9))
        lw, lc, lin = timed(lambda t=t: minhash_dedup(texts, t))
        rows.append({"threshold": t, "removed_exhaustive": full.n_removed,
                     "removed_linear": lin.n_removed,
                     "removal_recall": round(lin.n_removed / max(full.n_removed, 1), 4),
                     "false_removals": len(set(lin.removed.tolist())
                                           - set(full.removed.tolist())),
                     "cocluster_f1": cocluster_f1(full, lin),
                     "candidates_exhaustive": full.info["candidates"],
                     "candidates_linear": lin.info["candidates"],
                     "cpu_s_exhaustive": round(fc, 3), "cpu_s_linear": round(lc, 3)})
    return {"docs": len(texts), "rows": rows}


def cocluster_f1(ref: Any, got: Any) -> float:
    """F1 of the pairs placed in one cluster, ``got`` against ``ref``."""
    def labels(r):
        return np.where(r.duplicate_of >= 0, r.duplicate_of, np.arange(r.n))

    def pairs_in(*labs):
        key = labs[0].astype(np.int64)
        for lab in labs[1:]:
            key = key * (len(lab) + 1) + lab
        _, counts = np.unique(key, return_counts=True)
        return int((counts * (counts - 1) // 2).sum())

    a, b = labels(ref), labels(got)
    both, pa, pb = pairs_in(a, b), pairs_in(a), pairs_in(b)
    p, r = (both / pb if pb else 1.0), (both / pa if pa else 1.0)
    return round(2 * p * r / (p + r), 4) if p + r else 0.0


# ---------------------------------------------------------------- reports


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """Markdown table lines; the first column left-aligned, the rest right-aligned."""
    out = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def markdown(res: dict[str, Any]) -> str:
    """The results as Markdown; ``python -m evals.readme`` adds the command and machine."""
    tp, q, pf = res["throughput"], res["quality"], res["pair_f1"]
    ls, se = res["lsh_speed"], res["semantic"]
    lines = [f"# Dedup benchmark{' (quick)' if res['quick'] else ''}", ""]
    lines += [
        f"MinHash signatures, raw text to 128 permutations of character 5-grams ({tp['docs']} "
        f"docs, {tp['mean_chars']} characters on average; CPU time is the fair figure on a "
        "shared machine):",
        "",
    ]
    lines += _table(
        ["method", "docs/s (wall)", "docs/s (CPU)", "ctxkit speedup (wall)", "(CPU)"],
        [
            [
                name,
                f"{m['docs_per_s']:,.0f}",
                f"{m['docs_per_cpu_s']:,.0f}",
                f"{m['ctxkit_speedup_wall']:.2f}x",
                f"{m['ctxkit_speedup_cpu']:.2f}x",
            ]
            for name, m in tp["methods"].items()
        ],
    )
    lines += [
        "",
        f"Removed set vs injected ground truth ({q['docs']} docs, {q['gold_removed']} copies with "
        "5-15% word edits plus case, whitespace and punctuation noise):",
        "",
    ]
    lines += _table(
        ["method", "threshold", "precision", "recall", "F1"],
        [
            [
                r["method"],
                r["threshold"],
                f"{r['precision']:.3f}",
                f"{r['recall']:.3f}",
                f"{r['f1']:.3f}",
            ]
            for r in q["rows"]
            if not ("estimate" in r["method"] and r["threshold"] not in (0.5, 0.8))
        ],
    )
    lines += ["", f"Pair F1 against the exact Jaccard join ({pf['docs']} docs):", ""]
    lines += _table(
        ["method", "threshold", "true pairs", "found", "precision", "recall", "F1"],
        [
            [
                r["method"],
                r["threshold"],
                r["gold"],
                r["predicted"],
                f"{r['precision']:.3f}",
                f"{r['recall']:.3f}",
                f"{r['f1']:.3f}",
            ]
            for r in pf["rows"]
        ],
    )
    lines += [
        "",
        f"LSH candidates + verification, {ls['docs']:,} docs at threshold {ls['threshold']} "
        f"({ls['bands']} bands x {ls['rows']} rows, {ls['candidates']:,} candidates; signatures "
        f"took {ls['signature_seconds']} s, {ls['signature_docs_per_cpu_s']:,.0f} docs per CPU s):",
        "",
    ]
    lines += _table(
        ["method", "wall s", "CPU s", "speedup vs datasketch (wall)", "(CPU)"],
        [
            [
                name,
                f"{m['wall_s']:.2f}",
                f"{m['cpu_s']:.2f}",
                f"{m['speedup_vs_datasketch_wall']:.1f}x",
                f"{m['speedup_vs_datasketch_cpu']:.1f}x",
            ]
            for name, m in ls["methods"].items()
        ],
    )
    lines += [
        "",
        f"Semantic: SemDeDup k-means partition vs exact all-pairs ({se['docs']} docs, "
        f"{se['clusters']} clusters; {res['encoder']}, {se['embed_docs_per_s']:.0f} docs/s):",
        "",
    ]
    lines += _table(
        ["method", "cosine threshold", "pairs", "recall", "seconds"],
        [
            [r["method"], r["threshold"], r["pairs"], f"{r['recall']:.3f}", f"{r['seconds']:.2f}"]
            for r in se["rows"]
        ],
    )
    lines += _markdown_templated(res["templated_speed"])
    lines += _markdown_real(res["real_data"], res["linear_recall"])
    return "\n".join(lines) + "\n"


def _markdown_templated(ts: dict[str, Any]) -> list[str]:
    rounds = ts.get("ctxkit_rounds")
    best = f", best of {rounds} rounds that each visit every size" if rounds and rounds > 1 else ""
    lines = ["", f"Whole pipelines on templated records, CPU seconds{best} "
             "(`dedup(texts, method=\"minhash\")` with signatures, LSH, verification and "
             "clusters, against datasketch `MinHash.bulk` + `MinHashLSH` insert and query and "
             "rensa `RMinHash` + `RMinHashLSH` insert and query, which neither verify nor "
             "cluster). toolformer: the GPTeacher toolformer"
             " records (prefixes; the last is the whole set), every one opening with a tool"
             " description; mix: a resample drawn afresh at each size, 90% the LSH-timing"
             " corpus and 10% toolformer records drawn with replacement from a share of the"
             " records proportional to the size, so duplicates are as frequent at every size."
             " us/doc: CPU microseconds per document (best round; median of the rounds"
             " beside it, the fairer across sizes, as a short run fits in a quiet spell of"
             " the machine more often); it should stay flat as the corpus grows:", ""]
    header = ["corpus", "docs", "threshold", "ctxkit CPU s", "us/doc", "median us/doc",
              "candidates/doc",
              "removed", "largest cluster", "datasketch CPU s", "datasketch us/doc",
              "ctxkit speedup", "rensa CPU s", "rensa us/doc", "ctxkit speedup vs rensa"]
    body = []
    for r in ts["rows"]:
        row = [r["corpus"], f"{r['docs']:,}", r["threshold"], f"{r['ctxkit_cpu_s']:.2f}",
               f"{r['ctxkit_us_per_doc_cpu']:.0f}",
               f"{r['ctxkit_median_us_per_doc_cpu']:.0f}",
               f"{r.get('candidates_per_doc', '-')}",
               f"{r['removed']:,}", f"{r['largest_cluster']:,}"]
        for lib in ("datasketch", "rensa"):
            have = f"{lib}_cpu_s" in r
            row += [f"{r[f'{lib}_cpu_s']:.2f}" if have else "-",
                    f"{r[f'{lib}_us_per_doc_cpu']:.0f}" if have else "-",
                    f"{r[f'speedup_vs_{lib}_cpu']:.1f}x" if have else "-"]
        body.append(row)
    return lines + _table(header, body)


def _one_line(text: str, head: int = 40, tail: int = 110) -> str:
    """The text on one line, its middle elided (a shared template opens most records, so the
    end is where two records differ)."""
    flat = text.replace("\n", " / ").replace("|", "\\|")
    return flat if len(flat) <= head + tail + 5 else f"{flat[:head]} ... {flat[-tail:]}"


def _markdown_real(rd: dict[str, Any], lr: dict[str, Any]) -> list[str]:
    ts = rd["thresholds"]
    if not rd["rows"]:
        lines = ["", "(The shared instruction datasets are absent: no removals table.)"]
        return lines + _markdown_recall(lr)
    lines = ["", "Records each threshold removes on the shared instruction datasets (MinHash, "
             "character 5-gram Jaccard, whole records / the varying part after stripping "
             "template lines found in >= 1% of records), next to what exact dedup, datasketch's "
             "default (`MinHashLSH` threshold 0.9, query then insert, no verification) and "
             "text-dedup's defaults (0.7, word 5-grams, 256 permutations, a shared LSH bucket is a "
             "duplicate) remove:", ""]
    header = ["dataset", "records", "template lines", "exact"] + \
        [f"t = {t}" for t in ts] + ["datasketch 0.9", "text-dedup 0.7"]
    body = []
    for r in rd["rows"]:
        body.append([r["dataset"], f"{r['records']:,}", r["boilerplate_lines"], r["exact"]]
                    + [f"{r[f'whole_{t}']:,} / {r[f'varying_{t}']:,}" for t in ts]
                    + [f"{r['datasketch_0.9']:,}", f"{r['textdedup_0.7']:,}"])
    lines += _table(header, body)
    if rd["samples"]:
        lines += ["", "Pairs just above the threshold (Jaccard in [t, t + 0.03)), i.e. what the "
                  "threshold starts to remove (newlines shown as ` / `):", ""]
        lines += _table(["dataset", "t", "compared", "Jaccard", "text A", "text B"], [
            [s["dataset"], s["threshold"], s["compared"], s["jaccard"], _one_line(s["a"]),
             _one_line(s["b"])] for s in rd["samples"]])
    return lines + _markdown_recall(lr)


def _markdown_recall(lr: dict[str, Any]) -> list[str]:
    lines = ["", f"Hub stars vs all pairs of every LSH bucket, toolformer's first {lr['docs']:,} "
              "records (whole): removals, and F1 of the pairs put in one cluster:", ""]
    lines += _table(
        ["threshold", "removed (all bucket pairs)", "removed (hub stars)", "removal recall",
         "false removals", "co-cluster F1", "candidates (all / stars)", "CPU s (all / stars)"],
        [[r["threshold"], f"{r['removed_exhaustive']:,}", f"{r['removed_linear']:,}",
          f"{r['removal_recall']:.3f}", r["false_removals"], f"{r['cocluster_f1']:.3f}",
          f"{r['candidates_exhaustive']:,} / {r['candidates_linear']:,}",
          f"{r['cpu_s_exhaustive']:.2f} / {r['cpu_s_linear']:.2f}"] for r in lr["rows"]])
    return lines


def _wrap(label: str, width: int = 22) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(label, width))


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    ax = axes[0, 0]
    names = list(res["throughput"]["methods"])
    vals = [res["throughput"]["methods"][n]["docs_per_cpu_s"] for n in names]
    ax.barh(
        [_wrap(n) for n in names],
        vals,
        color=["tab:blue", "tab:cyan", "tab:orange", "tab:red", "tab:gray"][: len(names)],
    )
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("documents per CPU second (log scale)")
    ax.set_title("MinHash signatures, char 5-grams, 128 permutations")
    for y, v in enumerate(vals):
        ax.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
    ax.invert_yaxis()

    ax = axes[0, 1]
    for method, style in (
        ("ctxkit char 5-gram, exact verify", "o-"),
        ("ctxkit char 5-gram, estimate verify", "s--"),
        ("ctxkit word 5-gram, exact verify", "^-"),
        ("datasketch MinHashLSH char 5-gram", "x:"),
    ):
        rows = [r for r in res["quality"]["rows"] if r["method"] == method]
        ax.plot([r["threshold"] for r in rows], [r["f1"] for r in rows], style, label=method)
    ax.set_xlabel("Jaccard threshold")
    ax.set_ylabel("F1 of removed set vs ground truth")
    ax.set_ylim(0, 1.02)
    ax.set_title("Near-duplicate removal quality (injected edits)")
    ax.legend(fontsize=8, loc="lower left")

    ax = axes[1, 0]
    methods = list(dict.fromkeys(r["method"] for r in res["pair_f1"]["rows"]))
    ts = sorted({r["threshold"] for r in res["pair_f1"]["rows"]})
    width = 0.8 / len(methods)
    for k, m in enumerate(methods):
        f1 = [
            next(
                r["f1"] for r in res["pair_f1"]["rows"] if r["method"] == m and r["threshold"] == t
            )
            for t in ts
        ]
        ax.bar(np.arange(len(ts)) + k * width, f1, width, label=m)
    ax.set_xticks(np.arange(len(ts)) + 0.4 - width / 2, [f"t = {t}" for t in ts])
    ax.set_ylabel("pair F1 vs exact Jaccard join")
    ax.set_ylim(0, 1.35)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.axhline(0.95, color="k", lw=0.8, ls="--")
    ax.set_title("Pair F1 against all pairs with true Jaccard >= t")
    ax.legend(fontsize=7, loc="upper center", ncol=2)

    ax = axes[1, 1]
    ts = res["templated_speed"]
    for (corpus, t), style in zip(
        sorted({(r["corpus"], r["threshold"]) for r in ts["rows"]}), ("o-", "s--", "^-", "v--")
    ):
        rows = [r for r in ts["rows"] if r["corpus"] == corpus and r["threshold"] == t]
        ax.plot([r["docs"] for r in rows], [r["ctxkit_us_per_doc_cpu"] for r in rows], style,
                label=f"ctxkit, {corpus}, t = {t}")
        base = [r for r in rows if "datasketch_cpu_s" in r]
        ax.plot([r["docs"] for r in base], [1e6 * r["datasketch_cpu_s"] / r["docs"] for r in base],
                "x", color=ax.lines[-1].get_color(), label=f"datasketch, {corpus}, t = {t}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("documents")
    ax.set_ylabel("CPU microseconds per document (log)")
    ax.set_title("Templated corpora: time per document as the corpus grows")
    ax.legend(fontsize=7, loc="center right")
    fig.suptitle("ctxkit dedup vs datasketch and rensa" + (" (quick run)" if res["quick"] else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few seconds, small sizes")
    ap.add_argument("--out", type=Path, default=Path("evals/results"))
    ap.add_argument(
        "--lsh-docs", type=int, default=None, help="documents for the LSH timing (default 200000)"
    )
    ap.add_argument("--semantic-docs", type=int, default=3000, help="texts embedded for recall")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scaling", type=int, default=0, metavar="ROUNDS",
                    help="only the time per document as the corpus grows, in ROUNDS rounds "
                         "(writes dedup_scaling.json and .md)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rng = random.Random(args.seed)
    root = data_dir()
    sources = load_sources(root)
    quick = args.quick
    sizes = {
        "throughput": 600 if quick else 5000,
        "originals": 300 if quick else 6000,
        "lsh": args.lsh_docs or (3000 if quick else 200_000),
        "semantic": 300 if quick else args.semantic_docs,
        # templated speed: toolformer prefixes (the last is the whole set), resample sizes
        "toolformer": [200, 400] if quick else [2000, 4000, None],
        # resamples drawn afresh per size, same shape (templated_mix)
        "mix": [1000, 2000] if quick else [25_000, 50_000, 100_000, 200_000],
        "mix_baselines": [1000, 2000] if quick else [25_000, 200_000],
        "real": 500 if quick else None,
        "linear": 300 if quick else 2000,
    }
    if args.scaling:
        return run_scaling(args, sources, rng, sizes["mix"])
    res: dict[str, Any] = {
        "quick": quick,
        "machine": machine_info(),
        "data": str(root) if root else "generated",
        "command": "python -m evals.dedup" + (" --quick" if quick else ""),
        "sizes": sizes,
    }
    pool = [t for texts in sources.values() for t in texts if t.strip()]
    rng.shuffle(pool)
    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    from ctxkit.io.records import atomic_write, write_json

    def checkpoint() -> None:
        # A long run leaves its finished sections behind even if it is stopped.
        write_json(args.out / "dedup.partial.json", res)

    res["throughput"] = bench_throughput(pool[: sizes["throughput"]], repeats=1 if quick else 3)
    checkpoint()
    orig = originals(sources, sizes["originals"], rng)
    texts, truth = inject_near_duplicates(orig, rng)
    res["quality"] = bench_quality(
        texts, truth, [0.5, 0.8] if quick else [0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    )
    checkpoint()
    res["pair_f1"] = bench_pair_f1(texts, [0.5, 0.7, 0.8])
    checkpoint()
    res["lsh_speed"] = bench_lsh_speed(
        scale_corpus(sizes["lsh"], sources, rng), DEFAULT_THRESHOLD, repeats=1 if quick else 2
    )
    checkpoint()
    if quick:
        encoder, res["encoder"] = HashingEncoder(), "character 3-gram hashing stand-in (quick run)"
    else:
        from ctxkit.deduplication.semantic import default_encoder

        encoder = default_encoder("cpu")
        res["encoder"] = "all-MiniLM-L6-v2 (ctxkit PackedEncoder, CPU)"
    res["semantic"] = bench_semantic(texts[: sizes["semantic"]], [0.9, 0.8], encoder)
    checkpoint()
    tool = sources.get("toolformer") or synthetic_templated(2000, rng)
    whole = len(tool) if not quick else sizes["toolformer"][-1]
    runs = [("toolformer", tool[:n], True) for n in sizes["toolformer"][:-1] + [whole]]
    runs += [("mix", templated_mix(n, sources, tool, rng, sizes["mix"][-1]),
              n in sizes["mix_baselines"]) for n in sizes["mix"]]
    res["templated_speed"] = bench_templated_speed(
        runs, [DEFAULT_THRESHOLD, 0.8], repeats=1 if quick else 5)
    checkpoint()
    real = {k: v[: sizes["real"]] for k, v in sources.items()} if sizes["real"] else sources
    res["real_data"] = bench_real_data(real, [0.5, 0.6, 0.7, 0.8, 0.9], [0.5, DEFAULT_THRESHOLD])
    checkpoint()
    res["linear_recall"] = bench_linear_recall(tool[: sizes["linear"]], [0.5, 0.7, 0.8])
    res["total_seconds"] = round(time.perf_counter() - t0, 1)
    res["section_seconds"] = {k: round(v, 1) for k, v in SECTION_SECONDS.items()}
    write_json(args.out / "dedup.json", res)
    (args.out / "dedup.partial.json").unlink(missing_ok=True)
    with atomic_write(args.out / "dedup.md") as fh:
        fh.write(markdown(res))
    plot(res, args.out / "dedup.png")
    print(markdown(res))
    return res


# The replicas go on to this many copies of the smallest resample (800k documents in a full
# run), four times the largest resample and far past every cache of the machine, so the check
# shows whether the time per document levels off or keeps growing with the corpus.
REPLICA_COPIES_MAX = 32


def run_scaling(
    args: argparse.Namespace, sources: dict[str, list[str]], rng: random.Random, sizes: list[int]
) -> dict[str, Any]:
    """``--scaling ROUNDS``: :func:`bench_scaling` on fresh resamples of every size and on
    disjoint replicas of the smallest, in as many copies as the resamples' sizes hold and in
    :data:`REPLICA_COPIES_MAX` copies (4 in a quick run, which stays a few seconds)."""
    from evals._common import write_results

    tool = sources.get("toolformer") or synthetic_templated(2000, rng)
    resamples = {n: templated_mix(n, sources, tool, rng, sizes[-1]) for n in sizes}
    unit = resamples[sizes[0]]
    copies = sorted({n // sizes[0] for n in sizes} | {4 if args.quick else REPLICA_COPIES_MAX})
    replicas = {len(unit) * k: disjoint_replicas(unit, k, rng) for k in copies}
    res = bench_scaling({"mix": resamples, "replicas": replicas}, [DEFAULT_THRESHOLD, 0.8],
                        args.scaling)
    # after every ctxkit run, so the baseline's memory never sits beside ctxkit's runs
    res["reference"] = scaling_reference(replicas, DEFAULT_THRESHOLD, args.scaling)
    res["command"] = "python -m evals.dedup" + (" --quick" if args.quick else "") + (
        f" --scaling {args.scaling}")
    text = markdown_scaling(res)
    write_results(args.out, "dedup_scaling", res, text)
    print(text)
    return res


if __name__ == "__main__":
    main()
