"""ChatMemory on LangChain, LlamaIndex and Anthropic histories: windows in the input's types."""

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from llama_index.core.base.llms.types import ChatMessage

from ctxkit import ChatMemory, compress_chat
from ctxkit.chat.prefix_window import RECALL_HEADER
from ctxkit.errors import InputError


def _notes(n):
    out = []
    for i in range(n):
        out.append(("user", f"Note {i}: crate {i} holds {10 * i} bolts, stacked by the door."))
        out.append(("assistant", f"Noted, crate {i} has {10 * i} bolts."))
    return out


def _langchain(n):
    msgs = [SystemMessage("You are terse.")]
    for role, text in _notes(n):
        msgs.append(HumanMessage(text) if role == "user" else AIMessage(text))
    return msgs


def test_langchain_windows_are_langchain_messages_and_match_compress_chat():
    msgs = _langchain(20) + [HumanMessage("How many bolts in crate 3?")]
    mem = ChatMemory(budget=200, scorer="idf")
    mem.extend(msgs)
    window = mem.compress()
    ref = compress_chat(msgs, 200, scorer="idf")
    assert window.format == "langchain" and window.kept == ref.kept
    assert window.messages == ref.messages
    shortened = {c.index for c in window.ledger if c.action == "shortened"}
    for k, m in zip(window.kept, window.messages):
        assert (m is msgs[k]) == (k not in shortened)  # untouched: the very object
        assert type(m) is type(msgs[k])
    assert "crate 3 holds 30" in " ".join(m.content for m in window.messages)


def test_prefix_cache_recall_block_is_a_human_message_before_the_question():
    msgs = _langchain(30)
    mem = ChatMemory(budget=300, scorer="idf", prefix_cache=True)
    mem.extend(msgs)
    mem.compress()
    mem.extend([AIMessage("", tool_calls=[{"id": "c1", "name": "count", "args": {"crate": 3}}]),
                ToolMessage("30 bolts", tool_call_id="c1"),
                HumanMessage("How many bolts were in crate 3?")])
    window = mem.compress()
    types = [type(m).__name__ for m in window.messages]
    block = [i for i, m in enumerate(window.messages) if m.content.startswith(RECALL_HEADER)]
    assert len(block) == 1 and types[block[0]] == "HumanMessage"
    assert types[block[0] - 2:] == ["AIMessage", "ToolMessage", "HumanMessage", "HumanMessage"]
    assert window.compressed_tokens <= 300
    acc = mem.cache_accounting()
    assert len(acc.turns) == 2 and acc.turns[1].cached_messages >= 1


def test_prefix_cache_never_splits_a_tool_call_from_its_results_in_openai_dicts():
    msgs = [{"role": r, "content": t} for r, t in _notes(30)]
    msgs += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "count", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "30 bolts"},
        {"role": "user", "content": "How many bolts were in crate 3?"}]
    mem = ChatMemory(budget=300, scorer="idf", prefix_cache=True)
    mem.extend(msgs)
    window = mem.compress()
    roles = [m["role"] for m in window.messages]
    i = roles.index("tool")
    assert window.messages[i - 1].get("tool_calls")
    block = [k for k, m in enumerate(window.messages)
             if m["content"] and m["content"].startswith(RECALL_HEADER)]
    assert block == [len(roles) - 2] and block[0] > i  # after the results, before the question


def test_llamaindex_windows_are_chat_messages():
    msgs = [ChatMessage(role="system", content="You are terse.")]
    msgs += [ChatMessage(role=r, content=t) for r, t in _notes(20)]
    msgs.append(ChatMessage(role="user", content="How many bolts in crate 3?"))
    mem = ChatMemory(budget=200, scorer="idf", prefix_cache=True)
    mem.extend(msgs)
    window = mem.compress()
    assert window.format == "llamaindex"
    assert all(isinstance(m, ChatMessage) for m in window.messages)
    assert window.messages[0] is msgs[0] and window.messages[-1] is msgs[-1]
    assert window.compressed_tokens <= 200


def test_anthropic_tool_use_turns_round_trip():
    msgs = [{"role": r, "content": t} for r, t in _notes(15)]
    call = {"role": "assistant", "content": [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "t1", "name": "count", "input": {"crate": 3}}]}
    result = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "30 bolts"}]}
    msgs += [call, result, {"role": "user", "content": "How many bolts in crate 3?"}]
    mem = ChatMemory(budget=150, scorer="idf")
    mem.extend(msgs)
    window = mem.compress()
    assert window.format == "anthropic"
    assert window.messages[-3:] == [call, result, msgs[-1]]
    assert window.messages[-3] is call and window.messages[-2] is result
    assert mem.messages[-2]["role"] == "tool"  # the internal form beside it


def test_a_mix_of_formats_is_a_one_line_error_and_adds_nothing():
    mem = ChatMemory(budget=100)
    mem.add(HumanMessage("hi"))
    with pytest.raises(InputError, match="mix langchain and plain dict"):
        mem.add({"role": "user", "content": "hi"})
    with pytest.raises(InputError, match="mix langchain and llamaindex"):
        mem.add(ChatMessage(role="user", content="hi"))
    assert len(mem) == 1 and mem.history.originals == [HumanMessage("hi")]
    plain = ChatMemory(budget=100)
    plain.add({"role": "user", "content": "hi"})
    with pytest.raises(InputError, match="message 1 is langchain"):
        plain.add(AIMessage("yo"))
