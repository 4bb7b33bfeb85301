"""The billing replay of evals.chat_memory: every method's window per turn, billed and checked."""

from __future__ import annotations

import random

from evals import chat_billing
from evals import public_bench as pb


def _conversation() -> pb.LocomoConversation:
    rng = random.Random(7)
    topics = ["garden", "router", "invoice", "marathon", "piano", "tax form", "sourdough"]
    messages = []
    for i in range(50):
        topic = rng.choice(topics)
        if i % 2 == 0:
            messages.append({"role": "user", "content": f"About the {topic}: code "
                             f"{rng.randrange(1000, 9999)}. What next?"})
        else:
            messages.append({"role": "assistant", "content": f"For the {topic}, wait "
                             f"{rng.randrange(2, 60)} minutes and check again. " * 2})
    conv = pb.LocomoConversation("generated", messages)
    code = messages[10]["content"].split("code ")[1].split(".")[0]
    topic = messages[10]["content"].split("the ")[1].split(":")[0]
    conv.questions.append(pb.LocomoQuestion(f"What was code {code} about?", topic, 4, [10]))
    return conv


def test_replay_bills_every_method_and_checks_retention():
    rows = chat_billing.replay(_conversation(), 0.25, "idf")
    by = {r["method"]: r for r in rows}
    assert {"ChatMemory", "ChatMemory, prefix cache", "whole history", "ChatMemory, summaries",
            "ChatMemory, prefix cache, summaries"} <= set(by)
    for name in ("ChatMemory", "ChatMemory, prefix cache", "ChatMemory, summaries",
                 "ChatMemory, prefix cache, summaries"):
        assert by[name]["over_budget_turns"] == 0
        assert by[name]["retention"] in (0.0, 1.0) and by[name]["questions"] == 1
        assert by[name]["answer_in_window"] in (0.0, 1.0)
    # the whole history holds every answer; the question alone does not count
    assert by["whole history"]["answer_in_window"] == 1.0
    whole = by["whole history"]
    assert whole["over_budget_turns"] > 0 and whole["retention"] == 1.0
    assert whole["billed"]["0.5"] > by["ChatMemory"]["billed"]["0.5"]
    assert by["ChatMemory, prefix cache"]["billed"]["0.1"] < by["ChatMemory"]["billed"]["0.1"]
    for r in rows:
        assert 0.0 <= r["hit_share"] <= 1.0
        assert r["billed"]["0.1"] <= r["billed"]["0.5"] <= r["tokens"]
    summary = chat_billing.summarize(rows)
    assert len(summary) == len(rows)
    text = chat_billing.markdown(summary, "one generated chat", "idf")
    assert "vs ChatMemory" in text and "n/a (over budget)" in text and "| answer |" in text


def test_answer_in_window_reads_the_window_before_the_question():
    window = [{"role": "user", "content": "Summary: Ana moved to the Porto suburbs."},
              {"role": "user", "content": "Where did Ana move to?"}]
    assert chat_billing.answer_in_window(window, "Porto")
    assert not chat_billing.answer_in_window(window, "Where did Ana")
