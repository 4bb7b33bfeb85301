"""LangChain and LlamaIndex chat messages to ctxkit's internal form and back.

Neither package is imported here: a message is recognised by its class when the package that
defines it is already loaded (it must be, for the caller to hold one), so ctxkit keeps working
without them (the ``langchain`` and ``llamaindex`` extras).

- LangChain (``langchain_core.messages``): ``SystemMessage``, ``HumanMessage``, ``AIMessage``
  (``tool_calls`` and ``invalid_tool_calls``), ``ToolMessage`` (``tool_call_id``),
  ``FunctionMessage`` and ``ChatMessage`` with an OpenAI role; content as text or blocks.
- LlamaIndex (``llama_index.core.base.llms.types.ChatMessage``): every ``MessageRole``
  (``chatbot`` and ``model`` are the assistant), text / image / thinking / tool-call blocks,
  tool calls in ``additional_kwargs["tool_calls"]`` (OpenAI or Anthropic shape) and the call a
  tool turn answers in ``additional_kwargs["tool_call_id"]``.

A shortened message is a copy of its class (``model_copy``) with the new text; every other
field (ids, tool calls, metadata) stays.

Example:
    >>> framework_of({"role": "user", "content": "hi"}) is None
    True
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from ctxkit.errors import InputError

__all__ = ["compact_parts", "framework_of", "new_message", "openai_call", "shortened",
           "to_openai"]

_LANGCHAIN = "langchain_core.messages"
_LLAMAINDEX = "llama_index.core.base.llms.types"
_LANGCHAIN_ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool",
                    "function": "function", "developer": "developer",
                    "AIMessageChunk": "assistant", "HumanMessageChunk": "user",
                    "SystemMessageChunk": "system", "ToolMessageChunk": "tool",
                    "FunctionMessageChunk": "function"}
_LLAMAINDEX_ROLES = {"system": "system", "developer": "developer", "user": "user",
                     "assistant": "assistant", "chatbot": "assistant", "model": "assistant",
                     "tool": "tool", "function": "function"}
_OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_IMAGE_BLOCKS = frozenset({"image_url", "image", "input_image"})


def _loaded_class(module: str, name: str) -> type | None:
    mod = sys.modules.get(module)
    return getattr(mod, name, None) if mod is not None else None


def framework_of(m: Any) -> str | None:
    """``"langchain"``, ``"llamaindex"`` or ``None`` for anything else."""
    base = _loaded_class(_LANGCHAIN, "BaseMessage")
    if base is not None and isinstance(m, base):
        return "langchain"
    chat = _loaded_class(_LLAMAINDEX, "ChatMessage")
    if chat is not None and isinstance(m, chat):
        return "llamaindex"
    return None


def openai_call(call_id: Any, name: Any, arguments: Any, index: int) -> dict[str, Any]:
    """One tool call in OpenAI's shape (arguments as JSON text, as OpenAI sends them).

    Example:
        >>> openai_call("c1", "f", {"x": 1}, 0)["function"]
        {'name': 'f', 'arguments': '{"x": 1}'}
    """
    if not call_id or not name:
        raise InputError(f"message {index} has a tool call without an id or a name")
    args = arguments if isinstance(arguments, str) else json.dumps(
        arguments, ensure_ascii=False, default=str)
    return {"id": str(call_id), "type": "function",
            "function": {"name": str(name), "arguments": args}}


def _text_parts(content: Any, index: int, skip: frozenset[str]) -> list[dict[str, Any]]:
    """LangChain content (text or blocks) as text and image parts; blocks of a type in
    ``skip`` (tool calls also listed in ``tool_calls``) are left out, unknown ones count as
    their JSON."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise InputError(f"message {index} content is {type(content).__name__}, "
                         f"not text or blocks")
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append({"type": "text", "text": block})
        elif not isinstance(block, Mapping):
            raise InputError(f"message {index} has a content block of type "
                             f"{type(block).__name__}")
        elif block.get("type") in skip:
            continue
        elif block.get("type") == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif block.get("type") in ("thinking", "reasoning"):
            text = block.get("thinking", block.get("reasoning", ""))
            parts.append({"type": "text", "text": str(text)})
        elif block.get("type") in _IMAGE_BLOCKS:
            parts.append({"type": "image_url"})
        else:
            parts.append({"type": "text", "text": json.dumps(
                dict(block), ensure_ascii=False, sort_keys=True, default=str)})
    return parts


def compact_parts(parts: list[dict[str, Any]]) -> Any:
    """Text parts alone as one string (a turn that can be shortened); with media, the parts."""
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _from_langchain(m: Any, index: int) -> dict[str, Any]:
    kind = getattr(m, "type", None)
    role = getattr(m, "role", None) if kind == "chat" else _LANGCHAIN_ROLES.get(kind)
    role = {"human": "user", "ai": "assistant"}.get(role, role)
    if role not in _OPENAI_ROLES:
        raise InputError(f"message {index} has unknown role {kind if role is None else role!r} "
                         f"({type(m).__name__})")
    calls = [openai_call(c.get("id"), c.get("name"), c.get("args", {}), index)
             for c in [*(getattr(m, "tool_calls", None) or []),
                       *(getattr(m, "invalid_tool_calls", None) or [])]]
    out: dict[str, Any] = {"role": role, "content": compact_parts(_text_parts(
        m.content, index, frozenset({"tool_use", "tool_call"}) if calls else frozenset()))}
    if calls:
        out["tool_calls"] = calls
    if role == "tool":
        out["tool_call_id"] = str(m.tool_call_id)
    if getattr(m, "name", None):
        out["name"] = str(m.name)
    return out


def _llamaindex_call(call: Any, index: int) -> dict[str, Any]:
    if hasattr(call, "model_dump"):  # an openai SDK object
        call = call.model_dump()
    if not isinstance(call, Mapping):
        raise InputError(f"message {index} has a tool call of type {type(call).__name__}")
    fn = call.get("function")
    if isinstance(fn, Mapping):  # OpenAI shape
        return openai_call(call.get("id"), fn.get("name"), fn.get("arguments", "{}"), index)
    return openai_call(call.get("id"), call.get("name"), call.get("input", {}), index)


def _from_llamaindex(m: Any, index: int) -> dict[str, Any]:
    raw = getattr(m.role, "value", m.role)
    role = _LLAMAINDEX_ROLES.get(str(raw))
    if role is None:
        raise InputError(f"message {index} has unknown role {raw!r}")
    extra = m.additional_kwargs or {}
    parts: list[dict[str, Any]] = []
    calls = [_llamaindex_call(c, index) for c in extra.get("tool_calls") or []]
    for block in m.blocks:
        kind = getattr(block, "block_type", None)
        if kind == "text":
            parts.append({"type": "text", "text": block.text})
        elif kind == "thinking":
            parts.append({"type": "text", "text": block.content or ""})
        elif kind == "tool_call":
            if not any(c["id"] == block.tool_call_id for c in calls):
                calls.append(openai_call(block.tool_call_id, block.tool_name,
                                          block.tool_kwargs, index))
        else:  # image, audio, video, document: media, billed as one image each
            parts.append({"type": "image_url"})
    out: dict[str, Any] = {"role": role, "content": compact_parts(parts)}
    if calls:
        out["tool_calls"] = calls
    answered = extra.get("tool_call_id", extra.get("tool_use_id"))
    if role == "tool" and answered is not None:
        out["tool_call_id"] = str(answered)
    if extra.get("name"):
        out["name"] = str(extra["name"])
    return out


def to_openai(m: Any, index: int) -> dict[str, Any]:
    """A LangChain or LlamaIndex message in the internal OpenAI form.

    Example:
        >>> to_openai(object(), 4)
        Traceback (most recent call last):
        ...
        ctxkit.errors.InputError: message 4 is object, not a LangChain or LlamaIndex message
    """
    kind = framework_of(m)
    if kind == "langchain":
        return _from_langchain(m, index)
    if kind == "llamaindex":
        return _from_llamaindex(m, index)
    raise InputError(f"message {index} is {type(m).__name__}, not a LangChain or LlamaIndex "
                     f"message")


def shortened(m: Any, text: str) -> Any:
    """A copy of LangChain or LlamaIndex message ``m`` (text only) with ``text``."""
    if framework_of(m) == "langchain":
        return m.model_copy(update={"content": text})
    text_block = _loaded_class(_LLAMAINDEX, "TextBlock")
    return m.model_copy(update={"blocks": [text_block(text=text)]})


_LANGCHAIN_CLASSES = {"user": "HumanMessage", "assistant": "AIMessage", "system": "SystemMessage"}


def new_message(kind: str, role: str, text: str) -> Any:
    """A new text message of framework ``kind`` (``"langchain"`` or ``"llamaindex"``, whose
    package is loaded) with OpenAI ``role`` ``user``, ``assistant`` or ``system``: a block that
    ctxkit adds to a window (recalled turns) in the window's own types.

    Example:
        >>> new_message("openai", "user", "hi")
        Traceback (most recent call last):
        ...
        ValueError: new_message builds langchain or llamaindex messages, not openai
    """
    if kind == "langchain":
        return _loaded_class(_LANGCHAIN, _LANGCHAIN_CLASSES[role])(content=text)
    if kind == "llamaindex":
        return _loaded_class(_LLAMAINDEX, "ChatMessage")(role=role, content=text)
    raise ValueError(f"new_message builds langchain or llamaindex messages, not {kind}")
