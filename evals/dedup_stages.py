"""Where MinHash dedup's time per document goes, stage by stage, as the corpus grows.

``python -m evals.dedup_stages`` runs ``minhash_dedup`` in one process, timing each stage
through its ``on_stage`` hook, on the corpora of the
scaling check: a 25k templated resample and its replicas that share no letter or digit
(1 and 32 copies by default), so every size holds the same work per document and a stage whose
time per document grows with the corpus shows as such. Sizes alternate within each round
(small, large, small, large, ...), so a slow spell of the machine shows as a spread within a
size rather than as growth. Writes user and system CPU microseconds per document, per stage
and round, to ``evals/results/dedup_stages.{json,md}``.

Example (a few seconds)::

    python -m evals.dedup_stages --quick --out /tmp/stages
"""

from __future__ import annotations

import argparse
import os
import random
import resource
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ctxkit.deduplication.minhash import STAGES as MINHASH_STAGES

# the stages of an exact-verified run on raw texts (no template stripping)
STAGES = tuple(s for s in MINHASH_STAGES if s != "boilerplate")


def stage_times(texts: Sequence[str], threshold: float) -> dict[str, list[float]]:
    """``{stage: [user_us, system_us]}`` per document, for one minhash dedup of ``texts`` with
    exact verification, timed through ``minhash_dedup``'s ``on_stage`` hook."""
    from ctxkit.deduplication.minhash import minhash_dedup

    n = max(1, len(texts))
    times: dict[str, list[float]] = {}

    @contextmanager
    def timed(name: str) -> Iterator[None]:
        before = resource.getrusage(resource.RUSAGE_SELF)
        try:
            yield
        finally:
            after = resource.getrusage(resource.RUSAGE_SELF)
            times[name] = [1e6 * (after.ru_utime - before.ru_utime) / n,
                           1e6 * (after.ru_stime - before.ru_stime) / n]

    minhash_dedup(texts, threshold, verify="exact", on_stage=timed)
    return times


def corpora(base: int, copies: Sequence[int], seed: int) -> dict[int, list[str]]:
    """The ``base``-document templated resample in each number of ``copies`` (disjoint
    alphabets), keyed by size."""
    from evals._common import data_dir
    from evals.dedup_corpus import disjoint_replicas, load_sources, synthetic_templated
    from evals.dedup_sets import templated_mix

    rng = random.Random(seed)
    sources = load_sources(data_dir())
    tool = sources.get("toolformer") or synthetic_templated(2000, rng)
    unit = templated_mix(base, sources, tool, rng, 8 * base)
    return {base * k: disjoint_replicas(unit, k, random.Random(seed + k)) for k in copies}


def profile(texts_by_size: dict[int, list[str]], threshold: float, rounds: int) -> dict[str, Any]:
    """Every size once per round, in ascending order, after a warm-up on 300 texts."""
    smallest = texts_by_size[min(texts_by_size)]
    stage_times(smallest[:300], threshold)  # compile the loops, import everything
    runs = {n: [] for n in texts_by_size}
    for _ in range(rounds):
        for n, texts in texts_by_size.items():
            runs[n].append(stage_times(texts, threshold))
    return {"threshold": threshold, "rounds": rounds,
            "sizes": {str(n): r for n, r in runs.items()}}


def markdown(res: dict[str, Any]) -> str:
    from evals._common import md_table

    sizes = list(res["sizes"])
    head = [f"{int(n):,}" for n in sizes]

    def span(values: list[float]) -> str:
        lo, hi = min(values), max(values)
        return f"{lo:.2f}" if round(lo, 2) == round(hi, 2) else f"{lo:.2f}-{hi:.2f}"

    rows = []
    for stage in (*STAGES, "all stages"):
        cells = []
        for n in sizes:
            rounds = res["sizes"][n]
            pick = STAGES if stage == "all stages" else (stage,)
            user = [sum(r[s][0] for s in pick) for r in rounds]
            system = [sum(r[s][1] for s in pick) for r in rounds]
            cells.append(f"{span(user)} / {span(system)}")
        rows.append([stage, *cells])
    return (
        "# MinHash dedup, time per document by stage\n\n"
        f"One process, threshold {res['threshold']}, {res['rounds']} rounds that each run every "
        "size in ascending order; CPU microseconds per document, user / system, range over the "
        "rounds. Sizes: a templated resample and its replicas that share no letter or digit "
        "(the same work per document at every size).\n\n"
        + md_table(["stage", *head], rows)
        + f"\nCommand: `{res['command']}`\n"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from evals._common import command_line, write_results

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few seconds, small sizes")
    ap.add_argument("--out", type=Path, default=Path("evals/results"))
    ap.add_argument("--base", type=int, default=None, help="documents of one copy (25000)")
    ap.add_argument("--copies", type=int, nargs="+", default=None, help="copies (1 32)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threshold", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    base = args.base or (1000 if args.quick else 25_000)
    copies = args.copies or ([1, 2] if args.quick else [1, 32])
    if base < 1 or args.rounds < 1 or min(copies) < 1:
        raise SystemExit("--base, --rounds and --copies must be positive")
    res = profile(corpora(base, sorted(set(copies)), args.seed), args.threshold, args.rounds)
    res["command"] = command_line("evals.dedup_stages", argv)
    text = markdown(res)
    write_results(args.out, "dedup_stages", res, text)
    print(text)
    return res


if __name__ == "__main__":
    main()
