"""``ctxkit demo``: every stage of ctxkit on data it generates itself.

:mod:`ctxkit.demo.data` generates Alpaca-style records (with planted near copies) and a long
chat history; :mod:`ctxkit.demo.stages` runs dedup, chat compression, packing and a packed
embedding pass on them, each returning a small report dataclass.

Example:
    >>> from ctxkit.demo import demo_records
    >>> sorted(demo_records(3, seed=0)[0])
    ['id', 'input', 'instruction', 'output']
"""

from ctxkit.demo.data import DemoChat, DemoData, demo_chat, demo_dataset, demo_records
from ctxkit.demo.stages import (
    ChatStage,
    DedupStage,
    DemoRun,
    EmbedStage,
    PackStage,
    StrategyRow,
    chat_stage,
    dedup_stage,
    embed_stage,
    file_records,
    pack_stage,
    record_text,
    run_demo,
)

__all__ = ["ChatStage", "DedupStage", "DemoChat", "DemoData", "DemoRun", "EmbedStage",
           "PackStage", "StrategyRow", "chat_stage", "dedup_stage", "demo_chat", "demo_dataset",
           "demo_records", "embed_stage", "file_records", "pack_stage", "record_text", "run_demo"]
