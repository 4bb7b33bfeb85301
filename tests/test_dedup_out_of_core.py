"""Out-of-core dedup: the in-memory job's kept records and report, in bounded memory, with
its spill files gone however the run ends."""

import json
import random

import pytest

from ctxkit.cli import main
from ctxkit.deduplication.external.budget import Budget, parse_memory
from ctxkit.errors import InputError, OptionError
from ctxkit.jobs import Source, Target, run_dedup
from ctxkit.jobs.dedup_external import use_out_of_core

WORDS = [f"w{i}" for i in range(300)]
HEAD = ("toolformer: enabled\ntoolformer access: search\nsearch the web for facts about a "
        "thing\nsearch(query)")


def corpus(seed=0):
    """Originals with near copies, case-only copies and chains of edits, templated records
    (mostly one shared head), and empty texts; shuffled."""
    rng = random.Random(seed)
    rows = []
    for i in range(120):
        words = rng.choices(WORDS, k=rng.randint(20, 60))
        rows.append({"id": f"b{i}", "text": " ".join(words), "instruction": f"do {i}",
                     "output": " ".join(words[:8])})
        r = rng.random()
        if r < 0.3:
            words[rng.randrange(len(words))] = rng.choice(WORDS)
            rows.append({"id": f"n{i}", "text": " ".join(words)})
        elif r < 0.4:
            rows.append({"id": f"e{i}", "text": rows[-1]["text"].upper()})
        elif r < 0.5:  # a chain: each link one edit from the last
            for k in range(4):
                words[rng.randrange(len(words))] = rng.choice(WORDS)
                rows.append({"id": f"c{i}_{k}", "text": " ".join(words)})
    for i in range(100):
        ask = " ".join(rng.choices(WORDS, k=rng.randint(3, 8)))
        rows.append({"id": f"t{i}", "text": f"{HEAD}\n{ask}", "instruction": HEAD,
                     "output": ask})
    rows += [{"id": "empty", "text": ""}, {"id": "blank", "text": "  "}, {"id": "x", "text": ""}]
    rng.shuffle(rows)
    for row in rows:
        row.setdefault("instruction", "say it")
        row.setdefault("output", row["text"])
    return rows


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    path = tmp_path_factory.mktemp("ooc") / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in corpus()))
    return path


def both(tmp_path, src, memory=2000, source=None, **options):
    """Kept records and report of the in-memory run and of the out-of-core one."""
    out = []
    for mode in (False, True):
        o, r = tmp_path / f"out{mode}.jsonl", tmp_path / f"rep{mode}.json"
        run_dedup(source or Source(src, id_field="id"), Target(o, r), out_of_core=mode,
                  memory=memory if mode else None, tmp_dir=tmp_path / "spill", **options)
        report = json.loads(r.read_text())
        report.pop("output")
        out.append((o.read_text(), report))
    assert not list((tmp_path / "spill").iterdir())  # spill files removed
    return out


@pytest.mark.parametrize("method", ["exact,minhash", "minhash", "exact"])
@pytest.mark.parametrize("keep", ["first", "last", "longest"])
def test_same_result_as_in_memory(tmp_path, src, method, keep):
    mem, ext = both(tmp_path, src, method=method, keep=keep)
    assert mem == ext
    assert mem[1]["removed"] >= 10


@pytest.mark.parametrize("options", [
    {"boilerplate": 0.05},
    {"punctuation": True, "unit": "word", "ngram": 2, "threshold": 0.5},
    {"threshold": {"minhash": 0.9}, "num_perm": 64, "seed": 7},
])
def test_same_result_with_options(tmp_path, src, options):
    mem, ext = both(tmp_path, src, **options)
    assert mem == ext
    if "boilerplate" in options:
        assert ext[1]["stages"]["minhash"]["boilerplate"]["lines"] == 4


@pytest.mark.parametrize("how", [{"field": "output"}, {"template": "alpaca"}])
def test_same_result_with_field_or_template(tmp_path, src, how):
    mem, ext = both(tmp_path, src, source=Source(src, id_field="id", **how))
    assert mem == ext


def test_budget_decides_and_the_report_is_byte_identical(tmp_path, src):
    big, tiny = Budget(parse_memory("4G")), Budget(parse_memory("1M"))
    source = Source(src)
    assert not use_out_of_core(None, ["exact", "minhash"], "first", big, source)
    assert use_out_of_core(None, ["exact", "minhash"], "first", Budget(4096), source)
    assert not use_out_of_core(None, ["exact"], "first", tiny, source)  # one pass already
    assert not use_out_of_core(None, ["exact", "semantic"], "first", tiny, source)
    with pytest.raises(OptionError, match="--method exact,semantic runs in memory"):
        use_out_of_core(True, ["exact", "semantic"], "first", tiny, source)
    texts = []
    for memory in ("4G", 4096):  # in memory, then out of core by the budget alone
        o, r = tmp_path / f"o{memory}.jsonl", tmp_path / f"o{memory}.json"
        rep = run_dedup(Source(src), Target(o, r), memory=memory)
        texts.append(r.read_text().replace(o.name, ""))
    assert texts[0] == texts[1]
    assert rep.removed == json.loads(texts[1])["removed"] and rep.duplicates == []


def test_bad_record_names_its_line_and_leaves_nothing(tmp_path, src):
    bad = tmp_path / "bad.jsonl"
    lines = src.read_text().splitlines()
    bad.write_text("\n".join(lines[:5] + ['{"text": 3}'] + lines[5:]) + "\n")
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    with pytest.raises(InputError, match=r"bad.jsonl:6"):
        run_dedup(Source(bad), Target(out), out_of_core=True, tmp_dir=tmp_path / "spill")
    assert out.read_text() == "old\n"
    assert not list((tmp_path / "spill").iterdir())


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])  # Ctrl-C; SIGTERM in the CLI
def test_interrupt_keeps_the_old_output_and_removes_spill_files(tmp_path, src, monkeypatch,
                                                                stop):
    import ctxkit.deduplication.external.stage as stage

    def interrupted(*args, **kwargs):
        assert list((tmp_path / "spill").iterdir())  # spilling by now
        raise stop()

    monkeypatch.setattr(stage, "link_pairs", interrupted)
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    with pytest.raises(stop):
        run_dedup(Source(src), Target(out, tmp_path / "r.json"), out_of_core=True,
                  tmp_dir=tmp_path / "spill")
    assert out.read_text() == "old\n" and not (tmp_path / "r.json").exists()
    assert not list((tmp_path / "spill").iterdir())


def test_cli_flags(tmp_path, src, capsys):
    out, rep = tmp_path / "out.jsonl", tmp_path / "rep.json"
    assert main(["dedup", str(src), "-o", str(out), "--report", str(rep), "--memory", "1M",
                 "--out-of-core", "--tmp-dir", str(tmp_path / "t"), "--no-progress"]) == 0
    assert json.loads(rep.read_text())["removed"] > 10
    assert not list((tmp_path / "t").iterdir())
    for flags, message in [(["--memory", "lots"], "--memory must be a size"),
                           (["--memory", "10K"], "at least 1M"),
                           (["--out-of-core", "-m", "semantic"], "runs in memory"),
                           (["--memory", "2G", "--ray", "local"], "do not run with --ray")]:
        assert main(["dedup", str(src), "-o", str(out), "--no-progress", *flags]) != 0
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".json", ".parquet"])  # locations: element N, row N
def test_same_result_on_json_and_parquet(tmp_path, suffix):
    from ctxkit.io.outputs import write_records

    path = tmp_path / f"in{suffix}"
    write_records(path, iter(corpus(1)), fmt=suffix)
    mem, ext = both(tmp_path, path, method="exact,minhash")
    assert mem == ext
    assert {"element", "row"} & set(ext[1]["duplicates"][0])
