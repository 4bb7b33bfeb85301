"""Packed classification heads vs the calls users make: texts/s and logit fidelity.

Run from the repository root::

    python -m evals.classify                   # 250 texts per set, 3 alternating rounds
    python -m evals.classify --quick           # a few seconds, for CI smoke tests
    python -m evals.classify --n 250 --repeats 5 --threads 2 --out evals/results

Models: a MiniLM-sized BERT (6 layers, hidden 384, 12 heads, the bundled all-MiniLM-L6-v2
tokenizer, inputs truncated to 256 tokens) with random weights, as a 2-label sequence
classifier and as a 1-label ``CrossEncoder``. Throughput does not depend on the weights
(the same matrix multiplies run whatever their values), so random weights measure what a
trained model of this shape would do, with nothing to download.

Side by side in one process, methods alternating each round (same ``torch.set_num_threads``):

- classifier on the embedding benchmark's ``chat``, ``codealpaca`` and ``mix`` texts:
  ``PackedClassifier.predict`` vs the transformers loop users write (the tokenizer padding
  batches of 32, ``model(**batch).logits``), the same loop on texts sorted by length, and
  the ``text-classification`` pipeline (``batch_size=32``);
- cross-encoder on (question, passage) pairs: NQ-open questions with their 20 retrieved
  passages (``nq``, the reranking workload), and NQ questions with the ``mix`` texts
  (``nq_mix``, documents of uneven length): ``PackedClassifier.predict`` vs
  ``CrossEncoder.predict(pairs, batch_size=32)``;
- for the target, the embedding gain on the same texts: ``PackedEncoder.encode`` vs
  ``SentenceTransformer.encode(batch_size=32)`` (bundled all-MiniLM-L6-v2).

Writes ``classify.json`` and ``classify.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

from evals._common import md_table, write_results
from evals.embedding import load_sets

NAME = "classify"
MAX_LEN = 256


def _save_models(root: Path, quick: bool) -> tuple[Path, Path]:
    """A MiniLM-sized random classifier (2 labels) and cross-encoder (1 label) under ``root``."""
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from ctxkit.io.tokenizers import minilm_path

    tok = AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    tok.model_max_length = MAX_LEN
    shape = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
             "intermediate_size": 1536}
    if quick:  # a smoke test: small enough to build and save in a second
        shape = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "intermediate_size": 128}
    out = []
    for name, labels in (("classifier", {0: "NEGATIVE", 1: "POSITIVE"}), ("cross-encoder", None)):
        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=tok.vocab_size, max_position_embeddings=512,
                         num_labels=len(labels) if labels else 1, **shape,
                         **({"id2label": labels} if labels else {}))
        path = root / name
        BertForSequenceClassification(cfg).eval().save_pretrained(path)
        tok.save_pretrained(path)
        out.append(path)
    ce = CrossEncoder(str(out[1]), device="cpu", local_files_only=True, max_length=MAX_LEN)
    ce.save(str(out[1]))  # the sentence-transformers layout, as rerankers ship
    return out[0], out[1]


def load_pairs(n: int, mix: list[str], seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    """``nq``: NQ-open (question, retrieved passage) pairs; ``nq_mix``: NQ questions with
    texts of uneven length. Generated questions when the shared benchmark data is absent."""
    from evals._common import data_dir
    from evals.public_bench import bench_dir, load_nq

    rng = np.random.default_rng(seed)
    bench = bench_dir(data_dir())
    if bench is not None:
        cases = load_nq(bench, n=max(1, n // 20 + 1))
        nq = [(c.question, p) for c in cases for p in c.passages][:n]
        questions = [c.question for c in cases]
    else:  # CI without the shared data: short generated questions, generated documents
        questions = [f"what does item {i} do?" for i in range(max(1, n // 20 + 1))]
        nq = [(questions[i % len(questions)], mix[i % len(mix)]) for i in range(n)]
    docs = [mix[i] for i in rng.permutation(len(mix))[:n]]
    nq_mix = [(questions[i % len(questions)], d) for i, d in enumerate(docs)]
    return {"nq": nq, "nq_mix": nq_mix}


def hf_loop(model, tokenizer, batch_size: int = 32, sort: bool = False
            ) -> Callable[[list], np.ndarray]:
    """What users write: tokenizer padding each batch of 32, the model's logits; ``sort``
    batches texts by length first (longest first, by characters, as sentence-transformers
    does), the careful user's version."""
    import torch

    def run(texts: list) -> np.ndarray:
        order = np.argsort([-len(t) for t in texts], kind="stable") if sort \
            else np.arange(len(texts))
        out = []
        with torch.inference_mode():
            for s in range(0, len(texts), batch_size):
                enc = tokenizer([texts[i] for i in order[s:s + batch_size]], padding=True,
                                truncation=True, return_tensors="pt")
                out.append(model(**enc).logits.float().numpy())
        logits = np.concatenate(out)
        logits[order] = logits.copy()
        return logits

    return run


def pipeline_call(model, tokenizer, batch_size: int = 32) -> Callable[[list], np.ndarray]:
    """transformers' text-classification pipeline, raw logits out (``function_to_apply``)."""
    from transformers import pipeline

    pipe = pipeline("text-classification", model=model, tokenizer=tokenizer, device="cpu",
                    top_k=None, function_to_apply="none", truncation=True)
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]

    def run(texts: list) -> np.ndarray:
        res = pipe(texts, batch_size=batch_size)
        return np.array([[next(d["score"] for d in r if d["label"] == lab) for lab in labels]
                         for r in res], dtype=np.float32)

    return run


def time_methods(methods: dict[str, Callable], items: list, repeats: int, base: str
                 ) -> tuple[dict, dict[str, np.ndarray]]:
    """Alternating rounds; texts/s (median), ratios to ``base`` (median of per-round ratios),
    and each method's last output."""
    for fn in methods.values():  # warm-up (allocator, thread pools)
        fn(items[:4])
    times: dict[str, list[float]] = {m: [] for m in methods}
    outputs = {}
    for r in range(repeats):
        for m in (list(methods) if r % 2 == 0 else list(reversed(methods))):
            t0 = time.perf_counter()
            outputs[m] = methods[m](items)
            times[m].append(time.perf_counter() - t0)
    return {
        "texts_per_s": {m: len(items) / statistics.median(t) for m, t in times.items()},
        "speedup": {m: statistics.median(b / x for b, x in zip(times[base], t))
                    for m, t in times.items()},
        "seconds": times,
    }, outputs


def measure(methods: dict[str, Callable], items: list, repeats: int, base: str,
            packed) -> dict:
    """:func:`time_methods`, plus the packed layout's figures and the largest logit
    difference between the packed and the ``base`` outputs."""
    res, outs = time_methods(methods, items, repeats, base)
    packed.predict(items)
    res["utilization"] = packed.last_stats.utilization
    res["mean_tokens"] = packed.last_stats.tokens / len(items)
    got, ref = outs["packed"], outs[base]
    res["max_abs_logit_diff"] = float(np.abs(got.reshape(ref.shape) - ref).max())
    return res


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few seconds (CI smoke test)")
    ap.add_argument("--n", type=int, default=250, help="texts (or pairs) per set")
    ap.add_argument("--repeats", type=int, default=3, help="alternating timing rounds")
    ap.add_argument("--threads", type=int, default=2, help="torch threads, every method")
    ap.add_argument("--no-pipeline", action="store_true",
                    help="leave out the text-classification pipeline")
    ap.add_argument("--out", type=Path, default=Path("evals/results"))
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.repeats = 8, 1

    import torch
    from sentence_transformers import CrossEncoder, SentenceTransformer
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ctxkit.embedding.classifier import PackedClassifier
    from ctxkit.embedding.encoder import PackedEncoder
    from ctxkit.io.tokenizers import minilm_path

    torch.set_num_threads(args.threads)
    sets, source = load_sets(args.n)
    pair_sets = load_pairs(args.n, sets["mix"])
    results: dict[str, dict] = {"classifier": {}, "cross_encoder": {}, "embedding": {}}
    fidelity: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ctxkit-classify-") as tmp:
        clf_dir, ce_dir = _save_models(Path(tmp), args.quick)
        model = AutoModelForSequenceClassification.from_pretrained(
            clf_dir, local_files_only=True).eval()
        tok = AutoTokenizer.from_pretrained(clf_dir, local_files_only=True)
        packed = PackedClassifier(clf_dir, device="cpu")
        methods = {"hf_bs32": hf_loop(model, tok), "hf_sorted_bs32": hf_loop(model, tok, sort=True),
                   "packed": packed.predict}
        if not args.no_pipeline:
            methods["pipeline_bs32"] = pipeline_call(model, tok)
        st = SentenceTransformer(str(minilm_path()), device="cpu")
        enc = PackedEncoder(device="cpu")
        emb_methods = {"st_bs32": lambda t: st.encode(t, batch_size=32), "packed": enc.encode}
        for name, texts in sets.items():
            results["classifier"][name] = res = measure(methods, texts, args.repeats,
                                                        "hf_bs32", packed)
            emb, _ = time_methods(emb_methods, texts, args.repeats, "st_bs32")
            results["embedding"][name] = emb
            print(f"classifier {name}: {res['speedup']['packed']:.2f}x; embedding "
                  f"{emb['speedup']['packed']:.2f}x", flush=True)
        ce = CrossEncoder(str(ce_dir), device="cpu", local_files_only=True)
        packed_ce = PackedClassifier(ce_dir, device="cpu")
        ce_methods = {
            "ce_bs32": lambda p: ce.predict(p, batch_size=32,
                                            activation_fn=torch.nn.Identity()),
            "packed": packed_ce.predict,
        }
        for name, pairs in pair_sets.items():
            results["cross_encoder"][name] = res = measure(ce_methods, pairs, args.repeats,
                                                           "ce_bs32", packed_ce)
            # the target on these very texts: each pair embedded as one text
            emb, _ = time_methods(emb_methods, [f"{q} {d}" for q, d in pairs], args.repeats,
                                  "st_bs32")
            results["embedding"][f"pairs {name}"] = emb
            print(f"cross-encoder {name}: {res['speedup']['packed']:.2f}x; embedding "
                  f"{emb['speedup']['packed']:.2f}x", flush=True)
    for part in ("classifier", "cross_encoder"):
        fidelity[part] = max(r["max_abs_logit_diff"] for r in results[part].values())
    report = {"benchmark": NAME, "data": source, "threads": args.threads,
              "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
              "args": {k: str(v) for k, v in vars(args).items()},
              "model": ("random BERT, MiniLM-L6 shape (6 layers, hidden 384), all-MiniLM-L6-v2 "
                        f"tokenizer, max length {MAX_LEN}" if not args.quick else
                        "random BERT, 2 layers, hidden 64 (quick)"),
              "fidelity_max_abs_logit_diff": fidelity, "results": results}
    write_results(args.out, NAME, report, markdown(report))
    return report


LABELS = {
    "hf_bs32": "transformers: tokenizer(padding) + model, batches of 32",
    "hf_sorted_bs32": "the same, texts sorted by length first",
    "pipeline_bs32": "transformers text-classification pipeline, batch_size=32",
    "ce_bs32": "CrossEncoder.predict(batch_size=32)",
    "st_bs32": "SentenceTransformer.encode(batch_size=32)",
}


def _table(res: dict, packed_label: str) -> str:
    names = list(res)
    methods = [m for m in res[names[0]]["texts_per_s"] if m != "packed"] + ["packed"]
    rows = [[LABELS.get(m, packed_label) if m != "packed" else packed_label]
            + [f"{res[n]['texts_per_s'][m]:.1f} ({res[n]['speedup'][m]:.2f}x)" for n in names]
            for m in methods]
    if "mean_tokens" in res[names[0]]:
        rows.append(["mean tokens / packed utilization"]
                    + [f"{res[n]['mean_tokens']:.0f} / {res[n]['utilization']:.1%}"
                       for n in names])
    return md_table(["method"] + [f"{n}: texts/s (x)" for n in names], rows)


def markdown(report: dict) -> str:
    res = report["results"]
    fid = report["fidelity_max_abs_logit_diff"]
    emb = res["embedding"]
    clf = res["classifier"]
    def vs(part: str, name: str, base: str) -> float:
        sec = res[part][name]["seconds"]
        return statistics.median(b / x for b, x in zip(sec[base], sec["packed"]))

    sorted_gain = ", ".join(f"{n} {vs('classifier', n, 'hf_sorted_bs32'):.2f}x" for n in clf
                            if "hf_sorted_bs32" in clf[n]["seconds"])
    load = report.get("load_average")
    ce = res["cross_encoder"]
    gains = " | ".join(
        [f"{n}: classifier {clf[n]['speedup']['packed']:.2f}x vs embedding "
         f"{emb[n]['speedup']['packed']:.2f}x" for n in clf]
        + [f"{n} pairs: cross-encoder {ce[n]['speedup']['packed']:.2f}x vs embedding "
           f"{emb[f'pairs {n}']['speedup']['packed']:.2f}x" for n in ce
           if f"pairs {n}" in emb])
    return "\n".join([
        "# Packed classification heads",
        "",
        f"Model: {report['model']}; random weights (throughput does not depend on them); "
        f"{report['threads']} torch threads; data: {report['data']}. Texts/s are medians, "
        "ratios the median of per-round ratios to the first row (methods alternate each "
        "round).",
        "",
        "#### Sequence classifier (2 labels)",
        "",
        _table(clf, "ctxkit PackedClassifier.predict"),
        "#### Cross-encoder (question, passage) pairs",
        "",
        _table(res["cross_encoder"], "ctxkit PackedClassifier.predict (pairs)"),
        "#### Target: the embedding gain on the same texts (pairs: query and passage as "
        "one text)",
        "",
        _table(emb, "ctxkit PackedEncoder.encode"),
        f"Packed vs embedding gain: {gains}.",
        "",
        *([f"PackedClassifier vs the length-sorted loop (median of per-round ratios): "
           f"{sorted_gain}.", ""] if sorted_gain else []),
        *([f"Load average at the end of the run: {', '.join(f'{x:.1f}' for x in load)} "
           "(other jobs shared the machine; alternating rounds absorb part of it).", ""]
          if load else []),
        f"Max abs logit difference to the unpacked call: classifier {fid['classifier']:.1e}, "
        f"cross-encoder {fid['cross_encoder']:.1e} (fp32).",
        "",
    ])


if __name__ == "__main__":
    main()
