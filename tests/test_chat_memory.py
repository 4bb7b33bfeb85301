import json
import os
import random
from dataclasses import replace

import pytest

import ctxkit
from ctxkit.chat.memory import ChatMemory
from ctxkit.chat.pipeline import compress_chat, count_chat_tokens
from ctxkit.errors import InputError, OptionError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOPICS = ["router", "invoice", "flight", "recipe", "garden", "laptop", "tax form", "piano"]
FACTS = ["My locker code is {n}.", "The invoice number is INV-{n}.", "Book seat {n}A please.",
         "Use {n} grams of flour.", "I planted {n} tomato plants.", "My laptop serial is SN{n}."]


def conversation(turns: int, seed: int = 0) -> list[dict]:
    """A long support-style chat: templated greetings, facts with numbers, filler, re-asked
    questions, long answers and a tool call with its result."""
    rng = random.Random(seed)
    msgs = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."}]
    asked: list[str] = []
    for t in range(turns):
        kind = rng.random()
        topic = rng.choice(TOPICS)
        if kind < 0.1:
            user = rng.choice(["thanks!", "ok", "got it, thanks"])
        elif kind < 0.2 and asked:
            user = rng.choice(asked).lower().rstrip("?")  # a re-asked question
        elif kind < 0.5:
            user = rng.choice(FACTS).format(n=rng.randrange(100, 9999))
        else:
            user = f"How do I fix the {topic} problem number {rng.randrange(1, 50)}?"
            asked.append(user)
        msgs.append({"role": "user", "content": user})
        if kind > 0.93:
            msgs.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{t}", "type": "function",
                 "function": {"name": "lookup", "arguments": json.dumps({"q": topic})}}]})
            msgs.append({"role": "tool", "tool_call_id": f"call_{t}",
                         "content": f"{topic}: status ok, ticket {rng.randrange(1000)}"})
        answer = (f"For the {topic}, first check the settings page. " * rng.randrange(1, 4)
                  + f"Then restart it and wait {rng.randrange(2, 60)} seconds.")
        msgs.append({"role": "assistant", "content": answer})
    return msgs


def replay(messages, budget, **options):
    mem = ChatMemory(budget, **options)
    for k, m in enumerate(messages):
        mem.add(m)
        if m["role"] != "user" or k < 2:
            continue
        yield k, mem.compress()


@pytest.mark.parametrize("options", [
    {"keep_last": 2, "scorer": "idf"},
    {"keep_last": 1, "scorer": "idf", "alternate": True, "whole_share": 1.0},
    {"keep_last": 3, "scorer": "idf", "shorten": False, "neighbors": 0.0},
])
def test_replay_matches_compress_chat_on_every_prefix(options):
    msgs = conversation(50)
    budget = 400
    seen = 0
    for k, window in replay(msgs, budget, **options):
        prefix = msgs[:k + 1]
        if count_chat_tokens(prefix) > budget:
            seen += 1
        expected = compress_chat(prefix, budget, **options)
        assert window.messages == expected.messages, k
        assert window.kept == expected.kept and window.ledger == expected.ledger, k
        assert window.compressed_tokens == count_chat_tokens(window.messages) <= budget
    assert seen > 25  # most windows really compress


def test_replay_with_embedding_scorer_matches():
    """The same windows and ledgers; on some CPUs the cached path's scores differ from one
    call over the whole history in the last bits (about 1e-8: embeddings computed in other
    batches), so scores are compared to float32 precision."""
    pytest.importorskip("torch")
    msgs = conversation(8, seed=3)
    for k, window in replay(msgs, 250, scorer="embedding"):
        expected = compress_chat(msgs[:k + 1], 250, scorer="embedding")
        assert window.messages == expected.messages and window.kept == expected.kept, k
        assert [replace(c, score=None) for c in window.ledger] == \
            [replace(c, score=None) for c in expected.ledger], k
        assert [c.score for c in window.ledger] == pytest.approx(
            [c.score for c in expected.ledger], rel=1e-5, abs=1e-6), k


def test_round_trip_is_json_safe_and_equal():
    mem = ChatMemory(budget=300, keep_last=1, scorer="idf", alternate=True, word_keep=0.6)
    mem.extend(conversation(20, seed=1))
    snapshot = json.loads(json.dumps(mem.to_dict()))
    back = ChatMemory.from_dict(snapshot)
    assert len(back) == len(mem) and back.messages == mem.messages
    assert back.options == mem.options and back.budget == 300
    a, b = mem.compress(), back.compress()
    assert a.messages == b.messages and a.ledger == b.ledger
    back.add({"role": "user", "content": "And the invoice number?"})
    assert back.compress().messages[-1]["content"] == "And the invoice number?"


def test_a_snapshot_loads_only_what_the_restoring_caller_allows():
    from ctxkit.io.tokenizers import get_tokenizer, minilm_path

    mem = ChatMemory(budget=300, keep_last=1, scorer="idf")
    mem.extend(conversation(6, seed=4))
    snapshot = json.loads(json.dumps(mem.to_dict()))
    hf = f"hf:{minilm_path()}"  # a real local model: loading it would succeed
    for field, spec in (("tokenizer", hf), ("scorer", "cross-encoder:/srv/any/model")):
        bad = {**snapshot, field: spec}
        with pytest.raises(InputError, match=rf"snapshot field '{field}' is .*loads a model "
                                             rf"from a path.*{field}=.*allow="):
            ChatMemory.from_dict(bad)
    # the caller's choice: an allow-list of exact specs, or the tokenizer/scorer to use
    back = ChatMemory.from_dict({**snapshot, "tokenizer": hf}, allow=[hf])
    assert back.to_dict()["tokenizer"] == hf
    with pytest.raises(InputError, match="path"):
        ChatMemory.from_dict({**snapshot, "tokenizer": hf}, allow=["hf:/other"])
    back = ChatMemory.from_dict({**snapshot, "tokenizer": hf,
                                 "scorer": "cross-encoder:/srv/any/model"},
                                tokenizer=get_tokenizer("cl100k_base"), scorer="idf")
    assert back.compress().messages == mem.compress().messages
    assert back.to_dict()["tokenizer"] == "cl100k_base"
    with pytest.raises(OptionError, match="allow"):
        ChatMemory.from_dict(snapshot, allow="hf:/x")
    # built-in names restore as before
    assert ChatMemory.from_dict({**snapshot, "tokenizer": "minilm"}).budget == 300


def test_budget_override_query_and_public_export():
    mem = ctxkit.ChatMemory(budget=10_000, scorer="idf")
    msgs = conversation(30, seed=2)
    mem.extend(msgs)
    assert mem.compress().messages == msgs  # fits: untouched
    small = mem.compress(query="invoice number", budget=200)
    assert small.compressed_tokens <= 200 and small.budget == 200
    assert small.messages == compress_chat(msgs, 200, query="invoice number",
                                           scorer="idf").messages


def test_bad_input_is_a_clear_error():
    mem = ChatMemory(budget=100)
    mem.add({"role": "user", "content": "hi"})
    with pytest.raises(ValueError, match="mix"):
        mem.add({"from": "gpt", "value": "hello"})
    with pytest.raises(InputError, match="message 1 is str"):
        mem.add("hello")
    with pytest.raises(ValueError, match="message 1 content is int"):
        mem.add({"role": "user", "content": 3})
    assert len(mem) == 1
    with pytest.raises(TypeError, match="keep_lats"):
        ChatMemory(budget=10, keep_lats=2)
    with pytest.raises(ValueError, match="word_keep"):
        ChatMemory(budget=10, word_keep=1.5)
    with pytest.raises(ValueError, match="positive"):
        ChatMemory(budget=0)
    with pytest.raises(ValueError, match="snapshot"):
        ChatMemory.from_dict({"messages": []})
    snapshot = ChatMemory(budget=10, scorer="idf").to_dict()
    for damaged in ({**snapshot, "options": None}, {k: v for k, v in snapshot.items()
                                                      if k != "budget"},
                    {**snapshot, "options": {"keep_lats": 1}}, {**snapshot, "messages": 3}):
        with pytest.raises(InputError, match="snapshot"):
            ChatMemory.from_dict(damaged)
    with pytest.raises(ValueError, match="too small"):
        mem.extend([{"role": "assistant", "content": "hello " * 80},
                     {"role": "user", "content": "and now? " * 20}])
        mem.compress(budget=50)


def test_cli_replay_prints_per_turn_budgets_and_writes_the_last_window(tmp_path, capsys):
    from ctxkit.cli import main

    msgs = conversation(12, seed=4)
    src, dst, rep = tmp_path / "in.json", tmp_path / "out.json", tmp_path / "rep.json"
    src.write_text(json.dumps(msgs))
    assert main(["chat", str(src), "-b", "200", "-o", str(dst), "--report", str(rep),
                 "--replay", "--alternate", "--scorer", "idf"]) == 0
    printed = capsys.readouterr().out
    assert "per-turn budget" in printed and "0:5 " in printed
    turns = json.loads(rep.read_text())["turns"]
    assert [t["turn"] for t in turns] == list(range(len(msgs)))
    assert all(t["window_tokens"] <= 200 for t in turns)
    assert turns[-1]["history_tokens"] == count_chat_tokens(msgs)
    last = compress_chat(msgs, 200, alternate=True, scorer="idf")
    assert json.loads(dst.read_text()) == last.messages
    assert main(["chat", str(src), "-b", "200", "-o", str(dst), "--replay", "-q", "x"]) == 2
    assert "--query" in capsys.readouterr().err


def test_cli_replay_reports_prompt_cache_accounting(tmp_path, capsys):
    from ctxkit.cli import main

    msgs = conversation(40, seed=6)
    src, dst = tmp_path / "in.json", tmp_path / "out.json"
    src.write_text(json.dumps(msgs))
    billed = {}
    for mode in ([], ["--prefix-cache"]):
        rep = tmp_path / f"rep{len(mode)}.json"
        assert main(["chat", str(src), "-b", "200", "-o", str(dst), "--report", str(rep),
                     "--replay", "--scorer", "idf", *mode]) == 0
        assert "served from a prefix cache" in capsys.readouterr().out
        report = json.loads(rep.read_text())
        turns, cache = report["turns"], report["prompt_cache"]
        assert cache["tokens"] == sum(t["window_tokens"] for t in turns)
        assert cache["cached_tokens"] == sum(t["cached_tokens"] for t in turns)
        assert all(t["cached_tokens"] + t["uncached_tokens"] == t["window_tokens"]
                   for t in turns)
        assert set(cache["billed"]) == {"0.1", "0.5"}
        billed[bool(mode)] = cache["billed"]["0.1"]
    assert billed[True] < billed[False]
    assert main(["chat", str(src), "-b", "200", "-o", str(dst), "--prefix-cache"]) == 2
    assert "--replay" in capsys.readouterr().err


def test_edited_history_stays_equal_and_the_store_stays_bounded():
    msgs = conversation(40, seed=5)
    mem = ChatMemory(budget=300, scorer="idf")
    mem.extend(msgs)
    mem.compress()
    for k in range(1, len(msgs), 2):  # a server rewrites the stored turns
        mem.messages[k] = {**mem.messages[k], "content": f"edited turn {k}: code {k * 31}"}
        if k % 8 == 1:
            assert mem.compress().messages == compress_chat(mem.messages, 300,
                                                            scorer="idf").messages
    assert len(mem.features) <= 4 * len(mem) + 64


def test_add_refuses_a_tool_result_that_answers_no_call():
    # accepted, it made every later compress raise, even after from_dict
    mem = ChatMemory(budget=200, scorer="idf")
    mem.add({"role": "user", "content": "What is 6 times 7?"})
    with pytest.raises(InputError, match="message 1 answers tool call 'c9'"):
        mem.add({"role": "tool", "tool_call_id": "c9", "content": "42"})
    with pytest.raises(InputError, match="message 1 is a tool result"):
        mem.add({"role": "tool", "content": "42"})
    assert len(mem) == 1 and len(mem.history.originals) == 1
    mem.add({"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "mul", "arguments": "{\"a\": 6, \"b\": 7}"}}]})
    mem.add({"role": "tool", "tool_call_id": "c1", "content": "42"})
    assert len(ChatMemory.from_dict(mem.to_dict()).compress().messages) == 3


def test_remove_a_message():
    mem = ChatMemory(budget=60, keep_last=1, scorer="idf")
    turns = [{"role": "user", "content": f"Fact {i}: the locker code is {4400 + i}."}
             for i in range(6)]
    mem.extend(turns)
    mem.compress()
    assert mem.remove(2) == turns[2] and len(mem) == 5
    rest = turns[:2] + turns[3:]
    assert mem.compress().messages == compress_chat(rest, 60, keep_last=1,
                                                    scorer="idf").messages
    with pytest.raises(InputError, match="no message 9"):
        mem.remove(9)
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "f", "arguments": "{}"}}]}
    mem.extend([call, {"role": "tool", "tool_call_id": "c1", "content": "done"}])
    with pytest.raises(InputError, match="message 5 cannot go: message 6 answers tool call"):
        mem.remove(5)
    assert len(mem) == 7
    mem.remove(6)
    assert mem.remove(5) == call and len(mem) == 5


def test_a_snapshot_with_vectors_restores_without_embedding(monkeypatch):
    import ctxkit.compression.scoring.embedding as es
    from ctxkit.compression.scoring.registry import get_scorer

    turns = [{"role": "user" if i % 2 == 0 else "assistant",
              "content": f"Day {i}: we talked about the {w} and the harbour of town {i % 7}."}
             for i, w in enumerate(["kayak", "violin", "garden", "passport", "bakery",
                                    "lantern", "orchard", "canoe"] * 10)]
    mem = ChatMemory(300)
    mem.extend(turns)
    mem.compress()
    window = mem.compress()
    snap = json.loads(json.dumps(mem.to_dict(vectors=True)))
    vec = snap["vectors"]
    assert len(vec["embedding"]) + len(vec["word_pieces"]) == 4096 * vec["count"]  # per message
    seen: list[str] = []
    real = es.embed

    def counting(texts, dtype="fast"):
        seen.extend(texts)
        return real(texts, dtype)

    monkeypatch.setattr(es, "embed", counting)
    get_scorer("embedding").clear_cache()  # a fresh server process
    restored = ChatMemory.from_dict(snap)
    assert restored.compress().messages == window.messages
    assert seen == []  # nothing embedded again
    bad = json.loads(json.dumps(snap))
    bad["vectors"]["count"] -= 1
    with pytest.raises(InputError, match="vectors"):
        ChatMemory.from_dict(bad)
    bad["vectors"] = dict(snap["vectors"], embedding="not base64!")
    with pytest.raises(InputError, match="vectors.embedding"):
        ChatMemory.from_dict(bad)
    with pytest.raises(InputError, match="vectors=True needs the embedding scorer"):
        ChatMemory(300, scorer="idf").to_dict(vectors=True)
