"""One parser for chat messages, shared by every stage that reads a conversation.

Two formats are accepted, and a conversation may not mix them:

- OpenAI: ``{"role", "content", "name"?, "tool_calls"?, "tool_call_id"?}``, where ``content``
  is text, ``None`` or a list of parts (``{"type": "text", "text": ...}``, images...);
- ShareGPT: ``{"from", "value"}`` with roles ``human``, ``gpt``, ``system``, ``function_call``
  and ``observation``.

:func:`parse_messages` validates a conversation and returns one :class:`Message` view per turn
(the input dicts are never modified); :func:`normalize_messages` rewrites turns to OpenAI form.

Example:
    >>> turns = parse_messages([{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}])
    >>> [(m.role, m.text) for m in turns]
    [('user', 'hi'), ('assistant', 'yo')]
    >>> message_format([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    'openai'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxkit.errors import InputError

__all__ = [
    "ASSISTANT_ROLES",
    "MESSAGE_KEYS",
    "SYSTEM_ROLES",
    "TOOL_CALL_ROLES",
    "TOOL_RESULT_ROLES",
    "ToolPairing",
    "USER_ROLES",
    "Message",
    "answered_ids",
    "check_tool_results",
    "dict_format",
    "is_courtesy",
    "latest_user_text",
    "message_format",
    "message_text",
    "normalize_messages",
    "parse_message",
    "parse_messages",
    "raw_role",
    "tool_call_ids",
]

# keys under which datasets store a conversation, in the order they are looked for
MESSAGE_KEYS = ("messages", "conversations", "conversation", "dialog")
# ShareGPT and other datasets' role names for the OpenAI ones
ROLE_ALIASES = {"human": "user", "gpt": "assistant", "bot": "assistant", "model": "assistant"}
# the roles of each side of a conversation, as raw_role gives them in any dict format
SYSTEM_ROLES = frozenset({"system", "developer"})
USER_ROLES = frozenset({"user", "human"})
ASSISTANT_ROLES = frozenset({"assistant", "gpt", "bot", "model"})
TOOL_RESULT_ROLES = frozenset({"tool", "function", "observation"})
TOOL_CALL_ROLES = frozenset({"function_call"})  # ShareGPT's tool call turn
# roles a turn may have in each dict format; any other is bad input, not a guess
OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
SHAREGPT_ROLES = frozenset({"system", "human", "user", "gpt", "assistant", "bot", "model",
                            "function_call", "observation", "tool", "function"})
_TOOL_CALL_KEYS = ("tool_calls", "function_call")


@dataclass(frozen=True)
class Message:
    """A read-only view of one turn.

    ``role`` is the OpenAI name (``human`` -> ``user``...), ``raw_role`` the name as written;
    ``text`` joins the text parts of list content; ``media`` says the content also has
    non-text parts (images, audio); ``tool_call_ids`` are the ids of the calls this turn makes
    and ``tool_call_id`` the call it answers.
    """

    index: int
    role: str
    raw_role: str
    text: str
    media: bool = False
    calls_tool: bool = False
    tool_call_ids: tuple[str, ...] = ()
    tool_call_id: str | None = None

    @property
    def is_tool_result(self) -> bool:
        return self.raw_role in TOOL_RESULT_ROLES


# Thanks, greetings and "ok" phrases, in any mix with punctuation or emoji: such a turn carries
# nothing of its own (dedup treats all of them as one message, compression drops them). Words
# that answer a question ("yes", "sure", "fine") are not here, nor is any text with a "?".
_COURTESY = re.compile(
    r"^(?:(?:thanks?|thank\s*(?:you|u)|thx|ty|tysm|cheers|much|so|very|a\s+lot|lots|many|again|"
    r"ok(?:ay)?|k|great|cool|nice|awesome|perfect|excellent|wonderful|super|amazing|brilliant|"
    r"got\s+it|sounds\s+good|understood|noted|appreciated?|no\s+problem|np|"
    r"you'?re\s+welcome|welcome|alright|all\s+right|lol|haha|hi|hello|hey|good|helpful|"
    r"i\s+see|makes\s+sense|that\s+helps|i|it|that|that'?s|this|is|was|you)"
    r"[^\w?]*)+$",
    re.IGNORECASE,
)


def is_courtesy(text: str) -> bool:
    """True for a turn made only of thanks, greetings and "ok" phrases ("Thank you so much!!",
    "ok, got it 👍"); such a turn carries no content of its own.

    Example:
        >>> is_courtesy("Thank you so much!!"), is_courtesy("thanks, but why?"), is_courtesy("yes")
        (True, False, False)
    """
    text = text.strip()
    return bool(text) and len(text) <= 80 and _COURTESY.match(text) is not None


def raw_role(m: Mapping[str, Any]) -> str:
    """The role as written (``role``, ShareGPT ``from``, or ``sender``); ``""`` if none."""
    role = m.get("role", m.get("from", m.get("sender")))
    return "" if role is None else str(role)


def latest_user_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The text of the last user turn of ``messages`` (internal OpenAI or ShareGPT dicts), the
    question a chat window is chosen for when no query is given; None without one.

    Example:
        >>> latest_user_text([{"role": "user", "content": "hi"},
        ...                   {"role": "assistant", "content": "hello"}])
        'hi'
    """
    for i in range(len(messages) - 1, -1, -1):
        if raw_role(messages[i]) in USER_ROLES:
            return message_text(messages[i], i)
    return None


def _content_key(m: Mapping[str, Any]) -> str | None:
    return next((k for k in ("content", "value", "text") if k in m), None)


def _content(m: Mapping[str, Any]) -> Any:
    key = _content_key(m)
    return None if key is None else m[key]


def message_text(m: Mapping[str, Any], index: int = 0) -> str:
    """The text of a turn: ``content``/``value``; text parts joined; ``None`` is ``""``.

    Example:
        >>> message_text({"role": "user", "content": [{"type": "text", "text": "a"},
        ...                                           {"type": "image_url"}]})
        'a'
    """
    content = _content(m)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: keep the text parts
        return "".join(p["text"] for p in content
                       if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    raise InputError(f"message {index} content is {type(content).__name__}, not text or parts")


def tool_call_ids(m: Mapping[str, Any]) -> list[str]:
    """Ids of the tool calls a turn makes (OpenAI ``tool_calls[].id``)."""
    calls = m.get("tool_calls") or []
    if not isinstance(calls, list):
        return []
    return [str(c.get("id")) for c in calls if isinstance(c, Mapping) and c.get("id")]


def answered_ids(m: Mapping[str, Any]) -> tuple[str, ...]:
    """Ids of the tool calls a turn answers: OpenAI's ``tool_call_id``, or ``tool_result_ids``
    (one Anthropic user turn holding several ``tool_result`` blocks, as
    :mod:`ctxkit.io.formats` reads it).

    Example:
        >>> answered_ids({"role": "tool", "tool_call_id": "c1", "content": "42"})
        ('c1',)
    """
    many = m.get("tool_result_ids")
    if many:
        return tuple(str(i) for i in many)
    one = m.get("tool_call_id")
    return () if one is None else (str(one),)


def check_tool_results(messages: Sequence[Mapping[str, Any]]) -> None:
    """Raise :class:`InputError` naming the first tool result whose call id no earlier message
    makes, or which has no id and no call right before it (ShareGPT's ``observation`` and the
    legacy ``function`` turn answer the call before them).

    Example:
        >>> check_tool_results([{"role": "tool", "tool_call_id": "c9", "content": "1"}])
        Traceback (most recent call last):
        ...
        ctxkit.errors.InputError: message 0 answers tool call 'c9', which no earlier message makes
    """
    pairing = ToolPairing()
    for i, m in enumerate(messages):
        pairing.add(i, m)


class ToolPairing:
    """The tool calls of a history read in order: the call ids made so far, and whether the
    turns since the last call are all its results. :meth:`add` takes the next message, or
    raises :class:`InputError` for a tool result that answers no call (and changes nothing),
    so a growing history (``ChatMemory.add``) is checked one message at a time.

    Example:
        >>> pairing = ToolPairing()
        >>> pairing.add(0, {"role": "assistant", "tool_calls": [{"id": "c1"}]})
        >>> pairing.add(1, {"role": "tool", "tool_call_id": "c1", "content": "42"})
        >>> sorted(pairing.made)
        ['c1']
    """

    def __init__(self) -> None:
        self.made: set[str] = set()
        self.after_call = False

    def add(self, i: int, m: Mapping[str, Any]) -> None:
        ids, role = answered_ids(m), raw_role(m)
        for call in ids:
            if call not in self.made:
                raise InputError(f"message {i} answers tool call {call!r}, which no earlier "
                                 f"message makes")
        if not ids and role in TOOL_RESULT_ROLES and not self.after_call:
            raise InputError(f"message {i} is a tool result ({role}) with no tool call before it")
        self.made.update(tool_call_ids(m))
        self.after_call = any(m.get(k) for k in _TOOL_CALL_KEYS) or role in TOOL_CALL_ROLES or (
            self.after_call and role in TOOL_RESULT_ROLES)


def dict_format(m: Any, index: int) -> str:
    """``"openai"`` or ``"sharegpt"`` for one dict turn; an :class:`InputError` naming
    ``index`` for a non-dict, an unknown role or a missing content.

    Example:
        >>> dict_format({"from": "gpt", "value": "yo"}, 3)
        'sharegpt'
    """
    if not isinstance(m, Mapping):
        raise InputError(f"message {index} is {type(m).__name__}, not an object")
    if "role" in m:
        fmt, known = "openai", OPENAI_ROLES
    elif "from" in m and "value" in m:
        fmt, known = "sharegpt", SHAREGPT_ROLES
    else:
        raise InputError(f"message {index} has neither 'role' (OpenAI) nor 'from'/'value' "
                         f"(ShareGPT) keys: {sorted(map(str, m))}")
    role = raw_role(m)
    if role not in known:
        raise InputError(f"message {index} has unknown role {role!r} (known: "
                         f"{', '.join(sorted(known))})")
    # a turn with no content is bad input, not filler; only a tool call may omit it
    if _content_key(m) is None and not any(m.get(k) for k in _TOOL_CALL_KEYS):
        raise InputError(f"message {index} ({role}) has no 'content'")
    return fmt


def message_format(messages: Sequence[Any]) -> str:
    """``"openai"`` or ``"sharegpt"``; raises on a non-list, a bad turn or a mix of the two.

    An empty conversation is ``"openai"``.
    """
    if not isinstance(messages, (list, tuple)):
        raise InputError(f"messages must be a list of messages, got {type(messages).__name__}")
    kinds = {dict_format(m, i) for i, m in enumerate(messages)}
    if len(kinds) > 1:
        raise InputError("messages mix OpenAI {role, content} and ShareGPT {from, value} turns")
    return kinds.pop() if kinds else "openai"


def parse_message(m: Mapping[str, Any], index: int = 0) -> Message:
    """One turn as a :class:`Message`; raises ``TypeError``/``ValueError`` naming ``index``."""
    dict_format(m, index)
    role = raw_role(m)
    content = _content(m)
    media = isinstance(content, list) and any(
        isinstance(p, Mapping) and p.get("type") not in (None, "text") for p in content)
    answered = answered_ids(m)
    return Message(
        index=index, role=ROLE_ALIASES.get(role, role), raw_role=role,
        text=message_text(m, index), media=media,
        calls_tool=any(m.get(k) for k in _TOOL_CALL_KEYS) or role in TOOL_CALL_ROLES,
        tool_call_ids=tuple(tool_call_ids(m)),
        tool_call_id=answered[0] if answered else None)


def parse_messages(messages: Sequence[Any]) -> list[Message]:
    """Validate a conversation (see :func:`message_format`) and view every turn.

    Example:
        >>> [m.tool_call_ids for m in parse_messages([
        ...     {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        ...     {"role": "tool", "tool_call_id": "c1", "content": "42"}])]
        [('c1',), ()]
    """
    message_format(messages)
    check_tool_results(messages)
    return [parse_message(m, i) for i, m in enumerate(messages)]


def normalize_messages(turns: Any) -> list[dict[str, Any]]:
    """OpenAI ``{role, content}`` or ShareGPT ``{from, value}`` turns to ``{role, content}``.

    Content parts become their joined text; extra keys (``tool_calls``, ``tool_call_id``,
    ``name``) are kept.

    Example:
        >>> normalize_messages([{"from": "human", "value": "hi"}])
        [{'role': 'user', 'content': 'hi'}]
    """
    if not isinstance(turns, list):
        raise InputError(f"messages must be a list of turns, got {type(turns).__name__}")
    out = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, Mapping):
            raise InputError(f"turn {i} is not an object")
        if raw_role(turn) == "" and not any(k in turn for k in ("role", "from", "sender")):
            raise InputError(f"turn {i} has no role/from field")
        key = _content_key(turn)
        if key is None and not any(turn.get(k) for k in _TOOL_CALL_KEYS):
            raise InputError(f"turn {i} ({raw_role(turn)}) has no content")
        content = None if key is None else turn[key]
        msg = parse_message({"role": turn["role"], "content": content} if "role" in turn
                            else {"from": raw_role(turn), "value": content}, i)
        used = {"role", "from", "sender", key}
        rest = {k: v for k, v in turn.items() if k not in used}
        out.append({"role": msg.role, "content": msg.text, **rest})
    return out
