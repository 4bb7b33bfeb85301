"""Scale-out benchmark: what ``docs/scaling.md`` quotes.

1. Per-worker throughput of every distributed stage's block function, in one process with
   one thread (what one Ray worker does per core): MinHash signatures + band keys, bucket
   pairs, pair scoring, tokenizing, per-block packing and, when ``ctxkit.embed`` exists,
   ``PackedEncoder``.
2. End to end on a local Ray instance with ``--workers`` CPUs, side by side with the
   single-machine call in the same run: ``minhash_dedup`` (sort and hash shuffle; results
   checked equal to ``ctxkit.dedup``), ``pack`` (global plan and per block).
3. Packing utilization: the global plan versus per-block plans, for several block sizes,
   on real token lengths (the same ``pack_lengths`` call block mode makes per block).
4. A projection to N nodes, on paper, from the per-worker numbers (assumptions in the JSON).

Run: ``python -m evals.distributed [--quick] [--out evals/results] [--workers 2] [--ray]``
(``--quick`` skips the Ray section unless ``--ray`` is given: Ray's start-up alone is ~10 s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

NAME = "distributed"
PROJECT_DOCS = 100_000_000  # the corpus size the projection is for
CORES_PER_NODE = 16  # the node the projection assumes
NODES = (1, 4, 16, 64)


# ---------------------------------------------------------------- data and machine


def data_dir() -> Path | None:
    env = os.environ.get("CTXKIT_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    return path if path.is_dir() else None


def load_texts(n: int, seed: int = 0) -> tuple[list[str], str]:
    """Real instruction texts (codealpaca, gsm8k, gpteacher), or generated ones."""
    root = data_dir()
    texts: list[str] = []
    if root is not None:
        for rel in ("codealpaca/new_codealpaca.json", "gsm8k/train.jsonl",
                    "gpteacher/toolformer-dedupe-only-dataset.json"):
            path = root / rel
            if not path.exists():
                continue
            raw = path.read_text(encoding="utf-8")
            rows = ([json.loads(x) for x in raw.splitlines() if x.strip()]
                    if path.suffix == ".jsonl" else json.loads(raw))
            for r in rows:
                parts = [r.get("instruction") or r.get("question") or "", r.get("input") or "",
                         r.get("output") or r.get("response") or r.get("answer") or ""]
                texts.append("\n".join(p for p in parts if p))
    source = "shared data (codealpaca, gsm8k, gpteacher toolformer)"
    if not texts:
        rng = np.random.default_rng(seed)
        words = [f"w{i}" for i in range(5000)]
        texts = [" ".join(rng.choice(words, int(rng.integers(20, 300)))) for _ in range(n)]
        source = "generated (shared data not found)"
    rng = np.random.default_rng(seed)
    picked = [texts[i] for i in rng.permutation(len(texts))[:n]]
    while len(picked) < n:  # more than the data holds: repeat with light edits
        t = picked[len(picked) % len(texts)]
        picked.append(t + f" ({len(picked)})")
    return picked, source


def machine_info() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {"cpu": cpu, "cores": os.cpu_count(),
                            "python": platform.python_version(),
                            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for mod in ("numpy", "torch", "ray", "pyarrow"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - missing library: the benchmark still runs
            info[mod] = None
    return info


def best_of(fn, repeat: int) -> float:
    """The fastest of ``repeat`` runs, in seconds (the machine is shared: minimum is stable)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


# ---------------------------------------------------------------- 1. per worker


def per_worker(texts: list[str], repeat: int) -> dict[str, Any]:
    """Items/s of each block function in this process, pinned to one thread."""
    from ctxkit.distributed.packing import _pack_block
    from ctxkit.io.tokenizers import get_tokenizer
    from ctxkit.packing.options import PackOptions

    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    n = len(texts)
    rows = np.arange(n, dtype=np.int64)
    out: dict[str, Any] = {}
    tok = get_tokenizer("cl100k_base")
    t = best_of(lambda: [tok.encode(x) for x in texts], repeat)
    ids = [np.asarray(tok.encode(x), dtype=np.int64) for x in texts]
    lengths = np.array([len(x) for x in ids])
    out["tokenize_cl100k"] = {"items": n, "seconds": t, "per_s": n / t, "unit": "texts"}
    col = np.empty(n, dtype=object)
    col[:] = ids
    batch = {"_row": rows, "input_ids": col}
    opts = PackOptions(capacity=2048, overflow="truncate")
    t = best_of(lambda: _pack_block(batch, "input_ids", None, None, True, opts), repeat)
    out["pack_block_bfd"] = {"items": n, "seconds": t, "per_s": n / t, "unit": "sequences"}
    out["tokens_per_text"] = float(lengths.mean())
    out.update(_minhash_per_worker_rates(texts, repeat))
    try:
        from ctxkit.embedding.encoder import PackedEncoder
    except ImportError as exc:
        out["embed"] = f"skipped: ctxkit.embed not available ({exc})"
    else:
        enc = PackedEncoder(device="cpu")
        sample = texts[: min(n, 32 if repeat == 1 else 512)]  # quick runs: a small sample
        enc.encode(sample[:16])
        t = best_of(lambda: enc.encode(sample), max(1, repeat - 1))
        out["embed_packed_minilm"] = {"items": len(sample), "seconds": t,
                                      "per_s": len(sample) / t, "unit": "texts"}
    return out


def _minhash_per_worker_rates(texts: list[str], repeat: int) -> dict[str, Any]:
    """The MinHash task functions of :mod:`ctxkit.distributed.stages` in this process: a
    chunk's signatures and band keys, its buckets' pairs, and pair scoring."""
    import pyarrow as pa

    from ctxkit.deduplication.lsh import choose_bands
    from ctxkit.distributed import stages

    n, out = len(texts), {}
    bands, r = choose_bands(0.5, 128)
    table = pa.table({"text": texts})
    t = best_of(lambda: stages.prepare_chunk(0, "text", _PARAMS, bands, r, None, table), repeat)
    chunk = stages.prepare_chunk(0, "text", _PARAMS, bands, r, None, table)
    out["minhash_signatures"] = {"items": n, "seconds": t, "per_s": n / t,
                                 "unit": "docs (signatures and band keys)"}
    bounds = np.array([0, n])
    t = best_of(lambda: stages.bucket_pairs(1000, bounds, chunk.bands), repeat)
    codes = stages.bucket_pairs(1000, bounds, chunk.bands)[0]
    out["minhash_bucket_pairs"] = {"items": n, "seconds": t, "per_s": n / t, "unit": "docs",
                                   "rows": len(chunk.bands["key"])}
    m = 100_000
    codes = np.unique(stages.encode(np.random.default_rng(0).integers(0, n, (m, 2))))
    served = stages.serve_signatures(0, chunk.sig, np.unique(stages.decode(codes)))
    starts = np.array([0, n])
    t = best_of(lambda: stages.score_estimates(-1.0, starts, codes, *served), repeat)
    out["minhash_score_pairs_estimate"] = {"items": len(codes), "seconds": t,
                                           "per_s": len(codes) / t, "unit": "pairs"}
    out["minhash_bands"] = [bands, r]
    return out


_PARAMS = dict(num_perm=128, seed=1, ngram=5, unit="char", normalization=None,
               hashfunc="fast", scheme="affine32")


def peak_memory(texts: list[str], batch: int = 4096) -> dict[str, Any]:
    """Peak bytes numpy allocates in one call of each block function (tracemalloc).

    One MinHash batch (``batch`` texts, what ``map_batches`` hands a worker), one bucket
    partition of those texts' band rows and one per-block packing plan.
    """
    import tracemalloc

    from ctxkit.distributed.packing import _pack_block
    from ctxkit.io.tokenizers import get_tokenizer
    from ctxkit.packing.options import PackOptions

    texts = texts[:batch]
    n = len(texts)
    rows = np.arange(n, dtype=np.int64)
    out: dict[str, Any] = {"batch_texts": n, "mean_chars": float(np.mean([len(t) for t in texts]))}

    def peak(fn) -> int:
        tracemalloc.start()
        fn()
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return int(top)

    tok = get_tokenizer("cl100k_base")
    col = np.empty(n, dtype=object)
    col[:] = [np.asarray(tok.encode(t), dtype=np.int64) for t in texts]
    out["pack_block_bytes"] = peak(
        lambda: _pack_block({"_row": rows, "input_ids": col}, "input_ids", None, None, True,
                            PackOptions(capacity=2048, overflow="truncate")))
    import pyarrow as pa

    from ctxkit.deduplication.lsh import choose_bands
    from ctxkit.distributed import stages

    table = pa.table({"text": texts})
    bands, r = choose_bands(0.5, 128)
    out["minhash_batch_bytes"] = peak(
        lambda: stages.prepare_chunk(0, "text", _PARAMS, bands, r, None, table))
    triples = stages.prepare_chunk(0, "text", _PARAMS, bands, r, None, table).bands
    out["bucket_partition_bytes"] = peak(
        lambda: stages.bucket_pairs(1000, np.array([0, n]), triples))
    out["bucket_partition_rows"] = int(len(triples["key"]))
    return out


# ---------------------------------------------------------------- 2. Ray end to end


def end_to_end(texts: list[str], workers: int, repeat: int, quick: bool) -> dict[str, Any]:
    import ray

    from ctxkit.distributed import init_ray, pack, window_utilization
    from ctxkit.io.tokenizers import get_tokenizer
    from ctxkit.packing.plan import pack_lengths

    t0 = time.perf_counter()
    init_ray(num_cpus=workers)
    out: dict[str, Any] = {"workers": workers, "ray_init_s": time.perf_counter() - t0}
    n = len(texts)
    blocks = max(2 * workers, n // 2000)
    ds = ray.data.from_items([{"text": t} for t in texts], override_num_blocks=blocks)
    ds = ds.materialize()  # the input is in the object store, as after a read
    tok = get_tokenizer("cl100k_base")
    lengths = [len(tok.encode(x)) for x in texts]
    tds = ray.data.from_items([{"n": int(x)} for x in lengths],
                              override_num_blocks=blocks).materialize()
    for mode in ("global", "block"):
        box: dict[str, Any] = {}

        def run(box: dict = box, mode: str = mode) -> None:
            res = pack(tds, 2048, column="n", mode=mode, overflow="truncate")
            box["u"] = window_utilization(res.windows, 2048)

        if not quick:
            run()
        t = best_of(run, repeat)
        out[f"pack_ray_{mode}_lengths"] = {"seconds": t, "seqs_per_s": n / t, **box["u"],
                                           "rows_per_block": n / blocks}
    t = best_of(lambda: pack_lengths(np.array(lengths), capacity=2048, overflow="truncate"), repeat)
    out["pack_single_process"] = {"seconds": t, "seqs_per_s": n / t}
    ray.shutdown()
    return out


# ---------------------------------------------------------------- 3. utilization


def utilization_by_block(lengths: np.ndarray, capacity: int, sizes: list[int]) -> dict[str, Any]:
    from ctxkit.packing.plan import pack_lengths

    lengths = np.minimum(lengths, capacity)
    glob = pack_lengths(lengths, capacity=capacity)
    rows = []
    for size in sizes:
        bins = sum(pack_lengths(lengths[s:s + size], capacity=capacity).n_bins
                   for s in range(0, len(lengths), size))
        util = lengths.sum() / (bins * capacity)
        rows.append({"block_rows": size, "windows": int(bins), "utilization": float(util),
                     "loss_vs_global": float(glob.utilization - util)})
    return {"capacity": capacity, "sequences": int(len(lengths)),
            "global": {"windows": glob.n_bins, "utilization": glob.utilization,
                       "lower_bound": glob.lower_bound},
            "per_block": rows}


# ---------------------------------------------------------------- 4. MinHash end to end


def minhash_runs(sizes: list[int], workers: int, corpus_dir: Path) -> list[dict[str, Any]]:
    """``ctxkit dedup`` local and ``--ray local`` on generated corpora of ``sizes`` records
    (:mod:`evals.distributed_e2e`); Ray gets ``workers`` CPUs (the machine's, when equal)."""
    from evals.distributed_e2e import compare
    from evals.ray_corpus import write_corpus

    corpus_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    for n in sizes:
        path = corpus_dir / f"corpus_{n}.jsonl"
        if not path.exists():
            write_corpus(path, n)
        runs.append(compare(path, corpus_dir / f"out_{n}", n, workers))
    return runs


# ---------------------------------------------------------------- 5. projection


def projection(runs: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    """Records/s of MinHash dedup on N nodes, from the largest measured Ray run: the
    workers' part scales with the cores, the driver's serial part does not."""
    if not runs:
        return {"table": [], "assumptions": ["no MinHash run"]}
    from evals.distributed_e2e import DRIVER_STAGES

    big = runs[-1]
    n, stages = big["records"], big["ray"]["stages"]
    driver = sum(stages.get(k, 0.0) for k in DRIVER_STAGES)
    spread = sum(stages.values()) - stages.get("start-up", 0.0) - driver
    per_core = n / (spread * workers)
    ceiling = n / driver if driver else float("inf")
    table = []
    for nodes in NODES:
        rate = 1.0 / (1.0 / (per_core * CORES_PER_NODE * nodes) + 1.0 / ceiling)
        table.append({"nodes": nodes, "docs_per_s": rate,
                      "hours_for_corpus": PROJECT_DOCS / rate / 3600})
    return {
        "corpus_docs": PROJECT_DOCS, "cores_per_node": CORES_PER_NODE, "from_records": n,
        "per_core_docs_per_s": per_core, "per_node_docs_per_s": per_core * CORES_PER_NODE,
        "driver_seconds": driver, "driver_ceiling_docs_per_s": ceiling,
        "assumptions": [
            f"the workers' stages of the {n:,}-record Ray run (all but start-up and the "
            f"driver's {', '.join(DRIVER_STAGES)}) spread over {workers} CPUs here and over "
            f"{CORES_PER_NODE} per node there, at the same cost per record and core",
            "the driver's stages run once, serially, at their measured cost per record: "
            "records/s = 1 / (1 / (nodes x per-node rate) + 1 / driver ceiling)",
            "shuffled bytes per record (21 x bands for the band keys, a signature or a "
            "text's shingles per pair partition that needs it) cross the network at 10 "
            "Gbit/s per node, below the map time; the input is many files (a single file "
            "is read by one task)",
        ],
        "table": table,
    }


# ---------------------------------------------------------------- report


def markdown(res: dict[str, Any]) -> str:
    w, e, u, p = res["per_worker"], res["end_to_end"], res["utilization"], res["projection"]
    lines = [f"# Distributed stages ({res['mode']} run, {res['docs']} texts from {res['source']})",
             "", "## Per worker (one process, one thread)", "",
             "| stage | items/s | unit |", "|---|---:|---|"]
    for k, v in w.items():
        if isinstance(v, dict) and "per_s" in v:
            lines.append(f"| {k} | {v['per_s']:,.0f} | {v['unit']} |")
        elif isinstance(v, str):
            lines.append(f"| {k} | - | {v} |")
    m = res.get("memory", {})
    if m:
        lines += ["", f"## Peak memory of one block function call ({m['batch_texts']} texts, "
                  f"{m['mean_chars']:.0f} characters each on average)", "",
                  "| call | peak MiB |", "|---|---:|"]
        for k, v in m.items():
            if k.endswith("_bytes"):
                lines.append(f"| {k[:-6]} | {v / 2**20:.1f} |")
    lines += ["", f"## End to end on a local Ray instance ({e.get('workers')} CPUs)", "",
              "| run | seconds | items/s | note |", "|---|---:|---:|---|"]
    for k, v in e.items():
        if isinstance(v, dict) and "seconds" in v:
            rate = v.get("docs_per_s", v.get("seqs_per_s", 0.0))
            note = ", ".join(f"{a}={b:.4g}" if isinstance(b, float) else f"{a}={b}"
                             for a, b in v.items() if a not in ("seconds", "docs_per_s",
                                                                "seqs_per_s"))
            lines.append(f"| {k} | {v['seconds']:.2f} | {rate:,.0f} | {note} |")
        elif isinstance(v, str):
            lines.append(f"| {k} | - | - | {v} |")
    lines += ["", f"## Packing utilization, capacity {u['capacity']} ({u['sequences']} "
              "sequences)", "", "| plan | windows | utilization | loss vs global |",
              "|---|---:|---:|---:|",
              f"| global | {u['global']['windows']} | {u['global']['utilization']:.4f} | 0 |"]
    for r in u["per_block"]:
        lines.append(f"| per block of {r['block_rows']} | {r['windows']} | "
                     f"{r['utilization']:.4f} | {r['loss_vs_global']:.4f} |")
    lines += minhash_markdown(res.get("minhash", []), res["workers"])
    if p["table"]:
        lines += ["", f"## MinHash dedup projected to N nodes of {p['cores_per_node']} cores, "
                  f"{p['corpus_docs']:,} documents (from the measured stages)", "",
                  f"Per core {p['per_core_docs_per_s']:,.0f} records/s, per node "
                  f"{p['per_node_docs_per_s']:,.0f}; the driver's serial steps "
                  f"({p['driver_seconds']:.2f} s for {p['from_records']:,} records) cap a "
                  f"cluster at {p['driver_ceiling_docs_per_s']:,.0f} records/s.", "",
                  "| nodes | records/s | hours |", "|---:|---:|---:|"]
        for r in p["table"]:
            lines.append(f"| {r['nodes']} | {r['docs_per_s']:,.0f} | "
                         f"{r['hours_for_corpus']:.2f} |")
    lines += ["", "Assumptions:", ""] + [f"- {a}" for a in p["assumptions"]]
    lines += ["", f"Command: `{res['command']}`", ""]
    return "\n".join(lines)


def minhash_markdown(runs: list[dict[str, Any]], workers: int) -> list[str]:
    """The local-versus-Ray tables: totals per size, then seconds per stage."""
    if not runs:
        return []
    lines = ["", f"## MinHash dedup: `ctxkit dedup IN --method minhash`, local vs `--ray local` "
             f"({workers} CPUs), generated records", "",
             "| records | input MB | local s | Ray s | Ray / local | local records/s per core "
             "| Ray records/s per core | driver peak RSS MB (local) | same output |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        lines.append(
            f"| {r['records']:,} | {r['input_mb']:.0f} | {r['local']['wall']:.1f} | "
            f"{r['ray']['wall']:.1f} | {r['ratio']:.2f} | {r['local_per_core']:,.0f} | "
            f"{r['ray_per_core']:,.0f} | {r['ray']['peak_rss_mb']:,.0f} "
            f"({r['local']['peak_rss_mb']:,.0f}) | "
            f"{'yes' if r['kept_equal'] and r['report_equal'] else 'NO'} |")
    head = " | ".join(f"{r['records']:,}" for r in runs)
    growth = len(runs) > 1
    lines += ["", "Seconds per stage (Ray stages awaited one by one; wall includes the "
              "interpreter's start):", "",
              f"| run | stage | {head} |" + (" growth |" if growth else ""),
              "|---|---|" + "---:|" * len(runs) + ("---:|" if growth else "")]
    for kind in ("local", "ray"):
        names = list(dict.fromkeys(k for r in runs for k in r[kind]["stages"]))
        for name in names + ["wall"]:
            vals = [r[kind]["wall"] if name == "wall" else r[kind]["stages"].get(name, 0.0)
                    for r in runs]
            row = f"| {kind} | {name} | " + " | ".join(f"{v:.2f}" for v in vals) + " |"
            if growth:
                row += f" {vals[-1] / vals[0]:.1f}x |" if vals[0] > 0 else " - |"
            lines.append(row)
    if growth:
        scale = runs[-1]["records"] / runs[0]["records"]
        lines += ["", f"growth: seconds at {runs[-1]['records']:,} over seconds at "
                  f"{runs[0]['records']:,} records ({scale:.0f}x the corpus)."]
    return lines


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ctxkit.io.records import atomic_write

    u, p = res["utilization"], res["projection"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    sizes = [r["block_rows"] for r in u["per_block"]]
    a.plot(sizes, [100 * r["utilization"] for r in u["per_block"]], "o-", label="per-block plan")
    a.axhline(100 * u["global"]["utilization"], color="k", ls="--", label="global plan")
    a.set_xscale("log")
    a.set_xlabel("sequences per block (count, log scale)")
    a.set_ylabel("window utilization (%)")
    a.set_title(f"Packing into {u['capacity']}-token windows: per block vs global")
    a.legend()
    b.plot([r["nodes"] for r in p["table"]], [r["hours_for_corpus"] for r in p["table"]],
           "o-", label="MinHash dedup")
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel(f"nodes ({p['cores_per_node']} cores each, log scale)")
    b.set_ylabel(f"hours for {p['corpus_docs'] / 1e6:.0f} M documents (log scale)")
    b.set_title("Projected wall time (on paper, from per-worker rates)")
    b.legend()
    fig.tight_layout()
    with atomic_write(path, mode="wb", encoding=None) as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few seconds of work (CI smoke test)")
    ap.add_argument("--out", default="evals/results", help="output directory")
    ap.add_argument("--workers", type=int, default=2, help="CPUs of the local Ray instance")
    ap.add_argument("--docs", type=int, default=None, help="texts to use")
    ap.add_argument("--ray", action=argparse.BooleanOptionalAction, default=None,
                    help="run the end-to-end Ray section (default: on, off with --quick, "
                         "since starting Ray alone takes ~10 s)")
    ap.add_argument("--sizes", default=None,
                    help="records of the MinHash local-vs-Ray runs, comma-separated "
                         "(default 300000,3000000; 20000 with --quick)")
    ap.add_argument("--corpus-dir", type=Path, default=None,
                    help="where the generated corpora and outputs go (default: a temporary "
                         "directory, removed afterwards)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    n = args.docs or (400 if args.quick else 8000)
    repeat = 1 if args.quick else 2
    texts, source = load_texts(n)
    from ctxkit.io.tokenizers import get_tokenizer

    tok = get_tokenizer("cl100k_base")
    lengths = np.array([len(tok.encode(t)) for t in texts])
    res: dict[str, Any] = {
        "mode": "quick" if args.quick else "full", "docs": n, "source": source,
        "command": "python -m evals.distributed" + (" --quick" if args.quick else "") +
                   f" --workers {args.workers}" + ("" if args.ray is None else
                                                   (" --ray" if args.ray else " --no-ray")) +
                   ("" if args.sizes is None else f" --sizes {args.sizes}"),
        "machine": machine_info(), "workers": args.workers,
    }
    res["per_worker"] = per_worker(texts, repeat)
    res["memory"] = peak_memory(texts, 1024 if args.quick else 4096)
    res["utilization"] = utilization_by_block(lengths, 2048, [64, 256, 1024, 4096, 16384])
    with_ray = (not args.quick) if args.ray is None else args.ray
    res["end_to_end"] = (end_to_end(texts, args.workers, 1, args.quick) if with_ray  # warm-up first
                         else {"workers": args.workers, "skipped": "quick run (use --ray)"})
    sizes = [int(x) for x in (args.sizes or ("20000" if args.quick else
                                             "300000,3000000")).split(",")]
    with tempfile.TemporaryDirectory(prefix="ctxkit-distributed-") as tmp:
        res["minhash"] = minhash_runs(sizes, args.workers, args.corpus_dir or Path(tmp))
    res["projection"] = projection(res["minhash"], args.workers)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from ctxkit.io.records import atomic_write, write_json

    write_json(out / f"{NAME}.json", res)
    with atomic_write(out / f"{NAME}.md") as fh:
        fh.write(markdown(res))
    plot(res, out / f"{NAME}.png")
    print(markdown(res))
    return res


if __name__ == "__main__":
    main()
