"""What :func:`ctxkit.compress_chat`, :class:`ctxkit.ChatMemory` and the prefix window
return: the window in the input's format and the ledger of every changed message."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ctxkit.chat.summary_placement import ChatSummary
from ctxkit.compression.budgeted import BudgetedResult

__all__ = ["CompressChatResult", "Ledger", "MessageChange"]


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


@dataclass(frozen=True)
class _Batch:
    """Many entries of one action and code, as columns (``reason`` formats each ``detail``)."""

    indices: np.ndarray
    roles: Sequence[str]  # by message index
    action: str
    code: str
    reason: str | Callable[[int], str]
    tokens_before: np.ndarray
    scores: np.ndarray | None = None
    details: np.ndarray | None = None

    def changes(self) -> list[MessageChange]:
        reason, roles = self.reason, self.roles
        details = self.details.tolist() if self.details is not None else None
        scores = self.scores.tolist() if self.scores is not None else None
        return [MessageChange(i, roles[i], self.action,
                              reason if details is None else reason(details[k]), before, 0,
                              None if scores is None else scores[k], self.code)
                for k, (i, before) in enumerate(zip(self.indices.tolist(),
                                                    self.tokens_before.tolist()))]


class Ledger(Sequence[MessageChange]):
    """Every removed, shortened or recalled message of a window, in index order: a sequence
    of :class:`MessageChange` that compares equal to the list of its entries.

    A window over a long history drops thousands of turns each call; they are recorded as
    columns (:meth:`add_batch`) and become entries only when read, so a caller that sends the
    window and never reads its ledger does not pay for one object per dropped turn.

    Example:
        >>> ledger = Ledger([MessageChange(4, "user", "dropped", "filler", 5, 0)])
        >>> ledger.add_batch(np.array([1, 2]), ["user"] * 5, "dropped", "duplicate",
        ...                  lambda j: f"duplicate of message {j}", np.array([7, 9]),
        ...                  details=np.array([3, 3]))
        >>> [(c.index, c.reason) for c in ledger]
        [(1, 'duplicate of message 3'), (2, 'duplicate of message 3'), (4, 'filler')]
        >>> len(ledger), ledger.indices("dropped").tolist()
        (3, [1, 2, 4])
    """

    def __init__(self, entries: Sequence[MessageChange] = ()):
        self._entries = list(entries)
        self._batches: list[_Batch] = []
        self._sorted: list[MessageChange] | None = None

    def add(self, change: MessageChange) -> None:
        self._entries.append(change)
        self._sorted = None

    def add_batch(self, indices: np.ndarray, roles: Sequence[str], action: str, code: str,
                  reason: str | Callable[[int], str], tokens_before: np.ndarray, *,
                  scores: np.ndarray | None = None, details: np.ndarray | None = None
                  ) -> None:
        """Entries for ``indices`` with one ``action`` and ``code``; ``reason`` is a string,
        or a function of each entry's ``details`` value; ``roles`` maps an index to its role."""
        if len(indices):
            self._batches.append(_Batch(np.asarray(indices, np.int64), roles, action, code,
                                        reason, np.asarray(tokens_before, np.int64),
                                        scores, details))
            self._sorted = None

    def discard(self, index: int) -> None:
        """Remove the entries of message ``index``."""
        self._entries = [c for c in self._entries if c.index != index]
        self._batches = [b if index not in b.indices else _Batch(
            b.indices[keep := b.indices != index], b.roles, b.action, b.code, b.reason,
            b.tokens_before[keep], None if b.scores is None else b.scores[keep],
            None if b.details is None else b.details[keep]) for b in self._batches]
        self._sorted = None

    def indices(self, action: str | None = None, codes: Sequence[str] | None = None
                ) -> np.ndarray:
        """Indices of the entries with ``action`` (and a code in ``codes``), ascending,
        without building the entries."""
        def wanted(a: str, c: str) -> bool:
            return (action is None or a == action) and (codes is None or c in codes)
        parts = [b.indices for b in self._batches if wanted(b.action, b.code)]
        parts.append(np.array([c.index for c in self._entries if wanted(c.action, c.code)],
                              np.int64))
        return np.sort(np.concatenate(parts), kind="stable")

    def _all(self) -> list[MessageChange]:
        if self._sorted is None:
            items = [c for b in self._batches for c in b.changes()] + self._entries
            items.sort(key=lambda c: c.index)  # stable: one index's entries as added
            self._sorted = items
        return self._sorted

    def __len__(self) -> int:
        return len(self._entries) + sum(len(b.indices) for b in self._batches)

    def __getitem__(self, k):  # type: ignore[override]
        return self._all()[k]

    def __iter__(self) -> Iterator[MessageChange]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Ledger, list, tuple)):
            return self._all() == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Ledger({self._all()!r})"


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
    ledger: Sequence[MessageChange] = field(default_factory=list)
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
