"""Reading a model config into the per-token shape of its KV cache (:class:`KVCacheShape`).

The config is a preset name (:data:`ctxkit.kvcache.presets.PRESETS`), a ``config.json``, a
model directory or a dict; GQA, MQA, MLA and sliding-window variants are read as
``docs/kvcache.md`` describes.

Example:
    >>> kv_cache_shape("llama-3.1-8b").values_per_token
    65536
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.errors import OptionError
from ctxkit.kvcache.presets import PRESETS

__all__ = ["KVCacheShape", "ModelSpec", "kv_cache_shape"]

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


ModelSpec = str | Path | Mapping[str, Any] | KVCacheShape


def _load(config: str | Path | Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """``(name, config dict)`` from a preset name, a config.json, a model directory or a dict."""
    if isinstance(config, Mapping):
        return str(config.get("_name_or_path") or config.get("model_type") or "config"), config
    if not isinstance(config, (str, Path)):
        raise OptionError("config", f"config must be a dict, a path or a preset name, got "
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
