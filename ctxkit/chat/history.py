"""A growing chat history in any message format, and its windows given back in that format.

:class:`~ctxkit.chat.memory.ChatMemory` selects on the internal form of
:mod:`ctxkit.io.formats` (OpenAI or ShareGPT dicts). :class:`HistoryFormat` sits beside it: each
added message is converted once (:func:`~ctxkit.io.formats.to_internal`) and kept as it came,
and a window computed on the internal form is mapped back (:meth:`HistoryFormat.restore`): an
untouched message is the very object added, a shortened one a copy of its type with the new
text, and a message ctxkit adds to the window (the recalled-turns block of a prefix-cache
window) a new message of the history's types (LangChain ``HumanMessage``, LlamaIndex
``ChatMessage``, an Anthropic dict).

A history is one format: plain ``{"role", "content"}`` text dicts read as OpenAI or Anthropic,
and any other mix is a one-line :class:`~ctxkit.errors.InputError`.

Example:
    >>> fmt = HistoryFormat()
    >>> msg, kind = fmt.convert({"role": "user", "content": [
    ...     {"type": "image", "source": {"type": "url", "url": "https://x.org/a.png"}}]}, 0)
    >>> fmt.append(msg, kind); fmt.format, msg["content"]
    ('anthropic', [{'type': 'image_url'}])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ctxkit.chat.pipeline import CompressChatResult
from ctxkit.chat.result import Ledger
from ctxkit.errors import InputError
from ctxkit.io import frameworks
from ctxkit.io.formats import Conversation, message_kind, to_internal
from ctxkit.io.messages import message_text, raw_role

__all__ = ["HistoryFormat"]

_PLAIN = (None, "openai", "anthropic")  # formats a plain text dict is compatible with
_NATIVE = (None, "openai", "sharegpt")  # formats ChatMemory selects on as they are
_ROLES = {"human": "user", "gpt": "assistant", "developer": "system"}


class HistoryFormat:
    """The input format of a growing history (``None`` while it holds plain text dicts only)
    and the messages as they were added (``originals``)."""

    def __init__(self) -> None:
        self.format: str | None = None
        self.originals: list[Any] = []

    def convert(self, message: Any, index: int) -> tuple[dict[str, Any], str | None]:
        """``message`` (the ``index``-th) in the internal form, and the format it shows;
        raises when it is no message or another format than the history's. Changes nothing:
        :meth:`append` records it once the caller accepted it."""
        kind = message_kind(message, index)
        fmt = self.format
        if kind is None:
            ok = fmt in _PLAIN
        else:
            ok = kind == fmt or (fmt is None and (not self.originals or kind in _PLAIN))
        if not ok:
            theirs = fmt or "openai"
            raise InputError(f"messages mix {theirs} and {kind or 'plain dict'} turns (message "
                             f"{index} is {kind or 'a plain dict'})")
        return to_internal(message, index, kind or fmt or "openai"), kind

    def append(self, message: Any, kind: str | None) -> None:
        """Record an accepted message as it came (``kind`` from :meth:`convert`)."""
        if kind is not None:
            self.format = kind
        self.originals.append(message)

    def restore(self, window: CompressChatResult,
                history: Sequence[Mapping[str, Any]]) -> CompressChatResult:
        """``window`` (computed on ``history``, the internal form of :attr:`originals`) with
        its messages in the input's format and types; OpenAI and ShareGPT windows as they are.
        """
        if self.format in _NATIVE:
            return window
        recalled, shortened = _indices(window.ledger, "recalled"), _indices(window.ledger,
                                                                          "shortened")
        body = [k for k in window.kept if k not in recalled]
        conv = Conversation(self.format, self.originals, [])
        out: list[Any] = []
        p = 0
        for m in window.messages:
            k = body[p] if p < len(body) else None
            if k is not None and (m == history[k] or (k in shortened and _shortened_from(
                    m, history[k]))):
                text = {k: message_text(m, k)} if k in shortened else {}
                out.append(conv.restore([k], text)[0])
                p += 1
            else:  # a message ctxkit added to the window
                out.append(self._new(m))
        return replace(window, messages=out, format=self.format)

    def _new(self, m: Mapping[str, Any]) -> Any:
        role = raw_role(m)
        role = _ROLES.get(role, role)
        text = message_text(m, 0)
        if self.format == "anthropic":
            return {"role": role, "content": text}
        return frameworks.new_message(self.format, role, text)


def _indices(ledger: Any, action: str) -> set[int]:
    """Indices of the ledger's entries with ``action``; a :class:`Ledger` answers from its
    columns, without building an entry per dropped turn."""
    if isinstance(ledger, Ledger):
        return set(ledger.indices(action).tolist())
    return {c.index for c in ledger if c.action == action}


def _shortened_from(m: Mapping[str, Any], original: Mapping[str, Any]) -> bool:
    """Whether window message ``m`` is ``original`` with shorter text (same other keys)."""
    rest = {k: v for k, v in m.items() if k != "content"}
    return rest == {k: v for k, v in original.items() if k != "content"} and len(
        message_text(m, 0)) < len(message_text(original, 0))
