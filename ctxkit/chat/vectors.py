"""The vectors a :class:`~ctxkit.ChatMemory` snapshot can carry, so a restored session does not
embed its history again.

A server that keeps one memory per session restores it at the session's next request; without
its vectors the first call is cold (the shortlist embeds what the question needs) and the next
one embeds every message, which for a 1M-token history is minutes of encoder time. With
``to_dict(vectors=True)`` the snapshot holds, for each distinct message text in order, the
scorer's embedding and its first-stage word-piece vector, as little-endian float32 rows in
base64 (JSON-safe): 384 + 384 floats, 4,096 characters per message for the bundled MiniLM.
They are the vectors the memory ranks with, so the restored memory's windows are the
original's.

Example:
    >>> from ctxkit.compression.scoring.embedding import EmbeddingScorer
    >>> scorer = EmbeddingScorer()
    >>> data = snapshot_vectors(scorer, ["The parcel left Lyon.", "It rained."])
    >>> data["count"], data["dim"], len(data["embedding"])
    (2, 384, 4096)
    >>> fresh = EmbeddingScorer()
    >>> restore_vectors(fresh, ["The parcel left Lyon.", "It rained."], data)
    >>> len(fresh.cache), len(fresh.word_pieces.cache)
    (2, 2)
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxkit.errors import InputError

__all__ = ["VECTORS_VERSION", "restore_vectors", "snapshot_vectors"]

VECTORS_VERSION = 1


def _b64(rows: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(rows, dtype="<f4").tobytes()).decode("ascii")


def snapshot_vectors(scorer: Any, texts: Sequence[str]) -> dict[str, Any]:
    """The scorer's vectors of ``texts`` (distinct, non-empty, in order), computed where they
    are missing; an :class:`~ctxkit.errors.InputError` for a scorer that keeps none."""
    if not hasattr(scorer, "cache") or not hasattr(scorer, "word_pieces") or not hasattr(
            scorer, "_embed"):
        raise InputError(f"vectors=True needs the embedding scorer, which keeps vectors; "
                         f"this memory's is {getattr(scorer, 'name', type(scorer).__name__)}")
    texts = list(texts)
    scorer.prepare(texts)
    emb, pieces = scorer._embed(texts), scorer.word_pieces(texts)
    return {"version": VECTORS_VERSION, "scorer": scorer.name, "dtype": scorer.dtype,
            "count": len(texts), "dim": int(emb.shape[1]) if len(texts) else 0,
            "piece_dim": int(pieces.shape[1]) if len(texts) else 0,
            "embedding": _b64(emb), "word_pieces": _b64(pieces)}


def _rows(data: Mapping[str, Any], field: str, count: int, dim: int) -> np.ndarray:
    try:
        raw = base64.b64decode(data[field], validate=True)
    except (KeyError, TypeError, ValueError, binascii.Error):
        raise InputError(f"snapshot field 'vectors.{field}' must be base64 float32 rows") \
            from None
    if len(raw) != 4 * count * dim:
        raise InputError(f"snapshot field 'vectors.{field}' holds {len(raw)} bytes; "
                         f"{count} rows of {dim} float32 need {4 * count * dim}")
    return np.frombuffer(raw, dtype="<f4").reshape(count, dim).astype(np.float32)


def restore_vectors(scorer: Any, texts: Sequence[str], data: Any) -> None:
    """Put a snapshot's vectors of ``texts`` (the same distinct texts, in the same order) in
    the scorer's caches; an :class:`~ctxkit.errors.InputError` naming what does not match."""
    if not isinstance(data, Mapping) or data.get("version") != VECTORS_VERSION:
        raise InputError(f"snapshot field 'vectors' must be a mapping of version "
                         f"{VECTORS_VERSION}")
    if data.get("scorer") != getattr(scorer, "name", None) or not hasattr(scorer, "cache"):
        raise InputError(f"snapshot field 'vectors' holds {data.get('scorer')!r} vectors; "
                         f"the memory ranks with {getattr(scorer, 'name', scorer)!r}")
    texts = list(texts)
    count, dim, piece_dim = data.get("count"), data.get("dim"), data.get("piece_dim")
    if count != len(texts) or not all(isinstance(d, int) and (d > 0 or not texts)
                                       for d in (dim, piece_dim)):
        raise InputError(f"snapshot field 'vectors' holds {count!r} rows for {len(texts)} "
                         "distinct message texts")
    embedding = _rows(data, "embedding", count, dim)
    pieces = _rows(data, "word_pieces", count, piece_dim)
    scorer.cache.put(texts, list(embedding))
    scorer.word_pieces.cache.put(texts, list(pieces))
