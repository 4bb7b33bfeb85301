import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxkit.chat.pipeline import CompressChatResult, compress_chat, count_chat_tokens
from ctxkit.compression.scoring.idf import IdfScorer
from ctxkit.errors import InputError, OptionError
from ctxkit.io.tokenizers import get_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TOK = get_tokenizer("cl100k_base")
STOPWORDS = "the a of and is to in it was for on my what".split()
SCORER = IdfScorer(table=dict.fromkeys(STOPWORDS, 1.0), default=12.0)

LONG = ("The history of the region is long. Farmers grew barley and wheat for centuries. "
        "Trade routes crossed the valley. A castle was built on the northern ridge. ") * 6


def history():
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Tell me about the valley."},
        {"role": "assistant", "content": LONG},
        {"role": "user", "content": "By the way, my locker code is 4417."},
        {"role": "assistant", "content": "Noted, your locker code is 4417."},
        {"role": "user", "content": "thanks!"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Oslo: 4 C, light rain."},
        {"role": "assistant", "content": "It is 4 C and raining in Oslo."},
        {"role": "user", "content": "What is my locker code?"},
    ]


def test_counts_tokens_like_the_openai_cookbook():
    msgs = [{"role": "user", "content": "hello world"},
            {"role": "assistant", "content": "hi", "name": "bot"}]
    expected = (3 + 1 + 2) + (3 + 1 + 1 + 1 + 1) + 3
    assert count_chat_tokens(msgs) == expected
    assert count_chat_tokens([]) == 0


def test_keeps_system_last_turns_and_the_needed_fact():
    msgs = history()
    out = compress_chat(msgs, budget=120, scorer=SCORER)
    assert isinstance(out, CompressChatResult)
    assert out.compressed_tokens <= 120 == out.budget
    assert out.compressed_tokens == count_chat_tokens(out.messages)
    contents = [m.get("content") for m in out.messages]
    assert contents[0] == "You are a helpful assistant."
    assert contents[-2:] == ["It is 4 C and raining in Oslo.", "What is my locker code?"]
    assert any("4417" in (c or "") for c in contents[1:-2])
    # every message is kept, or in the ledger with a reason
    dropped = {c.index for c in out.ledger if c.action == "dropped"}
    assert dropped | set(out.kept) == set(range(len(msgs))) and not dropped & set(out.kept)
    reasons = {c.index: c.reason for c in out.ledger}
    assert reasons[5] == "filler"


def test_tool_call_and_result_move_together():
    msgs = history()
    for budget in (60, 80, 120, 200, 400):
        out = compress_chat(msgs, budget=budget, keep_last=1, scorer=SCORER)
        assert (6 in out.kept) == (7 in out.kept), budget
        assert out.compressed_tokens <= budget


def test_long_relevant_turn_is_shortened():
    msgs = history()[:4] + [{"role": "user", "content": "Which crops did farmers grow?"}]
    out = compress_chat(msgs, budget=90, keep_last=1, scorer=SCORER)
    short = [c for c in out.ledger if c.action == "shortened"]
    assert short and short[0].index == 2 and short[0].tokens_after < short[0].tokens_before
    text = out.messages[out.kept.index(2)]["content"]
    assert "barley" in text and len(text) < len(LONG)
    assert out.compressed_tokens <= 90


def test_reasked_question_keeps_latest_copy():
    msgs = [{"role": "user", "content": "How do I reset the router password quickly?"},
            {"role": "assistant", "content": "Hold the reset button for ten seconds."},
            {"role": "user", "content": "Tell me a very long story " + LONG},
            {"role": "assistant", "content": "Once upon a time " + LONG},
            {"role": "user", "content": "how do I reset the router password quickly"},
            {"role": "assistant", "content": "As said: hold reset for ten seconds."},
            {"role": "user", "content": "Thanks."}]
    out = compress_chat(msgs, budget=150, keep_last=3, scorer=SCORER)
    reasons = {c.index: c.reason for c in out.ledger}
    assert reasons[0] == "duplicate of message 4"
    assert 4 in out.kept


def test_sharegpt_format_roundtrip():
    msgs = [{"from": "system", "value": "Be brief."},
            {"from": "human", "value": "My cat is called Miso."},
            {"from": "gpt", "value": LONG},
            {"from": "human", "value": "What is my cat called?"},
            {"from": "gpt", "value": "Miso."}]
    out = compress_chat(msgs, budget=60, scorer=SCORER)
    assert out.format == "sharegpt"
    assert all(set(m) == {"from", "value"} for m in out.messages)
    assert out.messages[0]["value"] == "Be brief." and out.messages[-1]["value"] == "Miso."
    assert any("Miso" in m["value"] for m in out.messages[1:-2])
    assert out.compressed_tokens <= 60


def test_under_budget_untouched_and_errors():
    msgs = history()
    out = compress_chat(msgs, budget=10_000)
    assert out.messages == msgs and out.ledger == [] and out.ratio == 1.0
    with pytest.raises(OptionError, match="budget 20 is too small for the kept messages"):
        compress_chat(msgs, budget=20)
    with pytest.raises(ValueError, match="positive"):
        compress_chat(msgs, budget=0)
    with pytest.raises(InputError, match="message 1 is str"):
        compress_chat([{"role": "user", "content": "x"}, "oops"], budget=5)
    with pytest.raises(ValueError, match="message 0 has neither"):
        compress_chat([{"text": "x"}], budget=5)
    with pytest.raises(ValueError, match="message 0 content is int"):
        compress_chat([{"role": "user", "content": 3}], budget=5)
    with pytest.raises(ValueError, match="mix"):
        compress_chat([{"role": "user", "content": "a"}, {"from": "gpt", "value": "b"}], 5)
    assert compress_chat([], budget=5).messages == []


def test_content_parts_are_counted():
    msgs = [{"role": "user", "content": [{"type": "text", "text": "hello world"},
                                         {"type": "image_url", "image_url": {"url": "x"}}]}]
    # the image costs IMAGE_TOKENS (85: OpenAI's low-detail image), configurable
    assert count_chat_tokens(msgs) == 3 + 1 + 2 + 85 + 3
    assert count_chat_tokens(msgs, image_tokens=0) == 3 + 1 + 2 + 3


TURNS = ["ok", "thanks!", "My badge number is 7781.", "What is my badge number?", LONG[:300],
         "Tell me about Oslo weather.", "It rains a lot in Oslo in autumn.", "sure", ""]


@given(picks=st.lists(st.sampled_from(TURNS), min_size=1, max_size=14),
       budget=st.integers(1, 300), keep_last=st.integers(0, 3))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_never_exceeds_budget(picks, budget, keep_last):
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
            for i, t in enumerate(picks)]
    try:
        out = compress_chat(msgs, budget, keep_last=keep_last, scorer=SCORER)
    except ValueError as exc:
        assert "too small for the kept messages" in str(exc)
        tail = msgs[-keep_last:] if keep_last else []
        assert count_chat_tokens(tail) > budget
        return
    assert out.compressed_tokens == count_chat_tokens(out.messages) <= budget
    assert [m for m in out.messages[len(out.messages) - keep_last:]] == msgs[-keep_last:] or \
        keep_last == 0 or count_chat_tokens(msgs) <= budget
    changed = {c.index for c in out.ledger}
    assert set(range(len(msgs))) == set(out.kept) | changed


def _sides(out):
    return [("user" if m["role"] == "user" else "assistant", i)
            for m, i in zip(out.messages, out.kept) if m["role"] != "system"]


def test_alternate_keeps_user_assistant_turns_alternating():
    msgs = history()
    for budget in (60, 80, 100, 140, 200):
        plain = compress_chat(msgs, budget, keep_last=1, scorer=SCORER)
        out = compress_chat(msgs, budget, keep_last=1, scorer=SCORER, alternate=True)
        assert out.compressed_tokens <= budget
        sides = _sides(out)
        assert sides[0][0] == "user"
        for (a, i), (b, j) in zip(sides, sides[1:]):
            assert a != b or j == i + 1, (budget, sides)  # only the input's own adjacency
        assert {c.code for c in out.ledger} <= {"filler", "duplicate", "over_budget",
                                                "shortened", "alternation"}
        assert set(out.kept) <= set(plain.kept)
    # a budget where plain selection leaves two user turns in a row
    broken = [k for k in (60, 80, 100, 140, 200)
              if any(a == b == "user" for (a, _), (b, _) in
                     zip(_sides(compress_chat(msgs, k, keep_last=1, scorer=SCORER)),
                         _sides(compress_chat(msgs, k, keep_last=1, scorer=SCORER))[1:]))]
    assert broken, "the history should exercise the alternation fix"
    out = compress_chat(msgs, broken[0], keep_last=1, scorer=SCORER, alternate=True)
    assert any(c.code == "alternation" for c in out.ledger)


def test_orphaned_tool_result_is_never_kept():
    msgs = [{"role": "system", "content": "Use tools."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "search", "arguments": "{\"q\": \"flights\"}"}}]},
            {"role": "user", "content": "Also, my booking code is ZX81Q. " + LONG[:200]},
            # answers c1, whose call is two messages up: kept or dropped with it
            {"role": "tool", "tool_call_id": "c1", "content": "Flight 9 leaves at 7:40."},
            {"role": "assistant", "content": "Your flight leaves at 7:40."},
            {"role": "user", "content": "What was my booking code?"}]
    for budget in (40, 60, 90, 130):
        out = compress_chat(msgs, budget, keep_last=1, scorer=SCORER)
        assert out.compressed_tokens <= budget
        if 3 in out.kept:
            assert 1 in out.kept
        first = next(m for m in out.messages if m["role"] != "system")
        assert first["role"] != "tool"
        assert (3 in out.kept) == (1 in out.kept), budget
    out = compress_chat(msgs, 60, keep_last=1, scorer=SCORER)
    assert 1 not in out.kept and {c.index: c.reason for c in out.ledger}[3] == \
        "over budget (tool call and results)"


@given(picks=st.lists(st.sampled_from(TURNS + ["TOOL"]), min_size=1, max_size=14),
       budget=st.integers(30, 300), keep_last=st.integers(0, 3))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_alternate_never_exceeds_budget_or_orphans(picks, budget, keep_last):
    msgs, role = [], "user"
    for k, t in enumerate(picks):
        if t == "TOOL":
            msgs.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{k}", "type": "function",
                 "function": {"name": "f", "arguments": "{}"}}]})
            msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": "result 42"})
            role = "user"
            continue
        msgs.append({"role": role, "content": t})
        role = "assistant" if role == "user" else "user"
    try:
        out = compress_chat(msgs, budget, keep_last=keep_last, scorer=SCORER, alternate=True)
    except ValueError as exc:
        assert "too small for the kept messages" in str(exc)
        return
    assert out.compressed_tokens == count_chat_tokens(out.messages) <= budget
    kept = set(out.kept)
    for i in kept:
        if msgs[i]["role"] == "tool":
            assert i - 1 in kept
    assert set(range(len(msgs))) == kept | {c.index for c in out.ledger}
    sides = _sides(out)
    tail = set(range(len(msgs) - keep_last, len(msgs))) if keep_last else set()
    for (a, i), (b, j) in zip(sides, sides[1:]):
        assert a != b or j == i + 1 or ({i, j} <= tail) or i in tail and j in tail
