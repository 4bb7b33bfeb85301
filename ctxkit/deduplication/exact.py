"""Exact dedup: a 128-bit hash of each normalized text.

Two texts are duplicates when they are equal after normalization (NFKC, case folding and
whitespace folding by default, punctuation stripping on request; see
:mod:`ctxkit.deduplication.normalize`). BLAKE2b-128 makes an accidental collision practically
impossible (about n**2 / 2**129), so no text comparison is needed afterwards.

:class:`ExactDeduper` does the same one text at a time for streams of any length, keeping
only 16 bytes per distinct text.

Example:
    >>> res = exact_dedup(["Hello  world", "hello world", "other"])
    >>> res.keep.tolist(), res.duplicate_of.tolist()
    ([0, 2], [-1, 0, -1])
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ctxkit.deduplication.normalize import (
    Normalization,
    codepoints_to_texts,
    normalize_text,
    normalized_codepoints,
)
from ctxkit.deduplication.result import DedupResult, result_from_representatives
from ctxkit.deduplication.unionfind import keep_priority, representatives

__all__ = ["ExactDeduper", "exact_dedup", "text_digests"]


def _digest(text: str) -> bytes:
    # surrogatepass: a lone surrogate (from a lenient decoder) is still hashable, not an error.
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def text_digests(
    texts: Sequence[str], norm: Normalization | None = None, **options: bool
) -> list[bytes]:
    """The 16-byte digest of each normalized text; equal digests mean duplicate texts.

    Example:
        >>> a, b = text_digests(["A  b", "a b"])
        >>> a == b
        True
    """
    norm = (norm or Normalization()).with_options(**options)
    return [_digest(t) for t in codepoints_to_texts(*normalized_codepoints(texts, norm))]


def exact_dedup(
    texts: Sequence[str],
    *,
    keep: str = "first",
    scores: Sequence[float] | None = None,
    normalization: Normalization | None = None,
    **options: bool,
) -> DedupResult:
    """Remove texts equal to another after normalization.

    Args:
        texts: the texts.
        keep: which member of a group of duplicates survives: ``"first"``, ``"last"`` or
            ``"longest"`` (of the original texts); ``scores`` overrides it (highest wins).
        normalization: a :class:`Normalization`; keyword ``options`` (``nfkc``, ``case``,
            ``whitespace``, ``punctuation``) override single fields.

    Example:
        >>> exact_dedup(["a!", "A"], punctuation=True).duplicate_of.tolist()
        [-1, 0]
    """
    digests = text_digests(texts, normalization, **options)
    first: dict[bytes, int] = {}
    labels = np.fromiter(
        (first.setdefault(d, i) for i, d in enumerate(digests)), dtype=np.int64, count=len(digests)
    )
    lengths = [len(t) for t in texts] if keep == "longest" and scores is None else None
    rep = representatives(labels, keep_priority(keep, len(texts), lengths=lengths, scores=scores))
    return result_from_representatives(rep, np.ones(len(texts)), "exact", info={"method": "exact"})


class ExactDeduper:
    """Streaming exact dedup: remembers one digest per distinct text seen so far.

    ``add`` returns ``None`` for a new text, or the index (in arrival order) of the first
    text it duplicates; so in a stream the first occurrence is always the one kept.

    Example:
        >>> d = ExactDeduper()
        >>> [d.add(t) for t in ["x", "y", " X "]]
        [None, None, 0]
    """

    def __init__(self, normalization: Normalization | None = None, **options: bool) -> None:
        self.norm = (normalization or Normalization()).with_options(**options)
        self.seen: dict[bytes, int] = {}
        self.count = 0

    def add(self, text: str) -> int | None:
        digest = _digest(normalize_text(text, self.norm))
        index = self.count
        self.count += 1
        first = self.seen.setdefault(digest, index)
        return None if first == index else first

    def add_many(self, texts: Sequence[str]) -> list[int | None]:
        """``add`` for a batch, normalizing the batch in one vectorized pass."""
        out: list[int | None] = []
        for digest in text_digests(texts, self.norm):
            index = self.count
            self.count += 1
            first = self.seen.setdefault(digest, index)
            out.append(None if first == index else first)
        return out
