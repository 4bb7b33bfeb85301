"""Cold ``compress_chat`` latency: the cascade beside embedding every turn, in one run.

A cold call (a server restoring a session, a batch job over many histories) meets every turn
for the first time. With the default ``embedding`` scorer, ``compress_chat`` embeds only the
turns a cheap first stage ranks best, filling the free room
(:mod:`ctxkit.compression.scoring.shortlist`);
its encoder runs in the ``"fast"`` dtype (bf16 on CPUs that multiply it natively, else fp32).
``EmbeddingScorer(candidates=0, dtype="float32")`` embeds every turn in fp32, the path without
either; ``EmbeddingScorer(dtype="float32")`` is the cascade alone. All run here, interleaved
call by call so that a loaded machine slows them alike:

- the longest dev LoCoMo conversation (``shared/data/bench``) with its first question as the
  last user message, budget 1/4 of its tokens, the embedding and word-piece caches cleared
  before every call (the model loaded once before timing; its load time is reported apart);
- all dev conversations joined (about 100k tokens) against the longest one (about 25k): the
  growth of the cold call with the history, which should be about linear (at most 4x), at a
  budget of 1/4 of each history's tokens and, as an application with a fixed context window
  sees it, at the longest one's budget for both (there the every-turn path, whose work does
  not depend on the budget, is not run again);
- retention beside it: the LoCoMo task of :mod:`evals.public_compression` (24 questions per
  conversation, every evidence turn kept at 1/2, 1/4 and 1/8 of the tokens) with the cascade
  and without, each method on one feature store per conversation (as ``ChatMemory`` keeps
  one: the same windows as ``compress_chat``, the features computed once).

Reported: median wall seconds and CPU seconds (both torch threads together) per call, and the
retention table. Run: ``python -m evals.chat_latency [--quick] [--reps N] [--out DIR]``; writes
``chat_latency.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from ctxkit.chat.features import ChatFeatures  # noqa: E402
from ctxkit.chat.options import ChatOptions  # noqa: E402
from ctxkit.chat.pipeline import compress_chat, count_chat_tokens  # noqa: E402
from ctxkit.chat.selection import select  # noqa: E402
from ctxkit.compression.scoring import shortlist as cascade  # noqa: E402
from ctxkit.compression.scoring.embedding import EmbeddingScorer  # noqa: E402
from ctxkit.compression.scoring.registry import get_scorer  # noqa: E402
from ctxkit.embedding.model import resolve_dtype  # noqa: E402
from ctxkit.io.tokenizers import get_tokenizer  # noqa: E402
from evals import public_bench as pb  # noqa: E402
from evals._common import data_dir, md_table, write_results  # noqa: E402

RATIOS = (1 / 2, 1 / 4, 1 / 8)
DEFAULT, CASCADE_FP32, EVERY_TURN = ("cascade (default)", "cascade, fp32",
                                     "every turn embedded, fp32")
METHODS = {DEFAULT: lambda: "embedding",
           CASCADE_FP32: lambda: EmbeddingScorer(dtype="float32"),
           EVERY_TURN: lambda: EmbeddingScorer(candidates=0, dtype="float32")}


def histories(convs: list[pb.LocomoConversation], tok) -> dict[str, list[dict[str, str]]]:
    """The longest conversation and every conversation joined, each ending with the longest
    one's first question."""
    longest = max(convs, key=lambda c: count_chat_tokens(c.messages, tokenizer=tok))
    question = {"role": "user", "content": longest.questions[0].question if longest.questions
                else "What did they plan for the weekend?"}
    joined = [m for c in convs for m in c.messages]
    return {"longest": longest.messages + [question], "joined": joined + [question]}


def cold_call(messages: list[dict[str, str]], budget: int, make_scorer) -> tuple[float, float]:
    """Wall and CPU seconds of one ``compress_chat`` with empty embedding caches."""
    get_scorer("embedding").clear_cache()  # a fresh EmbeddingScorer's caches start empty
    scorer = make_scorer()
    wall, cpu = time.perf_counter(), time.process_time()
    out = compress_chat(messages, budget, scorer=scorer)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if out.compressed_tokens > budget:
        raise AssertionError(f"over budget: {out.compressed_tokens} > {budget}")
    return wall, cpu


def latency(hists: dict[str, list], tok, reps: int, joined_old_reps: int) -> dict[str, Any]:
    """Median wall and CPU seconds per history and method, calls interleaved; ``"joined"`` at
    1/4 of its tokens, ``"joined_fixed"`` at the longest history's budget."""
    out: dict[str, Any] = {}
    runs = [*hists.items(), ("joined_fixed", hists["joined"])]
    fixed = count_chat_tokens(hists["longest"], tokenizer=tok) // 4
    for name, msgs in runs:
        tokens = count_chat_tokens(msgs, tokenizer=tok)
        budget = fixed if name == "joined_fixed" else tokens // 4
        times: dict[str, list[tuple[float, float]]] = {m: [] for m in METHODS}
        for rep in range(reps):
            for method, make in METHODS.items():
                if method == EVERY_TURN and (name == "joined_fixed" or (
                        name == "joined" and rep >= joined_old_reps)):
                    continue
                print(f"{name} ({tokens} tokens) {method}: call {rep + 1}", file=sys.stderr,
                      flush=True)
                times[method].append(cold_call(msgs, budget, make))
        out[name] = {"messages": len(msgs), "tokens": tokens, "budget": budget,
                     **{m: {"calls": len(t),
                            "wall_s": statistics.median(w for w, _ in t),
                            "cpu_s": statistics.median(c for _, c in t)}
                        for m, t in times.items() if t}}
    return out


def retention(convs: list[pb.LocomoConversation], tok) -> dict[str, Any]:
    """Share of questions whose evidence turns are all kept, per method and budget."""
    hits = {m: {r: [] for r in RATIOS} for m in METHODS}
    over = dict.fromkeys(METHODS, 0)
    for conv in convs:
        print(f"retention: {conv.name}", file=sys.stderr, flush=True)
        get_scorer("embedding").clear_cache()
        feats = {m: ChatFeatures(tok, make()) for m, make in METHODS.items()}
        for q in conv.questions:
            msgs = pb.locomo_messages(conv, q)
            original = count_chat_tokens(msgs, tokenizer=tok)
            for m, f in feats.items():
                opts = ChatOptions(tokenizer=tok, scorer=f.scorer)
                for r in RATIOS:
                    res = select(msgs, int(original * r), opts, f)
                    hits[m][r].append(pb.locomo_retained(res.kept, q))
                    over[m] = max(over[m], res.compressed_tokens - int(original * r))
    return {m: {"cases": len(h[RATIOS[0]]), "overshoot_tokens": int(over[m]),
                "retention": {f"1/{round(1 / r)}": float(np.mean(h[r])) for r in RATIOS}}
            for m, h in hits.items()}


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Cold compress_chat latency{' (quick)' if report['quick'] else ''}", ""]
    if report.get("skipped"):
        return "\n".join(lines + [report["skipped"], ""])
    lat = report["latency"]
    lines += ["Cold calls (embedding caches empty, model loaded; budget 1/4 of the history's "
              "tokens, or the longest conversation's budget where the table says so), "
              "the cascade (the default; its encoder in the `fast` dtype, here "
              f"{report['ranking_dtype']}), the cascade in fp32 (`EmbeddingScorer(dtype="
              "\"float32\")`) and every turn embedded in fp32 (`EmbeddingScorer(candidates=0, "
              "dtype=\"float32\")`) interleaved in one process; median seconds per call, wall "
              f"and CPU (torch on {report['torch_threads']} threads). Model load, once per "
              f"process: {report['model_load_s']:.1f} s.", ""]
    rows = []
    for name, title in (("longest", "longest dev LoCoMo conversation"),
                        ("joined", "all dev conversations joined"),
                        ("joined_fixed", "all joined, the longest's budget")):
        h = lat.get(name)
        if not h:
            continue
        for m in METHODS:
            if m in h:
                rows.append([title, f"{h['messages']:,}", f"{h['tokens']:,}",
                             f"{h['budget']:,}", m, h[m]["calls"], f"{h[m]['wall_s']:.2f}",
                             f"{h[m]['cpu_s']:.2f}"])
    lines.append(md_table(["history", "messages", "tokens", "budget", "method", "calls",
                           "wall s", "CPU s"], rows))
    for key, text in report["summary"].items():
        lines.append(f"- {key}: {text}")
    ret = report.get("retention")
    if ret:
        lines += ["", "LoCoMo retention (dev half, every evidence turn kept; one feature store "
                  "per conversation and method):", ""]
        lines.append(md_table(
            ["method", "cases"] + [f"kept @ {r}" for r in next(iter(ret.values()))["retention"]]
            + ["overshoot"],
            [[m, v["cases"], *(f"{x:.3f}" for x in v["retention"].values()),
              v["overshoot_tokens"]] for m, v in ret.items()]))
    lines += ["", f"Candidates per call: the first stage's best turns filling "
              f"{report['candidate_rooms']:g}x the free room, at least "
              f"{report['candidate_floor']} turns.", "",
              f"Command: `{report['command']}`; {report['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def summary(lat: dict[str, Any]) -> dict[str, str]:
    out = {}
    if "longest" in lat:
        h = lat["longest"]
        new, fp32, old = h[DEFAULT], h[CASCADE_FP32], h[EVERY_TURN]
        out["longest conversation"] = (
            f"{new['wall_s']:.2f} s with the defaults against {old['wall_s']:.2f} s with every "
            f"turn embedded in fp32 ({old['wall_s'] / new['wall_s']:.1f}x faster wall, "
            f"{old['cpu_s'] / new['cpu_s']:.1f}x less CPU); the cascade in fp32 "
            f"{fp32['wall_s']:.2f} s")
    if "longest" in lat and "joined" in lat:
        a, b = lat["longest"], lat["joined"]
        size = b["tokens"] / a["tokens"]
        wall = b[DEFAULT]["wall_s"] / a[DEFAULT]["wall_s"]
        out["growth"] = (f"{size:.2f}x the tokens take {wall:.2f}x the wall time "
                         f"({b[DEFAULT]['cpu_s'] / a[DEFAULT]['cpu_s']:.2f}x the CPU) with the "
                         f"defaults at 1/4 of each history's tokens ({wall / size:.2f}x per "
                         "token: 1 is linear)")
        c = lat.get("joined_fixed")
        if c:
            out["growth"] += (f"; {c[DEFAULT]['wall_s'] / a[DEFAULT]['wall_s']:.2f}x the wall "
                              f"time ({c[DEFAULT]['cpu_s'] / a[DEFAULT]['cpu_s']:.2f}x the CPU) "
                              f"at the longest one's budget ({c['budget']:,} tokens)")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seconds, for CI smoke tests")
    ap.add_argument("--out", default="evals/results", help="output directory")
    ap.add_argument("--reps", type=int, default=5, help="cold calls per history and method")
    ap.add_argument("--joined-old-reps", type=int, default=2,
                    help="calls of the every-turn path on the joined history (slow)")
    ap.add_argument("--no-retention", action="store_true", help="skip the retention table")
    args = ap.parse_args(argv)
    command = "python -m evals.chat_latency" + (" --quick" if args.quick else "") + "".join(
        f" --{k.replace('_', '-')} {getattr(args, k)}" for k, d in
        (("reps", 5), ("joined_old_reps", 2)) if getattr(args, k) != d and not args.quick) + (
        " --no-retention" if args.no_retention and not args.quick else "")
    import torch

    report: dict[str, Any] = {"quick": args.quick, "command": command,
                              "torch_threads": torch.get_num_threads(),
                              "ranking_dtype": str(resolve_dtype("fast", torch.device("cpu"))
                                                   ).removeprefix("torch."),
                              "candidate_rooms": cascade.CANDIDATE_ROOMS,
                              "candidate_floor": cascade.CANDIDATE_FLOOR}
    t0 = time.time()
    bench = pb.bench_dir(data_dir())
    if bench is None:
        report["skipped"] = "*Skipped: the benchmark data (`shared/data/bench`) is not here.*"
    else:
        tok = get_tokenizer("cl100k_base")
        load = time.perf_counter()
        for make in METHODS.values():  # every encoder the methods use
            scorer = make()
            (get_scorer(scorer) if isinstance(scorer, str) else scorer).relevance(["warm up"],
                                                                                  "warm")
        cascade.WordPieces()(["warm up"])
        report["model_load_s"] = time.perf_counter() - load
        convs = pb.load_locomo(bench, 2 if args.quick else 24, 0)
        if args.quick:
            convs = [pb.LocomoConversation(c.name, c.messages[:150]) for c in convs[:2]]
        hists = histories(convs, tok)
        reps = 1 if args.quick else args.reps
        report["latency"] = latency(hists, tok, reps, 1 if args.quick else args.joined_old_reps)
        report["summary"] = summary(report["latency"])
        if not args.no_retention and not args.quick:
            report["retention"] = retention(convs, tok)
    report["seconds"] = round(time.time() - t0, 1)
    write_results(args.out, "chat_latency", report, markdown(report))
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
