"""ChatMemory at agent scale: per-turn cost from 25k to 1M tokens, and evidence on long histories.

``python -m evals.chat_scaling [--quick] [--sizes 25000,100000,400000,1000000]``

**Scaling.** The dev LoCoMo conversations are joined into one history, turn after turn, up to
each size in tokens; past their ~108k tokens they are joined again, each round's turns marked
``[round R]`` so no two texts are equal (the rounds repeat the dev conversations' content, so
re-asked turns are part of the workload). Each size runs in a process of its own (its peak RSS
is that size's): ``ChatMemory(budget)`` with the defaults takes the history, its first
``compress`` is cold (as ``compress_chat`` is: the shortlist embeds what the question needs),
its second prepares every message's features once, and then a chat goes on for ``--turns``
turns: a user question from the dev questions, ``compress``, a short assistant reply,
``compress``. Reported: the cold call, the one-time preparation, per-turn median and p95 of
``compress``, a warm ``peek(query=...)``, peak RSS and the RSS each message adds.

**Billing.** Each dev conversation replayed with a clock (:func:`timestamps`), a window after
every message, accounted with a prompt cache that never expires and with one that expires
after 5 idle minutes: the default memory, the prefix-cache mode blind to the cache's lifetime
and the one told it (``PrefixCacheOptions(ttl=300)``), and the whole history.

**Evidence.** The dev conversations joined (~108k tokens, 3.1k turns): for sampled questions
of every conversation, the window for that question (``peek(query=question)``) at 4,096 and
8,192 tokens keeps every evidence turn or not; beside it the prefix-cache mode, BM25 (``bm25s``)
and MiniLM (sentence-transformers) turn retrieval, and keep-recent, each filling the same
budget with whole turns in its ranking order.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ctxkit.chat.memory import ChatMemory  # noqa: E402
from ctxkit.chat.pipeline import count_chat_tokens  # noqa: E402
from ctxkit.io.tokenizers import get_tokenizer  # noqa: E402
from evals import public_bench as pb  # noqa: E402
from evals._common import command_line, data_dir, md_table, write_results  # noqa: E402

SIZES = (25_000, 100_000, 400_000, 1_000_000)
QUICK_SIZES = (5_000, 20_000)
BUDGETS = (4096, 8192)
REPLY = {"role": "assistant", "content": "Let me think about that and check what we said."}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def joined_history(convs: list[pb.LocomoConversation], tokens: int, tok) -> list[dict]:
    """Dev LoCoMo turns joined up to ``tokens`` billed tokens, rounds past the first marked."""
    out, total, rnd = [], 3, 0
    while total < tokens:
        for conv in convs:
            for m in conv.messages:
                msg = m if rnd == 0 else {**m, "content": f"[round {rnd}] {m['content']}"}
                out.append(msg)
                total += count_chat_tokens([msg], tokenizer=tok, reply_priming=0)
                if total >= tokens:
                    return out
        rnd += 1
    return out


def _warm_up(history: list[dict], questions: list[str]) -> None:
    """A short chat through every step first, as a server process has done before its next
    session: the model loads, and the bf16 kernels for each row shape are built, outside the
    timings; then the scorer's caches are emptied."""
    from ctxkit.compression.scoring.registry import get_scorer

    mem = ChatMemory(512)
    mem.extend(history[:80])
    for k in range(8):
        mem.compress()
        mem.add({"role": "user", "content": questions[k] + " " + "and more " * (8 * k)})
    get_scorer("embedding").clear_cache()


def one_size(tokens: int, budget: int, turns: int) -> dict[str, Any]:
    """Everything measured at one history size, in this process."""
    bench = pb.bench_dir(data_dir())
    tok = get_tokenizer("cl100k_base")
    convs = pb.load_locomo(bench, None, 0)
    questions = [q.question for c in convs for q in c.questions]
    history = joined_history(convs, tokens, tok)
    _warm_up(history, questions)
    mem = ChatMemory(budget)
    rss0 = _rss_bytes()
    mem.extend(history)
    t = time.perf_counter()
    mem.compress()
    cold = time.perf_counter() - t
    t = time.perf_counter()
    mem.compress()
    prepare = time.perf_counter() - t
    times = []
    for k in range(turns):
        for message in ({"role": "user", "content": questions[(k * 37) % len(questions)]},
                        REPLY):
            mem.add(message)
            t = time.perf_counter()
            mem.compress()
            times.append(time.perf_counter() - t)
    t = time.perf_counter()
    mem.peek(query=questions[0])
    peek = time.perf_counter() - t
    rss = _rss_bytes()
    times.sort()
    return {"tokens": count_chat_tokens(mem.messages, tokenizer=tok), "messages": len(mem),
            "budget": budget, "cold_s": cold, "prepare_s": prepare,
            "turn_median_ms": 1e3 * statistics.median(times),
            "turn_p95_ms": 1e3 * times[min(len(times) - 1, int(0.95 * len(times)))],
            "turn_max_ms": 1e3 * times[-1], "turns_timed": len(times),
            "warm_peek_ms": 1e3 * peek,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "bytes_per_message": (rss - rss0) / max(1, len(mem))}


def scaling(sizes: list[int], budget: int, turns: int) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        print(f"scaling: {size:,} tokens", file=sys.stderr, flush=True)
        proc = subprocess.run([sys.executable, "-m", "evals.chat_scaling", "--one", str(size),
                               "--budget", str(budget), "--turns", str(turns)],
                              cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"size {size}: {proc.stderr[-2000:]}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return rows


def evidence(convs: list[pb.LocomoConversation], tok) -> dict[str, Any]:
    """Share of sampled questions whose evidence turns all stay, per method and budget."""
    joined, offset = [], {}
    for conv in convs:
        offset[conv.name] = len(joined)
        joined.extend(conv.messages)
    texts = [m["content"] for m in joined]
    methods = {"ChatMemory": ChatMemory(BUDGETS[0]),
               "ChatMemory(alternate=True)": ChatMemory(BUDGETS[0], alternate=True),
               "ChatMemory(prefix_cache=True)": ChatMemory(BUDGETS[0], prefix_cache=True)}
    for mem in methods.values():
        mem.extend(joined)
        mem.compress()
        mem.compress()  # prepared: the steady state
    rankers = {"BM25 turn retrieval": pb.bm25_ranking if pb.bm25_available() else None,
               "MiniLM turn retrieval": pb.dense_ranking, "keep-recent": pb.recent_ranking}
    hits: dict[str, dict[int, list[bool]]] = {m: {b: [] for b in BUDGETS}
                                              for m in [*methods, *rankers] if
                                              rankers.get(m, True) is not None}
    runs: dict[str, int] = dict.fromkeys(methods, 0)  # longest same-role run in a window
    dense_cache: dict[str, Any] = {}
    for conv in convs:
        print(f"evidence: {conv.name}", file=sys.stderr, flush=True)
        for q in conv.questions:
            shifted = pb.LocomoQuestion(q.question, q.answer, q.category,
                                        [offset[conv.name] + e for e in q.evidence])
            msgs = joined + [{"role": "user", "content": q.question}]
            for b in BUDGETS:
                for name, mem in methods.items():
                    window = mem.peek(query=q.question, budget=b)
                    hits[name][b].append(pb.locomo_retained(window.kept, shifted))
                    runs[name] = max(runs[name], same_role_run(window.messages))
                for name, rank in rankers.items():
                    if rank is None:
                        continue
                    order = rank(texts, q.question, dense_cache) if rank is pb.dense_ranking \
                        else rank(texts, q.question)
                    kept = pb.top_messages(msgs, order, b, tok)
                    hits[name][b].append(pb.locomo_retained(kept, shifted))
    n = len(next(iter(next(iter(hits.values())).values())))
    return {"questions": n, "history_tokens": count_chat_tokens(joined, tokenizer=tok),
            "history_messages": len(joined),
            "kept": {m: {str(b): sum(v) / len(v) for b, v in per.items()}
                     for m, per in hits.items()},
            "longest_same_role_run": runs}


def same_role_run(messages: list[dict]) -> int:
    """The most messages of one role in a row (what strict chat templates refuse)."""
    best = run = 0
    for k, m in enumerate(messages):
        run = run + 1 if k and m["role"] == messages[k - 1]["role"] else 1
        best = max(best, run)
    return best


TTL = 300  # seconds: OpenAI's and Anthropic's default prompt-cache lifetime
BILLING_PRICE = 0.1


def timestamps(messages: list[dict], seed: int = 0) -> list[float]:
    """A replay's clock: turns 20-120 s apart within a session, a day between sessions (a
    LoCoMo session's first turn starts with its date in brackets)."""
    rng = np.random.default_rng(seed)
    out, now = [], 0.0
    for k, m in enumerate(messages):
        now += 86_400.0 if k and m["content"].startswith("[") else float(rng.integers(20, 121))
        out.append(now)
    return out


def billing(convs: list[pb.LocomoConversation], budget: int) -> dict[str, Any]:
    """Each dev conversation replayed a message at a time with :func:`timestamps`; every
    method's windows accounted with a cache that never expires and with one that expires
    after :data:`TTL` idle seconds (what providers do)."""
    from ctxkit.chat.billing import cache_accounting
    from ctxkit.chat.prefix_window import PrefixCacheOptions

    methods = {"ChatMemory": {},
               "ChatMemory(prefix_cache=True)": {"prefix_cache": True},
               f"ChatMemory(prefix_cache=PrefixCacheOptions(ttl={TTL}))":
                   {"prefix_cache": PrefixCacheOptions(ttl=TTL)}}
    totals: dict[str, dict[str, float]] = {}
    for conv in convs:
        print(f"billing: {conv.name}", file=sys.stderr, flush=True)
        times = timestamps(conv.messages)
        sent: dict[str, list] = {name: [] for name in [*methods, "whole history"]}
        mems = {name: ChatMemory(budget, **kw) for name, kw in methods.items()}
        for k, (m, at) in enumerate(zip(conv.messages, times)):
            for name, mem in mems.items():
                mem.add(m, at=at)
                sent[name].append(mem.compress().messages)
            sent["whole history"].append(conv.messages[:k + 1])
        for name, windows in sent.items():
            row = totals.setdefault(name, {"never": 0.0, "expiring": 0.0, "tokens": 0,
                                           "cached_expiring": 0, "expired": 0})
            never = cache_accounting(windows)
            expiring = cache_accounting(windows, ttl=TTL, times=times)
            row["never"] += never.billed(BILLING_PRICE)
            row["expiring"] += expiring.billed(BILLING_PRICE)
            row["tokens"] += expiring.tokens
            row["cached_expiring"] += expiring.cached_tokens
            row["expired"] += expiring.expired
    return {"conversations": len(convs), "budget": budget, "ttl": TTL,
            "price": BILLING_PRICE, "methods": totals}


def markdown(report: dict[str, Any]) -> str:
    lines = ["# ChatMemory at agent scale", "", f"Command: `{report['command']}`", ""]
    if report.get("skipped"):
        return "\n".join(lines + [report["skipped"], ""])
    rows = [[f"{r['tokens']:,}", f"{r['messages']:,}", f"{r['cold_s']:.2f}",
             f"{r['prepare_s']:.1f}", f"{r['turn_median_ms']:.0f}", f"{r['turn_p95_ms']:.0f}",
             f"{r['warm_peek_ms']:.0f}", f"{r['peak_rss_mb']:,.0f}",
             f"{r['bytes_per_message']:,.0f}"] for r in report["scaling"]]
    lines += [f"Per turn, budget {report['scaling'][0]['budget']:,}, defaults, "
              f"{report['scaling'][0]['turns_timed']} calls of `compress` after each added "
              "message (a chat going on):", "",
              md_table(["history tokens", "messages", "cold call s", "prepare once s",
                        "turn median ms", "turn p95 ms", "warm peek ms", "peak RSS MB",
                        "RSS per message B"], rows), "", report["summary"], ""]
    ev = report.get("evidence")
    if ev:
        runs = ev.get("longest_same_role_run", {})
        rows = [[m, *(f"{per[str(b)]:.2f}" for b in BUDGETS), str(runs.get(m, "-"))]
                for m, per in ev["kept"].items()]
        lines += [f"Evidence kept on the dev conversations joined ({ev['history_tokens']:,} "
                  f"tokens, {ev['history_messages']:,} turns), {ev['questions']} questions, and "
                  "the longest run of same-role messages in any window:",
                  "", md_table(["method", *(f"{b:,} tokens" for b in BUDGETS),
                                "longest same-role run"], rows), ""]
    bill = report.get("billing")
    if bill:
        whole = bill["methods"]["whole history"]["expiring"]
        rows = [[m, f"{r['never']:,.0f}", f"{r['expiring']:,.0f}",
                 f"{r['cached_expiring'] / r['tokens']:.2f}", f"{r['expiring'] / whole:.2f}"]
                for m, r in bill["methods"].items()]
        lines += [f"Billing on a timestamped replay of the {bill['conversations']} dev "
                  f"conversations (turns 20-120 s apart, sessions a day apart; budget "
                  f"{bill['budget']:,}; a window after every message), in token-equivalents at "
                  f"a cached price of {bill['price']}: with a cache that never expires and "
                  f"with one that expires after {bill['ttl']} idle seconds:", "",
                  md_table(["method", "billed, cache never expires",
                            f"billed, cache expires after {bill['ttl']} s",
                            "share cached (expiring)", "of the whole history (expiring)"],
                           rows), ""]
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    a, z = rows[0], rows[-1]
    return (f"{z['tokens'] / a['tokens']:.0f}x the tokens: per-turn median "
            f"{z['turn_median_ms'] / a['turn_median_ms']:.2f}x; at {a['tokens']:,} tokens a "
            f"turn costs 1/{a['cold_s'] * 1e3 / a['turn_median_ms']:.0f} of the cold call.")


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seconds, for CI smoke tests")
    ap.add_argument("--out", default="evals/results", help="output directory")
    ap.add_argument("--sizes", default=None, help="history sizes in tokens, comma-separated")
    ap.add_argument("--budget", type=int, default=4096)
    ap.add_argument("--turns", type=int, default=None, help="chat turns timed per size")
    ap.add_argument("--questions", type=int, default=20,
                    help="evidence questions drawn per conversation")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    turns = args.turns or (3 if args.quick else 20)
    if args.one is not None:  # a child process: one size
        print(json.dumps(one_size(args.one, args.budget, turns)))
        return None
    report: dict[str, Any] = {"command": command_line("evals.chat_scaling", argv),
                              "quick": args.quick}
    t0 = time.time()
    bench = pb.bench_dir(data_dir())
    if bench is None:
        report["skipped"] = "*Skipped: the benchmark data (`shared/data/bench`) is not here.*"
    else:
        sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(
            QUICK_SIZES if args.quick else SIZES)
        report["scaling"] = scaling(sizes, args.budget, turns)
        report["summary"] = summary(report["scaling"])
        if not args.quick:
            tok = get_tokenizer("cl100k_base")
            convs = pb.load_locomo(bench, args.questions, 0)
            report["evidence"] = evidence(convs, tok)
            report["billing"] = billing(convs, args.budget)
    report["seconds"] = round(time.time() - t0, 1)
    write_results(args.out, "chat_scaling", report, markdown(report))
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
