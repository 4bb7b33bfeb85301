"""Prompt-cache accounting: cached prefixes of whole messages, as rendered, between windows."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.chat.billing import CacheMeter, cache_accounting
from ctxkit.chat.pipeline import compress_chat, count_chat_tokens
from ctxkit.errors import CtxkitError, InputError, OptionError


def _chat(n: int) -> list[dict]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": f"turn {i}: the parcel for order {1000 + i} "
             "ships from the north depot on Tuesday."} for i in range(n)]


def test_a_window_that_grows_at_its_end_is_cached_up_to_the_previous_window():
    chat = _chat(6)
    result = cache_accounting([chat[:2], chat[:4], chat[:6]])
    for turn, window in zip(result.turns, (chat[:2], chat[:4], chat[:6])):
        assert turn.tokens == count_chat_tokens(window)
    # the previous window's messages, without the reply priming (3 tokens)
    assert result.turns[0].cached_tokens == 0
    assert result.turns[1].cached_tokens == count_chat_tokens(chat[:2]) - 3
    assert result.turns[2].cached_tokens == count_chat_tokens(chat[:4]) - 3
    assert [t.cached_messages for t in result.turns] == [0, 2, 4]


def test_a_change_in_the_first_message_breaks_the_whole_prefix():
    chat = _chat(4)
    edited = [dict(chat[0], content="turn 0, reworded")] + chat[1:]
    result = cache_accounting([chat, edited])
    assert result.turns[1].cached_tokens == 0
    assert result.turns[1].uncached_tokens == result.turns[1].tokens


def test_any_field_of_a_message_counts_as_rendered():
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "lookup", "arguments": '{"q": "a"}'}}]}
    other = {**call, "tool_calls": [{**call["tool_calls"][0],
                                     "function": {"name": "lookup", "arguments": '{"q": "b"}'}}]}
    user = {"role": "user", "content": "find it"}
    result = cache_accounting([[user, call], [user, other]])
    assert result.turns[1].cached_messages == 1
    # key order is not a change: the rendering is canonical
    reordered = {k: call[k] for k in reversed(list(call))}
    assert cache_accounting([[user, call], [user, reordered]]).turns[1].cached_messages == 2


def test_totals_and_billing_at_each_cached_price():
    chat = _chat(8)
    windows = [chat[:k] for k in range(2, 9, 2)]
    result = cache_accounting(windows)
    assert result.tokens == sum(count_chat_tokens(w) for w in windows)
    assert result.cached_tokens == sum(t.cached_tokens for t in result.turns)
    for price in (0.1, 0.5, 1.0):
        assert result.billed(price) == pytest.approx(sum(t.billed(price) for t in result.turns))
    assert result.billed(1.0) == result.tokens
    assert 0 < result.hit_share < 1
    data = result.to_dict(per_turn=True)
    assert set(data["billed"]) == {"0.1", "0.5"} and len(data["per_turn"]) == 4


def test_provider_blocks_round_the_cached_prefix_down():
    chat = _chat(6)
    ideal = cache_accounting([chat[:3], chat]).turns[1].cached_tokens
    blocked = cache_accounting([chat[:3], chat], block_tokens=16).turns[1].cached_tokens
    assert blocked == ideal - ideal % 16
    assert cache_accounting([chat[:3], chat],
                            min_cached_tokens=ideal + 1).turns[1].cached_tokens == 0


def test_records_compress_chat_results_directly():
    chat = _chat(12)
    meter = CacheMeter()
    first = compress_chat(chat[:10], 120, scorer="idf")
    meter.record(first)
    turn = meter.record(first)
    assert turn.cached_messages == len(first.messages)
    assert turn.tokens == first.compressed_tokens


def test_sharegpt_windows_are_counted_like_openai_ones():
    openai = [{"role": "user", "content": "hello there"}]
    sharegpt = [{"from": "human", "value": "hello there"}]
    assert (cache_accounting([sharegpt]).tokens == cache_accounting([openai]).tokens
            == count_chat_tokens(openai))


@pytest.mark.parametrize("windows", ["not windows", [["not a message"]], [[{"x": 1}]], [None]])
def test_bad_windows_are_input_errors(windows):
    with pytest.raises(InputError, match="window"):
        cache_accounting(windows)


@pytest.mark.parametrize("option", [{"block_tokens": 0}, {"min_cached_tokens": -1},
                                    {"per_message": 1.5}, {"reply_priming": True}])
def test_bad_options_are_option_errors(option):
    with pytest.raises(OptionError, match=next(iter(option))):
        CacheMeter(**option)
    assert issubclass(OptionError, CtxkitError)


_message = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant", "system"]),
    "content": st.text(alphabet="abc xyz.", max_size=30)})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_message, max_size=6), min_size=1, max_size=6))
def test_cached_tokens_never_exceed_either_window(windows):
    result = cache_accounting(windows)
    previous = 0
    for turn, window in zip(result.turns, windows):
        assert turn.tokens == count_chat_tokens(window)
        assert 0 <= turn.cached_tokens <= turn.tokens
        assert turn.cached_tokens <= max(previous - 3, 0)
        previous = turn.tokens


@pytest.mark.parametrize("bad", [None, 5, "abc", {"role": "user"}])
def test_cache_accounting_names_windows_that_are_no_sequence(bad):
    # None and numbers raised TypeError ('NoneType' object is not iterable)
    with pytest.raises(InputError, match="windows must be a sequence of windows"):
        cache_accounting(bad)
