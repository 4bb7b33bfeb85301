"""Dedup speed next to datasketch and rensa: throughput, LSH on a large corpus, templated
records."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ctxkit.deduplication.interop import to_datasketch
from ctxkit.deduplication.lsh import band_keys, candidate_pairs, choose_bands
from ctxkit.deduplication.minhash import minhash_dedup
from ctxkit.deduplication.signatures import empty_rows, signatures
from ctxkit.deduplication.verify import verify_pairs
from evals.dedup_baselines import (
    best_timed,
    char_shingles,
    datasketch_bulk,
    datasketch_lsh,
    interleaved,
    optional_rensa,
    rensa_lsh,
    rensa_minhashes,
    timed,
)
from evals.dedup_common import RAW, section


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

    dedup(runs[0][1][:300], method="minhash")  # warm caches and code paths
    mine = interleaved({(i, t): functools.partial(dedup, texts, method="minhash", threshold=t)
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
        res = dedup(texts, method="minhash", threshold=t)
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
