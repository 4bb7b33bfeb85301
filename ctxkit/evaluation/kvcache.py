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
    >>> size = kv_cache_bytes("llama-3.1-8b", 8192)
    >>> size.per_token_bytes, size.bytes == 8192 * 131072
    (131072, True)
    >>> str(size)
    '1.00 GiB KV cache for 8,192 tokens in bfloat16 (llama-3.1-8b, GQA: 32 layers x 2 (K, V) x 8 KV heads x 128 head dim x 2 B = 128 KiB per token)'
    >>> kv_cache_bytes("mistral-7b", [10_000, 100]).bytes == (4096 + 100) * 131072
    True
"""  # noqa: E501

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.errors import OptionError
from ctxkit.evaluation.kv_presets import PRESETS

__all__ = [
    "DTYPE_BITS",
    "KVCacheChange",
    "KVCacheShape",
    "KVCacheReport",
    "format_bytes",
    "kv_bytes_per_sequence",
    "kv_cache_bytes",
    "kv_cache_change",
    "kv_cache_shape",
]

# bits per cached value; quantized caches (int4, int2) also keep scales, which are not counted
DTYPE_BITS = {
    "float32": 32, "fp32": 32, "float": 32,
    "bfloat16": 16, "bf16": 16, "float16": 16, "fp16": 16, "half": 16,
    "float8": 8, "fp8": 8, "float8_e4m3fn": 8, "float8_e4m3fnuz": 8, "float8_e5m2": 8,
    "float8_e5m2fnuz": 8, "fp8_e4m3": 8, "fp8_e5m2": 8, "int8": 8, "uint8": 8,
    "int4": 4, "fp4": 4, "int2": 2,
}

_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
_HIDDEN = ("hidden_size", "n_embd", "d_model", "dim")
_KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads")
# model types whose configs leave the sliding-window layer pattern to the library's default
# (transformers: Gemma2Config, Gemma3TextConfig, Cohere2Config): every p-th layer is global
_DEFAULT_PATTERN = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6, "cohere2": 4}
_LAYER_TYPES = {"full_attention": False, "sliding_attention": True}


@dataclass(frozen=True)
class KVCacheShape:
    """What one token costs per layer, read from a model config (:func:`kv_cache_shape`).

    ``tensors`` x ``kv_heads`` x ``head_dim`` values per token and layer; ``window_layers`` of
    the ``layers`` keep at most ``window`` tokens per sequence. ``attention`` is ``"MHA"``,
    ``"GQA"``, ``"MQA"`` or ``"MLA"``.
    """

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    tensors: int = 2
    window: int | None = None
    window_layers: int = 0
    attention: str = "MHA"

    @property
    def values_per_token(self) -> int:
        """Cached values per token over all layers, before any window cap."""
        return self.layers * self.tensors * self.kv_heads * self.head_dim


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


ModelSpec = str | Path | Mapping[str, Any] | KVCacheShape


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


# ---------------------------------------------------------------------------------------------
# reading a config


def _load(config: str | Path | Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """``(name, config dict)`` from a preset name, a config.json, a model directory or a dict."""
    if isinstance(config, Mapping):
        return str(config.get("_name_or_path") or config.get("model_type") or "config"), config
    if not isinstance(config, (str, Path)):
        raise TypeError(f"config must be a dict, a path or a preset name, got "
                        f"{type(config).__name__}")
    key = str(config).strip().lower()
    if isinstance(config, str) and key in PRESETS:
        return key, PRESETS[key].config
    path = Path(config).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise OptionError("config", f"model directory {path} has no config.json")
        name, path = path.name, path / "config.json"
    elif path.is_file():
        name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    else:
        raise OptionError("config", f"unknown model {str(config)!r}: not a preset "
                                    f"({', '.join(PRESETS)}) nor a config.json or model "
                                    "directory")
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (OSError, UnicodeDecodeError) as exc:
        raise OptionError("config", f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise OptionError("config", f"{path}: not valid JSON (line {exc.lineno}: "
                                    f"{exc.msg})") from None
    if not isinstance(data, Mapping):
        raise OptionError("config", f"{path}: a config.json holds an object, got "
                                    f"{type(data).__name__}")
    return name, data


def _int(cfg: Mapping[str, Any], keys: Sequence[str], where: str, *,
         required: bool = True) -> int | None:
    """The first of ``keys`` present and not null, as a positive int."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise OptionError("config", f"{where}: {key} must be a positive integer, got "
                                        f"{value!r}")
        return int(value)
    if required:
        err = OptionError("config", f"{where}: missing {' / '.join(keys)}; cannot size the "
                                    "KV cache")
        err.missing = True  # kv_cache_shape may fill it from the library's defaults
        raise err
    return None


def _kv_heads(cfg: Mapping[str, Any], heads: int, where: str) -> int:
    if cfg.get("model_type") == "falcon" or "new_decoder_architecture" in cfg:
        # transformers' FalconAttention: multi_query (default True) unless the new architecture
        grouped = bool(cfg.get("new_decoder_architecture")) or not cfg.get("multi_query", True)
        return (_int(cfg, ("num_kv_heads",), where, required=False) or heads) if grouped else 1
    if cfg.get("multi_query_attention"):  # ChatGLM
        return _int(cfg, ("multi_query_group_num",), where) or 1
    explicit = _int(cfg, _KV_HEADS, where, required=False)
    if explicit is not None:
        return explicit
    return 1 if cfg.get("multi_query") else heads  # GPT-BigCode: multi_query; else MHA


def _window_layers(cfg: Mapping[str, Any], layers: int, where: str) -> tuple[int | None, int]:
    """``(window, how many layers it caps)``."""
    if cfg.get("use_sliding_window") is False:  # Qwen2 ships a window it does not use
        return None, 0
    window = _int(cfg, ("sliding_window", "sliding_window_size"), where, required=False)
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise OptionError("config", f"{where}: layer_types must list one type per layer "
                                        f"({layers}), got {types!r:.80}")
        unknown = sorted({str(t) for t in types} - set(_LAYER_TYPES))
        if unknown:
            raise OptionError("config", f"{where}: layer type {unknown[0]!r} is not supported "
                                        f"(only {' and '.join(_LAYER_TYPES)})")
        n = sum(_LAYER_TYPES[t] for t in types)
        if n and window is None:
            raise OptionError("config", f"{where}: {n} sliding_attention layers but no "
                                        "sliding_window")
        return (window, n) if n else (None, 0)
    if window is None:
        return None, 0
    pattern = _int(cfg, ("sliding_window_pattern",), where, required=False) \
        or _DEFAULT_PATTERN.get(str(cfg.get("model_type")))
    if pattern is not None:  # layer i is global when (i + 1) % pattern == 0
        return window, layers - layers // pattern
    if cfg.get("use_sliding_window"):  # Qwen2: layers from max_window_layers on
        first = cfg.get("max_window_layers") or 0
        return window, max(0, layers - int(first))
    return window, layers  # Mistral: every layer


def kv_cache_shape(config: ModelSpec) -> KVCacheShape:
    """Read the per-token KV-cache shape of a model from its config.

    ``config``: a preset name (``PRESETS``: ``"llama-3.1-8b"``, ``"mistral-7b"``...), a
    ``config.json`` path, a model directory holding one, a config dict, or a
    :class:`KVCacheShape` (returned as is). Multimodal configs are read from ``text_config``.
    Fields a config leaves out are filled from transformers' config class for its
    ``model_type`` when transformers knows it; otherwise a missing or invalid field raises
    :class:`~ctxkit.errors.OptionError` naming it.

    Example:
        >>> s = kv_cache_shape({"num_hidden_layers": 32, "num_attention_heads": 71,
        ...                     "hidden_size": 4544, "multi_query": True})
        >>> s.kv_heads, s.head_dim, s.attention
        (1, 64, 'MQA')
    """
    if isinstance(config, KVCacheShape):
        return config
    name, cfg = _load(config)
    where = name if isinstance(config, (str, Path)) else "config"
    for nested in ("text_config", "llm_config"):
        inner = cfg.get(nested)
        if isinstance(inner, Mapping) and not any(k in cfg for k in _LAYERS):
            cfg = inner
            where = f"{where}: {nested}"
            break
    try:
        return _shape(name, cfg, where)
    except OptionError as exc:
        filled = _library_defaults(cfg) if getattr(exc, "missing", False) else None
        if filled is None:
            raise
        return _shape(name, filled, f"{where} (with transformers' defaults)")


def _library_defaults(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """``cfg`` with the fields it leaves out filled as transformers fills them for its
    ``model_type`` (multimodal ``text_config`` sections often omit heads and head_dim);
    None when transformers is missing or does not know the model type."""
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str):
        return None
    try:
        from transformers import AutoConfig

        known = AutoConfig.for_model(model_type, **{k: v for k, v in cfg.items()
                                                    if k != "model_type"}).to_dict()
    except Exception:  # any failure means: no defaults to offer, report the missing field
        return None
    return {**known, **{k: v for k, v in cfg.items() if v is not None}}


def _shape(name: str, cfg: Mapping[str, Any], where: str) -> KVCacheShape:
    layers = _int(cfg, _LAYERS, where)
    assert layers is not None
    window, window_layers = _window_layers(cfg, layers, where)
    if cfg.get("kv_lora_rank") is not None:  # multi-head latent attention
        rank = _int(cfg, ("kv_lora_rank",), where)
        rope = _int(cfg, ("qk_rope_head_dim",), where)
        assert rank is not None and rope is not None
        return KVCacheShape(name, layers, 1, rank + rope, 1, window, window_layers, "MLA")
    heads = _int(cfg, _HEADS, where)
    assert heads is not None
    head_dim = _int(cfg, ("head_dim",), where, required=False)
    if head_dim is None:
        hidden = _int(cfg, _HIDDEN, where)
        assert hidden is not None
        if hidden % heads:
            raise OptionError("config", f"{where}: hidden size {hidden} is not a multiple of "
                                        f"{heads} heads; give head_dim")
        head_dim = hidden // heads
    kv_heads = _kv_heads(cfg, heads, where)
    if kv_heads > heads or heads % kv_heads:
        raise OptionError("config", f"{where}: {kv_heads} KV heads do not divide {heads} "
                                    "attention heads")
    attention = "MHA" if kv_heads == heads else "MQA" if kv_heads == 1 else "GQA"
    return KVCacheShape(name, layers, kv_heads, head_dim, 2, window, window_layers, attention)


# ---------------------------------------------------------------------------------------------
# the formula


def _dtype_bits(dtype: Any) -> tuple[str, int]:
    name = str(dtype).strip().lower().removeprefix("torch.")
    bits = DTYPE_BITS.get(name)
    if bits is None:
        raise OptionError("dtype", f"unknown KV-cache dtype {str(dtype)!r}; choose from "
                                   f"{', '.join(DTYPE_BITS)}")
    return name, bits


def _tokens(tokens: Any) -> np.ndarray:
    if isinstance(tokens, bool):
        raise TypeError("tokens must be an int or a sequence of per-sequence token counts")
    arr = np.asarray(tokens)
    if arr.dtype == object or (arr.size and arr.dtype.kind not in "iu"):
        raise TypeError("tokens must be an int or a sequence of per-sequence token counts, "
                        f"got {type(tokens).__name__} of {arr.dtype}")
    arr = arr.astype(np.int64, copy=False).ravel()
    if arr.size and int(arr.min()) < 0:
        raise ValueError(f"token counts must be >= 0, got {int(arr.min())}")
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


def kv_cache_bytes(config: ModelSpec, tokens: int | Sequence[int] | np.ndarray,
                   dtype: str = "bfloat16") -> KVCacheReport:
    """The KV-cache memory of ``tokens`` tokens for the model ``config`` describes.

    ``tokens``: one sequence's token count, or an array of per-sequence counts (a batch, or the
    sessions a server holds): the sizes add up, each sequence capped at the window on
    sliding-window layers. ``dtype``: the cache's element type (``bfloat16``, ``float16``,
    ``float32``, ``fp8``, ``int8``, ``int4``...). ``config`` as for :func:`kv_cache_shape`.

    Example:
        >>> llama3_8b = {"num_hidden_layers": 32, "num_attention_heads": 32,
        ...              "num_key_value_heads": 8, "hidden_size": 4096}
        >>> kv_cache_bytes(llama3_8b, 1).bytes
        131072
        >>> kv_cache_bytes(llama3_8b, [1000, 24], dtype="fp8").bytes == 1024 * 65536
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


def kv_bytes_per_sequence(config: ModelSpec, tokens: Sequence[int] | np.ndarray,
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
    :func:`kv_cache_bytes`), for the compress and chat reports.

    Example:
        >>> str(kv_cache_change("llama-3.1-8b", 4096, 1024))
        'llama-3.1-8b KV cache (bfloat16): 512 MiB -> 128 MiB (saves 384 MiB, 75.0%)'
    """
    shape = kv_cache_shape(config)
    return KVCacheChange(kv_cache_bytes(shape, before, dtype), kv_cache_bytes(shape, after, dtype))
