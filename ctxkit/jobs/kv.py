"""``--kv-model`` / ``--kv-dtype`` for the jobs that report KV-cache memory (compress, chat,
eval): the options checked once, up front, and the rows every report shows the same way."""

from __future__ import annotations

from typing import Any

from ctxkit.errors import OptionError

__all__ = ["check_kv", "kv_note", "kv_rows"]


def check_kv(kv_model: str | None, kv_dtype: str = "bfloat16") -> Any:
    """The model's :class:`~ctxkit.kvcache.shape.KVCacheShape`, or None without
    ``kv_model``; a bad model or dtype is an :class:`OptionError` naming the flag."""
    if kv_model is None:
        return None
    from ctxkit.kvcache.accounting import kv_cache_bytes
    from ctxkit.kvcache.shape import kv_cache_shape

    try:
        shape = kv_cache_shape(kv_model)
    except OptionError as exc:
        raise OptionError("--kv-model", f"--kv-model: {exc}") from None
    try:
        kv_cache_bytes(shape, 0, dtype=kv_dtype)
    except OptionError as exc:
        raise OptionError("--kv-dtype", f"--kv-dtype: {exc}") from None
    return shape


def kv_rows(change: Any) -> list[tuple[str, Any]]:
    """Summary rows for a :class:`~ctxkit.kvcache.accounting.KVCacheChange`."""
    from ctxkit.kvcache.accounting import format_bytes

    before = change.before
    return [(f"KV cache before ({before.model}, {before.dtype})", format_bytes(before.bytes)),
            ("KV cache after", format_bytes(change.after.bytes)),
            ("KV cache saved", f"{format_bytes(change.saved_bytes)} ({1 - change.ratio:.1%})")]


def kv_note(size: Any, tokenizer: str) -> str:
    """How the KV figures were computed, for the report's closing notes."""
    return (f"KV cache: {size.formula()}; tokens counted with {tokenizer} "
            "(use the model's tokenizer for exact figures); weights and activations not counted")
