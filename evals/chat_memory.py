"""ChatMemory per-turn latency: replaying a long conversation, against compress_chat per turn.

A chat application compresses its history on every turn. This benchmark replays a LoCoMo
conversation (the longest of ``shared/data/bench``, 600+ turns) through
:class:`ctxkit.ChatMemory` one message at a time, calling ``compress()`` after each, and at
evenly spaced turns also runs what a user would call instead, ``compress_chat`` on the whole
history so far (a fresh call: every message tokenised and scored again; embeddings come from
the process-wide cache of the ``embedding`` scorer, as in a server that has seen the messages
before). Both must
return the same window (checked at every sampled turn); the figure is the ratio of their
median per-turn CPU time, for the default scorer and for ``scorer="embedding"``.

    python -m evals.chat_memory            # full: 600+ turns, both scorers, and billing
    python -m evals.chat_memory --quick    # smoke: a generated 60-turn chat, idf only

It also runs the billing replay of :mod:`evals.chat_billing`: every dev LoCoMo conversation
turn by turn at 1/4 and 1/8 of its tokens, the billed input, prompt-cache hits, evidence
retention, answer strings in the window and KV cache of each way to build the window, with
and without summaries of the evicted turns (``--smollm2 K``: SmolLM2 summaries as well, on the
K shortest conversations).

CPU time (``time.process_time``) is reported because it survives a loaded machine; torch runs
on one thread so that CPU time is the work done, not threads spinning.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from evals import chat_billing  # noqa: E402
from evals._common import data_dir, md_table, write_results  # noqa: E402


def _conversation(quick: bool) -> tuple[str, list[dict[str, Any]]]:
    """The longest LoCoMo conversation, or a generated chat when the data is absent/quick."""
    root = data_dir()
    bench = root / "bench" if root is not None else None
    if not quick and bench is not None and any(bench.glob("locomo_*.json")):
        from evals.public_bench import load_locomo

        conv = max(load_locomo(bench), key=lambda c: len(c.messages))
        return f"LoCoMo {conv.name}", conv.messages
    rng = random.Random(0)
    topics = ["garden", "router", "invoice", "marathon", "piano", "tax form", "sourdough"]
    msgs = []
    for _ in range(30):
        topic = rng.choice(topics)
        msgs.append({"role": "user", "content": f"About the {topic}: my number is "
                     f"{rng.randrange(100, 999)}. What should I do next?"})
        msgs.append({"role": "assistant", "content": f"For the {topic}, check it daily. " *
                     rng.randrange(1, 5) + f"Wait {rng.randrange(2, 60)} minutes."})
    return "generated 60-turn chat", msgs


def replay(messages: list[dict[str, Any]], budget: int, scorer: str, samples: int
           ) -> dict[str, Any]:
    """Per-turn CPU ms of ChatMemory.compress (every turn) and compress_chat (sampled turns)."""
    from ctxkit.chat.memory import ChatMemory
    from ctxkit.chat.pipeline import compress_chat, count_chat_tokens

    n = len(messages)
    first = next(k for k in range(n) if count_chat_tokens(messages[:k + 1]) > budget)
    step = max(1, (n - 1 - first) // max(1, samples - 1))
    sampled = set(range(n - 1, first - 1, -step)[:samples])
    mem = ChatMemory(budget, scorer=scorer)
    memory_ms, fresh_ms, paired = [], [], []
    mismatches = over = 0
    for k, m in enumerate(messages):
        mem.add(m)
        t0 = time.process_time()
        window = mem.compress()
        ms = (time.process_time() - t0) * 1e3
        over += window.compressed_tokens > budget
        if k < first:
            continue
        memory_ms.append(ms)
        if k in sampled:
            t0 = time.process_time()
            fresh = compress_chat(messages[:k + 1], budget, scorer=scorer)
            fresh_ms.append((time.process_time() - t0) * 1e3)
            paired.append(ms)
            mismatches += fresh.messages != window.messages or fresh.ledger != window.ledger
        print(f"  {scorer}: turn {k + 1}/{n}", end="\r", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    med_mem, med_fresh = statistics.median(paired), statistics.median(fresh_ms)
    return {
        "scorer": scorer,
        "turns_compressed": len(memory_ms),
        "sampled_turns": sorted(sampled),
        "memory_ms_median": round(statistics.median(memory_ms), 2),
        "memory_ms_median_sampled": round(med_mem, 2),
        "memory_ms_max": round(max(memory_ms), 2),
        "compress_chat_ms_median": round(med_fresh, 2),
        "speedup": round(med_fresh / med_mem, 1) if med_mem else None,
        "mismatches": mismatches,
        "over_budget": over,
    }


def markdown(report: dict[str, Any]) -> str:
    rows = [[f"`{r['scorer']}`", r["turns_compressed"], r["memory_ms_median"],
             r["compress_chat_ms_median"], f"{r['speedup']}x", r["mismatches"],
             r["over_budget"]] for r in report["runs"]]
    return (
        f"# ChatMemory per-turn latency\n\n"
        f"Replay of {report['conversation']} ({report['messages']} messages, "
        f"{report['tokens']:,} tokens) at budget {report['budget']}: `ChatMemory.compress()` "
        f"after every message against `compress_chat` on the whole history at "
        f"{report['samples']} evenly spaced turns (median CPU ms per turn, torch on one "
        f"thread). Mismatches: sampled turns where the two windows differ.\n\n"
        + md_table(["scorer", "turns", "ChatMemory ms", "compress_chat ms", "speed-up",
                    "mismatches", "over budget"], rows))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seconds: generated chat, idf only")
    ap.add_argument("--out", default="evals/results", help="output directory")
    ap.add_argument("--budget", type=int, default=4096)
    ap.add_argument("--samples", type=int, default=None,
                    help="turns at which compress_chat is timed (default 8; 4 with --quick)")
    ap.add_argument("--scorers", default="idf,embedding")
    ap.add_argument("--billing-scorer", default="embedding",
                    help="scorer of the billing replay (ChatMemory's default)")
    ap.add_argument("--questions", type=int, default=0,
                    help="LoCoMo questions drawn per conversation for retention (0: all)")
    ap.add_argument("--skip-latency", action="store_true", help="only the billing replay")
    ap.add_argument("--smollm2", type=int, default=0, metavar="K",
                    help="also prefix-cache rows with SmolLM2 summaries on the K shortest "
                         "conversations (needs ctxkit[lm]; minutes per conversation on CPU)")
    args = ap.parse_args(argv)
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    name, messages = _conversation(args.quick)
    from ctxkit.chat.pipeline import count_chat_tokens

    scorers = ["idf"] if args.quick else [s for s in args.scorers.split(",") if s]
    budget = 300 if args.quick else args.budget
    samples = args.samples or (4 if args.quick else 8)
    t0 = time.time()
    report = {
        "quick": args.quick, "conversation": name, "messages": len(messages),
        "tokens": count_chat_tokens(messages), "budget": budget, "samples": samples,
        "runs": [] if args.skip_latency else [replay(messages, budget, s, samples)
                                              for s in scorers],
    }
    report["billing"] = billing(args)
    report["seconds"] = round(time.time() - t0, 1)
    text = (markdown(report) if report["runs"] else "# ChatMemory\n") + "\n" + \
        chat_billing.markdown(report["billing"]["summary"], report["billing"]["conversations"],
                              report["billing"]["scorer"])
    smol = report["billing"].get("smollm2")
    if smol:
        text += "\n" + chat_billing.markdown(
            smol["summary"], f"SmolLM2 summaries against extractive on {smol['conversations']}",
            report["billing"]["scorer"])
    write_results(args.out, "chat_memory", report, text)
    print(text)
    return report


def billing(args: argparse.Namespace) -> dict[str, Any]:
    """The billing replay (:mod:`evals.chat_billing`) over the dev LoCoMo conversations, or a
    generated chat with ``--quick``."""
    from evals import public_bench as pb

    root = data_dir()
    bench = root / "bench" if root is not None else None
    if not args.quick and bench is not None and any(bench.glob("locomo_*.json")):
        convs = pb.load_locomo(bench, args.questions or None, 0)
        asked = sum(len(c.questions) for c in convs)
        scorer = args.billing_scorer
        what = f"{len(convs)} dev LoCoMo conversations, {asked} questions"
    else:
        name, messages = _conversation(True)
        convs, scorer, what = [pb.LocomoConversation("generated", messages)], "idf", name
    rows = []
    for conv in convs:
        for fraction in chat_billing.FRACTIONS:
            print(f"  billing: {conv.name} at {fraction:g}", file=sys.stderr, flush=True)
            rows += chat_billing.replay(conv, fraction, scorer)
    out = {"conversations": what, "scorer": scorer, "rows": rows,
           "summary": chat_billing.summarize(rows)}
    if args.smollm2:  # a model call per compaction: the shortest conversations only
        picked = sorted(convs, key=lambda c: len(c.messages))[:args.smollm2]
        names = {c.name for c in picked}
        smol = [r for r in rows if r["conversation"] in names
                and r["method"].startswith("ChatMemory, prefix cache")]
        for conv in picked:
            for fraction in chat_billing.FRACTIONS:
                print(f"  smollm2: {conv.name} at {fraction:g}", file=sys.stderr, flush=True)
                smol += chat_billing.replay(conv, fraction, scorer, ("smollm2",), plain=False)
        out["smollm2"] = {"conversations": ", ".join(sorted(names)), "rows": smol,
                          "summary": chat_billing.summarize(smol)}
    return out


if __name__ == "__main__":
    main()
