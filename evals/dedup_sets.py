"""Corpora of the dedup benchmark built from the sources: originals, resamples at scale, the
templated mix, and the gold set of removals."""

from __future__ import annotations

import random

import numpy as np

from ctxkit.deduplication.unionfind import connected_components
from evals.dedup_common import section
from evals.dedup_corpus import (
    exact_jaccard_join,
    inject_near_duplicates,
    synthetic_texts,
)


@section("originals")
def originals(sources: dict[str, list[str]], n: int, rng: random.Random) -> list[str]:
    """Texts of every source but toolformer (benchmarked apart), natural near-duplicates out."""
    pool = [
        t for name, texts in sources.items() if name != "toolformer" for t in texts if t.strip()
    ]
    rng.shuffle(pool)
    pool = pool[:n]
    # Drop every text with a natural near-duplicate (exact Jaccard >= 0.4) so that the
    # injected copies are the whole ground truth.
    pairs, _ = exact_jaccard_join(pool, 0.4)[0.4]
    labels = connected_components(len(pool), pairs)
    return [t for i, t in enumerate(pool) if labels[i] == i]


def gold_removed(truth: np.ndarray) -> set[int]:
    """With keep-first, every member of a ground-truth cluster except the earliest."""
    label = np.where(truth >= 0, truth, np.arange(len(truth)))
    first: dict[int, int] = {}
    for i, lab in enumerate(label.tolist()):
        first.setdefault(lab, i)
    return {i for i, lab in enumerate(label.tolist()) if first[lab] != i}


@section("scale_corpus")
def scale_corpus(n: int, sources: dict[str, list[str]], rng: random.Random) -> list[str]:
    """About n documents for the LSH timing: 90% unrelated, 10% edited copies.

    Unrelated documents draw words from the real texts' unigram distribution and lengths
    from their length distribution, so character 5-gram overlaps between unrelated
    documents look like those between real ones (mostly short common words).
    """
    from collections import Counter

    per_source = max(200, min(5000, n // 10))
    real = [t.split() for texts in sources.values() for t in texts[:per_source] if t.strip()]
    if len(real) < 100:
        real = [t.split() for t in synthetic_texts(2000, rng)]
    freq = Counter(w for ws in real for w in ws)
    vocab = np.array(sorted(freq), dtype=object)
    counts = np.array([freq[w] for w in vocab], dtype=np.float64)
    lengths = np.array([len(ws) for ws in real])
    gen = np.random.default_rng(rng.randrange(2**32))
    n_base = int(n / 1.1)
    doc_len = np.clip(gen.choice(lengths, size=n_base), 5, 400)
    words = vocab[gen.choice(len(vocab), size=int(doc_len.sum()), p=counts / counts.sum())]
    cuts = np.cumsum(doc_len)[:-1]
    base = [" ".join(ws) for ws in np.split(words, cuts)]
    texts, _ = inject_near_duplicates(base, rng, dup_fraction=0.05, max_variants=3)
    return texts[:n]


@section("templated_mix")
def templated_mix(
    n: int, sources: dict[str, list[str]], tool: list[str], rng: random.Random, full: int
) -> list[str]:
    """One resample of ``n`` documents: 90% the LSH-timing corpus, 10% templated toolformer
    records, shuffled together. Each size is drawn afresh with the same shape: the templated
    part is drawn with replacement from a random share ``n / full`` of the records, so a
    record comes back about as often at every size (as templated records repeat in practice)
    and the duplicate share does not grow with ``n`` as it would in prefixes of one corpus."""
    base = scale_corpus(n - n // 10, sources, rng)
    pool = rng.sample(tool, max(1, round(len(tool) * min(1.0, n / full))))
    texts = base + [pool[rng.randrange(len(pool))] for _ in range(n - len(base))]
    rng.shuffle(texts)
    return texts
