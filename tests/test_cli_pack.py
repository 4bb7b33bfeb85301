"""`ctxkit pack` and `ctxkit demo` end to end, through ctxkit.cli.main."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

from ctxkit.cli import main
from ctxkit.demo import demo_records, pack_stage
from ctxkit.io.records import format_alpaca_prompt
from ctxkit.io.tokenizers import get_tokenizer

TOK = get_tokenizer("cl100k_base")
EOS = TOK.eos_id


def _write_jsonl(path, rows, extra_lines=()):
    with open(path, "wb") as fh:
        fh.writelines((json.dumps(row) + "\n").encode() for row in rows)
        fh.writelines(extra_lines)
    return path


def _rows(path):
    if str(path).endswith(".parquet"):
        return pq.read_table(path).to_pylist()
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def _text(capsys):
    captured = capsys.readouterr()
    return re.sub(r"\s+", " ", captured.out + captured.err)


def _check_output(rows, expected, capacity, padded=True):
    """Every record's tokens once, in place, with restarting positions and masked labels."""
    seen = {}
    for row in rows:
        n = len(row["input_ids"])
        assert n == capacity if padded else n == sum(row["seq_lengths"]) <= capacity
        off = 0
        for k, (rid, (s, e), length) in enumerate(
                zip(row["source_ids"], row["source_ranges"], row["seq_lengths"])):
            ids, labels = expected[rid]
            assert e - s == length
            assert row["input_ids"][off:off + length] == ids[s:e]
            assert row["labels"][off:off + length] == [-100] + labels[s + 1:e]
            assert row["position_ids"][off:off + length] == list(range(length))
            assert row["segment_ids"][off:off + length] == [k + 1] * length
            seen[rid] = seen.get(rid, 0) + length
            off += length
        if padded:
            assert set(row["segment_ids"][off:]) <= {0}
            assert set(row["labels"][off:]) <= {-100}
    return seen


def test_pack_alpaca_parquet_masks_prompt(tmp_path, capsys):
    recs = demo_records(120, seed=3)
    src = _write_jsonl(tmp_path / "in.jsonl", recs)
    out = tmp_path / "out.parquet"
    code = main(["pack", str(src), "--capacity", "1024", "--template", "alpaca",
                 "--id-field", "id", "-o", str(out), "--seed", "1", "--no-progress",
                 "--report", str(tmp_path / "report.json")])
    text = _text(capsys)
    assert code == 0, text
    expected = {}
    for r in recs:
        p = TOK.encode(format_alpaca_prompt(r["instruction"], r["input"]))
        c = TOK.encode(r["output"])
        expected[r["id"]] = (p + c + [EOS], [-100] * len(p) + c + [-100])
    rows = _rows(out)
    seen = _check_output(rows, expected, 1024)
    assert seen == {rid: len(v[0]) for rid, v in expected.items()}
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["windows"] == len(rows) and report["records"] == 120
    assert report["lower_bound"] <= report["windows"]
    for word in ("windows", "lower bound", "utilization", "padding tokens", "truncated",
                 "dropped", "empty"):
        assert word in text


def test_pack_train_on_prompt_flat_jsonl(tmp_path, capsys):
    recs = demo_records(40, seed=4)
    src = _write_jsonl(tmp_path / "in.jsonl", recs)
    out = tmp_path / "out.jsonl"
    code = main(["pack", str(src), "-c", "2048", "--template", "alpaca", "--train-on-prompt",
                 "--layout", "flat", "--label-separators", "-o", str(out), "--no-progress"])
    assert code == 0, _text(capsys)
    expected = {}
    for r in recs:
        ids = TOK.encode(format_alpaca_prompt(r["instruction"], r["input"])) + TOK.encode(
            r["output"]) + [EOS]
        expected[r["id"]] = (ids, ids)
    seen = _check_output(_rows(out), expected, 2048, padded=False)
    assert seen == {k: len(v[0]) for k, v in expected.items()}


def test_pack_field_separator_none_and_empty_text(tmp_path, capsys):
    texts = ["hello world", "", "a b c d e f g", "ünïcödé ✓", ""]
    src = _write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    out = tmp_path / "o.jsonl"
    code = main(["pack", str(src), "-c", "8", "--field", "text", "--separator", "none",
                 "--strategy", "greedy", "-o", str(out), "--no-progress"])
    text = _text(capsys)
    assert code == 0, text
    expected = {str(i): (TOK.encode(t), TOK.encode(t)) for i, t in enumerate(texts)}
    seen = _check_output(_rows(out), expected, 8)
    assert seen == {k: len(v[0]) for k, v in expected.items() if v[0]}
    assert "empty record ids: 1, 4" in text


@pytest.mark.parametrize(("overflow", "word"), [("truncate", "truncated"), ("drop", "dropped")])
def test_pack_overflow_policies(tmp_path, capsys, overflow, word):
    texts = ["word " * 50, "short one", "another short text"]
    src = _write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    out = tmp_path / "o.parquet"
    code = main(["pack", str(src), "-c", "16", "--field", "text", "--overflow", overflow,
                 "-o", str(out), "--no-progress"])
    text = _text(capsys)
    assert code == 0, text
    assert f"{word} record ids: 0" in text
    rows = _rows(out)
    placed = [rid for row in rows for rid in row["source_ids"]]
    assert sorted(placed) == (["0", "1", "2"] if overflow == "truncate" else ["1", "2"])


def test_pack_bad_input_is_exit_2_naming_the_record(tmp_path, capsys):
    src = _write_jsonl(tmp_path / "in.jsonl", [{"text": "fine"}, {"text": "also fine"}],
                       extra_lines=[b"{not json\n", b'{"text": "\xff\xfe bad bytes"}\n',
                                    b'{"text": 5}\n'])
    out = tmp_path / "o.parquet"
    assert main(["pack", str(src), "-c", "64", "--field", "text", "-o", str(out)]) == 2
    assert "in.jsonl:3" in _text(capsys) and not out.exists()

    assert main(["pack", str(src), "-c", "64", "--field", "text", "-o", str(out),
                 "--skip-bad", "--no-progress"]) == 0
    text = _text(capsys)
    assert "skipped 3 bad record(s)" in text
    assert "in.jsonl:4" in text and "UTF-8" in text and "in.jsonl:5" in text
    assert sorted(rid for row in _rows(out) for rid in row["source_ids"]) == ["0", "1"]


def test_pack_errors(tmp_path, capsys):
    src = _write_jsonl(tmp_path / "in.jsonl", [{"text": "one two three " * 20, "id": "long"},
                                               {"text": "x", "id": "x"}])
    out = tmp_path / "o.parquet"
    out.write_bytes(b"previous")
    base = ["pack", str(src), "--field", "text", "-o", str(out)]
    assert main(base + ["-c", "16", "--id-field", "id"]) == 2
    assert "record long (" in _text(capsys) and out.read_bytes() == b"previous"  # untouched
    for args, message in [
        (["-c", "0"], "--capacity must be a positive"),
        (["-c", "64", "--tokenizer", "nope"], "unknown tokenizer 'nope'"),
        (["-c", "64", "--strategy", "nope"], "--strategy 'nope' is unknown"),
        (["-c", "64", "--overflow", "nope"], "--overflow 'nope' is unknown"),
        (["-c", "64", "--layout", "nope"], "--layout 'nope' is unknown"),
        (["-c", "64", "--separator", "sep"], "--separator must be"),
        (["-c", "64", "--template", "alpaca"], "not both"),
    ]:
        assert main(base + args) == 2, args
        assert message in _text(capsys), args
    assert main(["pack", str(src), "-c", "64", "--field", "text", "-o",
                 str(tmp_path / "o.csv")]) == 2
    assert ".parquet, .jsonl or .json" in _text(capsys)
    assert main(["pack", str(tmp_path / "missing.jsonl"), "-c", "64", "-o", str(out)]) == 2
    assert "not found" in _text(capsys)
    bad_only = _write_jsonl(tmp_path / "bad.jsonl", [], extra_lines=[b"nope\n"])
    assert main(["pack", str(bad_only), "-c", "64", "-o", str(out), "--skip-bad"]) == 2
    assert "no records in" in _text(capsys)


def test_demo_command(capsys, tmp_path):
    data = tmp_path / "demo.jsonl"
    assert main(["demo", "--n", "300", "--capacity", "512", "--embed-texts", "0",
                 "--write-data", str(data)]) == 0
    text = _text(capsys)
    for word in ("padding, 1 per row", "greedy", "blocks of 1,000 (TRL)", "bfd", "optimal",
                 "lower bound", "utilization",
                 "padding tokens"):
        assert word in text
    assert len(_rows(data)) == 300
    assert main(["demo", "--n", "0"]) == 2


def test_demo_data_is_deterministic_and_varied():
    a, b = demo_records(400, seed=7), demo_records(400, seed=7)
    assert a == b and a != demo_records(400, seed=8)
    kinds = {r["instruction"].split()[0] for r in a}
    assert len(kinds) >= 8
    lengths = np.array([TOK.count(r["instruction"] + r["input"] + r["output"]) for r in a])
    assert lengths.min() < 40 and lengths.max() > 400  # short answers and a long tail
    res = pack_stage(a, capacity=1024, seed=7)
    by = {row.method: row for row in res.strategies}
    assert by["bfd"].windows <= by["greedy"].windows < by["padding, 1 per row"].windows
    assert by["optimal"].windows <= by["bfd"].windows <= by["bfd, blocks of 1,000 (TRL)"].windows
    assert res.batch.n_windows == by["bfd"].windows >= res.batch.lower_bound
    # records over the window are truncated and reported, never lost silently
    with_eos = res.total_tokens + 400
    assert res.batch.total_tokens + res.batch.tokens_truncated == with_eos
    assert (res.batch.truncated.size > 0) == (res.max_length + 1 > 1024)
    assert pack_stage(a, capacity=2048, seed=7).batch.truncated.size == 0


def test_pack_parquet_input_messages_template_numeric_separator(tmp_path, capsys):
    import pyarrow as pa

    chats = [
        [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"}],
        [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}],
        "not a list of turns",
    ]
    src = tmp_path / "chats.parquet"
    pq.write_table(pa.table({"messages": [json.dumps(c) for c in chats[:2]] + [chats[2]]}), src)
    # a JSON string is not a list of turns: every record is bad, and that is a clear error
    assert main(["pack", str(src), "-c", "64", "--template", "messages",
                 "-o", str(tmp_path / "x.jsonl")]) == 2
    assert "chats.parquet" in _text(capsys)

    rows = [{"messages": c} for c in chats[:2]]
    good = tmp_path / "chats.jsonl"
    _write_jsonl(good, rows)
    out = tmp_path / "o.jsonl"
    assert main(["pack", str(good), "-c", "64", "--template", "messages", "--separator", "0",
                 "-o", str(out), "--no-progress"]) == 0, _text(capsys)
    texts = ["user: Hi there\nassistant: Hello!", "user: 2+2?\nassistant: 4"]
    expected = {str(i): (TOK.encode(t) + [0], [*TOK.encode(t), -100]) for i, t in enumerate(texts)}
    seen = _check_output(_rows(out), expected, 64)
    assert seen == {k: len(v[0]) for k, v in expected.items()}


def test_pack_huge_text_split(tmp_path, capsys):
    huge = " ".join(f"token{i}" for i in range(20_000))  # ~60k tokens, far over the window
    texts = [huge, "short", "also short"]
    src = _write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    out = tmp_path / "o.parquet"
    assert main(["pack", str(src), "-c", "512", "--field", "text", "--overflow", "split",
                 "-o", str(out), "--no-progress", "--seed", "2",
                 "--report", str(tmp_path / "r.json")]) == 0, _text(capsys)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["split"] == ["0"] and report["truncated"] == report["dropped"] == []
    expected = {}
    for i, t in enumerate(texts):
        ids = TOK.encode(t) + [EOS]
        expected[str(i)] = (ids, ids[:-1] + [-100])
    rows = _rows(out)
    seen = _check_output(rows, expected, 512)
    assert seen == {k: len(v[0]) for k, v in expected.items()}
    # the pieces of the long record cover it in order, each at most one window
    ranges = sorted(tuple(r) for row in rows
                    for rid, r in zip(row["source_ids"], row["source_ranges"]) if rid == "0")
    assert ranges[0][0] == 0 and ranges[-1][1] == len(expected["0"][0])
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


@pytest.mark.parametrize("pad, says", [("-1", "--pad-id must be a token id in 0..2,147,483,647"),
                                       ("200000", "--pad-id must be a token id of tokenizer "
                                                  "cl100k_base (0..100,276), got 200000")])
def test_pad_id_outside_the_vocabulary_is_refused(tmp_path, capsys, pad, says):
    src = _write_jsonl(tmp_path / "in.jsonl", [{"text": "hello"}])
    out = tmp_path / "out.parquet"
    assert main(["pack", str(src), "-o", str(out), "-c", "16", "--pad-id", pad]) == 2
    assert says in _text(capsys)
    assert not out.exists()
