"""The README's headline table: ctxkit against the alternative a user would pick, per use.

Every figure is read from ``evals/results/<name>.json`` and every row names the command that
wrote it, so the README cannot drift from the results; ``python -m evals.benchmarks_page``
rewrites the block between ``<!-- headline -->`` and ``<!-- /headline -->``.

>>> from pathlib import Path
>>> "| use |" in render_headline(Path("/nonexistent"))
True
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

__all__ = ["BLOCK", "render_headline", "regenerate_readme"]

BLOCK = re.compile(r"<!-- headline -->\n.*?<!-- /headline -->", re.S)
HEADER = ("| use | ctxkit | the alternative | command |\n"
          "|---|---|---|---|")


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _packing(d: dict) -> tuple[str, str, str]:
    mean = {}
    for method in ("ctxkit bfd", "TRL bfd"):
        rows = [r["utilization"] for r in d["datasets"]
                if r["method"] == method and r["capacity"] == 8192]
        mean[method] = sum(rows) / len(rows)
    million = {r["method"]: r for r in d["million"] if r["capacity"] == 2048}
    ours, trl = million["ctxkit bfd"], million["TRL bfd"]
    return ("Pack for SFT: utilization of 8,192-token windows (mean over datasets); "
            "planning 1M lengths at 2,048",
            f"{100 * mean['ctxkit bfd']:.1f}%; {ours['seconds']:.3f} s",
            f"TRL `bfd` {100 * mean['TRL bfd']:.1f}%; {trl['seconds']:.1f} s")


def _dedup(d: dict) -> tuple[str, str, str]:
    rows = d["templated_speed"]["rows"]
    tool = max((r for r in rows if r["corpus"] == "toolformer" and r["threshold"] == 0.7),
               key=lambda r: r["docs"])
    return (f"MinHash dedup at 0.7, {tool['docs']:,} templated records (CPU s, "
            "signatures to clusters)",
            f"{tool['ctxkit_cpu_s']:.2f} s",
            f"datasketch {tool['datasketch_cpu_s']:.2f} s ({tool['speedup_vs_datasketch_cpu']}x "
            f"slower); rensa {tool['rensa_cpu_s']:.2f} s, no verification or clusters")


def _dedup_quality(d: dict) -> tuple[str, str, str]:
    f1 = {r["method"]: r["f1"] for r in d["pair_f1"]["rows"] if r["threshold"] == 0.7}
    return ("MinHash dedup at 0.7: pair F1 against the exact Jaccard join",
            f"{f1['ctxkit (exact verify)']:.3f}",
            f"datasketch `MinHashLSH` {f1['datasketch MinHashLSH']:.3f}; "
            f"rensa + verify {f1['rensa RMinHashLSH + verify']:.3f}")


def _embedding(d: dict) -> tuple[str, str, str]:
    res = d["results"]
    sets = ", ".join(f"{name} {r['speedup_vs_st_bs32']['packed']:.2f}x"
                     for name, r in res.items())
    return ("Packed embeddings (all-MiniLM-L6-v2, CPU): texts/s over "
            "`SentenceTransformer.encode(batch_size=32)`",
            f"{sets}; min cosine {d['fidelity']['min_cosine']:.7f}", "1.00x")


def _classify(d: dict) -> tuple[str, str, str]:
    clf = d["results"]["classifier"]
    ce = d["results"]["cross_encoder"]
    ours = ", ".join(f"{name} {r['speedup']['packed']:.2f}x" for name, r in clf.items())
    pairs = ", ".join(f"{name} {r['speedup']['packed']:.2f}x" for name, r in ce.items())
    return ("Packed classification: texts/s over the padded transformers loop "
            "(batches of 32); reranking over `CrossEncoder.predict`",
            f"{ours}; pairs {pairs}", "1.00x")


def _compression(d: dict) -> tuple[str, str, str]:
    ret = d["needle"]["retention"]
    return ("Compress a chat to 1/4 of its tokens: the fact the last question needs kept "
            f"({d['needle']['n_histories']} real histories)",
            f"{_pct(ret['ctxkit (embedding)']['1/4'])}",
            f"keep-recent {_pct(ret['keep-recent']['1/4'])}; "
            f"head truncation {_pct(ret['head truncation']['1/4'])}")


def _public_compression(d: dict) -> tuple[str, str, str]:
    nq = d["tasks"]["nq"]
    kept = {method: f"{row['retention']['1/4']:.2f}" for method, row in nq.items()}
    use = (f"Compress 20 retrieved passages to 1/4 with the query (NQ-open, "
           f"{nq['ctxkit default']['cases']} cases): answer kept")
    return use, kept["ctxkit default"], (
        f"BM25 top units {kept['BM25 top units']}; MiniLM top units {kept['MiniLM top units']}")


def _chat_scaling(d: dict) -> tuple[str, str, str]:
    a, z = d["scaling"][0], d["scaling"][-1]
    return (f"Agent memory: `compress` after every message, defaults, budget {a['budget']:,} "
            f"(joined dev LoCoMo turns), per-turn median at {a['tokens'] / 1e3:,.0f}k and "
            f"{z['tokens'] / 1e3:,.0f}k tokens",
            f"`ChatMemory` {a['turn_median_ms']:,.0f} ms / {z['turn_median_ms']:,.0f} ms "
            f"(peak RSS {z['peak_rss_mb'] / 1024:.1f} GB)",
            f"the cold first call (as `compress_chat`) {a['cold_s'] * 1e3:,.0f} ms / "
            f"{z['cold_s'] * 1e3:,.0f} ms")


def _chat_billing(d: dict) -> tuple[str, str, str]:
    rows = {r["method"]: r for r in d["billing"]["summary"] if r["fraction"] == 0.25}
    ours, memory = rows["ChatMemory, prefix cache"], rows["ChatMemory"]
    whole = rows["whole history"]
    trim = rows.get("LangChain trim_messages (last)")

    def cell(r: dict) -> str:
        return (f"{r['billed']['0.1'] / 1e6:.2f}M billed, {_pct(r['retention'])} kept, "
                f"{r['kv_mib_mean_window']:,.0f} MiB KV")

    return (f"Chat app replay at 1/4 of the tokens ({d['billing']['conversations']}): input "
            "billed with cached tokens at 0.1, evidence kept for end questions, KV cache of "
            "the mean window (Llama-3.1-8B)",
            f"`ChatMemory(prefix_cache=True)` {cell(ours)}; `ChatMemory` {cell(memory)}",
            f"whole history {whole['billed']['0.1'] / 1e6:.2f}M, "
            f"{whole['kv_mib_mean_window']:,.0f} MiB KV"
            + (f"; `trim_messages` {cell(trim)}" if trim else ""))


def _balance(d: dict) -> tuple[str, str, str]:
    rows = [r for r in d["rows"] if r.get("after") is not None]
    return ("Data-parallel steps at 8 and 64 ranks (shared datasets): busiest rank's compute "
            "over the step's mean, worst case",
            f"`ctxkit.balance` {max(r['after'] for r in rows):.3f}",
            f"windows dealt in plan order {max(r['before'] for r in rows):.3f}")


def _training(d: dict) -> tuple[str, str, str]:
    rows = [r for r in d["rows"] if r["method"] != "padded"]
    speed = {m: [r["speedup"] for r in rows if r["method"] == m]
             for m in dict.fromkeys(r["method"] for r in rows)}
    pack = speed.pop("ctxkit.pack")
    return ("SFT step on CPU (tiny Llama, forward + backward + AdamW): real tokens/s over "
            "padded batches, per dataset; per-example losses equal to "
            f"{d['tolerance']:g}",
            "`ctxkit.pack` " + " / ".join(f"{x:.2f}x" for x in pack),
            "; ".join(f"{m} " + " / ".join(f"{x:.2f}x" for x in v) for m, v in speed.items()))


ROWS: tuple[tuple[str, Callable[[dict], tuple[str, str, str]]], ...] = (
    ("compression", _compression),
    ("public_compression", _public_compression),
    ("chat_memory", _chat_billing),
    ("chat_scaling", _chat_scaling),
    ("dedup", _dedup),
    ("dedup", _dedup_quality),
    ("packing", _packing),
    ("balance", _balance),
    ("training", _training),
    ("embedding", _embedding),
    ("classify", _classify),
)


def render_headline(results: Path) -> str:
    """The headline block (markers included) from the JSON results in ``results``."""
    lines = ["<!-- headline -->", HEADER]
    for name, row in ROWS:
        path = results / f"{name}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            use, ours, theirs = row(data)
        except (OSError, ValueError, KeyError, StopIteration, TypeError, ZeroDivisionError):
            lines.append(f"| *no results from `python -m evals.{name}`* | | | |")
            continue
        command = data.get("command") or f"python -m evals.{name}"
        lines.append(f"| {use} | {ours} | {theirs} | `{command}` |")
    lines.append("<!-- /headline -->")
    return "\n".join(lines)


def regenerate_readme(text: str, results: Path) -> str:
    """``text`` with its headline block (if any) rendered afresh from ``results``."""
    return BLOCK.sub(lambda _: render_headline(results), text)
