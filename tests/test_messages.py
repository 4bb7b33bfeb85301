"""The one chat-message parser (ctxkit.io.messages) and the stages that share it."""

import json

import pytest

from ctxkit.chat.pipeline import compress_chat, count_chat_tokens
from ctxkit.deduplication.messages import dedup_messages
from ctxkit.errors import InputError
from ctxkit.io.messages import message_format, normalize_messages, parse_messages
from ctxkit.io.records import read_records

OPENAI = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "How do I reverse a list in Python?"},
    {"role": "assistant", "content": "Use xs[::-1]."},
    {"role": "user", "content": [{"type": "text", "text": "how do I reverse a list in "},
                                 {"type": "text", "text": "python??"}]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}},
                                 {"type": "text", "text": "and this?"}]},
]
# the same conversation as ShareGPT turns (no tool ids, no parts: ShareGPT has neither)
SHAREGPT = [
    {"from": "system", "value": "Be brief."},
    {"from": "human", "value": "How do I reverse a list in Python?"},
    {"from": "gpt", "value": "Use xs[::-1]."},
    {"from": "human", "value": "how do I reverse a list in python??"},
    {"from": "function_call", "value": '{"name": "calc"}'},
    {"from": "observation", "value": "42"},
    {"from": "human", "value": "and this?"},
]


def test_views_of_both_formats_agree():
    a, b = parse_messages(OPENAI), parse_messages(SHAREGPT)
    assert [m.role for m in a] == ["system", "user", "assistant", "user", "assistant", "tool",
                                   "user"]
    # ShareGPT's tool turns keep their names; what they are is in calls_tool / is_tool_result
    assert [m.role for m in b] == ["system", "user", "assistant", "user", "function_call",
                                   "observation", "user"]
    assert [m.text for m in a][:4] == [m.text for m in b][:4]
    assert a[3].text == "how do I reverse a list in python??" and not a[3].media
    assert a[6].media and a[6].text == "and this?"
    assert a[4].calls_tool and a[4].tool_call_ids == ("c1",) and a[5].tool_call_id == "c1"
    assert b[4].calls_tool and b[5].is_tool_result and a[5].is_tool_result
    assert message_format(OPENAI) == "openai" and message_format(SHAREGPT) == "sharegpt"


@pytest.mark.parametrize(("messages", "error", "match"), [
    ("hi", InputError, "must be a list of messages, got str"),
    ([{"role": "user", "content": "a"}, {"from": "gpt", "value": "b"}], ValueError, "mix"),
    ([{"speaker": "x"}], ValueError, r"message 0 has neither 'role'"),
    ([{"role": "user", "content": 5}], ValueError, "message 0 content is int"),
    (["text"], InputError, "message 0 is str"),
    ([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}], InputError,
     "message 1 has unknown role 'robot'"),
    ([{"from": "human", "value": "a"}, {"from": "Caroline", "value": "b"}], InputError,
     "message 1 has unknown role 'Caroline'"),
    ([{"role": "user"}], InputError, r"message 0 \(user\) has no 'content'"),
    ([{"role": "user", "content": "a"}, {"role": "tool", "tool_call_id": "c7", "content": "1"}],
     InputError, "message 1 answers tool call 'c7', which no earlier message makes"),
    ([{"role": "user", "content": "a"}, {"role": "function", "name": "f", "content": "1"}],
     InputError, r"message 1 is a tool result \(function\) with no tool call before it"),
])
def test_bad_conversations_fail_the_same_way_in_every_stage(messages, error, match):
    with pytest.raises(error, match=match):
        parse_messages(messages)
    with pytest.raises(error, match=match):
        dedup_messages(messages)
    with pytest.raises(error, match=match):
        count_chat_tokens(messages)


def test_dedup_messages_accepts_sharegpt_like_compress_chat():
    for messages in (OPENAI, SHAREGPT):
        out = dedup_messages(messages)
        # the re-asked question goes (the latest copy stays); system and tool turns never do
        assert [(e["index"], e["duplicate_of"]) for e in out.ledger] == [(1, 3)]
        assert out.messages[0] is messages[0]  # the caller's dicts, unchanged
        assert compress_chat(messages, budget=1000).kept == list(range(len(messages)))


def test_records_normalize_with_the_same_parser(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"conversations": SHAREGPT}) + "\n"
                    + json.dumps({"messages": OPENAI}) + "\n")
    a, b = read_records(path, template="messages")
    assert [m["role"] for m in a.messages] == [m.role for m in parse_messages(SHAREGPT)]
    assert b.messages[3]["content"] == "how do I reverse a list in python??"
    assert b.messages[4]["tool_calls"] == [{"id": "c1", "type": "function"}]
    assert normalize_messages([{"from": "human", "value": "hi", "weight": 1}]) == [
        {"role": "user", "content": "hi", "weight": 1}]


def test_one_courtesy_list_for_dedup_and_compression():
    """Dedup's acknowledgements and compress_chat's filler turns are one list: a turn that
    only thanks or greets, never an answer word or a question."""
    from ctxkit.chat.pipeline import compress_chat, count_chat_tokens
    from ctxkit.deduplication.messages import is_acknowledgement
    from ctxkit.io.messages import is_courtesy

    for text in ["Thanks a lot!!", "ok, got it 👍", "hello", "Noted, thank you", "cool cool :)"]:
        assert is_courtesy(text) and is_acknowledgement(text)
    for text in ["yes", "sure", "thanks, but why?", "is it?", "", "ok " * 40]:
        assert not is_courtesy(text) and not is_acknowledgement(text)
    msgs = [{"role": "user", "content": "What port does the API use? " * 5},
            {"role": "assistant", "content": "It listens on port 8443 over TLS. " * 5},
            {"role": "user", "content": "thanks, got it!"},
            {"role": "assistant", "content": "yes"},
            {"role": "user", "content": "And the admin port? " * 5}]
    out = compress_chat(msgs, count_chat_tokens(msgs) - 2, scorer="idf")
    dropped = {c.index: c.code for c in out.ledger if c.action == "dropped"}
    assert dropped == {2: "filler"}


def test_a_tool_call_may_omit_content_and_results_may_come_later():
    msgs = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "tool_calls": [{"id": "c1"}, {"id": "c2"}]},
            {"role": "tool", "tool_call_id": "c2", "content": "7 C"},
            {"role": "user", "content": "and?"},
            {"role": "tool", "tool_call_id": "c1", "content": "4 C"},
            {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}},
            {"role": "function", "name": "f", "content": "ok"}]
    views = parse_messages(msgs)
    assert views[1].text == "" and views[1].tool_call_ids == ("c1", "c2")
    assert [m.tool_call_id for m in views] == [None, None, "c2", None, "c1", None, None]
    # the late result is kept or dropped with its call, never alone
    for budget in range(30, count_chat_tokens(msgs), 5):
        try:
            out = compress_chat(msgs, budget, keep_last=1, scorer="idf")
        except ValueError:
            continue
        assert len({i in out.kept for i in (1, 2, 4)}) == 1, budget
