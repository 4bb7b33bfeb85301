"""The generated corpus of ``python -m evals.distributed``'s end-to-end runs.

Records of 30-120 words drawn uniformly from a vocabulary of 20,000 made-up words (3-10
letters), about 540 bytes of JSON each; a share (``near``, default 20%) are near copies of
another record, each word replaced with probability 8%. Written as JSON lines
``{"id": "r<i>", "text": ...}`` in a shuffled order, so copies lie anywhere in the file.

Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "c.jsonl")
    >>> write_corpus(path, 50)
    50
"""

from __future__ import annotations

import json
import os

import numpy as np

__all__ = ["write_corpus"]

_VOCAB = 20_000
_LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


def _vocabulary(rng: np.random.Generator) -> np.ndarray:
    lengths = rng.integers(3, 11, _VOCAB)
    letters = rng.choice(_LETTERS, int(lengths.sum()))
    cuts = np.cumsum(lengths)[:-1]
    return np.array(["".join(w) for w in np.split(letters, cuts)], dtype=object)


def corpus_texts(n: int, near: float = 0.2, seed: int = 0) -> list[str]:
    """``n`` texts, ``near`` of them edited copies of others (see the module)."""
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng)
    originals = n - int(near * n)
    lengths = rng.integers(30, 121, originals)
    words = rng.integers(0, _VOCAB, int(lengths.sum()))
    starts = np.r_[0, np.cumsum(lengths)]
    texts = [" ".join(vocab[words[starts[i]:starts[i + 1]]]) for i in range(originals)]
    for src in rng.integers(0, originals, n - originals).tolist():
        w = words[starts[src]:starts[src + 1]].copy()
        hit = rng.random(len(w)) < 0.08
        w[hit] = rng.integers(0, _VOCAB, int(hit.sum()))
        texts.append(" ".join(vocab[w]))
    order = rng.permutation(n)
    return [texts[i] for i in order.tolist()]


def write_corpus(path: str | os.PathLike, n: int, near: float = 0.2, seed: int = 0) -> int:
    """Write :func:`corpus_texts` as JSON lines to ``path``; returns the record count."""
    with open(path, "w", encoding="utf-8") as fh:
        for i, text in enumerate(corpus_texts(n, near, seed)):
            fh.write(json.dumps({"id": f"r{i}", "text": text}))
            fh.write("\n")
    return n
