"""ctxkit: make every token of a context window count.

Dedup, pruning to a token budget, density scoring, sequence packing and packed embedding
passes. Submodules load on first use, so ``import ctxkit`` stays fast (no torch import).

Example:
    >>> import ctxkit
    >>> ctxkit.pack_lengths([300, 200, 500], capacity=512).n_bins
    2
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "get_tokenizer": "ctxkit.tokenize",
    "Tokenizer": "ctxkit.tokenize",
    "read_records": "ctxkit.records",
    "Record": "ctxkit.records",
    "RecordError": "ctxkit.records",
    "pack_lengths": "ctxkit.pack.plan",
    "PackPlan": "ctxkit.pack.plan",
    "OnlinePacker": "ctxkit.pack.online",
    "pack_stream": "ctxkit.pack.online",
    "length_grouped_batches": "ctxkit.pack.batching",
    "pack": "ctxkit.pack.collate",
    "PackedBatch": "ctxkit.pack.collate",
    "PackedCollator": "ctxkit.pack.collate",
    "pack_dataset": "ctxkit.pack.hf",
    "dedup": "ctxkit.dedup",
    "DedupResult": "ctxkit.dedup",
    "dedup_messages": "ctxkit.dedup",
    "get_scorer": "ctxkit.scorers",
    "Scorer": "ctxkit.scorers",
    "count_chat_tokens": "ctxkit.chat",
    "LengthBatches": "ctxkit.pack.batching",
    "density": "ctxkit.density",
    "DensityReport": "ctxkit.density",
    "compress": "ctxkit.prune",
    "CompressResult": "ctxkit.prune",
    "compress_chat": "ctxkit.chat",
    "ChatCompression": "ctxkit.chat",
    "PackedEncoder": "ctxkit.embed",
    "evaluate": "ctxkit.evaluate",
    "EvalReport": "ctxkit.evaluate",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxkit' has no attribute {name!r}")
    if name == "dedup":
        # ctxkit.dedup is a callable package: bind the package so submodules stay reachable
        value = importlib.import_module("ctxkit.dedup")
    else:
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
