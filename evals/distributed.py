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


class _Local:
    """Stands in for a Ray broadcast when a block function runs in this process."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        return self.value


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
    try:
        from ctxkit.deduplication.lsh import choose_bands
        from ctxkit.distributed.minhash import (
            _band_rows,
            _bucket_pairs,
            _pair_plan,
            _score_partition,
            _sign_block,
        )
    except ImportError as exc:
        out["minhash"] = f"skipped: {exc}"
    else:
        params = dict(num_perm=128, seed=1, ngram=5, unit="char", normalization=None,
                      hashfunc="fast", scheme="affine32")
        tb = {"_row": rows, "text": np.array(texts, dtype=object)}
        t = best_of(lambda: _sign_block(tb, "text", params, None), repeat)
        signed = _sign_block(tb, "text", params, None)
        out["minhash_signatures"] = {"items": n, "seconds": t, "per_s": n / t, "unit": "docs"}
        bands, r = choose_bands(0.5, 128)
        t = best_of(lambda: _band_rows(signed, bands, r), repeat)
        banded = _band_rows(signed, bands, r)
        out["minhash_band_keys"] = {"items": n, "seconds": t, "per_s": n / t, "unit": "docs"}
        t = best_of(lambda: _bucket_pairs(banded, 1000), repeat)
        out["minhash_bucket_pairs"] = {"items": n, "seconds": t, "per_s": n / t, "unit": "docs",
                                       "rows": len(banded["key"])}
        m = 100_000
        pairs = np.random.default_rng(0).integers(0, n, (m, 2))
        plan = _Local(_pair_plan(pairs, 1))
        used = np.unique(pairs)
        pb = {"part": np.zeros(len(used), np.int64), "_row": used, "value": signed["sig"][used]}
        t = best_of(lambda: _score_partition(pb, plan, "estimate", {}), repeat)
        out["minhash_score_pairs_estimate"] = {"items": m, "seconds": t, "per_s": m / t,
                                               "unit": "pairs"}
        out["minhash_bands"] = [bands, r]
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
    try:
        from ctxkit.deduplication.lsh import choose_bands
        from ctxkit.distributed.minhash import _band_rows, _bucket_pairs, _sign_block
    except ImportError:
        return out
    params = dict(num_perm=128, seed=1, ngram=5, unit="char", normalization=None,
                  hashfunc="fast", scheme="affine32")
    tb = {"_row": rows, "text": np.array(texts, dtype=object)}
    out["minhash_batch_bytes"] = peak(lambda: _band_rows(_sign_block(tb, "text", params, None),
                                                         *choose_bands(0.5, 128)))
    banded = _band_rows(_sign_block(tb, "text", params, None), *choose_bands(0.5, 128))
    out["bucket_partition_bytes"] = peak(lambda: _bucket_pairs(banded, 1000))
    out["bucket_partition_rows"] = int(len(banded["key"]))
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
    try:
        from ctxkit.deduplication.pipeline import dedup
        from ctxkit.distributed import minhash_dedup
    except ImportError as exc:
        out["minhash"] = f"skipped: {exc}"
    else:
        box: dict[str, Any] = {}
        t = best_of(lambda: box.update(ref=dedup(texts, method="minhash", threshold=0.5)),
                    repeat)
        ref = box["ref"]
        out["minhash_single_process"] = {"seconds": t, "docs_per_s": n / t,
                                         "removed": ref.n_removed}
        # Quick runs skip the hash shuffle: its aggregator actors cost ~10 s per shuffle here.
        for shuffle in ("sort",) if quick else ("sort", "hash"):
            got: dict[str, Any] = {}

            def run(got: dict = got, shuffle: str = shuffle) -> None:
                got["r"] = minhash_dedup(ds, threshold=0.5, shuffle=shuffle)

            if not quick:
                run()  # warm the workers (imports), as a long job would be
            t = best_of(run, repeat)
            equal = bool(np.array_equal(got["r"].result.duplicate_of, ref.duplicate_of))
            out[f"minhash_ray_{shuffle}"] = {"seconds": t, "docs_per_s": n / t,
                                             "equal_to_single_machine": equal,
                                             "ratio_vs_single_process": (n / t) / (n / out[
                                                 "minhash_single_process"]["seconds"])}
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


# ---------------------------------------------------------------- 4. projection


def projection(worker: dict[str, Any], e2e: dict[str, Any]) -> dict[str, Any]:
    """Hours for PROJECT_DOCS documents on N nodes of CORES_PER_NODE cores, on paper."""
    eff = None
    ray_mh = e2e.get("minhash_ray_hash") if isinstance(e2e.get("minhash_ray_hash"), dict) else None
    if ray_mh and isinstance(worker.get("minhash_signatures"), dict):
        eff = ray_mh["docs_per_s"] / (e2e["workers"] * _minhash_per_worker(worker))
    stages = {}
    if isinstance(worker.get("minhash_signatures"), dict):
        stages["minhash dedup"] = _minhash_per_worker(worker)
    stages["tokenize + pack (per block)"] = 1.0 / (1.0 / worker["tokenize_cl100k"]["per_s"] +
                                                   1.0 / worker["pack_block_bfd"]["per_s"])
    if isinstance(worker.get("embed_packed_minilm"), dict):
        stages["embed (CPU, MiniLM)"] = worker["embed_packed_minilm"]["per_s"]
    assumed = 0.7  # parallel efficiency at scale (shuffle, stragglers, scheduling)
    table = []
    for stage, rate in stages.items():
        for nodes in NODES:
            docs_s = rate * CORES_PER_NODE * nodes * assumed
            table.append({"stage": stage, "nodes": nodes, "docs_per_s": docs_s,
                          "hours_for_corpus": PROJECT_DOCS / docs_s / 3600})
    return {
        "corpus_docs": PROJECT_DOCS, "cores_per_node": CORES_PER_NODE,
        "parallel_efficiency_assumed": assumed,
        "parallel_efficiency_measured_locally": eff,
        "assumptions": [
            f"{CORES_PER_NODE} cores per node, one Ray worker per core, each as fast as one "
            "core of this machine (measured single-threaded here)",
            f"parallel efficiency {assumed} at scale (the measured local figure includes Ray's "
            "fixed start-up costs on a small input, so it is a pessimistic floor)",
            "MinHash: map work (signatures, band keys, bucket pairs) dominates; the shuffles "
            "move 24 bytes x bands per document and at most one signature per involved row and "
            "partition, assumed to stay below the map time (10 Gbit/s per node)",
            "the driver holds about 100 bytes per document (result arrays) plus 16 per "
            "candidate pair (union-find on the driver)",
            "embedding on CPU actors; on GPUs use the GPU texts/s from the embedding "
            "benchmark, one actor per GPU",
        ],
        "table": table,
    }


def _minhash_per_worker(worker: dict[str, Any]) -> float:
    """Docs/s of the whole MinHash map work of one worker (the stages run one after another)."""
    keys = ("minhash_signatures", "minhash_band_keys", "minhash_bucket_pairs")
    return 1.0 / sum(1.0 / worker[k]["per_s"] for k in keys)


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
    lines += ["", f"## Projection to N nodes of {p['cores_per_node']} cores, "
              f"{p['corpus_docs']:,} documents (on paper)", "",
              "| stage | nodes | docs/s | hours |", "|---|---:|---:|---:|"]
    for r in p["table"]:
        lines.append(f"| {r['stage']} | {r['nodes']} | {r['docs_per_s']:,.0f} | "
                     f"{r['hours_for_corpus']:.2f} |")
    lines += ["", "Assumptions:", ""] + [f"- {a}" for a in p["assumptions"]]
    lines += ["", f"Command: `{res['command']}`", ""]
    return "\n".join(lines)


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
    for stage in dict.fromkeys(r["stage"] for r in p["table"]):
        rows = [r for r in p["table"] if r["stage"] == stage]
        b.plot([r["nodes"] for r in rows], [r["hours_for_corpus"] for r in rows], "o-",
               label=stage)
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
                                                   (" --ray" if args.ray else " --no-ray")),
        "machine": machine_info(),
    }
    res["per_worker"] = per_worker(texts, repeat)
    res["memory"] = peak_memory(texts, 1024 if args.quick else 4096)
    res["utilization"] = utilization_by_block(lengths, 2048, [64, 256, 1024, 4096, 16384])
    with_ray = (not args.quick) if args.ray is None else args.ray
    res["end_to_end"] = (end_to_end(texts, args.workers, 1, args.quick) if with_ray  # warm-up first
                         else {"workers": args.workers, "skipped": "quick run (use --ray)"})
    res["projection"] = projection(res["per_worker"], res["end_to_end"])
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
