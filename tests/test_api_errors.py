"""Bad input to the public API: a one-line ``CtxkitError`` naming the argument, or a
documented policy, never a built-in exception from deep inside."""

from __future__ import annotations

import math

import pytest

import ctxkit
from ctxkit.errors import CtxkitError, OptionError

NAN = math.nan
TEXTS = ["a cat sat on the mat", "dogs bark loudly at night"]
CHAT = [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "hi"}]
FAST = {"scorer": "idf"}  # no model load: the sweep is about arguments, not scoring


def _memory_snapshot(**changes):
    mem = ctxkit.ChatMemory(budget=64, scorer="idf")
    mem.extend(CHAT)
    snap = mem.to_dict()
    for key, value in changes.items():
        if value is _DELETE:
            snap.pop(key)
        else:
            snap[key] = value
    return snap


_DELETE = object()

# (id, call, the argument the error must name; None: the call succeeds by a documented policy)
CASES = [
    # pack
    ("pack-none", lambda: ctxkit.pack(None, capacity=8), "sequences"),
    ("pack-int", lambda: ctxkit.pack(5, capacity=8), "sequences"),
    ("pack-dict", lambda: ctxkit.pack({"a": 1}, capacity=8), "sequences"),
    ("pack-str", lambda: ctxkit.pack("abc", capacity=8), "sequences"),
    ("pack-texts", lambda: ctxkit.pack([["a", "b"]], capacity=8), "sequence 0"),
    ("pack-floats", lambda: ctxkit.pack([[1.5]], capacity=8), "sequence 0"),
    ("pack-negative-id", lambda: ctxkit.pack([[-1, 2]], capacity=8), "sequence 0"),
    ("pack-empty", lambda: ctxkit.pack([], capacity=8), None),
    ("pack-capacity-0", lambda: ctxkit.pack([[1]], capacity=0), "capacity"),
    ("pack-capacity-neg", lambda: ctxkit.pack([[1]], capacity=-1), "capacity"),
    ("pack-capacity-huge", lambda: ctxkit.pack([[1]], capacity=10**12), "capacity"),
    ("pack-capacity-nan", lambda: ctxkit.pack([[1]], capacity=NAN), "capacity"),
    ("pack-capacity-str", lambda: ctxkit.pack([[1]], capacity="8"), "capacity"),
    ("pack-strategy", lambda: ctxkit.pack([[1]], capacity=8, strategy="nope"), "strategy"),
    ("pack-overflow", lambda: ctxkit.pack([[1]], capacity=8, overflow="nope"), "overflow"),
    ("pack-layout", lambda: ctxkit.pack([[1]], capacity=8, layout="nope"), "layout"),
    ("pack-separator", lambda: ctxkit.pack([[1]], capacity=8, separator_id="x"), "separator_id"),
    ("pack-mask-len", lambda: ctxkit.pack([[1]], capacity=8, completion_mask=[[1], [1]]),
     "completion_mask"),
    ("pack-mask-int", lambda: ctxkit.pack([[1]], capacity=8, completion_mask=5),
     "completion_mask"),
    ("pack-labels-none-row", lambda: ctxkit.pack([[1]], capacity=8, labels=[None]), "labels"),
    # pack_lengths
    ("pack_lengths-none", lambda: ctxkit.pack_lengths(None, capacity=8), "lengths"),
    ("pack_lengths-str", lambda: ctxkit.pack_lengths("abc", capacity=8), "lengths"),
    ("pack_lengths-dict", lambda: ctxkit.pack_lengths({"a": 1}, capacity=8), "lengths"),
    ("pack_lengths-floats", lambda: ctxkit.pack_lengths([1.5], capacity=8), "lengths"),
    ("pack_lengths-negative", lambda: ctxkit.pack_lengths([-1], capacity=8), "length"),
    ("pack_lengths-empty", lambda: ctxkit.pack_lengths([], capacity=8), None),
    ("pack_lengths-capacity", lambda: ctxkit.pack_lengths([1], capacity=0), "capacity"),
    ("pack_lengths-strategy", lambda: ctxkit.pack_lengths([1], capacity=8, strategy="x"),
     "strategy"),
    ("pack_lengths-seed", lambda: ctxkit.pack_lengths([1], capacity=8, seed=-1), "seed"),
    # length_grouped_batches
    ("lgb-none", lambda: ctxkit.length_grouped_batches(None, batch_tokens=8), "lengths"),
    ("lgb-str", lambda: ctxkit.length_grouped_batches("abc", batch_tokens=8), "lengths"),
    ("lgb-negative", lambda: ctxkit.length_grouped_batches([-1], batch_tokens=8), "length"),
    ("lgb-tokens-0", lambda: ctxkit.length_grouped_batches([1], batch_tokens=0), "batch_tokens"),
    ("lgb-tokens-nan", lambda: ctxkit.length_grouped_batches([1], batch_tokens=NAN),
     "batch_tokens"),
    ("lgb-rows-0", lambda: ctxkit.length_grouped_batches([1], batch_tokens=8, max_rows=0),
     "max_rows"),
    ("lgb-rows-str", lambda: ctxkit.length_grouped_batches([1], batch_tokens=8, max_rows="2"),
     "max_rows"),
    ("lgb-seed", lambda: ctxkit.length_grouped_batches([1], batch_tokens=8, seed=-1), "seed"),
    ("lgb-too-long", lambda: ctxkit.length_grouped_batches([9], batch_tokens=8), "batch_tokens"),
    # online packing
    ("online-capacity", lambda: ctxkit.OnlinePacker(capacity=0), "capacity"),
    ("online-no-capacity", lambda: ctxkit.OnlinePacker(), "capacity"),
    ("online-buffer", lambda: ctxkit.OnlinePacker(capacity=8, buffer_size=0), "buffer_size"),
    ("online-carry-nan", lambda: ctxkit.OnlinePacker(capacity=8, carry_fraction=NAN),
     "carry_fraction"),
    ("online-carry-big", lambda: ctxkit.OnlinePacker(capacity=8, carry_fraction=2),
     "carry_fraction"),
    ("online-strategy", lambda: ctxkit.OnlinePacker(capacity=8, strategy="wrapped"), "strategy"),
    ("online-length", lambda: ctxkit.OnlinePacker(capacity=8, length=5), "length"),
    ("online-add-none", lambda: ctxkit.OnlinePacker(capacity=8).add(None), "item"),
    ("online-add-negative", lambda: ctxkit.OnlinePacker(capacity=8).add(-3), "item"),
    ("stream-none", lambda: list(ctxkit.pack_stream(None, capacity=8)), "iterable"),
    ("stream-int", lambda: list(ctxkit.pack_stream(5, capacity=8)), "iterable"),
    ("stream-empty", lambda: list(ctxkit.pack_stream([], capacity=8)), None),
    ("stream-capacity", lambda: list(ctxkit.pack_stream([[1]], capacity=-1)), "capacity"),
    # collator
    ("collator-capacity", lambda: ctxkit.PackedCollator(capacity=0), "capacity"),
    ("collator-no-capacity", lambda: ctxkit.PackedCollator(), "capacity"),
    ("collator-layout", lambda: ctxkit.PackedCollator(capacity=8, layout="x"), "layout"),
    ("collator-empty", lambda: ctxkit.PackedCollator(capacity=8).pack([]), "examples"),
    ("collator-no-ids", lambda: ctxkit.PackedCollator(capacity=8).pack([{"x": 1}]), "input_ids"),
    ("collator-not-mapping", lambda: ctxkit.PackedCollator(capacity=8).pack([[1, 2]]),
     "example 0"),
    ("collator-none", lambda: ctxkit.PackedCollator(capacity=8).pack(None), "examples"),
    # dedup
    ("dedup-none", lambda: ctxkit.dedup(None), "texts"),
    ("dedup-int", lambda: ctxkit.dedup(5), "texts"),
    ("dedup-dict", lambda: ctxkit.dedup({"a": 1}), "texts"),
    ("dedup-str", lambda: ctxkit.dedup("abc"), "texts"),
    ("dedup-ints", lambda: ctxkit.dedup([1, 2]), "text 0"),
    ("dedup-empty", lambda: ctxkit.dedup([]), None),
    ("dedup-method", lambda: ctxkit.dedup(TEXTS, method="nope"), "method"),
    ("dedup-method-int", lambda: ctxkit.dedup(TEXTS, method=5), "method"),
    ("dedup-threshold-nan", lambda: ctxkit.dedup(TEXTS, method="minhash", threshold=NAN),
     "threshold"),
    ("dedup-threshold-neg", lambda: ctxkit.dedup(TEXTS, method="minhash", threshold=-1),
     "threshold"),
    ("dedup-threshold-str", lambda: ctxkit.dedup(TEXTS, method="minhash", threshold="0.5"),
     "threshold"),
    ("dedup-keep", lambda: ctxkit.dedup(TEXTS, keep="nope"), "keep"),
    ("dedup-scores-len", lambda: ctxkit.dedup(TEXTS, scores=[1.0]), "scores"),
    ("dedup-option", lambda: ctxkit.dedup(TEXTS, method="minhash", num_perm=0), "num_perm"),
    ("dedup-unknown-option", lambda: ctxkit.dedup(TEXTS, method="minhash", colour=1), "colour"),
    # dedup_messages
    ("dedup_messages-none", lambda: ctxkit.dedup_messages(None), "messages"),
    ("dedup_messages-str", lambda: ctxkit.dedup_messages("abc"), "messages"),
    ("dedup_messages-ints", lambda: ctxkit.dedup_messages([1, 2]), "message 0"),
    ("dedup_messages-empty", lambda: ctxkit.dedup_messages([]), None),
    ("dedup_messages-method", lambda: ctxkit.dedup_messages(CHAT, method="nope"), "method"),
    ("dedup_messages-threshold", lambda: ctxkit.dedup_messages(CHAT, threshold=NAN),
     "threshold"),
    ("dedup_messages-keep", lambda: ctxkit.dedup_messages(CHAT, keep="nope"), "keep"),
    ("dedup_messages-roles", lambda: ctxkit.dedup_messages(CHAT, roles=5), "roles"),
    # count_chat_tokens
    ("count-none", lambda: ctxkit.count_chat_tokens(None), "messages"),
    ("count-str", lambda: ctxkit.count_chat_tokens("abc"), "messages"),
    ("count-ints", lambda: ctxkit.count_chat_tokens([1]), "message 0"),
    ("count-empty", lambda: ctxkit.count_chat_tokens([]), None),
    ("count-tokenizer", lambda: ctxkit.count_chat_tokens(CHAT, tokenizer="nope"), "tokenizer"),
    ("count-per-message", lambda: ctxkit.count_chat_tokens(CHAT, per_message=-1), "per_message"),
    ("count-priming", lambda: ctxkit.count_chat_tokens(CHAT, reply_priming="3"),
     "reply_priming"),
    # density
    ("density-none", lambda: ctxkit.density(None), "text_or_texts"),
    ("density-int", lambda: ctxkit.density(5), "text_or_texts"),
    ("density-dict", lambda: ctxkit.density({"a": 1}), "text_or_texts"),
    ("density-str", lambda: ctxkit.density("one text, scored whole"), None),
    ("density-ints", lambda: ctxkit.density([1, 2]), "text 0"),
    ("density-empty", lambda: ctxkit.density([]), None),
    ("density-tokenizer", lambda: ctxkit.density(TEXTS, tokenizer="nope"), "tokenizer"),
    ("density-scorer", lambda: ctxkit.density(TEXTS, scorer="nope"), "scorer"),
    # evaluate
    ("evaluate-none", lambda: ctxkit.evaluate(None), "texts"),
    ("evaluate-int", lambda: ctxkit.evaluate(5), "texts"),
    ("evaluate-str", lambda: ctxkit.evaluate("a string"), "texts"),
    ("evaluate-ints", lambda: ctxkit.evaluate([1, 2]), "text 0"),
    ("evaluate-capacity", lambda: ctxkit.evaluate(TEXTS, capacity=0), "capacity"),
    ("evaluate-sections", lambda: ctxkit.evaluate(TEXTS, sections=("nope",)), "sections"),
    ("evaluate-tokenizer", lambda: ctxkit.evaluate(TEXTS, tokenizer="nope"), "tokenizer"),
    # compress
    ("compress-none", lambda: ctxkit.compress(None, budget=10, **FAST), "text_or_chunks"),
    ("compress-int", lambda: ctxkit.compress(5, budget=10, **FAST), "text_or_chunks"),
    ("compress-dict", lambda: ctxkit.compress({"a": 1}, budget=10, **FAST), "text_or_chunks"),
    ("compress-ints", lambda: ctxkit.compress([1, 2], budget=10, **FAST), "chunk 0"),
    ("compress-empty", lambda: ctxkit.compress("", budget=10, **FAST), None),
    ("compress-budget-0", lambda: ctxkit.compress("a b.", budget=0, **FAST), "budget"),
    ("compress-budget-neg", lambda: ctxkit.compress("a b.", budget=-5, **FAST), "budget"),
    ("compress-budget-nan", lambda: ctxkit.compress("a b.", budget=NAN, **FAST), "budget"),
    ("compress-budget-str", lambda: ctxkit.compress("a b.", budget="10", **FAST), "budget"),
    ("compress-budget-none", lambda: ctxkit.compress("a b.", budget=None, **FAST), "budget"),
    ("compress-query-int", lambda: ctxkit.compress("a b.", budget=10, query=123, **FAST),
     "query"),
    ("compress-tokenizer", lambda: ctxkit.compress("a b.", budget=10, tokenizer="nope",
                                                   **FAST), "tokenizer"),
    ("compress-scorer", lambda: ctxkit.compress("a b.", budget=10, scorer="nope"), "scorer"),
    ("compress-granularity", lambda: ctxkit.compress("a b.", budget=10, granularity="nope",
                                                     **FAST), "granularity"),
    ("compress-reorder", lambda: ctxkit.compress("a b.", budget=10, reorder="nope", **FAST),
     "reorder"),
    ("compress-token-drop", lambda: ctxkit.compress("a b.", budget=10, token_drop=NAN, **FAST),
     "token_drop"),
    ("compress-force-keep", lambda: ctxkit.compress("a b.", budget=10, force_keep=5, **FAST),
     "force_keep"),
    # compress_chat
    ("chat-none", lambda: ctxkit.compress_chat(None, budget=10, **FAST), "messages"),
    ("chat-str", lambda: ctxkit.compress_chat("abc", budget=10, **FAST), "messages"),
    ("chat-ints", lambda: ctxkit.compress_chat([1], budget=10, **FAST), "message 0"),
    ("chat-empty", lambda: ctxkit.compress_chat([], budget=10, **FAST), None),
    ("chat-budget-0", lambda: ctxkit.compress_chat(CHAT, budget=0, **FAST), "budget"),
    ("chat-budget-nan", lambda: ctxkit.compress_chat(CHAT, budget=NAN, **FAST), "budget"),
    ("chat-query-int", lambda: ctxkit.compress_chat(CHAT, budget=50, query=123, **FAST),
     "query"),
    ("chat-keep-last", lambda: ctxkit.compress_chat(CHAT, budget=50, keep_last=-1, **FAST),
     "keep_last"),
    ("chat-scorer", lambda: ctxkit.compress_chat(CHAT, budget=50, scorer="nope"), "scorer"),
    # ChatMemory
    ("memory-budget", lambda: ctxkit.ChatMemory(budget=0, **FAST), "budget"),
    ("memory-add-none", lambda: ctxkit.ChatMemory(**FAST).add(None), "message"),
    ("memory-compress-query", lambda: _memory_with_chat().compress(123), "query"),
    ("memory-compress-budget", lambda: _memory_with_chat().compress(budget=0), "budget"),
    ("memory-from-none", lambda: ctxkit.ChatMemory.from_dict(None), "snapshot"),
    ("memory-from-empty", lambda: ctxkit.ChatMemory.from_dict({}), "version"),
    ("memory-no-budget", lambda: ctxkit.ChatMemory.from_dict(_memory_snapshot(budget=_DELETE)),
     "budget"),
    ("memory-no-options", lambda: ctxkit.ChatMemory.from_dict(
        _memory_snapshot(options=_DELETE)), "options"),
    ("memory-no-messages", lambda: ctxkit.ChatMemory.from_dict(
        _memory_snapshot(messages=_DELETE)), "messages"),
    ("memory-no-scorer", lambda: ctxkit.ChatMemory.from_dict(_memory_snapshot(scorer=_DELETE)),
     "scorer"),
    ("memory-budget-str", lambda: ctxkit.ChatMemory.from_dict(_memory_snapshot(budget="64")),
     "budget"),
    ("memory-options-list", lambda: ctxkit.ChatMemory.from_dict(_memory_snapshot(options=[])),
     "options"),
    ("memory-options-no-keep-last", lambda: ctxkit.ChatMemory.from_dict(
        _memory_snapshot(options={"keep_system": True})), "keep_last"),
    ("memory-options-unknown", lambda: ctxkit.ChatMemory.from_dict(
        _memory_snapshot(options={"keep_last": 2, "colour": 1})), "colour"),
    ("memory-messages-dict", lambda: ctxkit.ChatMemory.from_dict(
        _memory_snapshot(messages={"role": "user"})), "messages"),
    ("memory-messages-truncated", lambda: ctxkit.ChatMemory.from_dict(
        _memory_snapshot(messages=[{"role": "user", "content": "hi"}, "trunc"])), "message 1"),
    # tokenizers and scorers
    ("tokenizer-none", lambda: ctxkit.get_tokenizer(None), "tokenizer"),
    ("tokenizer-int", lambda: ctxkit.get_tokenizer(5), "tokenizer"),
    ("tokenizer-unknown", lambda: ctxkit.get_tokenizer("nope"), "tokenizer"),
    ("tokenizer-hf-missing", lambda: ctxkit.get_tokenizer("hf:/nonexistent"), "tokenizer"),
    ("scorer-unknown", lambda: ctxkit.get_scorer("nope"), "scorer"),
    ("tokenizer-list", lambda: ctxkit.get_tokenizer(["cl100k_base"]), "tokenizer"),
    # reading records
    ("read-none", lambda: list(ctxkit.read_records(None)), "path"),
    ("read-int", lambda: list(ctxkit.read_records(3)), "path"),
    ("read-list", lambda: list(ctxkit.read_records(["a.jsonl"])), "path"),
    # the packed encoder
    ("encoder-missing-dir", lambda: ctxkit.PackedEncoder(model="/nonexistent/model"),
     "model"),
    ("encoder-model-int", lambda: ctxkit.PackedEncoder(model=3), "model"),
    ("encode-none", lambda: _encoder().encode(None), "texts"),
    ("encode-str", lambda: _encoder().encode("one text"), "texts"),
    ("encode-none-item", lambda: _encoder().encode(["a", None]), "text 1"),
    ("tokenize-none-item", lambda: _encoder().tokenize([None]), "text 0"),
    # billing and message dedup
    ("billed-negative", lambda: _accounting().billed(-1), "cached_price"),
    ("billed-nan", lambda: _accounting().turns[0].billed(NAN), "cached_price"),
    ("dedup-messages-role-typo", lambda: ctxkit.dedup_messages(CHAT, roles=["asistant"]),
     "roles"),
]


def _encoder():
    return ctxkit.PackedEncoder(device="cpu")


def _accounting():
    return ctxkit.cache_accounting([CHAT, CHAT + [{"role": "user", "content": "more"}]])


def _memory_with_chat():
    mem = ctxkit.ChatMemory(budget=64, **FAST)
    mem.extend(CHAT)
    return mem


@pytest.mark.parametrize("call,names", [pytest.param(c, n, id=i) for i, c, n in CASES])
def test_bad_input_is_a_ctxkit_error_naming_the_argument(call, names):
    if names is None:
        call()  # the documented policy: an empty input gives an empty result, one str one text
        return
    with pytest.raises(CtxkitError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    assert names in message, message


def test_density_takes_one_string_as_one_text():
    assert len(ctxkit.density("one text, scored whole").texts) == 1


def test_the_sweep_can_fail():
    with pytest.raises(ValueError):  # a built-in exception is not taken for a ctxkit error
        test_bad_input_is_a_ctxkit_error_naming_the_argument(lambda: int("x"), "x")
    with pytest.raises(AssertionError):  # nor is an error that names another argument
        test_bad_input_is_a_ctxkit_error_naming_the_argument(
            lambda: ctxkit.pack([[1]], capacity=0), "strategy")


@pytest.mark.parametrize("call", [
    lambda: ctxkit.pack([[1, 2, 3]], capacity=8, options=ctxkit.ChatOptions()),
    lambda: ctxkit.dedup(["a b c", "a b c"], options="minhash"),
    lambda: ctxkit.compress("some text to compress here", 4, options={"scorer": "idf"}),
])
def test_options_of_the_wrong_type_name_the_option(call):
    with pytest.raises(OptionError, match="options"):
        call()
