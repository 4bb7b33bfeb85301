"""Information density: how much each token of a text, or of a corpus, is worth keeping.

Per text (:class:`TextDensity`):

- ``tokens``: length under the tokenizer;
- ``distinct_token_ratio`` and ``distinct_ngram_ratio`` (token n-grams, n=3 by default):
  share of distinct items, 1.0 when nothing repeats;
- ``compression_ratio``: zlib (level 9) bytes / UTF-8 bytes; low means repetitive;
- ``entropy``: Shannon entropy of the text's token-id unigram distribution, bits per token;
- ``self_information``: mean bits per token under a scorer (``idf`` by default: -log2 of each
  word's reference frequency, summed over the text's words and divided by its tokens);
- ``score``: the composite density, *non-repeated information per token*::

      score = self_information * distinct_ngram_ratio        [bits / token]

  Self-information measures how surprising the words are; the distinct n-gram ratio discounts
  the part that only repeats what the text already said (a paragraph pasted twice halves it).
  It is the "utility per token" that compression greedily maximises.

Per corpus (``density(list_of_texts)``, a :class:`DensityResult`): the per-text metrics as
distributions (``summary()``), plus redundancy against the rest of the corpus: which texts are
near-duplicates (Jaccard of word 3-gram shingles >= ``threshold``) of an earlier one,
their share, the tokens dedup would save, the top redundant clusters, and with
``semantic=True`` each text's semantic novelty ``1 - max cosine`` to any other text (bundled
all-MiniLM-L6-v2).

Example:
    >>> rep = density("The cat sat on the mat. The cat sat on the mat.", scorer=None)
    >>> rep.texts[0].tokens, round(rep.texts[0].distinct_ngram_ratio, 2)
    (14, 0.67)
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.compression.options import DensityOptions
from ctxkit.compression.scoring.base import Scorer
from ctxkit.compression.scoring.registry import get_scorer
from ctxkit.deduplication.near import near_duplicates
from ctxkit.io.tokenizers import Tokenizer, resolve_tokenizer
from ctxkit.options import bad_option, takes_options

__all__ = ["DensityResult", "TextDensity", "density", "near_duplicates", "text_densities"]


@dataclass
class TextDensity:
    """Density metrics of one text (see the module docstring for definitions)."""

    tokens: int
    distinct_token_ratio: float
    distinct_ngram_ratio: float
    compression_ratio: float
    entropy: float
    self_information: float | None
    score: float | None


@dataclass
class DensityResult:
    """Density of one text or a corpus; corpus fields are trivial for a single text."""

    texts: list[TextDensity]
    tokenizer: str
    scorer: str | None
    duplicate_of: list[int] = field(default_factory=list)  # -1: not a near-duplicate
    near_duplicate_share: float = 0.0
    dedup_saved_tokens: int = 0
    clusters: list[dict[str, Any]] = field(default_factory=list)  # top redundant clusters
    novelty: list[float] | None = None  # semantic novelty, when asked

    @property
    def total_tokens(self) -> int:
        return sum(t.tokens for t in self.texts)

    def summary(self) -> dict[str, dict[str, float]]:
        """Mean and percentiles (p10, p50, p90) of every per-text metric."""
        out: dict[str, dict[str, float]] = {}
        for name in TextDensity.__dataclass_fields__:
            values = [getattr(t, name) for t in self.texts]
            values = np.array([v for v in values if v is not None], dtype=np.float64)
            if values.size == 0:
                continue
            p10, p50, p90 = np.percentile(values, [10, 50, 90])
            out[name] = {"mean": float(values.mean()), "p10": float(p10), "p50": float(p50),
                         "p90": float(p90)}
        if self.novelty is not None and self.novelty:
            arr = np.array(self.novelty)
            out["novelty"] = {"mean": float(arr.mean()), **{
                f"p{q}": float(np.percentile(arr, q)) for q in (10, 50, 90)}}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokenizer": self.tokenizer,
            "scorer": self.scorer,
            "n_texts": len(self.texts),
            "total_tokens": self.total_tokens,
            "near_duplicate_share": self.near_duplicate_share,
            "dedup_saved_tokens": self.dedup_saved_tokens,
            "summary": self.summary(),
            "clusters": self.clusters,
            "texts": [asdict(t) | {"duplicate_of": d} for t, d in
                      zip(self.texts, self.duplicate_of or [-1] * len(self.texts))],
            "novelty": self.novelty,
        }


def _distinct_ratio(ids: np.ndarray, n: int) -> float:
    if ids.size < n:
        return 1.0 if ids.size else 0.0
    grams = np.lib.stride_tricks.sliding_window_view(ids, n)
    return len(np.unique(grams, axis=0)) / len(grams)


def _entropy(ids: np.ndarray) -> float:
    if ids.size == 0:
        return 0.0
    _, counts = np.unique(ids, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def text_density(text: str, ids: Sequence[int], bits: np.ndarray | None, n: int = 3
                 ) -> TextDensity:
    """Metrics of one text from its token ids and (optional) per-word bits."""
    arr = np.asarray(ids, dtype=np.int64)
    raw = text.encode("utf-8", errors="replace")
    tokens = int(arr.size)
    if tokens == 0:
        return TextDensity(0, 0.0, 0.0, 0.0, 0.0, None if bits is None else 0.0,
                           None if bits is None else 0.0)
    ngram = _distinct_ratio(arr, n)
    info = None if bits is None else float(bits.sum()) / tokens
    return TextDensity(
        tokens=tokens,
        distinct_token_ratio=len(np.unique(arr)) / tokens,
        distinct_ngram_ratio=ngram,
        compression_ratio=len(zlib.compress(raw, 9)) / len(raw),
        entropy=_entropy(arr),
        self_information=info,
        score=None if info is None else info * ngram,
    )




def _clusters(dup: list[int], tokens: list[int], top: int) -> list[dict[str, Any]]:
    groups: dict[int, list[int]] = {}
    for i, d in enumerate(dup):
        if d >= 0:
            root = d
            while dup[root] >= 0:
                root = dup[root]
            groups.setdefault(root, [root]).append(i)
    rows = [{"keep": root, "duplicates": members[1:],
             "tokens_saved": int(sum(tokens[m] for m in members[1:]))}
            for root, members in groups.items()]
    rows.sort(key=lambda r: (-r["tokens_saved"], r["keep"]))
    return rows[:top]


@takes_options(DensityOptions)
def density(
    text_or_texts: str | Sequence[str],
    *,
    options: DensityOptions,
) -> DensityResult:
    """Density of one text or of a corpus; see the module docstring for every metric.

    Args:
        text_or_texts: one text or a corpus.
        options: a :class:`~ctxkit.compression.options.DensityOptions`; every option keyword
            given applies on top of it. The options:
        tokenizer: name or tokenizer the tokens are counted in.
        scorer: the scorer of self-information; ``None`` skips it (and so the composite
            score). With ``idf`` and no ``wordfreq`` package, IDF is fitted on the corpus.
        n: word n-gram size of the redundancy and near-duplicate shingles.
        threshold: Jaccard similarity at which two texts are near duplicates.
        semantic: also each text's semantic novelty (embeddings).
        top_clusters: near-duplicate clusters listed.

    Returns:
        A :class:`DensityResult`: per-text :class:`TextDensity` rows, the corpus figures,
        each text's near-duplicate (``duplicate_of``) and the largest clusters.

    Example:
        >>> rep = density(["a b c", "a b c", "x y z w"], scorer=None)
        >>> rep.duplicate_of, rep.dedup_saved_tokens
        ([-1, 0, -1], 3)
    """
    texts = validate.text_or_texts(text_or_texts, "text_or_texts")
    opts = options
    tokenizer, scorer, n, threshold = opts.tokenizer, opts.scorer, opts.n, opts.threshold
    semantic, top_clusters = opts.semantic, opts.top_clusters
    tok = resolve_tokenizer(tokenizer)
    sc = None if scorer is None else get_scorer(scorer)
    per_text = text_densities(texts, tokenizer=tok, scorer=sc, n=n)
    dup = near_duplicates(texts, threshold) if len(texts) > 1 else [-1] * len(texts)
    tokens = [t.tokens for t in per_text]
    novelty = None
    if semantic and texts:
        novelty = _novelty(texts)
    return DensityResult(
        texts=per_text,
        tokenizer=getattr(tok, "name", str(tokenizer)),
        scorer=None if sc is None else sc.name,
        duplicate_of=dup,
        near_duplicate_share=(sum(d >= 0 for d in dup) / len(dup)) if dup else 0.0,
        dedup_saved_tokens=int(sum(t for t, d in zip(tokens, dup) if d >= 0)),
        clusters=_clusters(dup, tokens, top_clusters),
        novelty=novelty,
    )


def text_densities(
    texts: Sequence[str],
    *,
    tokenizer: str | Tokenizer = "cl100k_base",
    scorer: str | Scorer | None = "idf",
    n: int = 3,
) -> list[TextDensity]:
    """Per-text metrics only, without the corpus-level redundancy pass of :func:`density`.

    Example:
        >>> [d.tokens for d in text_densities(["a b c", "x"], scorer=None)]
        [3, 1]
    """
    if n < 1:
        raise bad_option("n", f" must be >= 1, got {n}")
    texts = list(texts)
    tok = resolve_tokenizer(tokenizer)
    ids = tok.encode_batch(texts) if texts else []
    sc = None if scorer is None else get_scorer(scorer)
    bits = sc.information(texts) if sc is not None else [None] * len(texts)
    return [text_density(t, i, b, n) for t, i, b in zip(texts, ids, bits)]


def _novelty(texts: list[str]) -> list[float]:
    from ctxkit.compression.scoring.lexical import embed

    if len(texts) == 1:
        return [1.0]
    vecs = embed(texts)
    nearest = np.empty(len(vecs), dtype=np.float32)
    block = 2048  # rows of the similarity matrix at a time: memory stays block * n floats
    for s in range(0, len(vecs), block):
        sims = vecs[s : s + block] @ vecs.T
        rows = np.arange(len(sims))
        sims[rows, s + rows] = -1.0  # not its own nearest neighbour
        nearest[s : s + block] = sims.max(axis=1)
    return [float(v) for v in np.clip(1.0 - nearest, 0.0, 1.0)]
