"""The dedup benchmark's Markdown tables and plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """Markdown table lines; the first column left-aligned, the rest right-aligned."""
    out = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def markdown(res: dict[str, Any]) -> str:
    """The results as Markdown; ``python -m evals.benchmarks_page`` adds the command and machine."""
    tp, q, pf = res["throughput"], res["quality"], res["pair_f1"]
    ls, se = res["lsh_speed"], res["semantic"]
    lines = [f"# Dedup benchmark{' (quick)' if res['quick'] else ''}", ""]
    lines += [
        f"MinHash signatures, raw text to 128 permutations of character 5-grams ({tp['docs']} "
        f"docs, {tp['mean_chars']} characters on average; CPU time is the fair figure on a "
        "shared machine):",
        "",
    ]
    lines += _table(
        ["method", "docs/s (wall)", "docs/s (CPU)", "ctxkit speedup (wall)", "(CPU)"],
        [
            [
                name,
                f"{m['docs_per_s']:,.0f}",
                f"{m['docs_per_cpu_s']:,.0f}",
                f"{m['ctxkit_speedup_wall']:.2f}x",
                f"{m['ctxkit_speedup_cpu']:.2f}x",
            ]
            for name, m in tp["methods"].items()
        ],
    )
    lines += [
        "",
        f"Removed set vs injected ground truth ({q['docs']} docs, {q['gold_removed']} copies with "
        "5-15% word edits plus case, whitespace and punctuation noise):",
        "",
    ]
    lines += _table(
        ["method", "threshold", "precision", "recall", "F1"],
        [
            [
                r["method"],
                r["threshold"],
                f"{r['precision']:.3f}",
                f"{r['recall']:.3f}",
                f"{r['f1']:.3f}",
            ]
            for r in q["rows"]
            if not ("estimate" in r["method"] and r["threshold"] not in (0.5, 0.8))
        ],
    )
    lines += ["", f"Pair F1 against the exact Jaccard join ({pf['docs']} docs):", ""]
    lines += _table(
        ["method", "threshold", "true pairs", "found", "precision", "recall", "F1"],
        [
            [
                r["method"],
                r["threshold"],
                r["gold"],
                r["predicted"],
                f"{r['precision']:.3f}",
                f"{r['recall']:.3f}",
                f"{r['f1']:.3f}",
            ]
            for r in pf["rows"]
        ],
    )
    lines += [
        "",
        f"LSH candidates + verification, {ls['docs']:,} docs at threshold {ls['threshold']} "
        f"({ls['bands']} bands x {ls['rows']} rows, {ls['candidates']:,} candidates; signatures "
        f"took {ls['signature_seconds']} s, {ls['signature_docs_per_cpu_s']:,.0f} docs per CPU s):",
        "",
    ]
    lines += _table(
        ["method", "wall s", "CPU s", "speedup vs datasketch (wall)", "(CPU)"],
        [
            [
                name,
                f"{m['wall_s']:.2f}",
                f"{m['cpu_s']:.2f}",
                f"{m['speedup_vs_datasketch_wall']:.1f}x",
                f"{m['speedup_vs_datasketch_cpu']:.1f}x",
            ]
            for name, m in ls["methods"].items()
        ],
    )
    lines += [
        "",
        f"Semantic: SemDeDup k-means partition vs exact all-pairs ({se['docs']} docs, "
        f"{se['clusters']} clusters; {res['encoder']}, {se['embed_docs_per_s']:.0f} docs/s):",
        "",
    ]
    lines += _table(
        ["method", "cosine threshold", "pairs", "recall", "seconds"],
        [
            [r["method"], r["threshold"], r["pairs"], f"{r['recall']:.3f}", f"{r['seconds']:.2f}"]
            for r in se["rows"]
        ],
    )
    lines += _markdown_templated(res["templated_speed"])
    lines += _markdown_real(res["real_data"], res["linear_recall"])
    return "\n".join(lines) + "\n"


def _markdown_templated(ts: dict[str, Any]) -> list[str]:
    rounds = ts.get("ctxkit_rounds")
    best = f", best of {rounds} rounds that each visit every size" if rounds and rounds > 1 else ""
    lines = ["", f"Whole pipelines on templated records, CPU seconds{best} "
             "(`dedup(texts, method=\"minhash\")` with signatures, LSH, verification and "
             "clusters, against datasketch `MinHash.bulk` + `MinHashLSH` insert and query and "
             "rensa `RMinHash` + `RMinHashLSH` insert and query, which neither verify nor "
             "cluster). toolformer: the GPTeacher toolformer"
             " records (prefixes; the last is the whole set), every one opening with a tool"
             " description; mix: a resample drawn afresh at each size, 90% the LSH-timing"
             " corpus and 10% toolformer records drawn with replacement from a share of the"
             " records proportional to the size, so duplicates are as frequent at every size."
             " us/doc: CPU microseconds per document (best round; median of the rounds"
             " beside it, the fairer across sizes, as a short run fits in a quiet spell of"
             " the machine more often); it should stay flat as the corpus grows:", ""]
    header = ["corpus", "docs", "threshold", "ctxkit CPU s", "us/doc", "median us/doc",
              "candidates/doc",
              "removed", "largest cluster", "datasketch CPU s", "datasketch us/doc",
              "ctxkit speedup", "rensa CPU s", "rensa us/doc", "ctxkit speedup vs rensa"]
    body = []
    for r in ts["rows"]:
        row = [r["corpus"], f"{r['docs']:,}", r["threshold"], f"{r['ctxkit_cpu_s']:.2f}",
               f"{r['ctxkit_us_per_doc_cpu']:.0f}",
               f"{r['ctxkit_median_us_per_doc_cpu']:.0f}",
               f"{r.get('candidates_per_doc', '-')}",
               f"{r['removed']:,}", f"{r['largest_cluster']:,}"]
        for lib in ("datasketch", "rensa"):
            have = f"{lib}_cpu_s" in r
            row += [f"{r[f'{lib}_cpu_s']:.2f}" if have else "-",
                    f"{r[f'{lib}_us_per_doc_cpu']:.0f}" if have else "-",
                    f"{r[f'speedup_vs_{lib}_cpu']:.1f}x" if have else "-"]
        body.append(row)
    return lines + _table(header, body)


def _one_line(text: str, head: int = 40, tail: int = 110) -> str:
    """The text on one line, its middle elided (a shared template opens most records, so the
    end is where two records differ)."""
    flat = text.replace("\n", " / ").replace("|", "\\|")
    return flat if len(flat) <= head + tail + 5 else f"{flat[:head]} ... {flat[-tail:]}"


def _markdown_real(rd: dict[str, Any], lr: dict[str, Any]) -> list[str]:
    ts = rd["thresholds"]
    if not rd["rows"]:
        lines = ["", "(The shared instruction datasets are absent: no removals table.)"]
        return lines + _markdown_recall(lr)
    lines = ["", "Records each threshold removes on the shared instruction datasets (MinHash, "
             "character 5-gram Jaccard, whole records / the varying part after stripping "
             "template lines found in >= 1% of records), next to what exact dedup, datasketch's "
             "default (`MinHashLSH` threshold 0.9, query then insert, no verification) and "
             "text-dedup's defaults (0.7, word 5-grams, 256 permutations, a shared LSH bucket is a "
             "duplicate) remove:", ""]
    header = ["dataset", "records", "template lines", "exact"] + \
        [f"t = {t}" for t in ts] + ["datasketch 0.9", "text-dedup 0.7"]
    body = []
    for r in rd["rows"]:
        body.append([r["dataset"], f"{r['records']:,}", r["boilerplate_lines"], r["exact"]]
                    + [f"{r[f'whole_{t}']:,} / {r[f'varying_{t}']:,}" for t in ts]
                    + [f"{r['datasketch_0.9']:,}", f"{r['textdedup_0.7']:,}"])
    lines += _table(header, body)
    if rd["samples"]:
        lines += ["", "Pairs just above the threshold (Jaccard in [t, t + 0.03)), i.e. what the "
                  "threshold starts to remove (newlines shown as ` / `):", ""]
        lines += _table(["dataset", "t", "compared", "Jaccard", "text A", "text B"], [
            [s["dataset"], s["threshold"], s["compared"], s["jaccard"], _one_line(s["a"]),
             _one_line(s["b"])] for s in rd["samples"]])
    return lines + _markdown_recall(lr)


def _markdown_recall(lr: dict[str, Any]) -> list[str]:
    lines = ["", f"Hub stars vs all pairs of every LSH bucket, toolformer's first {lr['docs']:,} "
              "records (whole): removals, and F1 of the pairs put in one cluster:", ""]
    lines += _table(
        ["threshold", "removed (all bucket pairs)", "removed (hub stars)", "removal recall",
         "false removals", "co-cluster F1", "candidates (all / stars)", "CPU s (all / stars)"],
        [[r["threshold"], f"{r['removed_exhaustive']:,}", f"{r['removed_linear']:,}",
          f"{r['removal_recall']:.3f}", r["false_removals"], f"{r['cocluster_f1']:.3f}",
          f"{r['candidates_exhaustive']:,} / {r['candidates_linear']:,}",
          f"{r['cpu_s_exhaustive']:.2f} / {r['cpu_s_linear']:.2f}"] for r in lr["rows"]])
    return lines


def _wrap(label: str, width: int = 22) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(label, width))


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    ax = axes[0, 0]
    names = list(res["throughput"]["methods"])
    vals = [res["throughput"]["methods"][n]["docs_per_cpu_s"] for n in names]
    ax.barh(
        [_wrap(n) for n in names],
        vals,
        color=["tab:blue", "tab:cyan", "tab:orange", "tab:red", "tab:gray"][: len(names)],
    )
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("documents per CPU second (log scale)")
    ax.set_title("MinHash signatures, char 5-grams, 128 permutations")
    for y, v in enumerate(vals):
        ax.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
    ax.invert_yaxis()

    ax = axes[0, 1]
    for method, style in (
        ("ctxkit char 5-gram, exact verify", "o-"),
        ("ctxkit char 5-gram, estimate verify", "s--"),
        ("ctxkit word 5-gram, exact verify", "^-"),
        ("datasketch MinHashLSH char 5-gram", "x:"),
    ):
        rows = [r for r in res["quality"]["rows"] if r["method"] == method]
        ax.plot([r["threshold"] for r in rows], [r["f1"] for r in rows], style, label=method)
    ax.set_xlabel("Jaccard threshold")
    ax.set_ylabel("F1 of removed set vs ground truth")
    ax.set_ylim(0, 1.02)
    ax.set_title("Near-duplicate removal quality (injected edits)")
    ax.legend(fontsize=8, loc="lower left")

    ax = axes[1, 0]
    methods = list(dict.fromkeys(r["method"] for r in res["pair_f1"]["rows"]))
    ts = sorted({r["threshold"] for r in res["pair_f1"]["rows"]})
    width = 0.8 / len(methods)
    for k, m in enumerate(methods):
        f1 = [
            next(
                r["f1"] for r in res["pair_f1"]["rows"] if r["method"] == m and r["threshold"] == t
            )
            for t in ts
        ]
        ax.bar(np.arange(len(ts)) + k * width, f1, width, label=m)
    ax.set_xticks(np.arange(len(ts)) + 0.4 - width / 2, [f"t = {t}" for t in ts])
    ax.set_ylabel("pair F1 vs exact Jaccard join")
    ax.set_ylim(0, 1.35)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.axhline(0.95, color="k", lw=0.8, ls="--")
    ax.set_title("Pair F1 against all pairs with true Jaccard >= t")
    ax.legend(fontsize=7, loc="upper center", ncol=2)

    ax = axes[1, 1]
    ts = res["templated_speed"]
    for (corpus, t), style in zip(
        sorted({(r["corpus"], r["threshold"]) for r in ts["rows"]}), ("o-", "s--", "^-", "v--")
    ):
        rows = [r for r in ts["rows"] if r["corpus"] == corpus and r["threshold"] == t]
        ax.plot([r["docs"] for r in rows], [r["ctxkit_us_per_doc_cpu"] for r in rows], style,
                label=f"ctxkit, {corpus}, t = {t}")
        base = [r for r in rows if "datasketch_cpu_s" in r]
        ax.plot([r["docs"] for r in base], [1e6 * r["datasketch_cpu_s"] / r["docs"] for r in base],
                "x", color=ax.lines[-1].get_color(), label=f"datasketch, {corpus}, t = {t}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("documents")
    ax.set_ylabel("CPU microseconds per document (log)")
    ax.set_title("Templated corpora: time per document as the corpus grows")
    ax.legend(fontsize=7, loc="center right")
    fig.suptitle("ctxkit dedup vs datasketch and rensa" + (" (quick run)" if res["quick"] else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
