"""Rank-balance benchmark: how even each step's per-rank compute is, in plan order and balanced.

    python -m evals.balance [--quick] [--out DIR]

Each shared dataset (gsm8k, codealpaca, gpteacher, and the chat set: every conversation of
``shared/data/chat`` as one text), tokenized with cl100k_base as :mod:`evals.packing` loads it
(Alpaca-formatted text plus one EOS), is packed with ``ctxkit.pack_lengths(capacity=2048,
overflow="truncate", seed=0)`` (shuffled windows, as a training plan is). At 8 and 64 ranks and
1 and 4 windows per rank per step, it reports the worst step's max/mean per-rank compute
(default :class:`ctxkit.WindowCost`) for the windows dealt in plan order (what
``DistributedSampler`` does) and after :func:`ctxkit.balance`, the window, step and leftover
counts, and the time ``balance`` takes. ``--quick`` uses 2,000 examples of gsm8k, or generated
lengths when ``../shared/data`` is absent.

Without ``--quick`` it also balances generated lengths (uniform, bimodal and heavy-tailed;
:func:`synthetic_lengths`) packed into windows of 1,024 tokens, at 8, 64 and 512 ranks.

Writes ``balance.json``, ``balance.md`` and ``balance.png`` to ``--out`` (evals/results).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

from ctxkit.packing.plan import pack_lengths
from ctxkit.training.balance import balance
from ctxkit.training.cost import WindowCost
from evals import _common as common

CAPACITY = 2048
RANKS = (8, 64)
PER_STEP = (1, 4)
TARGET = 1.02
CHAT_RESAMPLED = 20_000  # the chat set has a few hundred conversations: 7 windows
# Two cost models: the default (a Llama-3.2-1B, attention about 5% of a full window's cost) and
# SmolLM2-135M's shape, where attention is about a fifth of it and imbalance shows more.
COSTS = {
    "1B": WindowCost(),
    "135M": WindowCost.from_shape(hidden=576, layers=30, intermediate=1536, heads=9, kv_heads=3,
                                  vocab=49152),
}
DATASETS = {"gsm8k": ("gsm8k",), "codealpaca": ("codealpaca",),
            "gpteacher": ("gpteacher_toolformer", "gpteacher_codegen")}
# Generated length distributions, at the window and rank counts of large runs: 100,000
# lengths each, capacity 1,024, 8, 64 and 512 ranks.
SYNTHETIC_N = 100_000
SYNTHETIC_CAPACITY = 1024
SYNTHETIC_RANKS = (8, 64, 512)


def synthetic_lengths(n: int = SYNTHETIC_N, seed: int = 0) -> dict[str, np.ndarray]:
    """Uniform 1..1,024; bimodal (70% short prompts of 16..128, 30% long of 768..1,024);
    heavy-tailed (Pareto, shape 1.2, clipped to 1..1,024)."""
    rng = np.random.default_rng(seed)
    cap = SYNTHETIC_CAPACITY
    return {
        "uniform 1-1024": rng.integers(1, cap + 1, n),
        "bimodal": np.where(rng.random(n) < 0.7, rng.integers(16, 129, n),
                            rng.integers(768, cap + 1, n)),
        "heavy-tailed": np.clip(rng.pareto(1.2, n) * 40 + 1, 1, cap).astype(np.int64),
    }


def chat_texts(root: Path) -> list[str]:
    """Every conversation of ``root/chat`` as one ``role: text`` transcript."""
    chat = root / "chat"
    out = []
    for conv in json.loads((chat / "sharegpt_examples.json").read_text(encoding="utf-8")):
        out.append("\n".join(f"{t['from']}: {t['value']}" for t in conv["conversations"]))
    hh = json.loads((chat / "hh_rlhf_examples.json").read_text(encoding="utf-8"))
    out.extend(d.strip() for d in hh["chosen"])
    for dialog in json.loads((chat / "convai2_examples.json").read_text(encoding="utf-8"))[
            "dialog"]:
        out.append("\n".join(f"{t['sender']}: {t['text']}" for t in dialog))
    for line in (chat / "mt_bench_questions.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append("\n".join(json.loads(line)["turns"]))
    return [t for t in out if t.strip()]


def load_lengths(quick: bool) -> dict[str, np.ndarray]:
    """Token lengths (+1 EOS) per dataset; generated long-tailed lengths without the data."""
    root = common.data_dir()
    if root is None:
        rng = np.random.default_rng(0)
        n = 4000 if quick else 40000
        return {"synthetic": np.clip(rng.lognormal(5.0, 0.9, n), 8, 4000).astype(np.int64)}
    from ctxkit.io.tokenizers import get_tokenizer

    tok = get_tokenizer("cl100k_base")

    def texts(source: str) -> list[str]:
        return common.alpaca_texts(root / common.ALPACA_SOURCES[source])

    def lengths(batch: list[str]) -> np.ndarray:
        return np.array([len(ids) + 1 for ids in tok.encode_batch(batch)], np.int64)

    if quick:
        return {"gsm8k": lengths(texts("gsm8k")[:2000])}
    out = {name: lengths([t for src in sources for t in texts(src)])
           for name, sources in DATASETS.items()}
    out["chat"] = lengths(chat_texts(root))
    # a chat set of realistic size: conversation lengths drawn from the real ones
    out["chat (resampled)"] = np.random.default_rng(0).choice(out["chat"], CHAT_RESAMPLED)
    return out


def rows_for(name: str, lengths: np.ndarray, capacity: int = CAPACITY,
             rank_counts: tuple[int, ...] = RANKS) -> list[dict]:
    plan = pack_lengths(lengths, capacity=capacity, overflow="truncate", seed=0)
    balance(plan, ranks=8)  # warm up imports before timing
    rows = []
    for (model, cost), ranks, per in itertools.product(COSTS.items(), rank_counts, PER_STEP):
        start = time.perf_counter()
        res = balance(plan, ranks=ranks, windows_per_step=per, cost=cost)
        seconds = time.perf_counter() - start
        steps = res.n_steps
        rows.append({
            "dataset": name, "capacity": capacity, "cost": model,
            "examples": int(lengths.size), "ranks": ranks,
            "windows_per_step": per, "windows": plan.n_bins, "steps": steps,
            "leftover": int(res.leftover.size),
            "before": res.baseline_max_over_mean if steps else None,
            "after": res.max_over_mean if steps else None,
            "before_mean": float(res.step_max_over_mean(baseline=True).mean()) if steps
            else None,
            "after_mean": float(res.step_max_over_mean().mean()) if steps else None,
            "formation": res.formation, "seconds": seconds,
        })
    return rows


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{(x - 1) * 100:.2f}%"


def markdown(res: dict) -> str:
    table = [[r["dataset"], r["cost"], r["ranks"], r["windows_per_step"], f"{r['windows']:,}",
              r["steps"], r["leftover"], _pct(r["before"]), _pct(r["after"]),
              _pct(r["before_mean"]), _pct(r["after_mean"]), f"{r['seconds'] * 1000:.1f}"]
             for r in res["rows"]]
    short = [r for r in res["rows"] if not r["steps"]]
    note = ("" if not short else
            "\nn/a: fewer windows than one step needs (ranks x windows per rank); every window "
            "is then a leftover.\n")
    within = ", ".join(f"{model}: {'yes' if ok else 'no'}"
                       for model, ok in res["within_target"].items())
    note += (f"\nEvery step within {TARGET - 1:.0%} of its mean, per cost model: {within}. With "
             "one window per rank a step can only be as even as the costs of whole windows; "
             "more windows per rank per step give the balancer room.\n")
    return (
        "# Rank-balance benchmark\n\n"
        f"Windows of {CAPACITY} tokens (`pack_lengths(capacity={CAPACITY}, seed=0)`), dealt to "
        "data-parallel ranks. Excess of the worst step's largest per-rank compute over that "
        "step's mean (0% is perfect; the target is 2%): `before` deals windows in plan order "
        "as `DistributedSampler` does, `after` is `ctxkit.balance`; `mean` columns average "
        "the per-step excess. Cost `1B`: `ctxkit.WindowCost()` (a Llama-3.2-1B's shape); "
        "`135M`: `WindowCost.from_shape` of SmolLM2-135M, where attention weighs more. "
        f"`chat (resampled)`: {CHAT_RESAMPLED:,} lengths drawn from the chat set's. "
        f"`uniform 1-1024`, `bimodal`, `heavy-tailed`: {SYNTHETIC_N:,} generated lengths each "
        f"(`synthetic_lengths`), windows of {SYNTHETIC_CAPACITY:,} tokens, up to "
        f"{SYNTHETIC_RANKS[-1]} ranks.\n\n"
        + common.md_table(["dataset", "cost", "ranks", "windows/rank/step", "windows", "steps",
                           "leftover", "worst before", "worst after", "mean before",
                           "mean after", "balance ms"], table)
        + note
        + f"\nCommand: `{res['command']}`.\n"
    )


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in res["rows"] if r["steps"]]
    labels = [f"{r['dataset']} {r['cost']}\n{r['ranks']}x{r['windows_per_step']}"
              for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(rows)), 4.5))
    ax.bar(x - 0.2, [(r["before"] - 1) * 100 for r in rows], 0.4, label="plan order")
    ax.bar(x + 0.2, [(r["after"] - 1) * 100 for r in rows], 0.4, label="ctxkit.balance")
    ax.axhline((TARGET - 1) * 100, color="k", linestyle="--", linewidth=1, label="2% target")
    ax.set_xticks(x, labels, fontsize=6, rotation=90)
    ax.set_ylabel("worst step: max / mean per-rank compute - 1 (%)")
    ax.set_title("Per-rank compute balance (ranks x windows per rank per step)")
    ax.legend()
    fig.tight_layout()
    common.save_figure(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m evals.balance",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="seconds: a small subset")
    parser.add_argument("--out", default="evals/results", help="output directory")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    data = load_lengths(args.quick)
    res = {
        "command": "python -m evals.balance" + (" --quick" if args.quick else ""),
        "quick": args.quick, "capacity": CAPACITY, "target": TARGET,
        "rows": [row for name, lengths in data.items() for row in rows_for(name, lengths)],
    }
    if not args.quick:
        res["rows"] += [row for name, lengths in synthetic_lengths().items()
                        for row in rows_for(name, lengths, SYNTHETIC_CAPACITY, SYNTHETIC_RANKS)]
    res["within_target"] = {model: all(r["after"] <= TARGET for r in res["rows"]
                                       if r["steps"] and r["cost"] == model) for model in COSTS}
    res["seconds"] = time.perf_counter() - start
    md = markdown(res)
    out = common.write_results(args.out, "balance", res, md)
    plot(res, out / "balance.png")
    print(md)
    print(f"wrote {out / 'balance.json'}, balance.md, balance.png", file=sys.stderr)
    return res


if __name__ == "__main__":
    main()
    raise SystemExit(0)
