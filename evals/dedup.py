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
import os
import random
import time
from pathlib import Path
from typing import Any

from ctxkit.deduplication.options import DEFAULT_THRESHOLD
from evals.dedup_common import SECTION_SECONDS, machine_info
from evals.dedup_corpus import (
    data_dir,
    inject_near_duplicates,
    load_sources,
    synthetic_templated,
)
from evals.dedup_quality import (
    HashingEncoder,
    bench_linear_recall,
    bench_pair_f1,
    bench_quality,
    bench_real_data,
    bench_semantic,
)
from evals.dedup_report import markdown, plot
from evals.dedup_scaling import run_scaling
from evals.dedup_sets import originals, scale_corpus, templated_mix
from evals.dedup_speed import bench_lsh_speed, bench_templated_speed, bench_throughput


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


if __name__ == "__main__":
    main()
