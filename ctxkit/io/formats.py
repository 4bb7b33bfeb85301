"""Every chat-message format in and out, through one internal form.

Accepted, one format per conversation, detected from the messages:

=============  ==================================================================================
``openai``     ``{"role", "content"}`` dicts: text or parts (``text``, ``image_url``...),
               ``tool_calls`` and ``tool`` turns with ``tool_call_id``, legacy ``function_call``
               and ``function`` turns
``anthropic``  ``{"role": "user" | "assistant", "content"}`` with blocks ``text``, ``image``,
               ``tool_use``, ``tool_result`` (in the next user turn); the system prompt is
               given apart (``system=``)
``sharegpt``   ``{"from", "value"}`` turns
``langchain``  ``langchain_core`` ``BaseMessage`` objects (see :mod:`ctxkit.io.frameworks`)
``llamaindex`` ``llama_index`` ``ChatMessage`` objects (see :mod:`ctxkit.io.frameworks`)
=============  ==================================================================================

Dicts that use none of the format-specific keys or blocks (plain text turns) read the same in
OpenAI and Anthropic form; they are ``openai``, or ``anthropic`` when a system prompt is given
apart. :func:`read_conversation` validates a conversation (a one-line
:class:`~ctxkit.errors.InputError` naming the message for an unknown role, a missing content,
a tool result answering no call) and views it in the internal form: OpenAI dicts, one per input
message, with tool calls as ``tool_calls`` (arguments as JSON text), tool results as role
``tool`` answering ``tool_call_id`` (or ``tool_result_ids``: one Anthropic turn answering several
parallel calls) and images as ``image_url`` parts. OpenAI and ShareGPT messages are their own
internal form. :meth:`Conversation.restore` maps back: an untouched message is the very object
it came as, a shortened one a copy of its type with the new text.

Example:
    >>> conv = read_conversation([
    ...     {"role": "user", "content": "Weather in Oslo?"},
    ...     {"role": "assistant", "content": [
    ...         {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}]},
    ...     {"role": "user", "content": [
    ...         {"type": "tool_result", "tool_use_id": "t1", "content": "4 C"}]}],
    ...     system="Be brief.")
    >>> conv.format, [m["role"] for m in conv.internal]
    ('anthropic', ['system', 'user', 'assistant', 'tool'])
    >>> conv.internal[2]["tool_calls"][0]["function"]
    {'name': 'weather', 'arguments': '{"city": "Oslo"}'}
    >>> conv.restore([2], {})[0] is conv.messages[2]
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxkit.errors import InputError
from ctxkit.io import frameworks
from ctxkit.io.frameworks import compact_parts, openai_call
from ctxkit.io.messages import (
    OPENAI_ROLES,
    check_tool_results,
    dict_format,
    message_format,
)

__all__ = ["FORMATS", "IMAGE_TOKENS", "Conversation", "detect_format", "image_parts",
           "message_kind", "read_conversation", "to_internal"]

FORMATS = ("openai", "anthropic", "sharegpt", "langchain", "llamaindex")
# Tokens billed per image: OpenAI's published cost of a low-detail image (85 tokens, "Calculating
# costs" in platform.openai.com/docs/guides/images-vision); a high-detail or Anthropic image
# costs more (Anthropic: about width * height / 750), so set ``image_tokens`` for your model.
IMAGE_TOKENS = 85
IMAGE_TYPES = frozenset({"image_url", "image", "input_image"})
# blocks that only Anthropic's format has, and parts (and keys) that only OpenAI's has
_ANTHROPIC_BLOCKS = frozenset({"image", "document", "tool_use", "tool_result", "thinking",
                               "redacted_thinking"})
_OPENAI_PARTS = frozenset({"image_url", "input_audio", "file", "refusal"})
_OPENAI_KEYS = ("tool_calls", "function_call", "tool_call_id", "name")
_ANTHROPIC_ROLES = ("assistant", "user")


def image_parts(m: Mapping[str, Any]) -> int:
    """Image parts in an internal-form message's content (each billed ``image_tokens``).

    Example:
        >>> image_parts({"role": "user", "content": [{"type": "text", "text": "a"},
        ...                                          {"type": "image_url"}]})
        1
    """
    content = m.get("content")
    if not isinstance(content, list):
        return 0
    return sum(isinstance(p, Mapping) and p.get("type") in IMAGE_TYPES for p in content)


def _dict_kind(m: Mapping[str, Any]) -> str | None:
    """``openai``, ``anthropic`` or ``None`` (readable as either, or an unknown role that the
    format's reader reports) for a dict with a role."""
    if m.get("role") not in OPENAI_ROLES:
        return None
    if m.get("role") not in _ANTHROPIC_ROLES or any(k in m for k in _OPENAI_KEYS):
        return "openai"
    content = m.get("content")
    types = {b.get("type") for b in content if isinstance(b, Mapping)} \
        if isinstance(content, list) else set()
    if types & _ANTHROPIC_BLOCKS:
        return "anthropic"
    return "openai" if types & _OPENAI_PARTS else None


def _kind(m: Any, index: int) -> str | None:
    kind = frameworks.framework_of(m)
    if kind is not None:
        return kind
    if isinstance(m, Mapping) and "role" in m:
        return _dict_kind(m)
    return dict_format(m, index)  # sharegpt, or the error naming the message


def message_kind(m: Any, index: int) -> str | None:
    """The format one message shows (one of :data:`FORMATS`), or ``None`` for a plain dict that
    reads the same as OpenAI and Anthropic; a one-line error for a message of no format.

    Example:
        >>> message_kind({"role": "user", "content": "hi"}, 0) is None
        True
        >>> message_kind({"role": "user", "content": [{"type": "image", "source": {}}]}, 0)
        'anthropic'
    """
    return _kind(m, index)


def to_internal(m: Any, index: int, fmt: str) -> dict[str, Any]:
    """One message of a ``fmt`` conversation in the internal form (a new dict), so a growing
    history converts each message once (tool results are checked against their calls by the
    caller, on the internal form).

    Example:
        >>> to_internal({"role": "user", "content": [{"type": "text", "text": "hi"}]}, 0,
        ...             "anthropic")
        {'role': 'user', 'content': 'hi'}
    """
    if fmt == "anthropic":
        return _from_anthropic(m, index)
    if fmt in ("langchain", "llamaindex"):
        return frameworks.to_openai(m, index)
    if not isinstance(m, Mapping):
        raise InputError(f"message {index} is {type(m).__name__}, not an object")
    return dict(m)


def detect_format(messages: Sequence[Any], system: Any = None) -> str:
    """The format of a conversation, one of :data:`FORMATS`; raises on a mix.

    Example:
        >>> detect_format([{"from": "human", "value": "hi"}])
        'sharegpt'
        >>> detect_format([{"role": "user", "content": "hi"}]), \\
        ...     detect_format([{"role": "user", "content": "hi"}], system="Be brief.")
        ('openai', 'anthropic')
    """
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InputError(f"messages must be a list of messages, got {type(messages).__name__}")
    seen: dict[str, int] = {}
    for i, m in enumerate(messages):
        kind = _kind(m, i)
        if kind is not None:
            seen.setdefault(kind, i)
    if len(seen) > 1:
        (a, _), (b, j) = sorted(seen.items(), key=lambda kv: kv[1])[:2]
        raise InputError(f"messages mix {a} and {b} turns (message {j} is {b})")
    if seen:
        return next(iter(seen))
    return "anthropic" if system is not None else "openai"


# ---------------------------------------------------------------------------------------------
# Anthropic


def _text_part(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def _block_parts(block: Any, index: int) -> list[dict[str, Any]]:
    """Text and image parts of an Anthropic content block (other blocks count as JSON)."""
    if isinstance(block, str):
        return [_text_part(block)]
    if not isinstance(block, Mapping):
        raise InputError(f"message {index} has a content block of type {type(block).__name__}")
    kind = block.get("type")
    if kind == "text":
        return [_text_part(str(block.get("text", "")))]
    if kind == "thinking":
        return [_text_part(str(block.get("thinking", "")))]
    if kind == "image":
        return [{"type": "image_url"}]
    return [_text_part(json.dumps(dict(block), ensure_ascii=False, sort_keys=True, default=str))]


def _from_anthropic(m: Any, index: int) -> dict[str, Any]:
    if not isinstance(m, Mapping):
        raise InputError(f"message {index} is {type(m).__name__}, not an object")
    role = m.get("role")
    if role not in _ANTHROPIC_ROLES:
        raise InputError(f"message {index} has unknown role {role!r} (known: assistant, user; "
                         f"the system prompt is given apart)")
    if "content" not in m:
        raise InputError(f"message {index} ({role}) has no 'content'")
    content = m["content"]
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise InputError(f"message {index} content is {type(content).__name__}, "
                         f"not text or blocks")
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[str] = []
    for block in content:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "tool_use":
            calls.append(openai_call(block.get("id"), block.get("name"), block.get("input", {}),
                                     index))
        elif kind == "tool_result":
            if not block.get("tool_use_id"):
                raise InputError(f"message {index} has a tool_result block with no tool_use_id")
            results.append(str(block["tool_use_id"]))
            inner = block.get("content", "")
            for b in [inner] if isinstance(inner, str) else inner or []:
                parts.extend(_block_parts(b, index))
        else:
            parts.extend(_block_parts(block, index))
    out: dict[str, Any] = {"role": "tool" if results else role, "content": compact_parts(parts)}
    if calls:
        out["tool_calls"] = calls
    if results:
        out["tool_result_ids"] = results
    return out


def _shortened_dict(m: Mapping[str, Any], key: str, text: str) -> dict[str, Any]:
    content = m[key]
    if isinstance(content, list):  # all text blocks: one block, the last one's keys kept
        last = [b for b in content if isinstance(b, Mapping)][-1:]
        return {**m, key: [{**(last[0] if last else {}), "type": "text", "text": text}]}
    return {**m, key: text}


# ---------------------------------------------------------------------------------------------
# the conversation


@dataclass(frozen=True)
class Conversation:
    """A validated conversation: the input ``messages`` in their ``format``, the ``system``
    prompt given apart (or ``None``) and the ``internal`` form (the system prompt first when
    given, then one OpenAI dict per message)."""

    format: str
    messages: list[Any]
    internal: list[Any]
    system: Any = None

    @property
    def offset(self) -> int:
        """Index in ``internal`` of ``messages[0]``."""
        return 0 if self.system is None else 1

    def restore(self, kept: Sequence[int], new_text: Mapping[int, str]) -> list[Any]:
        """The messages at ``kept`` (input indices) in the input's format and types: the very
        object when untouched, a copy of its type with ``new_text[i]`` when shortened."""
        return [self.messages[i] if i not in new_text else self._shortened(i, new_text[i])
                for i in kept]

    def _shortened(self, i: int, text: str) -> Any:
        m = self.messages[i]
        if self.format in ("langchain", "llamaindex"):
            return frameworks.shortened(m, text)
        return _shortened_dict(m, "value" if self.format == "sharegpt" else "content", text)


def _system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):  # Anthropic's system blocks
        return "".join(p["text"] for p in (_block_parts(b, -1)[0] for b in system)
                       if p["type"] == "text")
    raise InputError(f"system must be text or a list of text blocks, got "
                     f"{type(system).__name__}")


def read_conversation(messages: Sequence[Any], *, system: Any = None) -> Conversation:
    """Detect, validate and view a conversation in the internal form (see the module doc).

    Example:
        >>> read_conversation([{"role": "tool", "tool_call_id": "c1", "content": "42"}])
        Traceback (most recent call last):
        ...
        ctxkit.errors.InputError: message 0 answers tool call 'c1', which no earlier message makes
    """
    fmt = detect_format(messages, system)
    if fmt == "anthropic":
        internal = [_from_anthropic(m, i) for i, m in enumerate(messages)]
    elif fmt in ("langchain", "llamaindex"):
        internal = [frameworks.to_openai(m, i) for i, m in enumerate(messages)]
    else:
        internal = list(messages)
    message_format(internal)  # roles known, content present
    check_tool_results(internal)
    if system is not None:
        text = _system_text(system)
        head = {"from": "system", "value": text} if fmt == "sharegpt" else \
            {"role": "system", "content": text}
        internal = [head, *internal]
    return Conversation(fmt, list(messages), internal, system)
