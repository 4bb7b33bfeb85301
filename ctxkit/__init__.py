"""ctxkit: make every token of a context window count.

Dedup, pruning to a token budget, density scoring, sequence packing and packed embedding
passes. Submodules load on first use, so ``import ctxkit`` stays fast (no torch import).

Example:
    >>> import ctxkit
    >>> ctxkit.pack_lengths([300, 200, 500], capacity=512).n_bins
    2
"""

from __future__ import annotations

from ctxkit._lazy import lazy_exports

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "get_tokenizer": "ctxkit.io.tokenizers",
    "Tokenizer": "ctxkit.io.tokenizers",
    "read_records": "ctxkit.io.records",
    "Record": "ctxkit.io.records",
    "RecordError": "ctxkit.io.records",
    "pack_lengths": "ctxkit.packing.plan",
    "PackLengthsResult": "ctxkit.packing.plan",
    "OnlinePacker": "ctxkit.packing.online",
    "pack_stream": "ctxkit.packing.online",
    "StreamWindow": "ctxkit.packing.online",
    "length_grouped_batches": "ctxkit.packing.batching",
    "pack": "ctxkit.packing.sequences",
    "PackResult": "ctxkit.packing.result",
    "PackedCollator": "ctxkit.packing.collator",
    "PackOptions": "ctxkit.packing.options",
    "pack_dataset": "ctxkit.packing.hf",
    "dedup": "ctxkit.deduplication.pipeline",
    "DedupResult": "ctxkit.deduplication.result",
    "MinHashOptions": "ctxkit.deduplication.options",
    "dedup_messages": "ctxkit.deduplication.messages",
    "DedupMessagesResult": "ctxkit.deduplication.messages",
    "get_scorer": "ctxkit.compression.scoring.registry",
    "Scorer": "ctxkit.compression.scoring.registry",
    "count_chat_tokens": "ctxkit.chat.pipeline",
    "LengthBatches": "ctxkit.packing.batching",
    "density": "ctxkit.compression.density",
    "DensityResult": "ctxkit.compression.density",
    "DensityOptions": "ctxkit.compression.options",
    "compress": "ctxkit.compression.text.pipeline",
    "CompressResult": "ctxkit.compression.text.pipeline",
    "compress_chat": "ctxkit.chat.pipeline",
    "CompressChatResult": "ctxkit.chat.pipeline",
    "ChatMemory": "ctxkit.chat.memory",
    "CompressOptions": "ctxkit.compression.options",
    "ChatOptions": "ctxkit.chat.options",
    "cache_accounting": "ctxkit.chat.billing",
    "CacheAccountingResult": "ctxkit.chat.billing",
    "CacheMeter": "ctxkit.chat.billing",
    "PrefixCacheOptions": "ctxkit.chat.prefix_window",
    "CachedTurn": "ctxkit.chat.billing",
    "ChatSummary": "ctxkit.chat.summary_placement",
    "SummaryOptions": "ctxkit.chat.summary_placement",
    "ExtractiveSummarizer": "ctxkit.chat.summarizers",
    "SmolLM2Summarizer": "ctxkit.chat.summarizers",
    "OpenAISummarizer": "ctxkit.chat.summarizers",
    "openai_summarizer": "ctxkit.chat.summarizers",
    "PackedEncoder": "ctxkit.embedding.encoder",
    "PackedClassifier": "ctxkit.embedding.classifier",
    "EmbedOptions": "ctxkit.embedding.options",
    "ClassifyOptions": "ctxkit.embedding.options",
    "evaluate": "ctxkit.evaluation.harness",
    "EvaluateResult": "ctxkit.evaluation.harness",
    "kv_cache_bytes": "ctxkit.kvcache.accounting",
    "kv_cache_report": "ctxkit.kvcache.accounting",
    "KVCacheReport": "ctxkit.kvcache.accounting",
    "balance": "ctxkit.training.balance",
    "BalanceResult": "ctxkit.training.balance",
    "BalanceOptions": "ctxkit.training.balance",
    "balance_lengths": "ctxkit.training.balance",
    "BalanceLengthsResult": "ctxkit.training.balance",
    "WindowCost": "ctxkit.training.cost",
    "BalancedSampler": "ctxkit.training.sampler",
    "BalancedBatchSampler": "ctxkit.training.sampler",
    "freeze_token_rows": "ctxkit.training.separator",
    "FreezeTokenRowsResult": "ctxkit.training.separator",
    "check_packing": "ctxkit.training.check",
    "CheckPackingResult": "ctxkit.training.check",
    "CheckPackingOptions": "ctxkit.training.check",
    "SegmentCheck": "ctxkit.training.check",
    "PackingCause": "ctxkit.training.diagnose",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


__getattr__, __dir__ = lazy_exports("ctxkit", _EXPORTS, globals(), ["__version__"])
