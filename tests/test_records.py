import json
import re

import pytest

from ctxkit.io.records import (
    ReadReport,
    RecordError,
    atomic_write,
    read_records,
    write_jsonl,
    write_parquet,
)


def write_lines(path, lines):
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_jsonl_field_and_ids(tmp_path):
    lines = [b'{"text": "a", "id": "x1"}', b"", b'{"text": "b", "id": 7}']
    p = write_lines(tmp_path / "a.jsonl", lines)
    recs = list(read_records(p, field="text", id_field="id"))
    assert [(r.id, r.text, r.line) for r in recs] == [("x1", "a", 1), ("7", "b", 3)]


def test_invalid_line_names_file_and_line(tmp_path):
    p = write_lines(tmp_path / "a.jsonl", [b'{"text": "a"}', b'{"text": ', b'{"text": "c"}'])
    with pytest.raises(RecordError, match=r"a\.jsonl:2.*invalid JSON"):
        list(read_records(p, field="text"))


def test_skip_policy_counts_and_lists(tmp_path):
    p = write_lines(
        tmp_path / "a.jsonl",
        [b'{"text": "a"}', b"not json", b'{"other": 1}', b'{"text": 5}', b'{"text": "\xff\xfe"}',
         b'{"text": "ok"}'],
    )
    report = ReadReport()
    recs = list(read_records(p, field="text", on_error="skip", report=report))
    assert [r.text for r in recs] == ["a", "ok"]
    assert report.read == 2
    assert [e.line for e in report.skipped] == [2, 3, 4, 5]
    reasons = " ".join(e.reason for e in report.skipped)
    assert "invalid JSON" in reasons and "missing field 'text'" in reasons
    assert "not text" in reasons and "UTF-8" in reasons
    assert report.to_dict()["skipped"][0]["line"] == 2


def test_alpaca_template_prompt_is_prefix(tmp_path):
    items = [{"instruction": "Add", "input": "2 3", "output": "5"},
             {"instruction": "Say hi", "input": "", "response": "hi"}]
    p = tmp_path / "a.json"
    p.write_text(json.dumps(items))
    recs = list(read_records(p, template="alpaca"))
    assert recs[0].text.startswith(recs[0].prompt) and recs[0].completion == "5"
    assert "### Input:" in recs[0].prompt and "### Input:" not in recs[1].prompt
    assert recs[1].completion == "hi"
    p.write_text(json.dumps([{"instruction": "x"}]))
    with pytest.raises(RecordError, match="alpaca template"):
        list(read_records(p, template="alpaca"))


def test_messages_template_sharegpt_and_openai(tmp_path):
    rows = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
            {"messages": [{"role": "system", "content": "be nice"}]}]
    p = tmp_path / "c.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    recs = list(read_records(p, template="messages"))
    assert [m["role"] for m in recs[0].messages] == ["user", "assistant"]
    assert recs[1].messages[0]["content"] == "be nice"


def test_parquet_roundtrip_and_atomic_writes(tmp_path):
    out = tmp_path / "sub" / "x.parquet"
    assert write_parquet(out, {"text": ["a", "b"], "n": [1, 2]}) == 2
    assert [r.text for r in read_records(out, field="text")] == ["a", "b"]
    j = tmp_path / "x.jsonl"
    assert write_jsonl(j, [{"a": 1}, {"a": 2}]) == 2
    assert [json.loads(line)["a"] for line in j.read_text().splitlines()] == [1, 2]
    # a failure while writing leaves the old file and no temp files
    with pytest.raises(RuntimeError):
        with atomic_write(j) as fh:
            fh.write("partial")
            raise RuntimeError("boom")
    assert j.read_text().count("\n") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub", "x.jsonl"]


def test_missing_file_and_bad_format(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(read_records(tmp_path / "nope.jsonl"))
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(RecordError, match="unknown format"):
        list(read_records(tmp_path / "x.csv"))


def test_atomic_write_gives_normal_permissions(tmp_path):
    import os
    import stat

    target = tmp_path / "out.json"
    with atomic_write(target) as fh:
        fh.write("{}")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    target.chmod(0o640)  # an existing file keeps its mode
    with atomic_write(target) as fh:
        fh.write("[]")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_write_records_by_suffix_never_drops_a_field(tmp_path):
    from ctxkit.errors import InputError
    from ctxkit.io.outputs import write_records

    rows = [{"a": 1}, {"b": "x"}, {"a": 3}]
    write_records(tmp_path / "r.jsonl", rows, batch_size=2)
    assert [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()] == rows
    write_records(tmp_path / "r.json", rows, batch_size=2)
    assert json.loads((tmp_path / "r.json").read_text()) == rows
    write_records(tmp_path / "r.parquet", rows, batch_size=2)  # one set of columns: nulls
    assert pq_rows(tmp_path / "r.parquet") == [{"a": 1, "b": None}, {"a": None, "b": "x"},
                                               {"a": 3, "b": None}]
    # a field first seen after the schema was fixed, or a type that changes: an error, no file
    late = tmp_path / "late.parquet"
    with pytest.raises(InputError, match=r"record 2 has field\(s\) \['c'\]"):
        write_records(late, [{"a": 1}, {"a": 2}, {"a": 3, "c": 1}], batch_size=2)
    with pytest.raises(InputError, match="write .jsonl instead"):
        write_records(late, [{"a": 1}, {"a": "x"}], batch_size=1)
    assert not late.exists() and not list(tmp_path.glob(".*.tmp"))


def pq_rows(path):
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def test_utf8_bom_is_ignored(tmp_path):
    bom = b"\xef\xbb\xbf"
    (tmp_path / "a.jsonl").write_bytes(bom + b'{"text": "a"}\n{"text": "b"}\n')
    (tmp_path / "a.json").write_bytes(bom + b'[{"text": "a"},\n {"text": "b"}]')
    (tmp_path / "b.json").write_bytes(bom + b'{"text": "a"}\n{"text": "b"}\n')
    for name in ("a.jsonl", "a.json", "b.json"):
        assert [r.text for r in read_records(tmp_path / name)] == ["a", "b"], name


DOC = {"id": "doc1", "text": "The whole document about packing and deduplication.",
       "chunks": [{"text": "chunk a"}, {"text": "chunk b"}]}


def test_one_json_object_is_one_record_whatever_lists_it_holds(tmp_path):
    p = tmp_path / "doc.json"
    for dump in (json.dumps(DOC), json.dumps(DOC, indent=2)):  # one line, or pretty-printed
        p.write_text(dump)
        recs = list(read_records(p))
        assert [(r.text, r.raw["chunks"]) for r in recs] == [(DOC["text"], DOC["chunks"])]
    # with another text field, the object is still the record that field is read from
    p.write_text(json.dumps({"title": "T", "chunks": DOC["chunks"]}))
    assert [r.text for r in read_records(p, field="title")] == ["T"]
    # an object without the text field and without a wrapper key is a record that fails
    p.write_text(json.dumps({"id": "doc1", "chunks": DOC["chunks"]}))
    with pytest.raises(RecordError, match=r"doc\.json:1 .*missing field 'text'"):
        list(read_records(p))


def test_json_wrapper_only_by_a_known_key_without_the_text_field(tmp_path):
    p = tmp_path / "w.json"
    p.write_text(json.dumps({"version": "1.1", "data": [{"text": "a"}, {"text": "b"}]}))
    assert [(r.text, r.location.element) for r in read_records(p)] == [("a", 0), ("b", 1)]
    p.write_text(json.dumps({"records": [{"body": "a"}]}))
    assert [r.text for r in read_records(p, field="body")] == ["a"]
    p.write_text(json.dumps({"data": ["a", "b"]}))  # a wrapper's bad element is named
    with pytest.raises(RecordError, match=r"element 0.*expected a JSON object, got str"):
        list(read_records(p))
    # the text field present, or two wrapper keys: one record, never unwrapped
    p.write_text(json.dumps({"text": "t", "data": [{"text": "a"}]}))
    assert [r.text for r in read_records(p)] == ["t"]
    p.write_text(json.dumps({"data": [{"text": "a"}], "records": [{"text": "b"}]}))
    with pytest.raises(RecordError, match="missing field 'text'"):
        list(read_records(p))
    # the messages template: an object with messages is a conversation
    conv = {"messages": [{"role": "user", "content": "hi"}], "data": [{"x": 1}]}
    p.write_text(json.dumps(conv))
    assert [r.text for r in read_records(p, template="messages")] == ["user: hi"]


def test_cli_commands_keep_a_one_record_json_file_whole(tmp_path, capsys):
    from ctxkit.cli import main

    p = tmp_path / "doc.json"
    p.write_text(json.dumps(DOC))
    for command, extra in (("dedup", []), ("compress", ["-b", "50"]), ("pack", ["-c", "64"]),
                           ("density", [])):
        dest = tmp_path / f"{command}.json{'l' if command != 'density' else ''}"
        code = main([command, str(p), "-o", str(dest), "--no-progress", *extra])
        assert code == 0, capsys.readouterr().err
        if command == "density":
            assert json.loads(dest.read_text())["n_texts"] == 1
            continue
        rows = [json.loads(line) for line in dest.read_text().splitlines()]
        if command == "pack":
            assert [len(r["source_ids"]) for r in rows] == [1]
            assert rows[0]["seq_lengths"][0] > 5  # the document, not a two-word chunk
        else:
            assert [(r["id"], r["chunks"]) for r in rows] == [("doc1", DOC["chunks"])]


def test_missing_text_field_names_the_template_that_reads_the_record(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text(json.dumps({"instruction": "Add", "input": "", "output": "5"}) + "\n"
                 + json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n"
                 + json.dumps({"body": "x"}) + "\n")
    report = ReadReport()
    assert list(read_records(p, on_error="skip", report=report)) == []
    assert [e.reason for e in report.skipped] == [
        "missing field 'text' (it has 'instruction' and 'output': the alpaca template reads it)",
        "missing field 'text' (it has 'messages': the messages template reads it)",
        "missing field 'text'"]


def test_a_lone_surrogate_is_a_bad_record_naming_its_line(tmp_path):
    # JSON's "\ud800" escape decodes to a lone surrogate, which no stage can encode: every
    # command exited 3 with no FILE:LINE
    from ctxkit.cli import main

    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "text": "fine text here"}\n'
                   '{"id": "b", "text": "bad \\ud800 text"}\n', encoding="utf-8")
    with pytest.raises(RecordError, match=r"in.jsonl:2 .*lone surrogate \(U\+D800\)"):
        list(read_records(src))
    assert [r.id for r in read_records(src, on_error="skip")] == ["a"]
    for argv in (["dedup", str(src), "-o", str(tmp_path / "d.jsonl")],
                 ["compress", str(src), "--budget", "10", "--scorer", "idf",
                  "-o", str(tmp_path / "c.jsonl")]):
        assert main(argv) == 2


@pytest.mark.parametrize("body,where", [
    ("[" * 100_000 + "]" * 100_000, "in.json:1 (element 0)"),
    ('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}", "in.json:1"),
    ('[{"text": "ok"},\n' + "[" * 100_000 + "]" * 100_000 + "]", "in.json:2 (element 1)"),
])
def test_a_json_file_nested_too_deeply_names_where(tmp_path, body, where):
    # the parser's RecursionError escaped: every command exited 3 with no location
    src = tmp_path / "in.json"
    src.write_text(body, encoding="utf-8")
    with pytest.raises(RecordError, match=re.escape(where) + ".*nested too deeply"):
        list(read_records(src))
