"""Packed embedding passes vs ``SentenceTransformer.encode``: fidelity, speed, where it comes from.

Run from the repository root::

    python -m evals.embedding                 # full: 2,000 texts fidelity, 1,000 per set timed
    python -m evals.embedding --quick         # a few seconds, for CI smoke tests
    python -m evals.embedding --n 400 --repeats 3 --threads 2 --out evals/results

Length distributions (from ``../shared/data`` or ``$CTXKIT_DATA``; generated text otherwise):

- ``chat``: short chat-like texts: gsm8k questions and single turns of real conversations;
- ``codealpaca``: instruction + input + output of CodeAlpaca (instruction-length);
- ``mix``: half of each.

Timing alternates the methods round by round in one process (so machine load hits all of
them alike) with the same ``torch.set_num_threads`` for everyone, and reports the median of
per-round ratios to ``encode(batch_size=32)``. The decomposition runs our forward with
progressively more of the packed design: ST's layout (char-sorted, 32 texts padded), token
sorting, token-sized batches, packed rows of ``max_seq_length``, then the automatic row length.

Writes ``embedding.json`` (with machine info), ``embedding.md`` and ``embedding.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

from evals._common import command_line

NAME = "embedding"


def data_dir() -> Path:
    """``$CTXKIT_DATA``, else ``../shared/data`` from the repository root (or one level up,
    for a git worktree nested one directory deeper)."""
    env = os.environ.get("CTXKIT_DATA")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for root in (here.parents[2], here.parents[3]):
        if (root / "shared" / "data").is_dir():
            return root / "shared" / "data"
    return here.parents[2] / "shared" / "data"


_VOCAB = ("data model token pack row batch attention layer vector text query answer "
          "python function return value list dict loop sort number sum")


def _synthetic(n: int, words: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = _VOCAB.split()
    lens = np.clip(rng.lognormal(np.log(words), 0.6, n).astype(int), 1, 600)
    return [" ".join(rng.choice(vocab, size=k)) for k in lens]


def load_sets(n: int, seed: int = 0) -> tuple[dict[str, list[str]], str]:
    """``{"chat": [...], "codealpaca": [...], "mix": [...]}`` of ``n`` texts each."""
    root = data_dir()
    rng = np.random.default_rng(seed)

    def sample(pool: list[str], k: int) -> list[str]:
        idx = rng.choice(len(pool), size=min(k, len(pool)), replace=False)
        return [pool[i] for i in idx]

    try:
        rows = json.loads((root / "codealpaca" / "new_codealpaca.json").read_text())
        code = ["\n".join(x for x in (r.get("instruction", ""), r.get("input", ""),
                                       r.get("output", "")) if x) for r in rows]
        gsm = [json.loads(line)["question"]
               for line in (root / "gsm8k" / "train.jsonl").read_text().splitlines() if line]
        turns: list[str] = []
        for name in ("sharegpt_examples.json", "hh_rlhf_examples.json", "convai2_examples.json"):
            path = root / "chat" / name
            if not path.exists():
                continue
            for conv in json.loads(path.read_text()):
                msgs = conv.get("conversations") or conv.get("messages") or conv.get("dialog") \
                    if isinstance(conv, dict) else None
                for m in msgs or []:
                    text = m.get("value") or m.get("content") or m.get("text") \
                        if isinstance(m, dict) else None
                    if isinstance(text, str) and text.strip():
                        turns.append(text)
        source = str(root)
    except (OSError, ValueError, KeyError):
        code, gsm, turns = _synthetic(4 * n, 120, 1), _synthetic(4 * n, 30, 2), []
        source = "generated (no shared data found)"
    chat = sample(gsm, n - min(len(turns), n // 4)) + sample(turns, min(len(turns), n // 4))
    chat = [chat[i] for i in rng.permutation(len(chat))]
    codealpaca = sample(code, n)
    mix = sample(chat, n // 2) + sample(codealpaca, n - n // 2)
    return {"chat": chat, "codealpaca": codealpaca,
            "mix": [mix[i] for i in rng.permutation(len(mix))]}, source


def st_padding(model, texts: list[str], batch_size: int) -> tuple[int, int]:
    """(real tokens, padded slots) of ``encode``'s batches: sorted by characters, padded."""
    order = np.argsort([-len(t) for t in texts], kind="stable")
    lens = np.array([len(x) for x in model.tokenizer(
        texts, truncation=True, max_length=model.max_seq_length)["input_ids"]])[order]
    slots = sum(int(lens[s:s + batch_size].max()) * len(lens[s:s + batch_size])
                for s in range(0, len(lens), batch_size))
    return int(lens.sum()), slots


def layout_runner(enc, layout: str, batch_texts: int = 32):
    """A callable embedding texts with our forward and a given batch layout."""
    from ctxkit.embedding.encoder import EncodeStats
    from ctxkit.embedding.ops import build_batch

    def run(texts: list[str]) -> np.ndarray:
        tk = enc.tokenize(texts)
        lens = tk.lengths
        if layout == "st_layout":  # char-sorted, 32 texts a batch, padded to the longest
            order = np.argsort([-len(t) for t in texts], kind="stable")
            groups = [order[s:s + batch_texts] for s in range(0, len(order), batch_texts)]
        elif layout == "token_sorted":
            order = np.argsort(-lens, kind="stable")
            groups = [order[s:s + batch_texts] for s in range(0, len(order), batch_texts)]
        elif layout == "token_budget":  # token-sorted, batches of ~batch_tokens slots
            order = np.argsort(-lens, kind="stable")
            groups, s = [], 0
            while s < len(order):
                per = max(1, enc.batch_tokens // int(lens[order[s]]))
                groups.append(order[s:s + per])
                s += per
        else:
            raise ValueError(layout)

        def batches():
            for g in groups:
                cap = int(lens[g].max())
                yield build_batch(tk.ids, tk.offsets, lens, [np.array([i]) for i in g], cap,
                                  enc.backbone.pad_id)

        return enc._encode_tokenized(tk, enc.batch_tokens, None, EncodeStats(),
                                     batches())

    return run


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(1)


def machine_info(threads: int) -> dict:
    import torch

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import sentence_transformers
    import transformers

    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": threads,
            "python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few seconds (CI smoke test)")
    ap.add_argument("--n", type=int, default=1000, help="texts per distribution timed")
    ap.add_argument("--fidelity-n", type=int, default=2000,
                    help="texts for fidelity (half codealpaca, half gsm8k/chat)")
    ap.add_argument("--repeats", type=int, default=3, help="alternating timing rounds")
    ap.add_argument("--threads", type=int, default=2, help="torch threads, both sides")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-tokens", type=int, default=None,
                    help="token slots per packed forward (default: PackedEncoder's)")
    ap.add_argument("--no-decompose", action="store_true", help="skip the decomposition runs")
    ap.add_argument("--out", type=Path, default=Path("evals/results"))
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.fidelity_n, args.repeats = 12, 12, 1

    import torch
    from sentence_transformers import SentenceTransformer

    from ctxkit.embedding.encoder import PackedEncoder
    from ctxkit.io.records import write_json
    from ctxkit.io.tokenizers import minilm_path

    torch.set_num_threads(args.threads)
    model = SentenceTransformer(str(minilm_path()), device=args.device)
    enc = PackedEncoder(device=args.device, batch_tokens=args.batch_tokens)
    sets, source = load_sets(max(args.n, args.fidelity_n // 2))

    # Fidelity: every vector against encode(batch_size=32), fp32.
    half = args.fidelity_n // 2
    fid_texts = sets["codealpaca"][:half] + sets["chat"][:args.fidelity_n - half]
    ref = model.encode(fid_texts, batch_size=32)
    got = enc.encode(fid_texts)
    cos = cosines(got, ref)
    fidelity = {"texts": len(fid_texts), "min_cosine": float(cos.min()),
                "mean_cosine": float(cos.mean()),
                "max_abs_diff": float(np.abs(got - ref).max()),
                "truncated": enc.last_stats.truncated, "empty": enc.last_stats.empty}
    print(f"fidelity on {len(fid_texts)} texts: min cosine {cos.min():.7f}", flush=True)
    # dtype="fast": bf16 on CPUs that multiply it natively (what relevance scoring runs)
    fast = PackedEncoder(device=args.device, dtype="fast", batch_tokens=args.batch_tokens)
    fast_cos = cosines(fast.encode(fid_texts), ref)
    fidelity["fast"] = {"dtype": str(fast.dtype).removeprefix("torch."),
                        "min_cosine": float(fast_cos.min()), "mean_cosine": float(fast_cos.mean())}

    methods = {
        "st_bs32": lambda t: model.encode(t, batch_size=32),
        "st_bs128": lambda t: model.encode(t, batch_size=128),
        "packed": enc.encode,
        "packed_fast": fast.encode,
    }
    if not args.no_decompose:
        methods.update({
            "ours_st_layout": layout_runner(enc, "st_layout"),
            "ours_token_sorted": layout_runner(enc, "token_sorted"),
            "ours_token_budget": layout_runner(enc, "token_budget"),
            "packed_rows_max": PackedEncoder(device=args.device,
                                             batch_tokens=args.batch_tokens,
                                             row_length=enc.max_seq_length).encode,
        })
    results = {}
    for name, texts in sets.items():
        texts = texts[:args.n]
        for fn in methods.values():  # warm-up (allocator, thread pools)
            fn(texts[:4])
        times: dict[str, list[float]] = {m: [] for m in methods}
        for r in range(args.repeats):
            keys = list(methods) if r % 2 == 0 else list(reversed(methods))
            for m in keys:
                t0 = time.perf_counter()
                methods[m](texts)
                times[m].append(time.perf_counter() - t0)
        enc.encode(texts)
        stats = enc.last_stats
        tokens, slots = st_padding(model, texts, 32)
        base = times["st_bs32"]
        res = {
            "texts": len(texts), "tokens": stats.tokens,
            "mean_tokens": stats.tokens / len(texts),
            "packed_utilization": stats.utilization, "packed_rows": stats.rows,
            "st_bs32_padding_fraction": 1 - tokens / slots,
            "texts_per_s": {m: len(texts) / statistics.median(t) for m, t in times.items()},
            "speedup_vs_st_bs32": {m: statistics.median(b / x for b, x in zip(base, t))
                                   for m, t in times.items()},
            "seconds": times,
        }
        results[name] = res
        print(name, {m: round(v, 3) for m, v in res["speedup_vs_st_bs32"].items()}, flush=True)

    report = {"benchmark": NAME, "data": source, "model": "all-MiniLM-L6-v2 (bundled)",
              "command": command_line("evals.embedding", argv),
              "args": {k: str(v) for k, v in vars(args).items()},
              "machine": machine_info(args.threads), "fidelity": fidelity, "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / f"{NAME}.json", report)
    write_markdown(args.out / f"{NAME}.md", report)
    plot(args.out / f"{NAME}.png", report)
    return report


LABELS = {
    "st_bs32": "ST encode(batch_size=32)",
    "st_bs128": "ST encode(batch_size=128)",
    "ours_st_layout": "ours, ST's layout (char-sorted, 32/batch, padded)",
    "ours_token_sorted": "+ token-length ordering",
    "ours_token_budget": "+ token-sized batches (padded)",
    "packed_rows_max": "+ packed rows of max_seq_length (no padding)",
    "packed": "PackedEncoder default (row length by cost model)",
    "packed_fast": "PackedEncoder dtype=\"fast\"",
}


def write_markdown(path: Path, report: dict) -> None:
    from ctxkit.io.records import atomic_write

    res = report["results"]
    names = list(res)
    methods = [m for m in LABELS if m in res[names[0]]["texts_per_s"]]
    f = report["fidelity"]
    lines = [
        "# Packed embedding passes vs sentence-transformers",
        "",
        (f"Model {report['model']}; machine {report['machine']['cpu']}, "
         f"{report['machine']['torch_threads']} torch threads; data: {report['data']}."),
        (f"Fidelity on {f['texts']} texts: min cosine {f['min_cosine']:.7f}, "
         f"max abs diff {f['max_abs_diff']:.2e}."),
        *([f"`dtype=\"fast\"` runs {f['fast']['dtype']} here (bf16 on CPUs that multiply it "
           f"natively, else fp32): min cosine to encode {f['fast']['min_cosine']:.5f}, mean "
           f"{f['fast']['mean_cosine']:.6f}."] if "fast" in f else []),
        "",
        "| method | " + " | ".join(f"{n} texts/s (x vs bs32)" for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for m in methods:
        cells = [f"{res[n]['texts_per_s'][m]:.1f} ({res[n]['speedup_vs_st_bs32'][m]:.2f}x)"
                 for n in names]
        lines.append(f"| {LABELS[m]} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| set | texts | mean tokens | packed utilization | ST bs32 padding |",
        "|---|---:|---:|---:|---:|",
    ]
    for n in names:
        r = res[n]
        lines.append(f"| {n} | {r['texts']} | {r['mean_tokens']:.1f} | "
                     f"{r['packed_utilization']:.1%} | {r['st_bs32_padding_fraction']:.1%} |")
    lines += ["", "Ratios are medians of per-round ratios (methods alternate each round).", ""]
    with atomic_write(path) as fh:
        fh.write("\n".join(lines))


def plot(path: Path, report: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = report["results"]
    names = list(res)
    methods = [m for m in LABELS if m in res[names[0]]["texts_per_s"]]
    fig, ax = plt.subplots(figsize=(10, 7))
    width = 0.8 / len(methods)
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(methods)))
    for k, m in enumerate(methods):
        xs = np.arange(len(names)) + (k - (len(methods) - 1) / 2) * width
        ys = [res[n]["speedup_vs_st_bs32"][m] for n in names]
        ax.bar(xs, ys, width, label=LABELS[m], color=colors[k])
        for x, y in zip(xs, ys):
            ax.text(x, y + 0.01, f"{y:.2f}", ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(names)))
    ax.set_xticklabels([f"{n}\n(mean {res[n]['mean_tokens']:.0f} tokens, "
                        f"{res[n]['texts']} texts)" for n in names])
    ax.set_xlabel("text length distribution")
    ax.set_ylabel("speed-up vs ST encode(batch_size=32) (ratio of texts/s)")
    f = report["fidelity"]
    ax.set_title("Packed embedding passes, all-MiniLM-L6-v2, CPU "
                 f"({report['machine']['torch_threads']} torch threads)\n"
                 f"fidelity: min cosine {f['min_cosine']:.7f} to ST encode on {f['texts']} texts")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
