"""What every compression result shares: its token counts against the budget, the ratio, the
KV-cache memory before and after, and the head of its JSON form."""

from __future__ import annotations

from typing import Any

__all__ = ["BudgetedResult"]


class BudgetedResult:
    """Mixin for result dataclasses with ``original_tokens``, ``compressed_tokens`` and
    ``budget`` fields (:class:`~ctxkit.compression.text.pipeline.CompressResult`,
    :class:`~ctxkit.chat.pipeline.CompressChatResult`)."""

    original_tokens: int
    compressed_tokens: int
    budget: int

    @property
    def ratio(self) -> float:
        """compressed_tokens / original_tokens (1.0 for an empty input)."""
        return self.compressed_tokens / self.original_tokens if self.original_tokens else 1.0

    def kv_cache(self, model: Any, dtype: str = "bfloat16") -> Any:
        """The KV cache of the original and the compressed input for ``model`` (a preset
        name, ``config.json``, model directory or config dict): a
        :class:`~ctxkit.kvcache.accounting.KVCacheChange`. Tokens are counted by the tokenizer
        the compression used; pass the model's own (``hf:<dir>``) for exact figures."""
        from ctxkit.kvcache.accounting import kv_cache_change

        return kv_cache_change(model, self.original_tokens, self.compressed_tokens, dtype)

    def _counts(self) -> dict[str, Any]:
        return {"original_tokens": self.original_tokens,
                "compressed_tokens": self.compressed_tokens, "budget": self.budget,
                "ratio": self.ratio}
