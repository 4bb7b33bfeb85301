"""Unit-length text vectors: the one ``embed`` that every stage (semantic dedup, relevance
scoring, density) calls, and the default encoder they share.

Example:
    >>> embed(["a cat", "a dog"]).shape, embed([]).shape
    ((2, 384), (0, 384))
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["DEFAULT_DIM", "RANKING_DTYPE", "Encoder", "default_encoder", "embed", "ranking_encoder",
           "unit_rows"]

DEFAULT_DIM = 384  # all-MiniLM-L6-v2, the bundled default model
# what relevance ranking embeds in: bf16 where the CPU multiplies it natively, fp32 elsewhere
RANKING_DTYPE = "fast"


class Encoder(Protocol):
    """Anything that turns texts into one vector each."""

    def encode(self, texts: Sequence[str]) -> Any: ...


@functools.lru_cache(maxsize=4)
def default_encoder(device: str = "auto", dtype: str = "auto") -> Encoder:
    """The bundled all-MiniLM-L6-v2 as a :class:`ctxkit.PackedEncoder` (packed passes, equal
    to ``SentenceTransformer.encode`` with the default ``dtype``; CUDA when present), cached
    per device and dtype."""
    from ctxkit.embedding.encoder import PackedEncoder

    return PackedEncoder(device=device, dtype=dtype)


def ranking_encoder() -> Encoder:
    """The default encoder in the ``"fast"`` dtype: bf16 on CPUs that multiply it natively.
    Relevance scoring only ranks by cosine, which bf16 keeps above 0.9999 to fp32's vectors
    (``python -m evals.embedding``), and the forward is most of a cold ``compress_chat``
    (``python -m evals.chat_latency``)."""
    return default_encoder(dtype=RANKING_DTYPE)


def embed(texts: Sequence[str], encoder: Encoder | None = None) -> np.ndarray:
    """L2-normalised float32 embeddings ``[len(texts), dim]`` from ``encoder`` (default: the
    bundled all-MiniLM-L6-v2); zero vectors stay zero. No texts give ``(0, dim)``.

    Example:
        >>> v = embed(["same words", "same words", "other"])
        >>> float(v[0] @ v[1]) > 0.999, v.dtype.name
        (True, 'float32')
    """
    if isinstance(texts, str):
        raise TypeError("embed takes a list of texts, not one string")
    texts = list(texts)
    if not texts:
        # the default's width is known without loading the model
        dim = DEFAULT_DIM if encoder is None else getattr(encoder, "dim", 0)
        return np.zeros((0, int(dim)), dtype=np.float32)
    enc = encoder if encoder is not None else default_encoder()
    emb = np.asarray(enc.encode(texts), dtype=np.float32)
    if emb.ndim != 2 or len(emb) != len(texts):
        raise ValueError(f"encoder returned shape {emb.shape}, expected ({len(texts)}, dim)")
    return unit_rows(emb)


def unit_rows(emb: np.ndarray) -> np.ndarray:
    """Each row divided by its L2 norm (zero rows stay zero); NaN or infinity is an error.

    Example:
        >>> unit_rows(np.array([[3.0, 4.0], [0.0, 0.0]])).tolist()
        [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    emb = np.asarray(emb, dtype=np.float32)
    if not np.isfinite(emb).all():
        raise ValueError("embeddings contain NaN or infinity")
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    return emb / np.where(norms > 0, norms, 1.0)
