"""`ctxkit dedup`: kept records, a report entry for every removal, clear errors for bad input."""

import json

import pytest

from ctxkit.cli import main

ROWS = [
    {"id": "a", "text": "The quick brown fox jumps over the lazy dog"},
    {"id": "b", "text": "the quick brown fox  jumps over the lazy dog"},
    {"id": "c", "text": "The quick brown fox jumped over the lazy dog!"},
    {"id": "d", "text": "Something else entirely"},
    {"id": "e", "text": ""},
    {"id": "f", "text": "  "},
]


def write_input(path, rows=ROWS, extra_lines=()):
    lines = [json.dumps(r).encode() for r in rows] + list(extra_lines)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def run(*args):
    return main([str(a) for a in args])


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("method", ["exact", "exact,minhash", "minhash"])
def test_every_removal_is_reported(tmp_path, method):
    src = write_input(tmp_path / "in.jsonl")
    out, rep = tmp_path / "out.jsonl", tmp_path / "dups.json"
    assert (
        run(
            "dedup",
            src,
            "-o",
            out,
            "--method",
            method,
            "--id-field",
            "id",
            "--report",
            rep,
            "--no-progress",
        )
        == 0
    )
    kept = [r["id"] for r in read_jsonl(out)]
    report = json.loads(rep.read_text())
    removed = {d["id"]: d for d in report["duplicates"]}
    assert sorted(kept + list(removed)) == [r["id"] for r in ROWS]  # nothing lost, nothing twice
    assert report["kept"] == len(kept) and report["removed"] == len(removed)
    for entry in removed.values():
        assert entry["duplicate_of"] in kept
        assert set(entry) >= {"id", "duplicate_of", "method", "similarity", "line"}
    if "exact" in method:
        assert removed["b"]["method"] == "exact" and removed["f"]["duplicate_of"] == "e"
    if "minhash" in method:
        assert removed["c"] == {**removed["c"], "duplicate_of": "a", "method": "minhash"}


def test_keep_rule_applies_to_the_exact_path(tmp_path):
    src = write_input(tmp_path / "in.jsonl")
    out = tmp_path / "out.jsonl"
    assert (
        run(
            "dedup",
            src,
            "-o",
            out,
            "-m",
            "exact",
            "--keep",
            "last",
            "--id-field",
            "id",
            "--no-progress",
        )
        == 0
    )
    assert [r["id"] for r in read_jsonl(out)] == ["b", "c", "d", "f"]
    assert run("dedup", src, "-o", out, "--keep", "best") == 2


def test_non_utf8_and_bad_json_lines(tmp_path, capsys):
    src = write_input(
        tmp_path / "in.jsonl", extra_lines=[b'{"id": "g", "text": "caf\xe9"}', b"{oops"]
    )
    out, rep = tmp_path / "out.jsonl", tmp_path / "dups.json"
    assert run("dedup", src, "-o", out, "--no-progress") == 2
    assert "in.jsonl:7" in capsys.readouterr().err.replace("\n", "")
    assert not out.exists()  # nothing half-written
    assert run("dedup", src, "-o", out, "--skip-bad", "--report", rep, "--no-progress") == 0
    report = json.loads(rep.read_text())
    assert [(s["line"], s["reason"][:15]) for s in report["skipped"]] == [
        (7, "not valid UTF-8"),
        (8, "invalid JSON: E"),
    ]
    assert report["records"] == len(ROWS) == report["kept"] + report["removed"]


def test_parquet_output_and_messages_template(tmp_path):
    import pyarrow.parquet as pq

    src = write_input(
        tmp_path / "in.jsonl",
        rows=[
            {"messages": [{"role": "user", "content": "hi there"}]},
            {"messages": [{"role": "user", "content": "Hi there!"}]},
        ],
    )
    out = tmp_path / "out.parquet"
    assert (
        run(
            "dedup",
            src,
            "-o",
            out,
            "--template",
            "messages",
            "--ignore-punctuation",
            "--no-progress",
        )
        == 0
    )
    assert pq.read_table(out).num_rows == 1


def test_usage_errors(tmp_path, capsys):
    src = write_input(tmp_path / "in.jsonl")
    out = tmp_path / "out.jsonl"
    assert run("dedup", tmp_path / "missing.jsonl", "-o", out) == 2
    assert run("dedup", src, "-o", out, "--method", "fuzzy") == 2
    assert run("dedup", src, "-o", out, "--threshold", "1.5") == 2
    assert run("dedup", src, "-o", out, "--threshold", "high") == 2
    assert run("dedup", src, "-o", tmp_path / "out.csv") == 2
    err = capsys.readouterr().err
    assert "not found" in err and "fuzzy" in err and "--threshold" in err and ".csv" in err


def _templated_rows(n=60):
    """Tool-use records: every one starts with the same tool description (a template) and
    asks something of its own; the last three repeat earlier requests word for word."""
    import random

    rng = random.Random(1)
    tool = ("toolformer: enabled\ntoolformer access: weather\nUseful for when you want to get "
            "weather information from the OpenMeteo API. The input should be a question.\n"
            "weather(querywithlocation)\n")
    words = [f"{a}{b}" for a in "bcdfghklmnprstvz" for b in ("ash", "ine", "oro", "ult")]
    asks = [" ".join(rng.sample(words, 8)) for _ in range(n - 3)]
    asks += asks[:3]
    return [{"id": f"r{i}", "text": tool + ask} for i, ask in enumerate(asks)]


def test_templated_records_warn_and_boilerplate_stripping_keeps_them(tmp_path, capsys):
    src = write_input(tmp_path / "in.jsonl", rows=_templated_rows())
    out, rep = tmp_path / "out.jsonl", tmp_path / "dups.json"
    base = ("dedup", src, "-o", out, "--method", "minhash", "--id-field", "id", "--report", rep,
            "--no-progress", "--threshold", "0.6")
    assert run(*base) == 0
    whole = json.loads(rep.read_text())
    assert whole["removed"] > 40  # the shared template makes every record "a duplicate"
    assert whole["warnings"] and "template" in whole["warnings"][0]
    assert "warning:" in capsys.readouterr().out
    assert run(*base, "--strip-boilerplate", "0.5") == 0
    stripped = json.loads(rep.read_text())
    assert stripped["removed"] == 3 and stripped["warnings"] == []  # only the true repeats
    assert {d["id"] for d in stripped["duplicates"]} == {"r57", "r58", "r59"}
    assert stripped["stages"]["minhash"]["boilerplate"]["lines"] == 4
    assert len(read_jsonl(out)) == 57
    assert run(*base, "--strip-boilerplate", "0.5", "--ray", "local") == 2
    assert "does not run with --ray" in " ".join(capsys.readouterr().err.split())


def test_threshold_without_a_stage_that_uses_it_is_an_error(tmp_path, capsys):
    src = write_input(tmp_path / "in.jsonl")
    assert run("dedup", src, "-o", tmp_path / "o.jsonl", "--method", "exact,minhash",
               "--threshold", "1.5", "--no-progress") == 2
    assert "between 0 and 1" in capsys.readouterr().err
    assert run("dedup", src, "-o", tmp_path / "o.jsonl", "--method", "exact",
               "--threshold", "0.9", "--no-progress") == 2
    assert "takes no threshold" in capsys.readouterr().err
    assert run("dedup", src, "-o", tmp_path / "o.jsonl", "--method", "minhash",
               "--threshold", "0.8", "--strip-boilerplate", "2", "--no-progress") == 2
    assert "boilerplate" in capsys.readouterr().err


def test_report_names_the_record_each_removal_matched(tmp_path):
    """A chain: each text is similar to the next, the first and third are not. Every removal
    names the record it matched, at or above the threshold, beside the kept representative."""
    words = [f"w{i}" for i in range(80)]
    rows = [{"id": f"t{k}", "text": " ".join(words[4 * k: 4 * k + 40])} for k in range(6)]
    src = write_input(tmp_path / "in.jsonl", rows)
    out, rep = tmp_path / "out.jsonl", tmp_path / "dups.json"
    assert run("dedup", src, "-o", out, "--id-field", "id", "--method", "minhash",
               "--threshold", "0.7", "--report", rep, "--no-progress") == 0
    removed = json.loads(rep.read_text())["duplicates"]
    assert [r["id"] for r in read_jsonl(out)] == ["t0"]
    assert len(removed) == 5
    for entry in removed:
        assert entry["duplicate_of"] == "t0"
        assert entry["similarity"] >= 0.7, entry
        assert int(entry["matched"][1:]) in (int(entry["id"][1:]) - 1, int(entry["id"][1:]) + 1)
    assert any(e["matched"] != e["duplicate_of"] for e in removed)
