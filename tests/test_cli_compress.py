import json
import os

import pytest

from ctxkit.chat.pipeline import count_chat_tokens
from ctxkit.cli import main
from ctxkit.io.tokenizers import get_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TOK = get_tokenizer("cl100k_base")


def err(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())  # rich wraps long lines


TEXT = ("Project Falcon has a budget of $1,250,000. The office plants were watered. "
        "The lead engineer is Ada Byte. Lunch was pasta. The launch is on 2027-03-01. ") * 3


def test_compress_text_file(tmp_path, capsys):
    src, dst, rep = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "ledger.json"
    src.write_text(TEXT, encoding="utf-8")
    code = main(["compress", str(src), "--budget", "30", "-q", "What is the Falcon budget?",
                 "-o", str(dst), "--report", str(rep)])
    assert code == 0
    out = dst.read_text(encoding="utf-8")
    assert TOK.count(out) <= 30 and "$1,250,000" in out
    ledger = json.loads(rep.read_text())
    assert ledger["compressed_tokens"] <= 30
    assert all(u["reason"] for u in ledger["units"] if not u["kept"])
    assert "dropped units by reason" in capsys.readouterr().out


def test_compress_records_and_errors(tmp_path, capsys):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"text": TEXT, "q": "Who is the lead engineer?"}) + "\n"
                   + json.dumps({"text": "short", "q": "?"}) + "\n")
    assert main(["compress", str(src), "-b", "25", "--query-field", "q", "-o", str(dst)]) == 0
    rows = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [sorted(r) for r in rows] == [["q", "text"], ["q", "text"]]  # fields kept, none added
    assert "Ada Byte" in rows[0]["text"] and rows[1]["text"] == "short"
    assert all(TOK.count(r["text"]) <= 25 for r in rows)

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": TEXT}) + "\n" + json.dumps({"text": 3}) + "\n")
    assert main(["compress", str(bad), "-b", "25", "-o", str(dst)]) == 2
    assert "bad.jsonl:2" in err(capsys)
    assert main(["compress", str(src), "-b", "0", "-o", str(dst)]) == 2
    assert "--budget must be a positive" in err(capsys)
    assert main(["compress", str(src), "-b", "5", "-o", str(dst), "--force-keep",
                 "The lead engineer is Ada Byte."]) == 2
    assert "too small for the force_keep parts" in err(capsys)
    assert main(["compress", str(src), "-b", "5", "-o", str(dst), "--scorer", "nope"]) == 2
    assert "unknown scorer" in err(capsys)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9".encode("latin-1"))
    text_dst = tmp_path / "out.txt"
    assert main(["compress", str(latin), "-b", "5", "-o", str(text_dst)]) == 2
    assert "not valid UTF-8 (byte 3)" in err(capsys)
    assert main(["compress", str(latin), "-b", "5", "-o", str(dst)]) == 2
    assert "the output is text" in err(capsys)
    assert main(["compress", str(tmp_path / "missing.txt"), "-b", "5", "-o", str(text_dst)]) == 2


def chat():
    return [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "My locker code is 4417."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "Tell me about castles. " + "Castles have walls. " * 40},
            {"role": "assistant", "content": "Castles are old forts. " * 40},
            {"role": "user", "content": "thanks!"},
            {"role": "user", "content": "What is my locker code?"}]


def test_chat_single_and_jsonl(tmp_path, capsys):
    src, dst, rep = tmp_path / "in.json", tmp_path / "out.json", tmp_path / "rep.json"
    src.write_text(json.dumps(chat()))
    assert main(["chat", str(src), "--budget", "60", "-o", str(dst), "--report", str(rep)]) == 0
    msgs = json.loads(dst.read_text())
    assert count_chat_tokens(msgs) <= 60
    assert any("4417" in m["content"] for m in msgs)
    led = json.loads(rep.read_text())["conversations"][0]["ledger"]
    assert {c["reason"] for c in led} >= {"filler"}
    assert "messages dropped" in capsys.readouterr().out

    src2, dst2 = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src2.write_text(json.dumps({"id": "a", "messages": chat()}) + "\n"
                    + json.dumps({"id": "b", "conversations": [
                        {"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]})
                    + "\n")
    assert main(["chat", str(src2), "-b", "60", "-o", str(dst2)]) == 0
    rows = [json.loads(line) for line in dst2.read_text().splitlines()]
    assert rows[0]["id"] == "a" and count_chat_tokens(rows[0]["messages"]) <= 60
    assert rows[1]["conversations"][0] == {"from": "human", "value": "hi"}

    assert main(["chat", str(src), "-b", "10", "-o", str(dst)]) == 2
    assert "too small for the kept messages" in err(capsys)
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "user", "content": 5}]')
    assert main(["chat", str(bad), "-b", "10", "-o", str(dst)]) == 2
    assert "content is int" in err(capsys)


def test_density_report(tmp_path, capsys):
    src, dst = tmp_path / "in.jsonl", tmp_path / "rep.json"
    lines = [{"id": "x", "body": "the quick brown fox jumps over the lazy dog by the river"},
             {"id": "y", "body": "The quick brown fox jumps over the lazy dog by the river!"},
             {"id": "z", "body": "entirely unrelated sentence about tax law"}]
    src.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    code = main(["density", str(src), "--field", "body", "--id-field", "id", "-o", str(dst)])
    assert code == 0
    rep = json.loads(dst.read_text())
    assert rep["n_texts"] == 3 and rep["clusters"][0] == {
        "keep": "x", "duplicates": ["y"], "tokens_saved": rep["texts"][1]["tokens"]}
    assert rep["texts"][2]["id"] == "z" and rep["texts"][2]["score"] > 0
    assert "tokens dedup would save" in capsys.readouterr().out
    assert main(["density", str(src), "--field", "nope", "-o", str(dst)]) == 2
    assert "missing field 'nope'" in err(capsys)


@pytest.mark.parametrize("cmd", ["compress", "chat", "density"])
def test_help(cmd, capsys):
    assert main([cmd, "--help"]) == 0


def test_chat_summarize_folds_evicted_turns_into_one_message(tmp_path, capsys):
    chat = [{"role": "system", "content": "You are a travel agent."}]
    for i in range(30):
        chat += [{"role": "user", "content": f"Day {i}: book hotel {i} in Lyon, {40 + i} euros."},
                 {"role": "assistant", "content": f"Booked hotel {i}, reference R{1000 + i}."}]
    src, dst, rep = tmp_path / "c.json", tmp_path / "w.json", tmp_path / "r.json"
    src.write_text(json.dumps(chat))
    for extra in ([], ["--replay"]):
        assert main(["chat", str(src), "-b", "200", "-t", "cl100k_base", "--scorer", "idf",
                     "--summarize", "extractive", "-o", str(dst), "--report", str(rep),
                     *extra]) == 0, capsys.readouterr().err
        window = json.loads(dst.read_text())
        entry = json.loads(rep.read_text())["conversations"][0]
        assert entry["summary"]["covers"], extra
        assert sum(m["content"] == entry["summary"]["text"] for m in window) == 1
        assert count_chat_tokens(window) <= 200
    capsys.readouterr()
    assert main(["chat", str(src), "-b", "200", "--summarize", "abstractive",
                 "-o", str(dst)]) == 2
    assert "--summarize" in capsys.readouterr().err
    assert main(["chat", str(src), "-b", "200", "--summarize", "http://localhost:9/v1",
                 "-o", str(dst)]) == 2
    assert "--summary-model" in capsys.readouterr().err


def test_chat_skip_bad_skips_a_conversation_that_cannot_fit(tmp_path, capsys):
    # a conversation whose kept messages alone overflow the budget is a bad record: an error
    # naming it, or with --skip-bad a skipped record in the report while the rest is written
    long_turns = [{"role": "user", "content": "hello there, how are you doing today my friend"},
                  {"role": "assistant", "content": "fine, thanks; what is new in your life?"}]
    src, dst, rep = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "rep.json"
    src.write_text(json.dumps({"id": "big", "messages": long_turns}) + "\n"
                   + json.dumps({"id": "small", "messages": [{"role": "user", "content": "hi"}]})
                   + "\n", encoding="utf-8")
    assert main(["chat", str(src), "-b", "12", "--scorer", "idf", "-o", str(dst)]) == 2
    assert "in.jsonl:1 (id " in err(capsys)  # names the record's line
    assert not dst.exists()
    assert main(["chat", str(src), "-b", "12", "--scorer", "idf", "--skip-bad", "-o", str(dst),
                 "--report", str(rep)]) == 0
    rows = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["small"]
    report = json.loads(rep.read_text())
    assert [s["line"] for s in report["skipped"]] == [1]
    assert "budget 12 is too small" in report["skipped"][0]["reason"]
    assert len(report["conversations"]) == 1
