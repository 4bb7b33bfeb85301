"""The chat ledger: entries recorded as columns read as the list of changes they stand for."""

import numpy as np

from ctxkit import compress_chat
from ctxkit.chat.result import Ledger, MessageChange


def test_batches_and_entries_read_as_one_sorted_list():
    ledger = Ledger()
    ledger.add(MessageChange(5, "user", "shortened", "cut", 9, 4, 0.5, "shortened"))
    ledger.add_batch(np.array([7, 1]), ["user", "assistant"] * 4, "dropped", "over_budget",
                     "over budget", np.array([3, 4]), scores=np.array([0.1, 0.2]))
    expected = [MessageChange(1, "assistant", "dropped", "over budget", 4, 0, 0.2,
                              "over_budget"),
                MessageChange(5, "user", "shortened", "cut", 9, 4, 0.5, "shortened"),
                MessageChange(7, "assistant", "dropped", "over budget", 3, 0, 0.1,
                              "over_budget")]
    assert ledger == expected and list(ledger) == expected and len(ledger) == 3
    assert ledger[1].index == 5 and ledger.indices("dropped").tolist() == [1, 7]
    ledger.discard(7)
    ledger.discard(5)
    assert ledger == expected[:1] and ledger.indices().tolist() == [1]


def test_every_message_of_a_long_chat_is_kept_or_in_the_ledger_once():
    chat = [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"Turn {i}: crate {i % 50} holds {i * 7} bolts from dock {i % 13}."}
            for i in range(600)]
    chat += [{"role": "user", "content": "thanks!"}] * 3 + chat[:40]  # filler and repeats
    chat.append({"role": "user", "content": "How many bolts does crate 7 hold?"})
    out = compress_chat(chat, 700, scorer="idf")
    changed = [c.index for c in out.ledger]
    assert changed == sorted(changed) and len(set(changed)) == len(changed)
    dropped = {c.index for c in out.ledger if c.action == "dropped"}
    assert dropped.isdisjoint(out.kept) and dropped | set(out.kept) == set(range(len(chat)))
    codes = {c.code for c in out.ledger}
    assert {"filler", "duplicate", "over_budget"} <= codes
    assert out.to_dict()["ledger"][0]["index"] == changed[0]


def test_a_turn_cut_to_fit_marks_where_fragments_that_were_apart_meet():
    story = ("Mira's locker code is 4417. The gym opens at six. The pool was repainted blue in "
             "spring. The sauna is closed on Mondays. Her spare towel is in locker 12.")
    chat = [{"role": "user", "content": story}, {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "What is Mira's locker code and where is her towel?"}]
    marked, plain = (compress_chat(chat, 56, scorer="idf", keep_last=1, word_keep=0.99,
                                   whole_share=0.0, gap_marker=m) for m in ("…", ""))
    text = marked.messages[0]["content"]
    assert text.startswith("Mira's locker code is 4417. … ") and "locker 12" in text
    assert marked.compressed_tokens <= 56  # the marker's tokens are counted
    assert [c.action for c in marked.ledger] == ["shortened", "dropped"]
    assert "…" not in plain.messages[0]["content"]
    assert compress_chat(chat, 56, scorer="idf", keep_last=1).messages == \
        compress_chat(chat, 56, scorer="idf", keep_last=1, gap_marker="…").messages  # default
