"""dedup_messages: chat histories keep one of each repeated turn, never touching system prompts."""

import pytest

from ctxkit.deduplication.messages import dedup_messages, is_acknowledgement


def history():
    return [
        {"role": "system", "content": "You are helpful."},  # 0
        {"role": "user", "content": "How do I reverse a list in Python?"},  # 1
        {"role": "assistant", "content": "Use xs[::-1]."},  # 2
        {"role": "user", "content": "thanks!"},  # 3
        {"role": "system", "content": "You are helpful."},  # 4 repeated system
        {"role": "user", "content": "how do I reverse a list in python??"},  # 5
        {"role": "assistant", "content": "Use xs[::-1]."},  # 6
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]},  # 7
        {"role": "tool", "tool_call_id": "c1", "content": "done"},  # 8
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c2"}]},  # 9
        {"role": "tool", "tool_call_id": "c2", "content": "done"},  # 10
        {"role": "user", "content": "Thank you so much :)"},  # 11
    ]


def test_keep_latest_and_ledger():
    msgs = history()
    out = dedup_messages(msgs)
    assert out.kept == [0, 4, 5, 6, 7, 8, 9, 10, 11]
    assert [(e["index"], e["role"], e["duplicate_of"], e["method"]) for e in out.ledger] == [
        (1, "user", 5, "exact"),
        (2, "assistant", 6, "exact"),
        (3, "user", 11, "ack"),
    ]
    assert out.messages[0] is msgs[0]  # the same dicts, untouched
    assert out.n_removed == len(msgs) - len(out.kept)


def test_keep_first_and_roles():
    out = dedup_messages(history(), keep="first")
    assert out.kept == [0, 1, 2, 3, 4, 7, 8, 9, 10]
    only_user = dedup_messages(history(), roles=["user", "system"])  # system is never removed
    assert {e["role"] for e in only_user.ledger} == {"user"}
    assert 0 in only_user.kept and 4 in only_user.kept
    with pytest.raises(ValueError, match="keep"):
        dedup_messages(history(), keep="longest")


def test_acknowledgements():
    assert is_acknowledgement("Thanks a lot!!")
    assert is_acknowledgement("ok, got it 👍")
    assert not is_acknowledgement("thanks, but what about tuples?")
    assert not is_acknowledgement("")
    msgs = [{"role": "user", "content": c} for c in ["thanks!", "thank you so much", "ok"]]
    assert dedup_messages(msgs).kept == [2]
    assert dedup_messages(msgs, acknowledgements=False).kept == [0, 1, 2]


def test_edge_cases():
    assert dedup_messages([]).kept == []
    one = [{"role": "user", "content": "hi"}]
    assert dedup_messages(one).messages == one
    parts = [
        {"role": "user", "content": [{"type": "text", "text": "same words here"}]},
        {"role": "user", "content": "Same words here."},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
    ]
    assert dedup_messages(parts).kept == [1, 2, 3]
    with pytest.raises(ValueError, match="role"):
        dedup_messages([{"content": "x"}])


def test_roles_take_sharegpt_names_and_refuse_unknown_ones():
    from ctxkit.errors import OptionError

    turns = [{"from": "human", "value": "What is the refund window for orders?"},
             {"from": "gpt", "value": "Refunds are accepted within 30 days of delivery."},
             {"from": "human", "value": "And for gift cards?"},
             {"from": "gpt", "value": "Refunds are accepted within 30 days of delivery."}]
    res = dedup_messages(turns, roles=["gpt"])
    assert [e["index"] for e in res.ledger] == [1]
    with pytest.raises(OptionError, match=r"roles: unknown role 'asistant'"):
        dedup_messages(turns, roles=["asistant"])
