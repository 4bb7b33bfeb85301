"""The training cost of a packed window: linear work per token plus attention per segment.

A window of segments with lengths ``s_1 .. s_k`` costs

    ``token * sum(s_j) + square * sum(s_j ** 2)``

FLOPs for one forward and backward pass. The first term is every matrix multiply whose work
grows with the number of tokens (projections, MLP, output head); the second is attention, whose
work grows with the number of query-key pairs, and a packed window attends only inside each
segment. So two full windows of 2,048 tokens cost the same linear work, but one 2,048-token
segment costs 16x the attention of sixteen 128-token segments.

The weights follow the usual FLOP accounting (Kaplan et al. 2020, "Scaling Laws for Neural
Language Models", table 1: training is 6 FLOPs per parameter per token, forward 2 plus backward
4; Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models", appendix F, for the
attention terms, the logits ``QK^T`` and the weighted sum ``AV``):

- ``token = 6 * (layers * (2 * h * d_attn + 2 * h * d_kv + 3 * h * i) + h * vocab)``: the
  query and output projections (``h x d_attn``), key and value (``h x d_kv``, smaller with
  grouped-query attention), the three gated-MLP matrices (``h x i``) and the output head;
- ``square = 6 * layers * d_attn``: per query-key pair, ``QK^T`` and ``AV`` take ``2 * d_attn``
  FLOPs each forward (so ``4 * d_attn``, times 3 with the backward pass), and a causal segment
  of ``s`` tokens has about ``s**2 / 2`` pairs (the kernels skip the masked half).

Softmax, norms and the embedding lookup are left out: they are linear in tokens and small.

Example:
    >>> cost = WindowCost.from_shape(hidden=64, layers=2, intermediate=128, heads=4)
    >>> cost.token, cost.square
    (491520.0, 768.0)
    >>> cost.window([128] * 16) < cost.window([2048])
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxkit.options import OptionSet, bad_option

__all__ = ["DEFAULT_SHAPE", "WindowCost"]

# Llama-3.2-1B's shape (hidden 2048, 16 layers, MLP 8192, 32 heads of 64, 8 KV heads, vocab
# 128,256): a common size for fine-tuning on packed data. At 2,048 tokens attention then adds
# about 5% to a single-segment window's cost.
DEFAULT_SHAPE = {"hidden": 2048, "layers": 16, "intermediate": 8192, "heads": 32,
                 "kv_heads": 8, "vocab": 128256}


def _positive(name: str, value: Any, integer: bool) -> float:
    ok = isinstance(value, (int, np.integer)) if integer else isinstance(
        value, (int, float, np.integer, np.floating))
    if isinstance(value, (bool, np.bool_)) or not ok or not value > 0 or not np.isfinite(value):
        kind = "a positive integer" if integer else "a positive finite number"
        raise bad_option(name, f" must be {kind}, got {value!r}")
    return int(value) if integer else float(value)


def _llama_flops(hidden: int, layers: int, intermediate: int, heads: int, kv_heads: int,
                 head_dim: int, vocab: int) -> tuple[float, float]:
    d_attn, d_kv = heads * head_dim, kv_heads * head_dim
    per_layer = 2 * hidden * d_attn + 2 * hidden * d_kv + 3 * hidden * intermediate
    return 6.0 * (layers * per_layer + hidden * vocab), 6.0 * layers * d_attn


@dataclass(frozen=True)
class WindowCost(OptionSet):
    """Weights of the window cost ``token * tokens + square * sum(segment_length ** 2)``.

    Attributes:
        token: FLOPs per token (linear work), positive.
        square: FLOPs per squared segment length (attention), zero or positive; zero balances
            tokens only.

    The default is the shape :data:`DEFAULT_SHAPE` (a Llama-3.2-1B); :meth:`from_shape` and
    :meth:`from_config` give the weights of another model. Only the ratio ``square / token``
    changes a balance.

    Example:
        >>> WindowCost(token=1.0, square=0.5).window([2, 4])
        16.0
    """

    token: float = _llama_flops(**{**DEFAULT_SHAPE, "head_dim": 64})[0]
    square: float = _llama_flops(**{**DEFAULT_SHAPE, "head_dim": 64})[1]

    _what = "cost option"

    def __post_init__(self) -> None:
        object.__setattr__(self, "token", _positive("token", self.token, integer=False))
        if self.square != 0:
            object.__setattr__(self, "square", _positive("square", self.square, integer=False))
        object.__setattr__(self, "square", float(self.square))

    @classmethod
    def from_shape(cls, *, hidden: int, layers: int, intermediate: int, heads: int,
                   kv_heads: int | None = None, head_dim: int | None = None,
                   vocab: int = 0) -> WindowCost:
        """The weights of a decoder with this shape (formula in the module docs).

        ``kv_heads`` defaults to ``heads`` (no grouped-query attention), ``head_dim`` to
        ``hidden // heads``; ``vocab`` counts the output head (0 leaves it out).

        Example:
            >>> WindowCost.from_shape(hidden=32, layers=2, intermediate=64, heads=4).square
            384.0
        """
        hidden = _positive("hidden", hidden, integer=True)
        layers = _positive("layers", layers, integer=True)
        intermediate = _positive("intermediate", intermediate, integer=True)
        heads = _positive("heads", heads, integer=True)
        kv_heads = heads if kv_heads is None else _positive("kv_heads", kv_heads, integer=True)
        if head_dim is None:
            head_dim = hidden // heads
        head_dim = _positive("head_dim", head_dim, integer=True)
        if isinstance(vocab, bool) or not isinstance(vocab, (int, np.integer)) or vocab < 0:
            raise bad_option("vocab", f" must be a non-negative integer, got {vocab!r}")
        token, square = _llama_flops(hidden, layers, intermediate, heads, kv_heads, head_dim,
                                     int(vocab))
        return cls(token=token, square=square)

    @classmethod
    def from_config(cls, config: Any) -> WindowCost:
        """The weights of a transformers decoder config (``LlamaConfig``, ``Qwen2Config``, ...).

        Reads ``hidden_size``, ``num_hidden_layers``, ``intermediate_size``,
        ``num_attention_heads`` and, when set, ``num_key_value_heads``, ``head_dim`` and
        ``vocab_size``.

        Example:
            >>> from types import SimpleNamespace
            >>> cfg = SimpleNamespace(hidden_size=32, num_hidden_layers=2, intermediate_size=64,
            ...                       num_attention_heads=4)
            >>> WindowCost.from_config(cfg) == WindowCost.from_shape(
            ...     hidden=32, layers=2, intermediate=64, heads=4)
            True
        """
        need = ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads")
        missing = [name for name in need if getattr(config, name, None) is None]
        if missing:
            raise bad_option("config", f" lacks {', '.join(missing)}: not a decoder config")
        return cls.from_shape(
            hidden=config.hidden_size, layers=config.num_hidden_layers,
            intermediate=config.intermediate_size, heads=config.num_attention_heads,
            kv_heads=getattr(config, "num_key_value_heads", None),
            head_dim=getattr(config, "head_dim", None),
            vocab=getattr(config, "vocab_size", None) or 0)

    def window(self, segment_lengths: Sequence[int]) -> float:
        """The cost of one window holding segments of these lengths."""
        s = np.asarray(segment_lengths, np.float64)
        return float(self.token * s.sum() + self.square * (s * s).sum())

    def windows(self, segment_lengths: np.ndarray, *, window_of: np.ndarray,
                n_windows: int) -> np.ndarray:
        """Vectorised :meth:`window`: per window, the cost of the segments whose window
        (``window_of``, in ``0..n_windows-1``) it is."""
        s = np.asarray(segment_lengths, np.float64)
        work = self.token * s + self.square * s * s
        return np.bincount(np.asarray(window_of, np.int64), weights=work, minlength=n_windows)
