"""Time per document as the corpus grows (``python -m evals.dedup --scaling N``): resamples
and replicas of equal work, each size timed in a process of its own."""

from __future__ import annotations

import argparse
import functools
import json
import pickle
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.deduplication.options import DEFAULT_THRESHOLD
from evals.dedup_baselines import (
    optional_rensa,
    rensa_lsh,
    rensa_minhashes,
)
from evals.dedup_corpus import (
    disjoint_replicas,
    synthetic_templated,
)
from evals.dedup_report import _table
from evals.dedup_sets import templated_mix


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


# How each size is timed: ``fresh`` in a process of its own, ``in_process`` in this one.
MODES = ("fresh", "in_process")


def bench_scaling(
    corpora: dict[str, dict[int, list[str]]], thresholds: list[float], rounds: int,
    modes: tuple[str, ...] = MODES,
) -> dict[str, Any]:
    """Time per document of ``dedup(texts, method="minhash", threshold=t)`` as the corpus
    grows, two ways.

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
    work that grows with the data. ``modes`` picks which of the two ways run.
    """
    import subprocess
    import tempfile

    from ctxkit.deduplication.pipeline import dedup
    from evals.dedup_oneshot import cpu_us_per_doc

    first = next(iter(corpora.values()))
    dedup(next(iter(first.values()))[:300], method="minhash")  # warm caches and code paths
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
                found = []
                times = cpu_us_per_doc(lambda: found.append(
                    dedup(corpora[name][n], method="minhash", threshold=t)), n)
                candidates[name, t, n] = found[0].info["minhash"]["candidates"] / max(1, n)
            runs.setdefault((mode, name, t, n), []).append(times)
            return sum(times)

        for r in range(rounds):
            for name, resamples in corpora.items():
                for t in thresholds:
                    for mode in modes:
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
                        args.scaling, MODES)
    # after every ctxkit run, so the baseline's memory never sits beside ctxkit's runs
    res["reference"] = scaling_reference(replicas, DEFAULT_THRESHOLD, args.scaling)
    res["command"] = "python -m evals.dedup" + (" --quick" if args.quick else "") + (
        f" --scaling {args.scaling}")
    text = markdown_scaling(res)
    write_results(args.out, "dedup_scaling", res, text)
    print(text)
    return res
