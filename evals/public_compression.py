"""Compression on public benchmarks, beside the retrieval baselines a user would write instead.

The four tasks of ``shared/data/bench/README.md`` (dev half; loaders and retention measures in
:mod:`evals.public_bench`): NQ-open with 20 passages (answer string kept), LoCoMo chats through
``compress_chat`` (every evidence turn kept), key-value JSON (value kept) and HotpotQA with 10
paragraphs (every supporting sentence kept), each at 1/2, 1/4 and 1/8 of the input's tokens.
Methods, side by side in one run:

- ctxkit with no arguments beyond the budget and the query (``compress(chunks, budget,
  query=q)``; ``compress_chat(messages, budget)`` with the question as the last user message),
  and the same with each other named scorer (``lm`` only with the ``[lm]`` extra, on the first
  ``--lm-cases`` cases);
- BM25 top units (``bm25s``, from the ``[bench]`` extra; its rows are skipped without it),
  MiniLM top units (sentence-transformers, the bundled all-MiniLM-L6-v2, normalised), first
  units, and for chats keep-recent (LangChain ``trim_messages(strategy="last")``). Units are
  passages, turns and JSON lines; each baseline fills the budget as ctxkit is counted;
- the oracle: the evidence alone (the gold passage, the evidence turns with the question, the
  key's JSON line, the supporting sentences), retained when it fits the budget: the ceiling.

A table of cold-call latency per 1k tokens at 1k, 10k and 100k input tokens
(:func:`cold_latency`) follows.

Reported per method: retention, achieved ratio (output tokens / input tokens), worst overshoot
over the budget (must be 0) and median milliseconds per 1k input tokens of a cold call (fresh
caches; on chats the first question of each conversation, later questions reuse the turn
embeddings as an application keeping one scorer, or ``ChatMemory``, would).

Run: ``python -m evals.public_compression [--quick] [--out DIR] [--nq N] [--locomo N] [--kv N]
[--hotpot N] [--tasks nq,kv,locomo,hotpot]``.
Writes ``public_compression.json``, ``.md`` and ``.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ctxkit.chat.pipeline import compress_chat, count_chat_tokens  # noqa: E402
from ctxkit.compression.scoring.registry import get_scorer  # noqa: E402
from ctxkit.compression.text.pipeline import compress  # noqa: E402
from ctxkit.io.tokenizers import get_tokenizer  # noqa: E402
from evals import public_bench as pb  # noqa: E402
from evals._common import data_dir, lm_installed, save_figure, write_results  # noqa: E402

RATIOS = (1 / 2, 1 / 4, 1 / 8)
DEFAULT = "ctxkit default"
TASKS = {"nq": "NQ-open, 20 passages (answer kept)",
         "locomo": "LoCoMo chats (all evidence turns kept)",
         "kv": "key-value JSON, 75 pairs (value kept)",
         "hotpot": "HotpotQA, 10 paragraphs (all supporting sentences kept)"}
ORACLE = "oracle (evidence alone)"


def _rname(r: float) -> str:
    return f"1/{round(1 / r)}"


class Tally:
    """Retention, achieved ratio, overshoot and cold latency per method and ratio."""

    def __init__(self) -> None:
        self.hits: dict[str, dict[float, list[bool]]] = {}
        self.ratio: dict[str, dict[float, list[float]]] = {}
        self.over: dict[str, int] = {}
        self.ms: dict[str, list[float]] = {}

    def add(self, method: str, ratio: float, kept: bool, used: int, budget: int,
            original: int) -> None:
        self.hits.setdefault(method, {r: [] for r in RATIOS})[ratio].append(bool(kept))
        self.ratio.setdefault(method, {r: [] for r in RATIOS})[ratio].append(used / original)
        self.over[method] = max(self.over.get(method, 0), used - budget, 0)

    def oracle(self, used: int, original: int, retained: bool = True) -> None:
        """The evidence alone (``used`` tokens) at every ratio: kept when it fits the budget
        and ``retained``."""
        for ratio in RATIOS:
            budget = int(original * ratio)
            fits = used <= budget
            self.add(ORACLE, ratio, fits and retained, used if fits else 0, budget, original)

    def time(self, method: str, seconds: float, original: int) -> None:
        self.ms.setdefault(method, []).append(seconds * 1e6 / original)

    def summary(self) -> dict[str, Any]:
        return {m: {"cases": len(v[RATIOS[0]]),
                    "retention": {_rname(r): float(np.mean(v[r])) for r in RATIOS},
                    "achieved_ratio": {_rname(r): float(np.mean(self.ratio[m][r]))
                                       for r in RATIOS},
                    "overshoot_tokens": int(self.over[m]),
                    "ms_per_1k_tokens": (float(np.median(self.ms[m])) if self.ms.get(m)
                                         else None)}
                for m, v in self.hits.items()}


def _cold(scorer: Any) -> Any:
    """``scorer`` with its caches emptied, so its next call pays for every model pass."""
    clear = getattr(scorer, "clear_cache", None)
    if clear is not None:
        clear()
    return scorer


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _baselines(chat: bool) -> dict[str, Callable]:
    names = ["keep-recent"] if chat else []
    names += ["BM25 top units", "MiniLM top units", "first units"]
    if not pb.bm25_available():
        names.remove("BM25 top units")
    return {n: pb.BASELINES[n] for n in names}


def _ctxkit_methods(scorers: list[str]) -> dict[str, str | None]:
    """Row name -> scorer name (None: the defaults, no scorer argument)."""
    return {DEFAULT: None, **{f"ctxkit scorer={s}": s for s in scorers}}


# ---------------------------------------------------------------------------------------------
# chunks: NQ passages and the key-value JSON


def chunk_task(cases: list[tuple[Any, str, Callable[[str], bool], list[str], str, str]],
               scorers: list[str], limits: dict[str, int], tok) -> dict[str, Any]:
    """``cases``: (input for compress, query, retained(text), baseline units, unit separator,
    the evidence alone)."""
    tally = Tally()
    methods = _ctxkit_methods(scorers)
    for c, (inp, query, retained, units, sep, evidence) in enumerate(cases):
        original = tok.count(inp if isinstance(inp, str) else "\n\n".join(inp))
        tally.oracle(tok.count(evidence), original, retained(evidence))
        for name, scorer in methods.items():
            if c >= limits.get(scorer or "", len(cases)):
                continue
            # the scorer cold per case (the default's is "embedding"): embedded once for the
            # three budgets, and the first call pays for it
            sc = _cold(get_scorer(scorer or "embedding"))
            for ratio in RATIOS:
                budget = int(original * ratio)
                out, sec = _timed(lambda: compress(inp, budget, query=query,  # noqa: B023
                                                   tokenizer=tok, scorer=sc))  # noqa: B023
                if ratio == RATIOS[0]:
                    tally.time(name, sec, original)
                tally.add(name, ratio, retained(out.text), out.compressed_tokens, budget,
                          original)
        for name, rank in _baselines(chat=False).items():
            cache: dict[str, np.ndarray] = {}
            for ratio in RATIOS:
                budget = int(original * ratio)
                extra = {"cache": cache} if rank is pb.dense_ranking else {}

                def run():
                    return pb.top_units(units, rank(units, query, **extra), budget,  # noqa: B023
                                        tok.count, sep)  # noqa: B023
                text, sec = _timed(run)
                if ratio == RATIOS[0]:
                    tally.time(name, sec, original)
                tally.add(name, ratio, retained(text), tok.count(text), budget, original)
    return tally.summary()


def nq_cases(bench, n: int) -> list:
    out = []
    for case in pb.load_nq(bench, n):
        answers = case.answers
        out.append((case.passages, case.question,
                    lambda text, a=answers: pb.nq_retained(text, a), case.passages, "\n\n",
                    case.passages[case.gold]))
    return out


def kv_cases(bench, n: int) -> list:
    out = []
    for case in pb.load_kv(bench, n):
        lines = case.text.split("\n")
        out.append((case.text, case.query, lambda text, v=case.value: pb.kv_retained(text, v),
                    lines, "\n", next(x for x in lines if case.value in x)))
    return out


def hotpot_cases(bench, n: int | None) -> list:
    """HotpotQA as chunks; the oracle is the supporting sentences joined by spaces."""
    out = []
    for case in pb.load_hotpot(bench, n):
        out.append((case.chunks, case.question,
                    lambda text, s=case.support: pb.hotpot_retained(text, s), case.chunks,
                    "\n\n", " ".join(case.support)))
    return out


# ---------------------------------------------------------------------------------------------
# chats: LoCoMo


def locomo_task(convs: list[pb.LocomoConversation], scorers: list[str], limits: dict[str, int],
                tok) -> dict[str, Any]:
    tally = Tally()
    methods = _ctxkit_methods(scorers)
    done = dict.fromkeys(list(methods), 0)
    for conv in convs:
        # one scorer per conversation and method: turn embeddings are computed once, as an
        # application that keeps its scorer (or ChatMemory) does; the first call pays them
        fresh = {name: _cold(get_scorer(s or "embedding")) for name, s in methods.items()}
        caches: dict[str, dict] = {name: {} for name in _baselines(chat=True)}
        texts = [m["content"] for m in conv.messages]
        for qn, q in enumerate(conv.questions):
            print(f"locomo {conv.name}: question {qn + 1}/{len(conv.questions)}",
                  file=sys.stderr, flush=True)
            msgs = pb.locomo_messages(conv, q)
            original = count_chat_tokens(msgs, tokenizer=tok)
            tally.oracle(count_chat_tokens([msgs[i] for i in q.evidence] + msgs[-1:],
                                           tokenizer=tok), original)
            for name, scorer in methods.items():
                if done[name] >= limits.get(scorer or "", 10**9):
                    continue
                done[name] += 1
                for ratio in RATIOS:
                    budget = int(original * ratio)
                    out, sec = _timed(lambda: compress_chat(  # noqa: B023
                        msgs, budget, tokenizer=tok, scorer=fresh[name]))  # noqa: B023
                    if ratio == RATIOS[0] and qn == 0:
                        tally.time(name, sec, original)
                    tally.add(name, ratio, pb.locomo_retained(out.kept, q),
                              out.compressed_tokens, budget, original)
            for name, rank in _baselines(chat=True).items():
                extra = {"cache": caches[name]} if rank is pb.dense_ranking else {}
                for ratio in RATIOS:
                    budget = int(original * ratio)
                    kept, sec = _timed(lambda: pb.top_messages(  # noqa: B023
                        msgs, rank(texts, q.question, **extra), budget, tok))  # noqa: B023
                    if ratio == RATIOS[0] and qn == 0:
                        tally.time(name, sec, original)
                    used = count_chat_tokens([msgs[i] for i in kept], tokenizer=tok)
                    tally.add(name, ratio, pb.locomo_retained(kept, q), used, budget, original)
    return tally.summary()


def cold_latency(bench, tok, sizes: tuple[int, ...] = (1_000, 10_000, 100_000)
                 ) -> dict[str, float]:
    """Median ms per 1k input tokens of a cold ``compress`` with the defaults (budget 1/4 of
    the input, embedding cache cleared) on the dev NQ passages joined up to each size."""
    cases = pb.load_nq(bench, None)
    passages = list(dict.fromkeys(p for c in cases for p in c.passages))
    out = {}
    for size in sizes:
        chunks, total = [], 0
        for p in passages:
            if total >= size:
                break
            chunks.append(p)
            total += tok.count(p)
        times = []
        for rep in range(3 if size < 100_000 else 1):
            _cold(get_scorer("embedding"))
            query = cases[rep % len(cases)].question
            _, sec = _timed(lambda: compress(chunks, total // 4, query=query,  # noqa: B023
                                             tokenizer=tok))  # noqa: B023
            times.append(sec * 1e6 / total)
        out[f"{size // 1000}k"] = float(np.median(times))
    return out


def quick_locomo(convs: list[pb.LocomoConversation], turns: int = 60, questions: int = 2
                 ) -> list[pb.LocomoConversation]:
    """The smoke run: the first ``turns`` turns of one conversation and questions on them."""
    conv = convs[0]
    qs = [q for q in conv.questions if max(q.evidence) < turns][:questions]
    return [pb.LocomoConversation(conv.name, conv.messages[:turns], qs)]


# ---------------------------------------------------------------------------------------------
# report


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Public compression benchmarks{' (quick)' if report['quick'] else ''}", ""]
    if report.get("skipped"):
        return "\n".join(lines + [report["skipped"], ""])
    lines += ["Share of cases whose evidence survives (dev half of `shared/data/bench`), "
              "achieved ratio at 1/4, worst overshoot over the budget, and median ms per 1k "
              "input tokens of a cold call. `ctxkit default`: no argument beyond the budget "
              "and the query; `oracle`: the evidence alone, kept when it fits the budget (the "
              "ceiling).", ""]
    for task, title in TASKS.items():
        res = report["tasks"].get(task)
        if not res:
            continue
        n = max(v["cases"] for v in res.values())
        lines += [f"**{title}**, {n} cases:", "",
                  "| method | " + " | ".join(f"kept @ {_rname(r)}" for r in RATIOS)
                  + " | ratio @ 1/4 | overshoot | ms / 1k tokens |",
                  "|---|" + "---:|" * (len(RATIOS) + 3)]
        best = {r: max(v["retention"][_rname(r)] for m, v in res.items() if m != ORACLE)
                for r in RATIOS}
        # the oracle is the ceiling, not a method: last, never bold
        for m, v in sorted(res.items(), key=lambda kv: kv[0] == ORACLE):
            name = m if v["cases"] == n else f"{m} (first {v['cases']})"
            cells = []
            for r in RATIOS:
                x = v["retention"][_rname(r)]
                cells.append(f"**{x:.2f}**" if x == best[r] and m != ORACLE else f"{x:.2f}")
            ms = v["ms_per_1k_tokens"]
            lines.append(f"| {name} | " + " | ".join(cells)
                         + f" | {v['achieved_ratio']['1/4']:.3f} | {v['overshoot_tokens']} | "
                         + ("-" if ms is None else f"{ms:.1f}") + " |")
        lines.append("")
    if report.get("cold_latency"):
        lat = report["cold_latency"]
        lines += ["**Cold `compress` with the defaults** (budget 1/4, dev NQ passages joined "
                  "to the size), median ms per 1k input tokens:", "",
                  "| input tokens | " + " | ".join(lat) + " |",
                  "|---|" + "---:|" * len(lat),
                  "| ms / 1k tokens | " + " | ".join(f"{v:.1f}" for v in lat.values()) + " |",
                  ""]
    if report.get("notes"):
        lines += [f"- {note}" for note in report["notes"]] + [""]
    lines += [f"Command: `{report['command']}`; {report['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def plot(report: dict[str, Any], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in TASKS if report["tasks"].get(t)]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.4 * len(tasks), 4.2), squeeze=False)
    xs = list(RATIOS)[::-1]
    # one colour and marker per method across the panels
    names = list(dict.fromkeys(m for t in tasks for m in report["tasks"][t]))
    look = {m: (f"C{k}", "osD^v<>ph*"[k % 10]) for k, m in enumerate(names)}
    for ax, task in zip(axes[0], tasks):
        for m, v in report["tasks"][task].items():
            style = "-" if m.startswith("ctxkit") else "--"
            ax.plot(xs, [100 * v["retention"][_rname(r)] for r in xs], style, color=look[m][0],
                    marker=look[m][1], label=m, alpha=0.9)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [_rname(r) for r in xs])
        ax.set_ylim(-3, 103)
        ax.set_xlabel("token budget (share of the input's tokens)")
        ax.set_ylabel("retained (% of cases)")
        ax.set_title(TASKS[task], fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def cross_encoder_scorer(directory: Path | None, scorers: list[str]) -> str | None:
    """Add ``cross-encoder:<directory>`` to ``scorers`` when a reranker is there; else the
    note saying why its rows are absent (no reranker ships with ctxkit, none downloads)."""
    if directory is None:
        return ("No cross-encoder rows: none is available offline here; give "
                "`--cross-encoder DIR` (a local reranker) to add the `cross-encoder:DIR` scorer.")
    if not directory.is_dir():
        return f"Cross-encoder rows skipped: {directory} is not a directory."
    scorers.append(f"cross-encoder:{directory}")
    return None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seconds, for CI smoke tests")
    ap.add_argument("--out", default="evals/results", help="output directory")
    ap.add_argument("--nq", type=int, default=150, help="NQ cases (the first N)")
    ap.add_argument("--locomo", type=int, default=24,
                    help="LoCoMo questions drawn per conversation (0: all)")
    ap.add_argument("--kv", type=int, default=100, help="key-value cases (the first N)")
    ap.add_argument("--hotpot", type=int, default=0, help="HotpotQA cases (the first N; 0: all)")
    ap.add_argument("--scorers", default=None,
                    help="named scorers besides the defaults (default idf, plus lm when the "
                         "[lm] extra is installed)")
    ap.add_argument("--lm-cases", type=int, default=10, help="cases per task for lm")
    ap.add_argument("--tasks", default=",".join(TASKS),
                    help="comma-separated tasks to run (default all: nq,kv,locomo,hotpot)")
    ap.add_argument("--cross-encoder", type=Path, default=None, metavar="DIR",
                    help="a local cross-encoder reranker: adds the cross-encoder:DIR scorer")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    scorers = [s for s in (args.scorers or "idf" + (",lm" if lm_installed() else ""))
               .split(",") if s]
    limits = {"lm": args.lm_cases}
    ce_note = cross_encoder_scorer(args.cross_encoder, scorers)
    command = ("python -m evals.public_compression" + (" --quick" if args.quick else "")
               + "".join(f" --{k.replace('_', '-')} {getattr(args, k)}" for k, d in
                         (("nq", 150), ("locomo", 24), ("kv", 100), ("hotpot", 0),
                          ("scorers", None),
                          ("lm_cases", 10), ("tasks", ",".join(TASKS)))
                         if getattr(args, k) != d and not args.quick))
    report: dict[str, Any] = {"quick": args.quick, "command": command, "tasks": {},
                              "notes": [ce_note] if ce_note else []}
    t0 = time.time()
    bench = pb.bench_dir(data_dir())
    if bench is None:
        report["skipped"] = ("*Skipped: the benchmark data (`shared/data/bench`) is not "
                             "here.*")
    else:
        tok = get_tokenizer("cl100k_base")
        get_scorer("embedding").relevance(["warm up"], "warm")  # load models before timing
        if pb.bm25_available():
            pb.bm25_ranking(["warm up"], "warm")
        else:
            report["notes"].append("BM25 rows skipped: `bm25s` is not installed "
                                   "(`pip install 'ctxkit[bench]'`).")
        pb.dense_ranking(["warm up"], "warm")
        if args.quick:
            scorers = scorers[:1]
            nq, kv, hotpot = nq_cases(bench, 2), kv_cases(bench, 2), hotpot_cases(bench, 2)
            convs = quick_locomo(pb.load_locomo(bench))
        else:
            nq, kv = nq_cases(bench, args.nq), kv_cases(bench, args.kv)
            hotpot = hotpot_cases(bench, args.hotpot or None)
            convs = pb.load_locomo(bench, args.locomo or None, args.seed)
        wanted = set(args.tasks.split(","))
        if wanted - set(TASKS):
            ap.error(f"--tasks: unknown {sorted(wanted - set(TASKS))}; known: {list(TASKS)}")
        if "nq" in wanted:
            print("nq ...", file=sys.stderr, flush=True)
            report["tasks"]["nq"] = chunk_task(nq, scorers, limits, tok)
        if "kv" in wanted:
            print("kv ...", file=sys.stderr, flush=True)
            report["tasks"]["kv"] = chunk_task(kv, scorers, limits, tok)
        if "locomo" in wanted:
            report["tasks"]["locomo"] = locomo_task(convs, scorers, limits, tok)
        if "hotpot" in wanted:
            print("hotpot ...", file=sys.stderr, flush=True)
            report["tasks"]["hotpot"] = chunk_task(hotpot, scorers, limits, tok)
        if not args.quick:
            print("cold latency ...", file=sys.stderr, flush=True)
            report["cold_latency"] = cold_latency(bench, tok)
        report["locomo_questions_left_out"] = sum(len(c.skipped) for c in convs)
    report["seconds"] = round(time.time() - t0, 1)
    out = write_results(args.out, "public_compression", report, markdown(report))
    if report["tasks"]:
        plot(report, out / "public_compression.png")
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
