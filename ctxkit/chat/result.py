"""What :func:`ctxkit.compress_chat`, :class:`ctxkit.ChatMemory` and the prefix window
return: the window in the input's format and the ledger of every changed message."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ctxkit.chat.summary_placement import ChatSummary
from ctxkit.compression.budgeted import BudgetedResult

__all__ = ["CompressChatResult", "MessageChange"]


@dataclass
class MessageChange:
    """One removed or shortened message: ``action`` is ``"dropped"`` or ``"shortened"``."""

    index: int
    role: str
    action: str
    reason: str
    tokens_before: int
    tokens_after: int
    score: float | None = None
    # ``reason`` as data: filler, duplicate, over_budget, shortened, orphaned_tool_result or
    # alternation
    code: str = ""


@dataclass
class CompressChatResult(BudgetedResult):
    """The compressed messages (input format and types) and the ledger of what changed;
    ``system`` is the system prompt given apart (always kept), else ``None``; ``summary`` the
    summary of evicted turns in ``messages`` (:mod:`ctxkit.chat.summary_placement`), else
    ``None``."""

    messages: list[Any]
    original_tokens: int
    compressed_tokens: int
    budget: int
    kept: list[int]  # input indices of the messages in ``messages``
    ledger: list[MessageChange] = field(default_factory=list)
    format: str = "openai"
    system: Any = None
    summary: ChatSummary | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            **self._counts(),
            "format": self.format,
            "kept": self.kept,
            "ledger": [asdict(c) for c in self.ledger],
            # LangChain and LlamaIndex messages as their own JSON-ready dump
            "messages": [m.model_dump() if hasattr(m, "model_dump") else m
                         for m in self.messages],
        }
        if self.system is not None:
            out["system"] = self.system
        if self.summary is not None:
            out["summary"] = self.summary.to_dict()
        return out
