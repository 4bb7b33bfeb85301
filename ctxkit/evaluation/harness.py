"""How much of a context budget is wasted, and what each stage would save.

``evaluate(texts, ...)`` runs the pipeline stages on a dataset and returns an
:class:`EvaluateResult`: sections of figures, each figure saying how it was computed. The report
renders itself as JSON (``to_json``), Markdown (``to_markdown``) and PNG plots (``plot``).

Sections:

- ``lengths``: token-length distribution, share of texts over the window, tokens lost if each
  text were truncated to the window.
- ``utilization``: windows, lower bound, utilization and padding for naive padding (one text
  per row), length-grouped batching, and each packing strategy.
- ``redundancy``: exact / near-duplicate shares and the tokens each dedup method would save.
- ``density``: per-text density distributions before and after dedup.
- ``embedding`` (opt-in): packed vs padded throughput and fidelity on a sample.
- ``kv_cache`` (with ``kv_model``): KV-cache memory per batch and over one pass, padded vs
  packed, for a model config (:func:`~ctxkit.kvcache.accounting.kv_cache_bytes`).

Example:
    >>> rep = evaluate(["a short text", "another short text"] * 3, capacity=64,
    ...                sections=("lengths", "utilization"))
    >>> rep.sections["utilization"]["methods"]["bfd"]["windows"]
    1
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.errors import InputError
from ctxkit.evaluation.report import plot_report, render_markdown

__all__ = ["EvaluateResult", "evaluate", "SECTIONS"]

SECTIONS = ("lengths", "utilization", "redundancy", "density", "embedding")
DEFAULT_SECTIONS = ("lengths", "utilization", "redundancy", "density")
PACK_STRATEGIES = ("greedy", "ffd", "bfd", "optimal", "wrapped")


@dataclass
class EvaluateResult:
    """Figures per section; ``notes[section]`` says how each was computed."""

    dataset: dict[str, Any]
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    # per-text arrays the plots draw (e.g. density scores); not part of the JSON
    extra_arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "sections": self.sections,
            "notes": self.notes,
            "timings_s": self.timings,
        }

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=_jsonable)

    def to_markdown(self, plots: Sequence[str] = ()) -> str:
        return render_markdown(self, plots)

    def plot(self, directory: str | Path) -> list[Path]:
        """Write one PNG per section that has something to draw; returns their paths."""
        return plot_report(self, Path(directory))


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {}
    qs = np.percentile(values, [0, 10, 50, 90, 99, 100])
    names = ("min", "p10", "p50", "p90", "p99", "max")
    out = {name: float(q) for name, q in zip(names, qs, strict=True)}
    out["mean"] = float(values.mean())
    return out


def lengths_section(lengths: np.ndarray, capacity: int) -> dict[str, Any]:
    over = lengths > capacity
    return {
        "texts": int(lengths.size),
        "tokens": int(lengths.sum()),
        "quantiles": _quantiles(lengths),
        "over_window": int(over.sum()),
        "over_window_share": float(over.mean()) if lengths.size else 0.0,
        "tokens_lost_to_truncation": int((lengths[over] - capacity).sum()),
        "empty": int((lengths == 0).sum()),
    }


def utilization_section(
    lengths: np.ndarray, capacity: int, strategies: Sequence[str], seed: int | None
) -> dict[str, Any]:
    from ctxkit.packing.batching import length_grouped_batches
    from ctxkit.packing.plan import pack_lengths

    fitted = np.minimum(lengths[lengths > 0], capacity)  # truncate, as a trainer would
    real = int(fitted.sum())
    methods: dict[str, dict[str, Any]] = {}

    def row(windows: int, slots: int, seconds: float) -> dict[str, Any]:
        return {
            "windows": int(windows),
            "utilization": real / slots if slots else 0.0,
            "padding_tokens": int(slots - real),
            "seconds": seconds,
        }

    methods["naive padding"] = row(fitted.size, fitted.size * capacity, 0.0)
    t0 = time.perf_counter()
    grouped = length_grouped_batches(fitted, batch_tokens=capacity)
    methods["length-grouped batches"] = row(
        len(grouped.batches), grouped.padded_tokens, time.perf_counter() - t0
    )
    for strategy in strategies:
        t0 = time.perf_counter()
        plan = pack_lengths(fitted, capacity=capacity, strategy=strategy, seed=seed)
        methods[strategy] = row(plan.n_bins, plan.n_bins * capacity, time.perf_counter() - t0)
    return {
        "capacity": capacity,
        "lower_bound": math.ceil(real / capacity) if real else 0,
        "real_tokens": real,
        "methods": methods,
    }


def kv_cache_section(lengths: np.ndarray, capacity: int, shape: Any, dtype: str,
                     batch_size: int, seed: int | None) -> dict[str, Any]:
    """KV-cache (and, in proportion, activation) memory of batches of ``batch_size`` rows:
    padded rows (each text its own row, as long as the window or as the batch's longest text,
    batches in input order) against packed rows (bfd windows, all ``capacity`` long)."""
    from ctxkit.kvcache.accounting import kv_bytes_per_sequence, kv_cache_report
    from ctxkit.packing.plan import pack_lengths

    fitted = np.minimum(lengths[lengths > 0], capacity)  # as the utilization section
    n, real = int(fitted.size), int(fitted.sum())
    starts = np.arange(0, n, batch_size)
    longest = np.maximum.reduceat(fitted, starts) if n else np.zeros(0, np.int64)
    rows_of = np.diff(np.append(starts, n))
    windows = pack_lengths(fitted, capacity=capacity, strategy="bfd", seed=seed).n_bins
    full = np.minimum(np.arange(0, windows, batch_size) + batch_size, windows) \
        - np.arange(0, windows, batch_size)
    layouts = {  # (rows per batch, row length per batch, real tokens per batch)
        "padded to window": (rows_of, np.full(rows_of.size, capacity)),
        "padded to longest": (rows_of, longest),
        "packed (bfd)": (full, np.full(full.size, capacity)),
    }
    methods: dict[str, dict[str, Any]] = {}
    for name, (rows, length) in layouts.items():
        per_batch = rows * kv_bytes_per_sequence(shape, length, dtype=dtype)
        slots = int((rows * length).sum())
        methods[name] = {
            "batches": int(rows.size),
            "real_tokens_per_batch": real / rows.size if rows.size else 0.0,
            "mean_kv_per_batch_mib": float(per_batch.mean()) / 2**20 if rows.size else 0.0,
            "peak_kv_per_batch_mib": float(per_batch.max()) / 2**20 if rows.size else 0.0,
            "kv_over_pass_gib": float(per_batch.sum()) / 2**30,
            "real_token_share": real / slots if slots else 0.0,
        }
    padded = methods["padded to longest"]["kv_over_pass_gib"]
    one = kv_cache_report(shape, 1, dtype=dtype)
    return {
        "model": shape.name, "dtype": one.dtype, "per_token_bytes": one.per_token_bytes,
        "formula": one.formula(), "batch_rows": batch_size, "methods": methods,
        "packed_over_padded_pass": methods["packed (bfd)"]["kv_over_pass_gib"] / padded
        if padded else 1.0,
    }


def kv_stages(lengths: np.ndarray, keep_mask: np.ndarray | None, shape: Any, dtype: str,
              sample: tuple[np.ndarray, np.ndarray] | None) -> dict[str, dict[str, Any]]:
    """KV cache of holding every text as one sequence: all texts, the dedup survivors, and the
    compression sample before and after, each with the share it saves."""
    from ctxkit.kvcache.accounting import kv_bytes_per_sequence

    def row(counts: np.ndarray, base: float | None = None) -> dict[str, Any]:
        kv = float(kv_bytes_per_sequence(shape, counts, dtype=dtype).sum())
        out = {"texts": int(counts.size), "tokens": int(counts.sum()), "kv_gib": kv / 2**30}
        if base is not None:
            out["kv_saved_share"] = 1 - kv / base if base else 0.0
        return out

    stages = {"all texts": row(lengths)}
    if keep_mask is not None:
        stages["after dedup"] = row(lengths[keep_mask], stages["all texts"]["kv_gib"] * 2**30)
    if sample is not None:
        before = row(sample[0])
        stages["compression sample"] = before
        stages["compression sample at 1/2"] = row(sample[1], before["kv_gib"] * 2**30)
    return stages


def redundancy_section(
    texts: Sequence[str], lengths: np.ndarray, methods: Sequence[str], threshold: float | None,
    seed: int | None,
) -> tuple[dict[str, Any], np.ndarray]:
    """Dedup figures per cumulative method chain; also returns the final keep mask."""
    from ctxkit.deduplication.pipeline import dedup

    total_tokens = int(lengths.sum())
    out: dict[str, dict[str, Any]] = {}
    keep_mask = np.ones(len(texts), dtype=bool)
    for k in range(1, len(methods) + 1):
        chain = list(methods[:k])
        t0 = time.perf_counter()
        options = {"seed": seed} if "minhash" in chain and seed is not None else {}
        # exact dedup takes no threshold (dedup rejects one given to it alone)
        res = dedup(texts, method=chain, threshold=threshold if set(chain) - {"exact"} else None,
                    **options)
        removed = np.flatnonzero(res.duplicate_of >= 0)
        saved = int(lengths[removed].sum())
        out[" + ".join(chain)] = {
            "removed": int(removed.size),
            "removed_share": removed.size / len(texts),
            "tokens_saved": saved,
            "tokens_saved_share": saved / total_tokens if total_tokens else 0.0,
            "clusters": len(res.clusters),
            "largest_cluster": max((len(c) for c in res.clusters), default=0),
            "seconds": time.perf_counter() - t0,
        }
        keep_mask = res.duplicate_of < 0
    from ctxkit.deduplication.pipeline import DEFAULT_THRESHOLDS

    used = {m: threshold if threshold is not None else DEFAULT_THRESHOLDS[m]
            for m in methods if m in DEFAULT_THRESHOLDS}
    return {"methods": out, "thresholds": used}, keep_mask


_DENSITY_METRICS = ("score", "self_information", "distinct_token_ratio", "distinct_ngram_ratio",
                    "compression_ratio", "entropy")


def density_section(
    texts: Sequence[str], tok: Any, keep_mask: np.ndarray, compress_sample: int, seed: int | None,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Density distributions for all texts, the dedup survivors, and compressed texts."""
    from ctxkit.compression.density import text_densities
    from ctxkit.compression.text.pipeline import compress

    # per-text metrics only: the redundancy section has already done the dedup pass
    per_text = text_densities(texts, tokenizer=tok)

    def column(rows: Sequence[Any], metric: str) -> np.ndarray:
        values = [getattr(r, metric) for r in rows]
        return np.array([v for v in values if v is not None], dtype=np.float64)

    arrays = {"score_before": column(per_text, "score")}
    groups: dict[str, Sequence[Any]] = {
        "all texts": per_text,
        "after dedup": [r for r, keep in zip(per_text, keep_mask) if keep],
    }
    arrays["score_after"] = column(groups["after dedup"], "score")
    compressed: dict[str, Any] = {}
    if compress_sample > 0:
        rng = np.random.default_rng(seed)
        candidates = [i for i, r in enumerate(per_text) if r.tokens >= 16 and keep_mask[i]]
        chosen = sorted(rng.permutation(candidates)[:compress_sample].tolist())
        if chosen:
            results = [compress(texts[i], budget=max(1, per_text[i].tokens // 2), tokenizer=tok)
                       for i in chosen]
            after = text_densities([r.text for r in results], tokenizer=tok)
            groups["sample, before compression"] = [per_text[i] for i in chosen]
            groups["sample, compressed to 1/2"] = after
            # per-text token counts, for the KV-cache section's before/after figures
            arrays["sample_tokens_before"] = np.array([per_text[i].tokens for i in chosen])
            arrays["sample_tokens_after"] = np.array([r.compressed_tokens for r in results])
            compressed = {
                "sample": len(chosen),
                "requested_ratio": 0.5,
                "achieved_ratio": float(np.mean([r.ratio for r in results])),
                "overshoot_tokens": int(sum(max(0, r.compressed_tokens - r.budget)
                                            for r in results)),
            }
    methods = {
        name: {metric: float(np.median(col)) if (col := column(rows, metric)).size else None
               for metric in _DENSITY_METRICS} | {"texts": len(rows)}
        for name, rows in groups.items()
    }
    return {"medians": methods, "compression": compressed}, arrays


def embedding_section(texts: Sequence[str], sample: int, seed: int | None) -> dict[str, Any]:
    """Packed vs padded (sentence-transformers) embedding of a seeded sample of texts."""
    from ctxkit.embedding.encoder import PackedEncoder

    rng = np.random.default_rng(seed)
    chosen = sorted(rng.permutation(len(texts))[:sample].tolist())
    batch = [texts[i] for i in chosen]
    encoder = PackedEncoder()
    reference_model = encoder.backbone.model  # the same SentenceTransformer, unpacked
    warm = batch[: min(8, len(batch))]
    encoder.encode(warm)
    reference_model.encode(warm, batch_size=32)
    t0 = time.perf_counter()
    reference = reference_model.encode(batch, batch_size=32, convert_to_numpy=True)
    t_reference = time.perf_counter() - t0
    t0 = time.perf_counter()
    packed = encoder.encode(batch)
    t_packed = time.perf_counter() - t0
    stats = encoder.last_stats
    ref = reference / np.maximum(np.linalg.norm(reference, axis=1, keepdims=True), 1e-12)
    got = packed / np.maximum(np.linalg.norm(packed, axis=1, keepdims=True), 1e-12)
    cosine = (ref * got).sum(axis=1)
    return {
        "sample": len(batch),
        "device": str(encoder.device),
        "methods": {
            "SentenceTransformer.encode (batch 32)": {
                "seconds": t_reference, "texts_per_s": len(batch) / t_reference,
            },
            "ctxkit PackedEncoder": {
                "seconds": t_packed, "texts_per_s": len(batch) / t_packed,
                "row_utilization": stats.utilization if stats else None,
            },
        },
        "speedup": t_reference / t_packed if t_packed else None,
        "min_cosine": float(cosine.min()),
        "mean_cosine": float(cosine.mean()),
    }


def evaluate(
    texts: Sequence[str],
    *,
    capacity: int = 2048,
    tokenizer: Any = "cl100k_base",
    sections: Sequence[str] = DEFAULT_SECTIONS,
    strategies: Sequence[str] = PACK_STRATEGIES,
    dedup_methods: Sequence[str] = ("exact", "minhash"),
    dedup_threshold: float | None = None,
    embed_sample: int = 256,
    compress_sample: int = 100,
    seed: int | None = 0,
    name: str = "dataset",
    content: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
    kv_model: Any = None,
    kv_dtype: str = "bfloat16",
    kv_batch_size: int = 8,
) -> EvaluateResult:
    """Run the pipeline stages on ``texts`` and report what each would save.

    ``content`` (one per text) is what the redundancy and density sections read when the
    texts carry shared boilerplate, such as a prompt template; lengths and packing always
    use ``texts``.

    ``kv_model`` (a preset name, ``config.json``, model directory or config dict) adds the
    ``kv_cache`` section: KV-cache memory per batch of ``kv_batch_size`` rows and over one pass,
    padded vs packed, in ``kv_dtype``.

    Example:
        >>> rep = evaluate(["x y z"] * 4, capacity=16, sections=("lengths",))
        >>> rep.sections["lengths"]["tokens"]
        12
    """
    from ctxkit.io.tokenizers import resolve_tokenizer

    texts = validate.texts(texts)
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise InputError(f"sections: unknown section(s) {sorted(unknown)}; choose from "
                         f"{SECTIONS}")
    validate.positive_int(capacity, "capacity")
    if not texts:
        raise InputError("evaluate needs at least one text")
    content = texts if content is None else list(content)
    if len(content) != len(texts):
        raise InputError(f"content needs one entry per text ({len(texts)}), got {len(content)}")
    kv_shape = None
    if kv_model is not None:
        from ctxkit.kvcache.accounting import kv_cache_bytes
        from ctxkit.kvcache.shape import kv_cache_shape

        kv_shape = kv_cache_shape(kv_model)
        kv_cache_bytes(kv_shape, 0, dtype=kv_dtype)  # a bad dtype fails before the work
        if not isinstance(kv_batch_size, int) or kv_batch_size <= 0:
            raise InputError(f"kv_batch_size must be a positive integer, got {kv_batch_size!r}")
    step = progress or (lambda _msg: None)
    tok = resolve_tokenizer(tokenizer)
    report = EvaluateResult(
        dataset={"name": name, "texts": len(texts), "tokenizer": getattr(tok, "name", str(tok)),
                 "capacity": capacity, "seed": seed},
    )
    t0 = time.perf_counter()
    step("tokenizing")
    lengths = np.fromiter((len(ids) for ids in tok.encode_batch(texts)), np.int64, len(texts))
    report.lengths = lengths
    report.timings["tokenize"] = time.perf_counter() - t0

    if "lengths" in sections:
        report.sections["lengths"] = lengths_section(lengths, capacity)
        report.notes["lengths"] = (
            f"Token counts under {report.dataset['tokenizer']}, no special tokens added. "
            f"'tokens lost to truncation' sums the tokens beyond {capacity} over texts longer "
            "than the window."
        )
    if "utilization" in sections:
        step("packing")
        t0 = time.perf_counter()
        report.sections["utilization"] = utilization_section(lengths, capacity, strategies, seed)
        report.timings["utilization"] = time.perf_counter() - t0
        report.notes["utilization"] = (
            "Texts longer than the window are truncated to it and empty texts are left out. "
            "Utilization = real tokens / (windows x capacity). Naive padding puts one text per "
            "window; length-grouped batching sorts by length and fills batches of at most "
            f"{capacity} padded tokens; packing strategies place whole texts into windows. "
            "Lower bound = ceil(real tokens / capacity)."
        )
    if kv_shape is not None:
        step("sizing the KV cache")
        t0 = time.perf_counter()
        report.sections["kv_cache"] = kv_cache_section(lengths, capacity, kv_shape, kv_dtype,
                                                       kv_batch_size, seed)
        report.timings["kv_cache"] = time.perf_counter() - t0
        report.notes["kv_cache"] = (
            f"KV-cache bytes per token: {report.sections['kv_cache']['formula']}. Batches hold "
            f"{kv_batch_size} rows; a row's cache is its length's (capped at the window on "
            "sliding-window layers). 'padded to window': one text per row, every row "
            f"{capacity} tokens; 'padded to longest': one text per row, in input "
            "order, rows as long as the longest text of their batch; 'packed (bfd)': the bfd "
            f"packing plan's windows, every row {capacity} tokens. Texts are truncated to the "
            "window and empty ones left out, as for utilization. Activations of a forward pass "
            "scale with the same token slots, so the padded/packed ratios hold for them; "
            "weights and activations are not in the bytes. Stages: the KV cache of holding "
            "every text as one sequence (not truncated; window layers capped per text): all "
            "texts, the survivors of the redundancy section, and the density section's "
            "compression sample before and after ctxkit.compress at half its tokens."
        )
    keep_mask = np.ones(len(texts), dtype=bool)
    keep_known = False
    if "redundancy" in sections:
        step("deduplicating")
        t0 = time.perf_counter()
        red, keep_mask = redundancy_section(content, lengths, dedup_methods, dedup_threshold, seed)
        keep_known = True
        report.sections["redundancy"] = red
        report.timings["redundancy"] = time.perf_counter() - t0
        report.notes["redundancy"] = (
            "Each row runs the dedup stages named, in order, each on the survivors of the last "
            "(ctxkit.dedup). exact: identical after Unicode NFKC, case and whitespace folding; "
            "minhash: Jaccard of character 5-gram sets at or above the threshold, verified "
            "pairs, transitive clusters; semantic: cosine of all-MiniLM-L6-v2 embeddings "
            "(thresholds in the table). Removed texts keep their cluster's first member; "
            "tokens saved are the removed texts' token counts."
        )
    if "density" in sections:
        step("scoring density")
        t0 = time.perf_counter()
        dens, arrays = density_section(content, tok, keep_mask, compress_sample, seed)
        report.sections["density"] = dens
        report.extra_arrays.update(arrays)
        report.timings["density"] = time.perf_counter() - t0
        report.notes["density"] = (
            "Medians per group of ctxkit.density's per-text metrics: score = the composite "
            "utility per token (formula in ctxkit.density), self-information in bits per token "
            "under the idf scorer, distinct token and n-gram ratios, zlib compression ratio and "
            "unigram entropy. 'after dedup' keeps the survivors of the redundancy section; the "
            f"compressed sample ({compress_sample} texts of at least 16 tokens, seeded) is each "
            "text passed through ctxkit.compress at half its token count."
        )
    if kv_shape is not None:
        arrays = report.extra_arrays
        sample = (arrays["sample_tokens_before"], arrays["sample_tokens_after"]) \
            if "sample_tokens_before" in arrays else None
        report.sections["kv_cache"]["stages"] = kv_stages(
            lengths, keep_mask if keep_known else None, kv_shape, kv_dtype, sample)
    if "embedding" in sections:
        step("embedding a sample")
        t0 = time.perf_counter()
        report.sections["embedding"] = embedding_section(texts, embed_sample, seed)
        report.timings["embedding"] = time.perf_counter() - t0
        report.notes["embedding"] = (
            f"A seeded sample of up to {embed_sample} texts embedded with the bundled "
            "all-MiniLM-L6-v2 twice, after one warm-up each: SentenceTransformer.encode with "
            "batch_size=32 (padded batches) and ctxkit's PackedEncoder (packed rows, "
            "block-diagonal attention). Cosine compares each text's two vectors; row "
            "utilization = real tokens / computed token slots."
        )
    return report
