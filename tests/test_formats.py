"""Every chat-message format in and out (ctxkit.io.formats): detection, round trips through
compress_chat with tool calls and parallel calls, token counts, bad input. LangChain and
LlamaIndex are the real classes (the ``langchain`` and ``llamaindex`` extras, in ``dev``)."""

import json

import pytest
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock

from ctxkit.chat.pipeline import compress_chat, count_chat_tokens
from ctxkit.compression.scoring.idf import IdfScorer
from ctxkit.errors import InputError
from ctxkit.io.formats import IMAGE_TOKENS, detect_format, read_conversation
from ctxkit.io.messages import parse_messages

STOPWORDS = "the a of and is to in it was for on my what".split()
SCORER = IdfScorer(table=dict.fromkeys(STOPWORDS, 1.0), default=12.0)
LONG = ("The history of the region is long. Farmers grew barley and wheat for centuries. "
        "Trade routes crossed the valley. A castle was built on the northern ridge. ") * 4
SYSTEM = "You are terse."
ASK = "What is in this picture, and the weather in Oslo and Bergen?"
IMAGE = "https://example.com/cat.png"
OSLO, BERGEN = {"city": "Oslo"}, {"city": "Bergen"}


def openai():
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Tell me about the valley."},
        {"role": "assistant", "content": LONG},
        {"role": "user", "content": "My locker code is 4417."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": [{"type": "text", "text": ASK},
                                     {"type": "image_url", "image_url": {"url": IMAGE}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "weather", "arguments": json.dumps(OSLO)}},
            {"id": "c2", "type": "function",
             "function": {"name": "weather", "arguments": json.dumps(BERGEN)}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Oslo: 4 C, rain."},
        {"role": "tool", "tool_call_id": "c2", "content": "Bergen: 7 C, sun."},
        {"role": "assistant", "content": "A cat. Oslo 4 C and rain, Bergen 7 C and sun."},
        {"role": "user", "content": "What is my locker code?"},
    ]


def anthropic():
    """The same conversation; the system prompt apart, both results in one user turn."""
    return [
        {"role": "user", "content": "Tell me about the valley."},
        {"role": "assistant", "content": [{"type": "text", "text": LONG}]},
        {"role": "user", "content": "My locker code is 4417."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": [
            {"type": "text", "text": ASK},
            {"type": "image", "source": {"type": "url", "url": IMAGE}}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "weather", "input": OSLO},
            {"type": "tool_use", "id": "c2", "name": "weather", "input": BERGEN}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "Oslo: 4 C, rain."},
            {"type": "tool_result", "tool_use_id": "c2",
             "content": [{"type": "text", "text": "Bergen: 7 C, sun."}]}]},
        {"role": "assistant", "content": "A cat. Oslo 4 C and rain, Bergen 7 C and sun."},
        {"role": "user", "content": "What is my locker code?"},
    ]


def sharegpt():
    return [
        {"from": "system", "value": SYSTEM},
        {"from": "human", "value": "Tell me about the valley."},
        {"from": "gpt", "value": LONG},
        {"from": "human", "value": "My locker code is 4417."},
        {"from": "gpt", "value": "Noted."},
        {"from": "human", "value": ASK},
        {"from": "function_call", "value": json.dumps({"name": "weather", "arguments": OSLO})},
        {"from": "observation", "value": "Oslo: 4 C, rain."},
        {"from": "gpt", "value": "A cat. Oslo 4 C and rain, Bergen 7 C and sun."},
        {"from": "human", "value": "What is my locker code?"},
    ]


def langchain():
    return [
        SystemMessage(SYSTEM),
        HumanMessage("Tell me about the valley.", id="m1"),
        AIMessage(LONG),
        HumanMessage("My locker code is 4417."),
        AIMessage("Noted."),
        HumanMessage([{"type": "text", "text": ASK},
                      {"type": "image_url", "image_url": {"url": IMAGE}}]),
        AIMessage("", tool_calls=[{"name": "weather", "args": OSLO, "id": "c1"},
                                  {"name": "weather", "args": BERGEN, "id": "c2"}]),
        ToolMessage("Oslo: 4 C, rain.", tool_call_id="c1"),
        ToolMessage("Bergen: 7 C, sun.", tool_call_id="c2"),
        AIMessage("A cat. Oslo 4 C and rain, Bergen 7 C and sun."),
        HumanMessage("What is my locker code?"),
    ]


def llamaindex():
    calls = [{"id": c, "type": "function",
              "function": {"name": "weather", "arguments": json.dumps(args)}}
             for c, args in (("c1", OSLO), ("c2", BERGEN))]
    return [
        ChatMessage(role="system", content=SYSTEM),
        ChatMessage(role="user", content="Tell me about the valley."),
        ChatMessage(role="assistant", content=LONG),
        ChatMessage(role="user", content="My locker code is 4417."),
        ChatMessage(role="assistant", content="Noted."),
        ChatMessage(role="user", blocks=[TextBlock(text=ASK), ImageBlock(url=IMAGE)]),
        ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": calls}),
        ChatMessage(role="tool", content="Oslo: 4 C, rain.",
                    additional_kwargs={"tool_call_id": "c1"}),
        ChatMessage(role="tool", content="Bergen: 7 C, sun.",
                    additional_kwargs={"tool_call_id": "c2"}),
        ChatMessage(role="assistant", content="A cat. Oslo 4 C and rain, Bergen 7 C and sun."),
        ChatMessage(role="user", content="What is my locker code?"),
    ]


FORMATS = {"openai": openai, "anthropic": anthropic, "sharegpt": sharegpt,
           "langchain": langchain, "llamaindex": llamaindex}
SYSTEM_APART = {"anthropic": SYSTEM}
# index of the tool call turn and of its results, per format
TOOL_GROUP = {"openai": (6, [7, 8]), "anthropic": (5, [6]), "sharegpt": (6, [7]),
              "langchain": (6, [7, 8]), "llamaindex": (6, [7, 8])}


def _text(m):
    if isinstance(m, dict):
        content = m.get("content", m.get("value"))
        if isinstance(content, list):
            return "".join(b.get("text", "") for b in content)
        return content or ""
    content = m.content
    return content if isinstance(content, str) else "".join(
        b.get("text", "") for b in content if isinstance(b, dict))


@pytest.mark.parametrize("fmt", FORMATS)
def test_detects_each_format(fmt):
    msgs = FORMATS[fmt]()
    assert detect_format(msgs, SYSTEM_APART.get(fmt)) == fmt
    assert read_conversation(msgs, system=SYSTEM_APART.get(fmt)).format == fmt


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_untouched_is_the_same_objects(fmt):
    msgs = FORMATS[fmt]()
    out = compress_chat(msgs, budget=100_000, system=SYSTEM_APART.get(fmt), scorer=SCORER)
    assert out.format == fmt and out.ledger == [] and out.kept == list(range(len(msgs)))
    assert all(a is b for a, b in zip(out.messages, msgs)) and len(out.messages) == len(msgs)
    assert out.system == SYSTEM_APART.get(fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_compressed_keeps_types_and_tool_groups(fmt):
    msgs = FORMATS[fmt]()
    call, results = TOOL_GROUP[fmt]
    full = count_chat_tokens(msgs, system=SYSTEM_APART.get(fmt))
    seen_short = seen_dropped_group = False
    for budget in range(full // 4, full, max(1, full // 25)):
        try:
            out = compress_chat(msgs, budget, system=SYSTEM_APART.get(fmt), keep_last=1,
                                scorer=SCORER)
        except ValueError:
            continue
        assert out.compressed_tokens <= budget and out.format == fmt
        assert set(out.kept) | {c.index for c in out.ledger} == set(range(len(msgs)))
        short = {c.index for c in out.ledger if c.action == "shortened"}
        for i, m in zip(out.kept, out.messages):
            assert type(m) is type(msgs[i])
            if i in short:
                assert m is not msgs[i] and len(_text(m)) < len(_text(msgs[i]))
                seen_short = True
            else:
                assert m is msgs[i]
        # a tool call and all its results: kept or dropped together
        assert len({i in out.kept for i in [call, *results]}) == 1, budget
        seen_dropped_group |= call not in out.kept
        first = next(i for i, m in zip(out.kept, out.messages)
                     if getattr(m, "type", None) != "system" and _role(m) != "system")
        assert first not in results  # the window never starts with a tool result
    assert seen_short and seen_dropped_group


def _role(m):
    if isinstance(m, dict):
        return m.get("role", m.get("from"))
    return getattr(getattr(m, "role", None), "value", None) or m.type


def test_same_conversation_costs_the_same_in_openai_langchain_llamaindex():
    counts = {f: count_chat_tokens(FORMATS[f]()) for f in ("openai", "langchain", "llamaindex")}
    assert len(set(counts.values())) == 1, counts
    views = [[(m.role, m.text, m.tool_call_ids, m.tool_call_id, m.media)
              for m in parse_messages(read_conversation(FORMATS[f]()).internal)]
             for f in ("langchain", "llamaindex")]
    assert views[0] == views[1]


def test_tokens_count_tool_calls_results_and_images():
    msgs = openai()
    base = count_chat_tokens(msgs)
    longer = openai()
    longer[6]["tool_calls"][0]["function"]["arguments"] = json.dumps(
        {"city": "Oslo", "units": "metric", "days": 7})
    assert count_chat_tokens(longer) > base  # arguments count
    assert count_chat_tokens(msgs, image_tokens=0) == base - IMAGE_TOKENS == base - 85
    a = anthropic()
    with_results = count_chat_tokens(a, system=SYSTEM)
    a[6]["content"][1]["content"] = [{"type": "text", "text": "Bergen: 7 C, sun. " * 20}]
    assert count_chat_tokens(a, system=SYSTEM) > with_results + 60  # tool_result content
    a[5]["content"][0]["name"] = "weather_forecast_for_city"
    assert count_chat_tokens(a, system=SYSTEM) > with_results + 62  # tool_use name
    # the system prompt given apart is billed
    assert count_chat_tokens(anthropic(), system=SYSTEM) > count_chat_tokens(anthropic())


def test_parallel_anthropic_results_join_their_calls():
    msgs = anthropic()
    conv = read_conversation(msgs, system=SYSTEM)
    turn = conv.internal[conv.offset + 6]
    assert turn["role"] == "tool" and turn["tool_result_ids"] == ["c1", "c2"]
    assert turn["content"] == "Oslo: 4 C, rain.Bergen: 7 C, sun."
    for budget in range(60, count_chat_tokens(msgs, system=SYSTEM), 15):
        try:
            out = compress_chat(msgs, budget, system=SYSTEM, keep_last=1, scorer=SCORER)
        except ValueError:
            continue
        assert (5 in out.kept) == (6 in out.kept), budget


def test_window_never_starts_with_a_tool_message():
    """langchain#33245: trim_messages(strategy="last") can return a history starting with a
    ToolMessage; here the last turns include the results, so their call comes with them."""
    msgs = langchain()[:9]  # ends with the two ToolMessages
    full = count_chat_tokens(msgs)
    for keep_last in (1, 2):
        for budget in range(90, full, 10):
            try:
                out = compress_chat(msgs, budget, keep_last=keep_last, scorer=SCORER)
            except ValueError:
                continue
            body = [m for m in out.messages if not isinstance(m, SystemMessage)]
            assert not isinstance(body[0], ToolMessage)
            assert 6 in out.kept and {7, 8} <= set(out.kept), (keep_last, budget)
    # and without the system prompt, too
    out = compress_chat(msgs[1:], count_chat_tokens(msgs[5:]) + 5, keep_last=1, scorer=SCORER)
    assert isinstance(out.messages[0], (HumanMessage, AIMessage))


def _one_line_error(messages, match, **kw):
    with pytest.raises(InputError, match=match) as err:
        compress_chat(messages, 1000, scorer=SCORER, **kw)
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match=match):
        count_chat_tokens(messages, **kw)


def test_bad_input_names_the_message():
    # unknown roles
    _one_line_error([{"role": "user", "content": "a"}, {"role": "narrator", "content": "b"}],
                    r"message 1 has unknown role 'narrator'")
    _one_line_error([{"from": "human", "value": "a"}, {"from": "alien", "value": "b"}],
                    r"message 1 has unknown role 'alien'")
    _one_line_error([{"role": "system", "content": "x"},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                   "content": "1"}]}],
                    r"mix openai and anthropic")
    _one_line_error(anthropic()[:5] + [{"role": "narrator", "content": "b"}],
                    r"message 5 has unknown role 'narrator' \(known: assistant, user",
                    system=SYSTEM)
    _one_line_error([HumanMessage("a"), RemoveMessage(id="x")], r"message 1 has unknown role")
    # missing content: bad input, not filler
    _one_line_error([{"role": "user", "content": "a"}, {"role": "assistant"}],
                    r"message 1 \(assistant\) has no 'content'")
    _one_line_error([{"role": "user"}], r"message 0 \(user\) has no 'content'", system="s")
    # a tool result whose call id is unknown, in every format that has ids
    _one_line_error([{"role": "user", "content": "a"},
                     {"role": "tool", "tool_call_id": "zz", "content": "1"}],
                    r"message 1 answers tool call 'zz', which no earlier message makes")
    _one_line_error(anthropic()[:5] + [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "zz", "content": "1"}]}],
        r"message 5 answers tool call 'zz'", system=SYSTEM)
    _one_line_error([HumanMessage("a"), ToolMessage("1", tool_call_id="zz")],
                    r"message 1 answers tool call 'zz'")
    _one_line_error([ChatMessage(role="user", content="a"),
                     ChatMessage(role="tool", content="1",
                                 additional_kwargs={"tool_call_id": "zz"})],
                    r"message 1 answers tool call 'zz'")
    _one_line_error([{"from": "human", "value": "a"}, {"from": "observation", "value": "1"}],
                    r"message 1 is a tool result \(observation\) with no tool call before it")


def test_shortened_copies_keep_their_class_and_fields():
    msgs = langchain()
    msgs[2] = AIMessage(LONG, id="long-one", name="bot")
    out = compress_chat(msgs, 150, keep_last=1, scorer=SCORER)
    short = [c.index for c in out.ledger if c.action == "shortened"]
    assert short, out.ledger
    for i in short:
        m = out.messages[out.kept.index(i)]
        assert type(m) is type(msgs[i]) and m.id == msgs[i].id and m.name == msgs[i].name
    assert msgs[2].content == LONG  # the input is never modified
    json.dumps(out.to_dict())  # LangChain messages dump to JSON
    li = llamaindex()
    out = compress_chat(li, 150, keep_last=1, scorer=SCORER)
    for i in [c.index for c in out.ledger if c.action == "shortened"]:
        m = out.messages[out.kept.index(i)]
        assert isinstance(m, ChatMessage) and m.role == li[i].role and m is not li[i]
        assert len(m.content) < len(li[i].content)
    a = anthropic()
    out = compress_chat(a, 150, system=SYSTEM, keep_last=1, scorer=SCORER)
    for i in [c.index for c in out.ledger if c.action == "shortened"]:
        m = out.messages[out.kept.index(i)]
        assert type(m["content"]) is type(a[i]["content"])
    assert out.to_dict()["system"] == SYSTEM
