"""KV-cache memory: what a number of tokens costs a given model while it generates.

A decoder keeps, for every layer and every token in its context, the keys and values of its
KV heads. So the cache for ``T`` tokens is::

    bytes = dtype_bytes x tensors x kv_heads x head_dim x (full_layers x T
                                                           + window_layers x min(T, window))

per sequence, summed over sequences: ``tensors`` is 2 (K and V), ``kv_heads`` is
``num_key_value_heads`` (grouped-query attention), 1 for multi-query attention, and the query
head count when the config names neither (multi-head attention); ``head_dim`` is the config's
``head_dim`` or ``hidden_size / num_attention_heads``. Sliding-window layers (Mistral's
``sliding_window`` on every layer; Gemma-style ``layer_types`` or ``sliding_window_pattern`` on
some) hold at most ``window`` tokens per sequence. Multi-head latent attention (DeepSeek-V2/V3:
``kv_lora_rank``) caches one compressed latent of ``kv_lora_rank + qk_rope_head_dim`` values per
token and layer instead (``tensors = kv_heads = 1``), as in the DeepSeek-V2 paper, section 2.1.

Only the cache is counted: not the weights, not activations, not a serving engine's block
rounding or a quantized cache's scales. ``docs/kvcache.md`` has the derivation, the config
variants read, and the presets' sources.

Example:
    >>> kv_cache_bytes("llama-3.1-8b", 8192) == 8192 * 131072
    True
    >>> size = kv_cache_report("llama-3.1-8b", 8192)
    >>> size.per_token_bytes, size.bytes == kv_cache_bytes("llama-3.1-8b", 8192)
    (131072, True)
    >>> str(size)
    '1.00 GiB KV cache for 8,192 tokens in bfloat16 (llama-3.1-8b, GQA: 32 layers x 2 (K, V) x 8 KV heads x 128 head dim x 2 B = 128 KiB per token)'
    >>> kv_cache_bytes("mistral-7b", [10_000, 100]) == (4096 + 100) * 131072
    True
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ctxkit.errors import InputError, OptionError
from ctxkit.kvcache.shape import KVCacheShape, ModelSpec, kv_cache_shape

__all__ = [
    "DTYPE_BITS",
    "KVCacheChange",
    "KVCacheReport",
    "format_bytes",
    "kv_bytes_per_sequence",
    "kv_cache_bytes",
    "kv_cache_change",
    "kv_cache_report",
]

# bits per cached value; quantized caches (int4, int2) also keep scales, which are not counted
DTYPE_BITS = {
    "float32": 32, "fp32": 32, "float": 32,
    "bfloat16": 16, "bf16": 16, "float16": 16, "fp16": 16, "half": 16,
    "float8": 8, "fp8": 8, "float8_e4m3fn": 8, "float8_e4m3fnuz": 8, "float8_e5m2": 8,
    "float8_e5m2fnuz": 8, "fp8_e4m3": 8, "fp8_e5m2": 8, "int8": 8, "uint8": 8,
    "int4": 4, "fp4": 4, "int2": 2,
}

@dataclass(frozen=True)
class KVCacheReport:
    """The KV cache of ``tokens`` tokens (over ``sequences`` sequences) and how it adds up.

    ``bytes`` is the total; ``per_token_bytes`` what one token costs with no window cap
    (``layers x tensors x kv_heads x head_dim x dtype_bytes``); ``str()`` says both in words.
    """

    model: str
    dtype: str
    tokens: int
    sequences: int
    bytes: int
    per_token_bytes: int
    layers: int
    kv_heads: int
    head_dim: int
    tensors: int
    dtype_bytes: float
    attention: str
    window: int | None = None
    window_layers: int = 0

    def formula(self) -> str:
        """How one token's bytes add up, and the window cap: the words inside ``str()``."""
        if self.attention == "MLA":
            what = f"{self.head_dim} latent values"
        else:
            heads = f"{self.kv_heads} KV head{'s' if self.kv_heads != 1 else ''}"
            what = f"2 (K, V) x {heads} x {self.head_dim} head dim"
        text = (f"{self.model}, {self.attention}: {self.layers} layers x {what} x "
                f"{self.dtype_bytes:g} B = {format_bytes(self.per_token_bytes)} per token")
        if self.window_layers:
            text += (f"; {self.window_layers} of {self.layers} layers hold at most "
                     f"{self.window:,} tokens per sequence")
        return text

    def __str__(self) -> str:
        return (f"{format_bytes(self.bytes)} KV cache for {self.tokens:,} tokens in {self.dtype} "
                f"({self.formula()})")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "human": format_bytes(self.bytes)}


@dataclass(frozen=True)
class KVCacheChange:
    """KV cache before and after compression, for one model and dtype."""

    before: KVCacheReport
    after: KVCacheReport

    @property
    def saved_bytes(self) -> int:
        return self.before.bytes - self.after.bytes

    @property
    def ratio(self) -> float:
        """after / before (1.0 when there was nothing before)."""
        return self.after.bytes / self.before.bytes if self.before.bytes else 1.0

    def __str__(self) -> str:
        return (f"{self.before.model} KV cache ({self.before.dtype}): "
                f"{format_bytes(self.before.bytes)} -> {format_bytes(self.after.bytes)} "
                f"(saves {format_bytes(self.saved_bytes)}, {1 - self.ratio:.1%})")

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.before.model, "dtype": self.before.dtype,
                "per_token_bytes": self.before.per_token_bytes,
                "before_tokens": self.before.tokens, "after_tokens": self.after.tokens,
                "before_bytes": self.before.bytes, "after_bytes": self.after.bytes,
                "saved_bytes": self.saved_bytes, "ratio": self.ratio, "human": str(self)}


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units: ``'512 B'``, ``'128 KiB'``, ``'1.50 GiB'``.

    Example:
        >>> format_bytes(131072), format_bytes(3 * 2**29), format_bytes(-2**20)
        ('128 KiB', '1.50 GiB', '-1.00 MiB')
    """
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            break
        value /= 1024
    if unit == "B":
        return f"{value:,.0f} {unit}"
    digits = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
    return f"{value:,.{digits}f} {unit}"


def _dtype_bits(dtype: Any) -> tuple[str, int]:
    name = str(dtype).strip().lower().removeprefix("torch.")
    bits = DTYPE_BITS.get(name)
    if bits is None:
        raise OptionError("dtype", f"unknown KV-cache dtype {str(dtype)!r}; choose from "
                                   f"{', '.join(DTYPE_BITS)}")
    return name, bits


def _tokens(tokens: Any) -> np.ndarray:
    if isinstance(tokens, bool):
        raise InputError("tokens must be an int or a sequence of per-sequence token counts")
    arr = np.asarray(tokens)
    if arr.dtype == object or (arr.size and arr.dtype.kind not in "iu"):
        raise InputError("tokens must be an int or a sequence of per-sequence token counts, "
                        f"got {type(tokens).__name__} of {arr.dtype}")
    arr = arr.astype(np.int64, copy=False).ravel()
    if arr.size and int(arr.min()) < 0:
        raise InputError(f"tokens: token counts must be >= 0, got {int(arr.min())}")
    return arr


def _layer_tokens(shape: KVCacheShape, counts: np.ndarray) -> np.ndarray:
    """Per sequence, the tokens held summed over layers (window layers capped)."""
    held = (shape.layers - shape.window_layers) * counts
    if shape.window_layers:
        held = held + shape.window_layers * np.minimum(counts, shape.window)
    return held


def _ceil_bytes(bits: Any) -> Any:
    """Bits to whole bytes, rounding up, in integers (floats would lose exactness)."""
    return -(-bits // 8)


def kv_cache_report(config: ModelSpec, tokens: int | Sequence[int] | np.ndarray, *,
                    dtype: str = "bfloat16") -> KVCacheReport:
    """The KV-cache memory of ``tokens`` tokens for the model ``config`` describes, and how it
    adds up (:class:`KVCacheReport`; :func:`kv_cache_bytes` is its ``bytes``).

    ``tokens``: one sequence's token count, or an array of per-sequence counts (a batch, or the
    sessions a server holds): the sizes add up, each sequence capped at the window on
    sliding-window layers. ``dtype``: the cache's element type (``bfloat16``, ``float16``,
    ``float32``, ``fp8``, ``int8``, ``int4``...). ``config`` as for :func:`kv_cache_shape`.

    Example:
        >>> llama3_8b = {"num_hidden_layers": 32, "num_attention_heads": 32,
        ...              "num_key_value_heads": 8, "hidden_size": 4096}
        >>> kv_cache_report(llama3_8b, 1).bytes
        131072
        >>> kv_cache_report(llama3_8b, [1000, 24], dtype="fp8").bytes == 1024 * 65536
        True
    """
    shape = kv_cache_shape(config)
    name, bits = _dtype_bits(dtype)
    counts = _tokens(tokens)
    held = int(_layer_tokens(shape, counts).sum())
    per_layer = shape.tensors * shape.kv_heads * shape.head_dim
    return KVCacheReport(
        model=shape.name, dtype=name, tokens=int(counts.sum()), sequences=int(counts.size),
        bytes=_ceil_bytes(held * per_layer * bits),
        per_token_bytes=_ceil_bytes(shape.values_per_token * bits),
        layers=shape.layers, kv_heads=shape.kv_heads, head_dim=shape.head_dim,
        tensors=shape.tensors, dtype_bytes=bits / 8, attention=shape.attention,
        window=shape.window if shape.window_layers else None,
        window_layers=shape.window_layers)


def kv_cache_bytes(config: ModelSpec, tokens: int | Sequence[int] | np.ndarray, *,
                   dtype: str = "bfloat16") -> int:
    """The KV-cache bytes of ``tokens`` tokens for the model ``config`` describes, an ``int``.

    ``tokens`` is one sequence's token count, or per-sequence counts whose caches add up to
    the one total returned (each capped at the window on sliding-window layers; the bytes of
    each sequence are :func:`kv_bytes_per_sequence`). The breakdown is
    :func:`kv_cache_report`.

    Example:
        >>> kv_cache_bytes("llama-3.1-8b", 1000)
        131072000
        >>> kv_cache_bytes("llama-3.1-8b", [1000, 24]) == kv_cache_bytes("llama-3.1-8b", 1024)
        True
    """
    return kv_cache_report(config, tokens, dtype=dtype).bytes


def kv_bytes_per_sequence(config: ModelSpec, tokens: Sequence[int] | np.ndarray, *,
                          dtype: str = "bfloat16") -> np.ndarray:
    """The KV-cache bytes of each sequence (int64 array), for figures per batch or per row.

    Example:
        >>> kv_bytes_per_sequence("mistral-7b", [5000, 10]).tolist()
        [536870912, 1310720]
    """
    shape = kv_cache_shape(config)
    _, bits = _dtype_bits(dtype)
    held = _layer_tokens(shape, _tokens(tokens))
    return _ceil_bytes(held * (shape.tensors * shape.kv_heads * shape.head_dim * bits))


def kv_cache_change(config: ModelSpec, before: int | Sequence[int] | np.ndarray,
                    after: int | Sequence[int] | np.ndarray,
                    dtype: str = "bfloat16") -> KVCacheChange:
    """The KV cache of ``before`` tokens next to that of ``after`` tokens (both as in
    :func:`kv_cache_report`), for the compress and chat reports.

    Example:
        >>> str(kv_cache_change("llama-3.1-8b", 4096, 1024))
        'llama-3.1-8b KV cache (bfloat16): 512 MiB -> 128 MiB (saves 384 MiB, 75.0%)'
    """
    shape = kv_cache_shape(config)
    return KVCacheChange(kv_cache_report(shape, before, dtype=dtype),
                         kv_cache_report(shape, after, dtype=dtype))
