"""Benchmark corpora for ``python -m evals.dedup``: real texts, injected near-duplicates,
exact Jaccard join.

Kept apart from the benchmark driver so tests and notebooks can build the same corpus.
"""

from __future__ import annotations

import json
import random
import re
import string
from pathlib import Path

import numpy as np

from ctxkit.deduplication.signatures import hash_values
from evals._common import data_dir

__all__ = [
    "data_dir",
    "disjoint_replicas",
    "exact_jaccard_join",
    "inject_near_duplicates",
    "load_sources",
    "synthetic_templated",
    "synthetic_texts",
]


def _read(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def load_sources(root: Path | None) -> dict[str, list[str]]:
    """Texts per source; a generated stand-in when the shared data is absent."""
    if root is None:
        return {"generated": synthetic_texts(6000, random.Random(0))}
    out: dict[str, list[str]] = {}
    specs = {
        "gsm8k": ("gsm8k/train.jsonl", ("question", "answer")),
        "codealpaca": ("codealpaca/new_codealpaca.json", ("instruction", "input", "output")),
        "codegen": ("gpteacher/codegen-instruct.json", ("instruction", "input", "response")),
        "toolformer": (
            "gpteacher/toolformer-dedupe-only-dataset.json",
            ("instruction", "input", "response"),
        ),
    }
    for name, (rel, keys) in specs.items():
        path = root / rel
        if path.exists():
            out[name] = ["\n".join(str(r.get(k) or "") for k in keys).strip() for r in _read(path)]
    return out


_VOCAB = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "for",
    "that",
    "with",
    "as",
    "on",
    "by",
    "this",
    "be",
    "are",
    "from",
    "it",
    "at",
    "or",
    "an",
    "can",
    "which",
    "value",
    "number",
    "list",
    "return",
    "function",
    "data",
    "time",
    "first",
    "each",
    "new",
    "result",
    "string",
    "order",
]


def synthetic_texts(n: int, rng: random.Random, words: list[str] | None = None) -> list[str]:
    """Random texts of 20-150 words drawn from ``words`` (a small default vocabulary)."""
    words = words or [f"{w}{i}" for i in range(60) for w in _VOCAB[:10]] + _VOCAB
    return [" ".join(rng.choices(words, k=rng.randint(20, 150))) for _ in range(n)]


def synthetic_templated(n: int, rng: random.Random) -> list[str]:
    """Tool-use records when the shared toolformer set is absent: one of four multi-line tool
    descriptions, then a short request of random words, and a call."""
    tools = [
        (name, f"toolformer: enabled\ntoolformer access: {name}\n"
               + " ".join(rng.choices(_VOCAB, k=30)) + f"\n{name}(query)\n")
        for name in ("search", "weather", "python", "wikipedia")
    ]
    words = [f"{w}{i}" for i in range(40) for w in _VOCAB[:10]]
    out = []
    for _ in range(n):
        name, head = rng.choice(tools)
        ask = " ".join(rng.choices(words, k=rng.randint(6, 14)))
        out.append(f"{head}{ask}\n\nHere it is: {name}('{ask[:24]}')")
    return out


def disjoint_replicas(unit: list[str], copies: int, rng: random.Random) -> list[str]:
    """``copies`` copies of ``unit`` that share no letter or digit, shuffled together.

    Copy ``k`` writes every letter (either case) and digit as its own CJK ideograph, so a
    text of one copy shares no shingle with another copy except runs of spaces and
    punctuation, and each copy holds exactly the unit's near-duplicates and templates (its
    LSH candidates are drawn afresh, as the hash values differ: the same in expectation).
    Time per document on 1, 2, 4, 8 copies therefore compares equal work
    per document at every size: any growth is the implementation's, not the data's (a
    resample of a real corpus finds more partners per record as it grows). Every copy,
    the first too, is mapped, so all sizes pay the same per-character normalization.

    Example:
        >>> disjoint_replicas(["Ab1 c"], 1, random.Random(0)) == ["\u4e00\u4e01\u4e1b \u4e02"]
        True
        >>> len(set("".join(disjoint_replicas(["Ab1 c"], 2, random.Random(0)))))  # 4 + 4 + space
        9
    """
    symbols = string.ascii_lowercase + string.digits
    if copies < 1 or (copies + 1) * len(symbols) > 0x9FFF - 0x4E00:
        raise ValueError(f"copies must be in 1..{(0x9FFF - 0x4E00) // len(symbols) - 1}")
    out = []
    for k in range(copies):
        base = 0x4E00 + k * len(symbols)
        table = {ord(c): base + i for i, c in enumerate(symbols)}
        table.update({ord(c.upper()): base + i for i, c in enumerate(string.ascii_lowercase)})
        out += [t.translate(table) for t in unit]
    rng.shuffle(out)
    return out


_PUNCT = list(".,;:!?-")


def _edit(text: str, rng: random.Random, vocab: list[str], rate: float) -> str:
    """Word edits at ``rate`` (substitute, delete, insert, swap), then case/space/punct noise."""
    words = text.split(" ")
    n_edits = max(1, round(rate * len(words)))
    for _ in range(n_edits):
        if not words:
            break
        op = rng.random()
        k = rng.randrange(len(words))
        if op < 0.4:
            words[k] = rng.choice(vocab)
        elif op < 0.65:
            del words[k]
        elif op < 0.9:
            words.insert(k, rng.choice(vocab))
        elif k + 1 < len(words):
            words[k], words[k + 1] = words[k + 1], words[k]
    out = " ".join(words)
    r = rng.random()
    if r < 0.25:
        out = out.upper()
    elif r < 0.5:
        out = out.lower()
    elif r < 0.6:
        out = out.title()
    # whitespace noise: doubled spaces, stray newlines and tabs
    out = re.sub(
        " ", lambda m: rng.choice(["  ", "\n", " \t", " "]) if rng.random() < 0.08 else " ", out
    )
    # punctuation noise: drop some marks, add a few
    out = "".join(c for c in out if not (c in _PUNCT and rng.random() < 0.3))
    chars = list(out)
    for _ in range(rng.randint(0, 3)):
        chars.insert(rng.randrange(len(chars) + 1), rng.choice(_PUNCT))
    return "".join(chars)


def inject_near_duplicates(
    originals: list[str],
    rng: random.Random,
    dup_fraction: float = 0.2,
    max_variants: int = 3,
    rate: tuple[float, float] = (0.05, 0.15),
) -> tuple[list[str], np.ndarray]:
    """Originals followed by edited copies, shuffled; ``truth[i]`` is the original's position or -1.

    Every edited copy gets 5-15% word edits plus case, whitespace and punctuation noise.
    The copies' original stays in the corpus, so a perfect dedup removes exactly the copies.
    """
    vocab = sorted({w for t in originals[:2000] for w in t.split()}) or list(_VOCAB)
    texts = list(originals)
    source = [-1] * len(originals)
    chosen = rng.sample(range(len(originals)), int(dup_fraction * len(originals)))
    for i in chosen:
        for _ in range(rng.randint(1, max_variants)):
            texts.append(_edit(originals[i], rng, vocab, rng.uniform(*rate)))
            source.append(i)
    order = list(range(len(texts)))
    rng.shuffle(order)
    position = {old: new for new, old in enumerate(order)}
    texts = [texts[o] for o in order]
    # truth: each copy points to its original's new position; originals point nowhere.
    truth = np.array([-1 if source[o] < 0 else position[source[o]] for o in order], dtype=np.int64)
    return texts, truth


def exact_jaccard_join(
    texts: list[str],
    thresholds: float | list[float],
    ngram: int = 5,
    unit: str = "char",
    block: int = 1000,
) -> dict[float, tuple[np.ndarray, np.ndarray]]:
    """Every pair ``i < j`` whose exact Jaccard of shingle sets is >= each threshold.

    Exact all-pairs by blocked sparse products (intersection counts of the document x
    shingle incidence matrix), one pass for all thresholds. Quadratic, so meant for
    benchmark corpora of some thousands of texts; shingles are the 64-bit hashes MinHash uses.
    Returns ``{threshold: (pairs, jaccard)}``.
    """
    from scipy import sparse

    thresholds = [thresholds] if isinstance(thresholds, float) else list(thresholds)
    lowest = min(thresholds)
    values, offsets = hash_values(texts, ngram, unit, scheme="affine64")
    n = len(texts)
    doc = np.repeat(np.arange(n), np.diff(offsets))
    _, col = np.unique(values, return_inverse=True)
    mat = sparse.csr_matrix(
        (np.ones(len(col), dtype=np.float32), (doc, col.ravel())),
        shape=(n, int(col.max()) + 1 if len(col) else 0),
    )
    mat.sum_duplicates()
    mat.data[:] = 1.0
    sizes = np.asarray(mat.sum(axis=1)).ravel()
    mat_t = mat.T.tocsc()
    found_pairs, found_jac = [], []
    for s in range(0, n, block):
        prod = (mat[s : s + block] @ mat_t[:, s:]).tocoo()
        i, j = prod.row + s, prod.col + s
        upper = j > i
        i, j, inter = i[upper], j[upper], prod.data[upper]
        jac = inter / (sizes[i] + sizes[j] - inter)
        ok = jac >= lowest - 1e-12
        found_pairs.append(np.stack([i[ok], j[ok]], axis=1))
        found_jac.append(jac[ok])
    pairs = (
        np.concatenate(found_pairs).astype(np.int64) if found_pairs else np.empty((0, 2), np.int64)
    )
    jac = np.concatenate(found_jac) if found_jac else np.empty(0)
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    pairs, jac = pairs[order], jac[order]
    return {t: (pairs[jac >= t - 1e-12], jac[jac >= t - 1e-12]) for t in thresholds}
