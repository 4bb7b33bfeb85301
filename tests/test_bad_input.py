"""Every case of issue 12's bad-input list: one ``error:`` line and exit 2 (or the documented
policy), never a traceback, and neither the input nor a previous output is lost.

CLI cases go through ``ctxkit.cli.main``; signals and line wrapping through a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer

import ctxkit
from ctxkit.cli import app, main
from ctxkit.errors import InputError, RecordError
from ctxkit.io.records import read_records

ROWS = [{"key": f"k{i}", "text": f"Record {i} says something about topic {i % 3}. " * 3,
         "topic": i % 3, "instruction": f"Explain item {i}", "output": f"Item {i} is fine.",
         "messages": [{"role": "user", "content": f"question {i} " * 8},
                      {"role": "assistant", "content": f"answer {i} " * 8},
                      {"role": "user", "content": f"follow-up {i}"}]}
        for i in range(6)]
PREVIOUS = b"previous output\n"


def write_jsonl(path: Path, rows=ROWS) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def src(tmp_path) -> Path:
    return write_jsonl(tmp_path / "in.jsonl")


def options_of(command: str) -> set[str]:
    """The flags ``ctxkit COMMAND`` accepts (its own, the root's, ``--help``)."""
    group = typer.main.get_command(app)
    params = [*group.commands[command].params, *group.params]
    return {o for p in params for o in p.opts} | {"--help"}


def run(capsys, *args) -> tuple[int, list[str]]:
    """Exit status and the ``error:`` lines; every flag an error line names must exist."""
    code = main([str(a) for a in args])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    command = str(args[0])
    if errors and command in typer.main.get_command(app).commands:
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", errors[0]):
            assert flag in options_of(command) | set(map(str, args)), (flag, errors[0])
    return code, errors


def fails(capsys, *args, match: str, code: int = 2) -> str:
    """Run; expect exit ``code`` with exactly one ``error:`` line matching ``match``."""
    got, errors = run(capsys, *args)
    assert got == code, (args, got, errors)
    assert len(errors) == 1, errors
    assert re.search(match, errors[0]), errors[0]
    return errors[0]


def unchanged(*pairs: tuple[Path, bytes]) -> None:
    for path, content in pairs:
        assert path.read_bytes() == content, path


def no_temp_files(directory: Path) -> None:
    assert not [p for p in directory.rglob("*") if p.name.endswith(".tmp")]


# one invocation per command, reading IN and writing OUT (suffix chosen per command)
COMMANDS = {
    "pack": lambda i, o: ["pack", i, "-c", "256", "-o", o, "--no-progress"],
    "dedup": lambda i, o: ["dedup", i, "-o", o, "--no-progress"],
    "embed": lambda i, o: ["embed", i, "-o", o, "--device", "cpu", "--no-progress"],
    "compress": lambda i, o: ["compress", i, "-b", "12", "-o", o],
    "chat": lambda i, o: ["chat", i, "-b", "40", "-o", o],
    "density": lambda i, o: ["density", i, "-o", o],
    "eval": lambda i, o: ["eval", i, "-o", o, "--no-density", "--no-dedup"],
}
SUFFIX = {"pack": ".parquet", "dedup": ".jsonl", "embed": ".npy", "compress": ".jsonl",
          "chat": ".jsonl", "density": ".json", "eval": ""}


# ----- unknown --template, --field with --template ------------------------------------------


@pytest.mark.parametrize("command", ["pack", "dedup", "embed", "density", "eval"])
def test_unknown_template_and_field_with_template(tmp_path, capsys, src, command):
    out = tmp_path / f"out{SUFFIX[command]}"
    base = COMMANDS[command](src, out)
    fails(capsys, *base, "--template", "chatml", match=r"unknown --template 'chatml'")
    fails(capsys, *base, "--template", "alpaca", "--field", "text", match="not both")
    assert not out.exists()


# ----- embed: devices, and the input before the model ---------------------------------------


def test_embed_device_errors_before_loading(tmp_path, capsys, src, monkeypatch):
    import ctxkit.embedding.encoder as encoder

    def no_model(*args, **kwargs):
        raise AssertionError("the model must not load for this input")

    monkeypatch.setattr(encoder, "load_backbone", no_model)
    out = tmp_path / "v.npy"
    fails(capsys, "embed", src, "-o", out, "--device", "tpu", match="--device 'tpu' is unknown")
    if not _cuda():
        fails(capsys, "embed", src, "-o", out, "--device", "cuda", match="needs CUDA")
    fails(capsys, "embed", tmp_path / "missing.jsonl", "-o", out, "--device", "cpu",
          match="input file not found")
    (tmp_path / "empty.jsonl").write_text("")
    fails(capsys, "embed", tmp_path / "empty.jsonl", "-o", out, "--device", "cpu",
          match="no records in")
    (tmp_path / "bad.jsonl").write_text('{"body": 1}\n')
    fails(capsys, "embed", tmp_path / "bad.jsonl", "-o", out, "--device", "cpu",
          match=r"bad\.jsonl:1 .*missing field 'text'")
    fails(capsys, "embed", src, "-o", out, "--dtype", "int8", "--device", "cpu",
          match="--dtype 'int8' is unknown")
    assert not out.exists()


def test_classify_errors_before_loading(tmp_path, capsys, src, monkeypatch):
    import ctxkit.embedding.classifier as classifier

    def no_model(*args, **kwargs):
        raise AssertionError("the model must not load for this input")

    monkeypatch.setattr(classifier, "load_classifier", no_model)
    out, model = tmp_path / "labels.jsonl", tmp_path / "model"
    model.mkdir()
    base = ["classify", src, "--model", model, "-o", out, "--device", "cpu", "--no-progress"]
    fails(capsys, *base[:4], "-o", tmp_path / "labels.npy", match=r"output must end in .jsonl")
    fails(capsys, *base, "--device", "tpu", match="--device 'tpu' is unknown")
    fails(capsys, *base, "--query", "q", "--query-field", "q", match="--query or --query-field")
    fails(capsys, "classify", src, "--model", tmp_path / "nomodel", "-o", out,
          match="model directory not found")
    fails(capsys, "classify", tmp_path / "missing.jsonl", "--model", model, "-o", out,
          match="input file not found")
    (tmp_path / "empty.jsonl").write_text("")
    fails(capsys, "classify", tmp_path / "empty.jsonl", "--model", model, "-o", out,
          match="no records in")
    fails(capsys, *base, "--template", "chatml", match=r"unknown --template 'chatml'")
    assert not out.exists()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# ----- paths: output a directory, input a directory, eval -o a file --------------------------


@pytest.mark.parametrize("command", ["pack", "dedup", "embed", "compress", "chat", "density"])
def test_output_and_input_directories(tmp_path, capsys, src, command):
    out_dir = tmp_path / f"out{SUFFIX[command]}"
    out_dir.mkdir()
    (out_dir / "keep.txt").write_text("mine")
    fails(capsys, *COMMANDS[command](src, out_dir), match="is a directory; give a file name")
    assert (out_dir / "keep.txt").read_text() == "mine"
    in_dir = tmp_path / "records.jsonl"
    in_dir.mkdir()
    fails(capsys, *COMMANDS[command](in_dir, tmp_path / f"o{SUFFIX[command]}"),
          match="is a directory; give a file")


def test_demo_write_data_directory_and_eval_output_file(tmp_path, capsys, src):
    fails(capsys, "demo", "--n", "5", "--write-data", tmp_path, match="is a directory")
    existing = tmp_path / "report"
    existing.write_bytes(PREVIOUS)
    fails(capsys, "eval", src, "-o", existing, match="is an existing file")
    unchanged((existing, PREVIOUS))
    fails(capsys, "eval", tmp_path / "nodir", "-o", tmp_path / "r", match="not found")
    fails(capsys, "eval", src, "-o", existing / "sub", match="is a file, not a directory")


# ----- capacities too large to allocate ----------------------------------------------------


@pytest.mark.parametrize("capacity", [10**12, 2**63])
def test_huge_capacity(tmp_path, capsys, src, capacity):
    out = tmp_path / "o.parquet"
    for args in (["pack", src, "-c", capacity, "-o", out],
                 ["pack", src, "-c", capacity, "-o", out, "--layout", "flat"],
                 ["eval", src, "--capacity", capacity, "-o", tmp_path / "r"],
                 ["demo", "--n", "5", "--capacity", capacity]):
        fails(capsys, *args, match=r"--capacity\b.*\d")  # the limit is packing's to set
    assert not out.exists()


# ----- output equal to input ---------------------------------------------------------------


@pytest.mark.parametrize("command", ["pack", "dedup", "compress", "chat"])
def test_output_equal_to_input_is_refused(tmp_path, capsys, command):
    src = write_jsonl(tmp_path / f"in{SUFFIX[command]}" if command != "pack"
                      else tmp_path / "in.jsonl")
    before = src.read_bytes()
    fails(capsys, *COMMANDS[command](src, src), match="is the input file.*--in-place")
    unchanged((src, before))


def test_files_written_beside_the_output_never_replace_an_input(tmp_path, capsys):
    ids = write_jsonl(tmp_path / "v.npy.ids.jsonl")  # embed --ids writes <output>.ids.jsonl
    before = ids.read_bytes()
    fails(capsys, "embed", ids, "-o", tmp_path / "v.npy", "--ids", "--device", "cpu",
          match=r"file .*v\.npy\.ids\.jsonl would overwrite the input")
    link = tmp_path / "link.jsonl"  # the same file by another name
    link.symlink_to(ids)
    fails(capsys, "embed", link, "-o", tmp_path / "v.npy", "--ids", "--device", "cpu",
          match="would overwrite the input")
    src = write_jsonl(tmp_path / "in.jsonl")
    fails(capsys, "embed", src, "-o", tmp_path / "v.npy", "--ids", "--device", "cpu",
          "--report", ids, match=r"report .*would overwrite the file")
    unchanged((ids, before))
    assert not (tmp_path / "v.npy").exists()


def test_eval_report_files_never_replace_the_input(tmp_path, capsys):
    rep = tmp_path / "rep"
    rep.mkdir()
    for name in ("report.json", "lengths.png"):
        inp = write_jsonl(rep / name) if name.endswith(".json") else None
        if inp is None:  # the input reached through a link named like a plot
            inp = rep / name
            inp.symlink_to(write_jsonl(tmp_path / "in.jsonl"))
            inp = tmp_path / "in.jsonl"
        before = inp.read_bytes()
        fails(capsys, *COMMANDS["eval"](inp, rep), match="would overwrite the input")
        unchanged((inp, before))
        assert sorted(p.name for p in rep.iterdir()) == sorted(
            ["report.json"] + (["lengths.png"] if name == "lengths.png" else []))


def test_ray_ids_file_is_checked_against_the_input(tmp_path):
    from ctxkit.distributed.output import check_output

    ids = write_jsonl(tmp_path / "v.npy.ids.jsonl")
    with pytest.raises(InputError, match="would overwrite the input"):
        check_output(tmp_path / "v.npy", (".npy", ".parquet"), input_path=ids, ids_file=True)
    check_output(tmp_path / "v.npy", (".npy", ".parquet"), input_path=ids)  # no ids: no file


def test_no_hint_names_a_flag_the_command_lacks(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.json")  # density has no --in-place: no hint for it
    line = fails(capsys, "density", src, "-o", src, match="is the input file")
    assert "--in-place" not in line  # run() checks every flag a line names


def test_in_place_replaces_the_input(tmp_path, capsys):
    rows = ROWS + [dict(ROWS[0])]  # one exact duplicate
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    code, errors = run(capsys, "dedup", src, "-o", src, "-m", "exact", "--in-place",
                       "--no-progress")
    assert code == 0, errors
    assert [json.loads(line) for line in src.read_text().splitlines()] == ROWS
    no_temp_files(tmp_path)


# ----- output format follows the suffix; records keep their fields and ids -----------------


def test_compress_writes_the_format_of_the_suffix_and_keeps_fields(tmp_path, capsys, src):
    for suffix in (".parquet", ".json", ".jsonl"):
        out = tmp_path / f"out{suffix}"
        code, errors = run(capsys, "compress", src, "-b", "12", "--id-field", "key", "-o", out,
                           "--report", tmp_path / "ledger.json")
        assert code == 0, errors
        if suffix == ".parquet":
            assert pq.ParquetFile(out).metadata.num_rows == len(ROWS)  # really Parquet
            rows = pq.read_table(out).to_pylist()
        elif suffix == ".json":
            rows = json.loads(out.read_text())
        else:
            rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["key"] for r in rows] == [r["key"] for r in ROWS]
        assert all(set(r) == set(ROWS[0]) for r in rows)  # every field, nothing added
        assert [r["topic"] for r in rows] == [r["topic"] for r in ROWS]
        assert all(len(r["text"]) < len(o["text"]) for r, o in zip(rows, ROWS))
        ledger = json.loads((tmp_path / "ledger.json").read_text())
        assert [e["id"] for e in ledger["records"]] == [r["key"] for r in ROWS]
        assert all(e["compressed_tokens"] <= 12 for e in ledger["records"])


def test_dedup_and_chat_outputs_follow_their_suffix(tmp_path, capsys, src):
    assert run(capsys, "dedup", src, "-o", tmp_path / "k.json", "-m", "exact",
               "--no-progress")[0] == 0
    assert [r["key"] for r in json.loads((tmp_path / "k.json").read_text())] == \
        [r["key"] for r in ROWS]
    assert run(capsys, "chat", src, "-b", "40", "-o", tmp_path / "c.parquet")[0] == 0
    table = pq.read_table(tmp_path / "c.parquet").to_pylist()
    assert [r["key"] for r in table] == [r["key"] for r in ROWS]
    fails(capsys, "dedup", src, "-o", tmp_path / "k.csv", match=r"\.jsonl, \.json or \.parquet")


# ----- the report: checked first, written last, atomically ---------------------------------


@pytest.mark.parametrize("command", ["pack", "dedup", "compress", "chat"])
def test_unwritable_report_fails_before_replacing_the_output(tmp_path, capsys, src, command):
    out = tmp_path / f"out{SUFFIX[command]}"
    out.write_bytes(PREVIOUS)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory should be")
    fails(capsys, *COMMANDS[command](src, out), "--report", blocker / "r.json",
          match="cannot write .*is a file, not a directory")
    fails(capsys, *COMMANDS[command](src, out), "--report", tmp_path,
          match="report .* is a directory")
    unchanged((out, PREVIOUS))
    no_temp_files(tmp_path)


def test_report_and_output_only_after_success(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", ROWS[:3] + [{"text": 7}])
    out, rep = tmp_path / "out.jsonl", tmp_path / "rep.json"
    out.write_bytes(PREVIOUS)
    rep.write_bytes(PREVIOUS)
    fails(capsys, "dedup", src, "-o", out, "--report", rep, "-m", "exact", "--no-progress",
          match=r"in\.jsonl:4 .*--skip-bad")
    unchanged((out, PREVIOUS), (rep, PREVIOUS))
    assert run(capsys, "dedup", src, "-o", out, "--report", rep, "-m", "exact", "--skip-bad",
               "--no-progress")[0] == 0
    report = json.loads(rep.read_text())
    assert report["kept"] == 3 and report["skipped"][0]["line"] == 4
    no_temp_files(tmp_path)


# ----- reading: one-line JSON documents, real line numbers ---------------------------------


def test_one_line_json_document_is_json(tmp_path, capsys):
    path = tmp_path / "data.json"
    path.write_text(json.dumps({"data": [{"text": "a"}, {"text": "b"}]}))
    assert [r.text for r in read_records(path)] == ["a", "b"]
    assert run(capsys, "dedup", path, "-o", tmp_path / "o.jsonl", "--no-progress")[0] == 0
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 2
    # a one-line file holding one record is still that record, list fields and all
    path.write_text(json.dumps({"text": "only", "tags": ["a", "b"]}))
    assert [(r.text, r.line) for r in read_records(path)] == [("only", 1)]


def test_real_line_numbers_for_json_arrays_and_rows_for_parquet(tmp_path, capsys):
    arr = tmp_path / "arr.json"
    arr.write_text('[\n  {"text": "a"},\n\n  {"text": "b"},\n  {"nope": 1}\n]\n')
    recs = list(read_records(arr, on_error="skip"))
    assert [(r.text, r.line, r.location.element) for r in recs] == [("a", 2, 0), ("b", 4, 1)]
    with pytest.raises(RecordError) as info:
        list(read_records(arr))
    assert str(info.value) == f"{arr}:5 (element 2) (id 2): missing field 'text'"
    fails(capsys, "pack", arr, "-c", "64", "-o", tmp_path / "o.jsonl",
          match=r"arr\.json:5 \(element 2\)")
    pq.write_table(pa.table({"text": ["a", "b", None]}), tmp_path / "t.parquet")
    fails(capsys, "dedup", tmp_path / "t.parquet", "-o", tmp_path / "o.jsonl",
          match=r"t\.parquet \(row 2\) \(id 2\): field 'text' is NoneType")
    broken = tmp_path / "broken.json"
    broken.write_text('[\n {"text": "a"},\n {"text": \n]')
    fails(capsys, "dedup", broken, "-o", tmp_path / "o.jsonl", match=r"broken\.json:4: invalid")


# ----- empty input: one policy for every command --------------------------------------------


@pytest.mark.parametrize("command", list(COMMANDS))
def test_empty_input_is_exit_2_everywhere(tmp_path, capsys, command):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    out = tmp_path / f"out{SUFFIX[command]}"
    if command != "eval":
        out.write_bytes(PREVIOUS)
    fails(capsys, *COMMANDS[command](empty, out), match=r"no records in .*empty\.jsonl")
    if command != "eval":
        unchanged((out, PREVIOUS))
    only_bad = write_jsonl(tmp_path / "bad.jsonl", [{"nothing": 1}])
    extra = ["--skip-bad"]
    fails(capsys, *COMMANDS[command](only_bad, out), *extra, match=r"\(1 skipped as bad\)")
    no_temp_files(tmp_path)


@pytest.mark.parametrize("command", ["compress", "density"])
def test_empty_text_file(tmp_path, capsys, command):
    text = tmp_path / "notes.txt"
    text.write_text("  \n")
    out = tmp_path / ("out.txt" if command == "compress" else "out.json")
    fails(capsys, *COMMANDS[command](text, out), match=r"no text in .*notes\.txt")


# ----- dedup options and the Python API ------------------------------------------------------


def test_threshold_out_of_range_for_every_method(tmp_path, capsys, src):
    for method in ("exact", "minhash", "exact,minhash"):
        fails(capsys, "dedup", src, "-o", tmp_path / "o.jsonl", "--method", method,
              "--threshold", "1.5", match=r"--threshold must be a similarity between 0 and 1")
    with pytest.raises(ValueError, match="between 0 and 1"):
        ctxkit.dedup(["a", "b"], method="exact", threshold=1.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        ctxkit.dedup(["a", "b"], method="minhash", threshold={"minhash": -0.1})


def test_api_type_errors_are_clear():
    with pytest.raises(InputError, match=r"texts must be a list of str, got one str; wrap"):
        ctxkit.dedup("abc")
    with pytest.raises(InputError, match=r"text_or_chunks must be a list of str, got "
                                         r"NoneType"):
        ctxkit.compress(None, 10)
    with pytest.raises(InputError, match="got NoneType"):
        ctxkit.dedup(None)


# ----- chat: multi-conversation files ------------------------------------------------------


def test_chat_multi_conversation_errors_name_only_its_own_flags(tmp_path, capsys):
    rows = [{"id": "a", "messages": ROWS[0]["messages"]}, {"id": "b", "text": "no turns"},
            {"id": "c", "conversations": [{"from": "human", "value": "hi " * 30},
                                          {"from": "gpt", "value": "hello " * 30},
                                          {"from": "human", "value": "and?"}]}]
    src = write_jsonl(tmp_path / "chats.jsonl", rows)
    out = tmp_path / "out.jsonl"
    line = fails(capsys, "chat", src, "-b", "40", "-o", out, match=r"chats\.jsonl:2 ")
    assert "--skip-bad" in line and "--skip-bad" in options_of("chat")  # checked in run()
    code, errors = run(capsys, "chat", src, "-b", "80", "-o", out, "--id-field", "id",
                       "--skip-bad", "--report", tmp_path / "r.json")
    assert code == 0, errors
    kept = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in kept] == ["a", "c"] and "conversations" in kept[1]
    report = json.loads((tmp_path / "r.json").read_text())
    assert [s["line"] for s in report["skipped"]] == [2]
    # a bare message list with a bad turn: one line naming the file and the message
    bare = tmp_path / "one.json"
    bare.write_text(json.dumps([{"role": "user", "content": 5}]))
    fails(capsys, "chat", bare, "-b", "40", "-o", tmp_path / "o.json",
          match=r"one\.json: message 0 content is int")


# ----- internal errors, usage errors --------------------------------------------------------


def test_internal_error_exit_3_with_hint_and_debug_traceback(tmp_path, capsys, src,
                                                             monkeypatch):
    import ctxkit.jobs as jobs

    def broken(*args, **kwargs):
        raise RuntimeError("invariant broke")

    monkeypatch.setattr(jobs, "run_dedup", broken)
    line = fails(capsys, "dedup", src, "-o", tmp_path / "o.jsonl", code=3,
                 match="internal error: RuntimeError: invariant broke")
    assert "--debug" in line and "CTXKIT_DEBUG=1" in line
    assert main(["--debug", "dedup", str(src), "-o", str(tmp_path / "o.jsonl")]) == 3
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "invariant broke" in err


def test_usage_errors_are_one_line(tmp_path, capsys, src):
    fails(capsys, "pack", src, "-o", tmp_path / "o.jsonl", match="Missing option '--capacity'")
    fails(capsys, "pack", src, "-c", "abc", "-o", tmp_path / "o.jsonl",
          match="Invalid value for '--capacity'")
    fails(capsys, "dedup", src, "-o", tmp_path / "o.jsonl", "--bogus",
          match="No such option: --bogus")
    fails(capsys, "nosuchcommand", match="No such command")
    assert main([]) == 2  # no command: the help is the answer, with no error line
    captured = capsys.readouterr()
    assert "Usage" in captured.out and "error:" not in captured.err


def test_input_error_carries_location_and_index():
    err = RecordError("d.jsonl", 3, "missing field 'text'", "r2", index=2)
    assert isinstance(err, InputError) and isinstance(err, ValueError)
    assert (err.location.line, err.index, err.record_id) == (3, 2, "r2")
    assert err.to_dict()["where"] == "d.jsonl:3"


# ----- signals and terminals (a real process) -----------------------------------------------

_SLOW_PACK = textwrap.dedent("""
    import sys, time
    import ctxkit.packing.sequences as sequences

    def slow(*args, **kwargs):
        print("packing", flush=True)
        time.sleep(60)

    sequences.pack_arrays = slow
    from ctxkit.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def _ctxkit(*args, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("COLUMNS", None)
    return subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.parametrize(("signum", "code", "word"), [(signal.SIGTERM, 143, "terminated"),
                                                       (signal.SIGINT, 130, "interrupted")])
def test_signals_leave_previous_output_and_no_temp_files(tmp_path, src, signum, code, word):
    out, rep = tmp_path / "out.parquet", tmp_path / "rep.json"
    out.write_bytes(PREVIOUS)
    proc = _ctxkit("-c", _SLOW_PACK, "pack", str(src), "-c", "256", "-o", str(out),
                   "--report", str(rep), "--no-progress")
    watchdog = threading.Timer(60, proc.kill)  # a hung child fails the test, never hangs it
    watchdog.start()
    line = proc.stdout.readline()
    watchdog.cancel()
    assert line.strip() == "packing"  # inside the job, outputs staged
    assert len([p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]) == 2
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == code, stderr
    assert stderr.strip() == f"error: {word}; no output was replaced"
    unchanged((out, PREVIOUS))
    assert not rep.exists()
    no_temp_files(tmp_path)


def test_error_lines_do_not_wrap_when_stderr_is_not_a_terminal(tmp_path):
    deep = tmp_path / ("a-rather-long-directory-name-" * 4) / "missing-input-file.jsonl"
    proc = _ctxkit("-m", "ctxkit.cli", "pack", str(deep), "-c", "64", "-o",
                   str(tmp_path / "o.jsonl"))
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    lines = stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) > 120 and str(deep) in lines[0]


def test_huge_num_perm_is_an_option_error_not_out_of_memory(tmp_path, capsys, src):
    fails(capsys, "dedup", src, "-o", tmp_path / "o.jsonl", "--num-perm", "100000000000",
          match=r"num_perm must be at most 8192")


def test_compress_query_field_not_text_names_the_record(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "text": "one two three four five six", "q": "three"}\n'
                   '{"id": "b", "text": "seven eight nine ten eleven", "q": 7}\n')
    out = tmp_path / "o.jsonl"
    fails(capsys, "compress", src, "--budget", "3", "--scorer", "idf", "--query-field", "q",
          "-o", out, match=r"in\.jsonl:2 \(id b\): query field 'q' is int, not text")
    assert not out.exists()


# ----- the last bad inputs: each refused with one line naming the option, before any work


def test_unknown_granularity_is_refused_before_work(tmp_path, capsys, src, monkeypatch):
    import ctxkit.jobs.compress as job

    monkeypatch.setattr(job, "is_records_path", lambda p: pytest.fail("work started"))
    fails(capsys, "compress", src, "-b", "10", "-o", tmp_path / "o.jsonl", "--granularity",
          "nope", match=r"^error: --granularity 'nope' is unknown; choose one of")


def test_options_that_do_nothing_alone_are_refused(tmp_path, capsys, src):
    chat = write_jsonl(tmp_path / "chat.jsonl")
    out = tmp_path / "o.jsonl"
    cases = [
        (["compress", src, "-b", "10", "-o", out, "--kv-dtype", "fp8"], "--kv-dtype", "--kv-model"),
        (["chat", chat, "-b", "40", "-o", out, "--kv-dtype", "bfloat16"], "--kv-dtype",
         "--kv-model"),
        (["chat", chat, "-b", "40", "-o", out, "--summary-model", "qwen"], "--summary-model",
         "--summarize"),
        (["chat", chat, "-b", "40", "-o", out, "--summarize", "extractive", "--summary-model",
          "qwen"], "--summary-model", "--summarize"),
        (["eval", src, "-o", tmp_path / "r", "--kv-batch-size", "4"], "--kv-batch-size",
         "--kv-model"),
        (["eval", src, "-o", tmp_path / "r", "--embed-sample", "8"], "--embed-sample",
         "--embedding"),
    ]
    for args, flag, needed in cases:
        fails(capsys, *args, match=rf"^error: {flag} .*{needed}")
    assert not out.exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", ["pack", "dedup", "eval", "demo"])
def test_negative_seed_in_ctxkit_words(tmp_path, capsys, src, command):
    args = {"pack": ["pack", src, "-c", "64", "-o", tmp_path / "o.jsonl"],
            "dedup": ["dedup", src, "-o", tmp_path / "o.jsonl"],
            "eval": ["eval", src, "-o", tmp_path / "r"],
            "demo": ["demo", "--n", "10"]}[command]
    fails(capsys, *args, "--seed", "-1", match=r"^error: --seed must be .*(>= 0|non-negative)")


@pytest.mark.parametrize("command", ["pack", "compress"])
def test_missing_hf_tokenizer_in_ctxkit_words(tmp_path, capsys, src, command):
    extra = ["-c", "64"] if command == "pack" else ["-b", "10"]
    err = fails(capsys, command, src, *extra, "-o", tmp_path / "o.jsonl", "-t",
                "hf:/nonexistent", match=r"^error: cannot load --tokenizer 'hf:/nonexistent'")
    assert "huggingface" not in err.lower() or "local hugging face" in err.lower()
    assert "Repo id" not in err


def test_threshold_for_a_method_not_run_is_refused(tmp_path, capsys, src):
    fails(capsys, "dedup", src, "-o", tmp_path / "o.jsonl", "--threshold", "semantic=0.9",
          match=r"^error: --threshold names semantic, which --method exact,minhash does not")


def test_query_field_missing_from_a_record_is_refused(tmp_path, capsys, src):
    fails(capsys, "compress", src, "-b", "10", "-o", tmp_path / "o.jsonl", "--query-field",
          "nope", "--scorer", "idf", match=r"in\.jsonl:1.*query field 'nope' is missing")


def test_empty_ray_address_is_refused(tmp_path, capsys, src):
    fails(capsys, "pack", src, "-c", "64", "-o", tmp_path / "o.jsonl", "--ray", "",
          match=r"^error: --ray needs an address")


@pytest.mark.parametrize("command", ["pack", "dedup", "compress", "chat", "embed"])
def test_output_that_is_a_directory(tmp_path, capsys, src, command):
    out = tmp_path / "outdir"
    out.mkdir()
    extra = {"pack": ["-c", "64"], "compress": ["-b", "10"], "chat": ["-b", "100"]}
    fails(capsys, command, src, *extra.get(command, []), "-o", out,
          match=r"^error: output .*outdir is a directory")


def test_separator_outside_the_vocabulary(tmp_path, capsys, src):
    fails(capsys, "pack", src, "-c", "64", "-o", tmp_path / "o.jsonl", "--separator",
          "1000000000", match=r"^error: --separator must be .* token id of tokenizer "
                              r"cl100k_base \(0\.\.100,\d+\)")


def test_no_progress_silences_transformers_bars():
    from transformers.utils import logging as hf_logging

    from ctxkit.cli.app import quiet_transformers

    assert hf_logging.is_progress_bar_enabled()
    with quiet_transformers(True):
        assert not hf_logging.is_progress_bar_enabled()
    assert hf_logging.is_progress_bar_enabled()


def test_deeply_nested_record_names_its_line_and_is_skipped(tmp_path, capsys):
    src = tmp_path / "deep.jsonl"
    src.write_text(json.dumps({"text": "fine record"}) + "\n"
                   + '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    fails(capsys, "pack", src, "-c", "64", "-o", out,
          match=r"deep\.jsonl:2.*nested too deeply")
    assert main(["pack", str(src), "-c", "64", "-o", str(out), "--skip-bad"]) == 0
    assert "deep.jsonl:2" in capsys.readouterr().err
