"""Prefix-cache-friendly windows: stable prefix between compactions, recall block, no loss."""

from __future__ import annotations

import random

import pytest

from ctxkit.chat.billing import CacheMeter
from ctxkit.chat.features import ChatFeatures
from ctxkit.chat.options import ChatOptions
from ctxkit.chat.prefix_window import RECALL_HEADER, PrefixWindow
from ctxkit.chat.selection import select
from ctxkit.errors import OptionError

TOPICS = ["garden", "router", "invoice", "marathon", "piano", "tax form", "sourdough", "bike"]


def _chat(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(n):
        topic = rng.choice(TOPICS)
        if i % 2 == 0:
            out.append({"role": "user", "content": f"About the {topic}: the code is "
                        f"{rng.randrange(1000, 9999)}. What should I do next?"})
        else:
            out.append({"role": "assistant", "content": f"For the {topic}, check it daily "
                        f"and wait {rng.randrange(2, 60)} minutes. " * rng.randrange(1, 4)})
    return out


def _window(**kw) -> PrefixWindow:
    return PrefixWindow(ChatOptions(keep_last=2), ChatFeatures(scorer="idf"), **kw)


def _replay(chat, budget, window):
    return [window.compress(chat[:k], budget) for k in range(2, len(chat) + 1)]


def test_never_over_budget_and_no_message_silently_lost():
    chat = _chat(110)
    budget = 600
    for k, out in enumerate(_replay(chat, budget, _window()), start=2):
        assert out.compressed_tokens <= budget
        ledgered = {c.index for c in out.ledger if c.action == "dropped"}
        assert set(out.kept) | ledgered == set(range(k))
        assert not set(out.kept) & ledgered
        recalled = [c.index for c in out.ledger if c.action == "recalled"]
        assert set(recalled) <= set(out.kept)


def test_between_compactions_windows_only_grow_at_their_end():
    chat = _chat(110)
    window = _window(recall=0.0)
    outs, compactions = [], []
    for k in range(2, len(chat) + 1):
        outs.append(window.compress(chat[:k], 600))
        compactions.append(window.compactions)
    grown = 0
    for a, b, ca, cb in zip(outs, outs[1:], compactions, compactions[1:]):
        if ca == cb and ca > 0:
            assert b.messages[:len(a.messages)] == a.messages
            grown += 1
    assert grown > 30 and compactions[-1] >= 2


def _blocks(out) -> list[int]:
    return [i for i, m in enumerate(out.messages)
            if isinstance(m.get("content"), str) and m["content"].startswith(RECALL_HEADER)]


def test_the_recall_block_sits_before_the_question_and_names_what_it_recalls():
    chat = _chat(120)
    window = _window(recall=0.2)
    question = chat[3]["content"].split(":")[0] + ": what was the code?"
    out = window.compress(chat + [{"role": "user", "content": question}], 700)
    blocks = _blocks(out)
    assert len(blocks) == 1 and blocks[0] == len(out.messages) - 2
    recalled = [c.index for c in out.ledger if c.action == "recalled"]
    assert recalled and all(chat[i]["content"].split()[0].lower() in ("about", "for")
                            for i in recalled)


def test_every_request_of_one_turn_reuses_the_cached_recall_block():
    chat = _chat(120)
    question = chat[3]["content"].split(":")[0] + ": what was the code?"
    call = {"id": "c1", "type": "function",
            "function": {"name": "lookup", "arguments": '{"topic": "code"}'}}
    turn = [{"role": "user", "content": question},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "No entry found."},
            {"role": "assistant", "content": "I could not find it in the records."}]
    window, meter = _window(recall=0.2), CacheMeter()
    outs = [window.compress(chat + turn[:k], 700) for k in range(1, len(turn) + 1)]
    for out in outs:
        assert _blocks(out) == _blocks(outs[0]) and len(_blocks(out)) == 1
    steps = [meter.record(out) for out in outs]
    assert window.compactions == 1
    for before, after, step in zip(outs, outs[1:], steps[1:]):
        assert after.messages[:len(before.messages)] == before.messages
        # the whole previous request is served from the cache, the new message only is not
        assert step.cached_messages == len(before.messages) == len(after.messages) - 1


def test_cached_prefix_bills_less_than_reselecting_every_turn():
    chat = _chat(140, seed=3)
    budget = 700
    options, features = ChatOptions(keep_last=2), ChatFeatures(scorer="idf")
    stable, reselect = CacheMeter(), CacheMeter()
    window = PrefixWindow(options, features)
    for k in range(2, len(chat) + 1):
        stable.record(window.compress(chat[:k], budget))
        reselect.record(select(chat[:k], budget, options, features))
    assert stable.result().billed(0.1) < reselect.result().billed(0.1) / 2
    assert stable.result().hit_share > 0.6


def test_a_history_that_fits_is_sent_whole():
    chat = _chat(6)
    out = _window().compress(chat, 10_000)
    assert out.messages == chat and out.ledger == []


def test_sharegpt_histories_get_a_sharegpt_recall_block():
    chat = [{"from": "human" if m["role"] == "user" else "gpt", "value": m["content"]}
            for m in _chat(120)[1:]]
    out = _window(recall=0.2).compress(chat, 600, query="what was the code for the piano?")
    assert all(set(m) == {"from", "value"} for m in out.messages)


@pytest.mark.parametrize("kw", [{"low_water": 0}, {"low_water": 1.0}, {"recall": -0.1},
                                {"low_water": 0.8, "recall": 0.3}, {"recall_role": "tool"},
                                {"low_water": True}])
def test_bad_options_are_option_errors(kw):
    with pytest.raises(OptionError):
        _window(**kw)


def test_chat_memory_prefix_cache_mode_and_its_accounting():
    from ctxkit.chat.memory import ChatMemory
    from ctxkit.chat.prefix_window import PrefixCacheOptions

    chat = _chat(90, seed=5)
    plain = ChatMemory(budget=500, scorer="idf")
    cached = ChatMemory(budget=500, scorer="idf", prefix_cache=True)
    for message in chat:
        plain.add(message)
        cached.add(message)
        assert plain.compress().compressed_tokens <= 500
        assert cached.compress().compressed_tokens <= 500
    assert len(cached.cache_accounting().turns) == len(chat)
    # a short chat at a fifth of its tokens (python -m evals.chat_memory measures LoCoMo's)
    assert cached.cache_accounting().billed(0.1) < 0.6 * plain.cache_accounting().billed(0.1)
    # a snapshot keeps the mode and its options
    tuned = ChatMemory(budget=500, scorer="idf",
                       prefix_cache=PrefixCacheOptions(low_water=0.5, recall=0.2))
    tuned.extend(chat)
    restored = ChatMemory.from_dict(tuned.to_dict())
    assert restored.prefix_cache == tuned.prefix_cache
    assert restored.compress().messages == tuned.compress().messages
    with pytest.raises(OptionError, match="prefix_cache"):
        ChatMemory(budget=500, prefix_cache="yes")
