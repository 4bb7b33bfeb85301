"""Dedup quality next to datasketch and rensa: removals and pair F1 against exact Jaccard,
semantic recall, real-data removals and linear-time recall."""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np

from ctxkit.deduplication.exact import exact_dedup
from ctxkit.deduplication.minhash import minhash_dedup
from ctxkit.deduplication.signatures import signatures
from evals.dedup_baselines import (
    datasketch_bulk,
    datasketch_removed,
    optional_rensa,
    rensa_bands,
    rensa_minhashes,
    textdedup_removed,
    timed,
)
from evals.dedup_common import prf, section
from evals.dedup_corpus import (
    exact_jaccard_join,
)
from evals.dedup_sets import gold_removed


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
