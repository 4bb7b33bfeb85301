"""`ctxkit pack|dedup|embed ... --ray local` writes what the local command writes.

Same input, same options, through ``ctxkit.cli.main`` both times. Ray's part files come in
no particular row order; the windows carry their number (``window``) and the vectors their
input row (``row``), the only columns the local output lacks, so the tests order by them, drop
them and compare the rest: Arrow tables with ``Table.equals``, vectors bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
pq = pytest.importorskip("pyarrow.parquet")

# Ray's own DataContext copies touch deprecated settings; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from ctxkit.cli import main  # noqa: E402


def _run(capsys, *args) -> str:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    assert code == 0, (args, out.err)
    return out.out


def _alpaca(n: int, seed: int = 0) -> list[dict]:
    """Instruction records with a shared template, long and empty answers, unicode."""
    rng = np.random.default_rng(seed)
    words = ["pack", "token", "window", "naïve", "日本語", "emoji🙂", "the", "a", "of"]
    rows = []
    for i in range(n):
        answer = " ".join(rng.choice(words, int(rng.integers(0, 120))))
        turns = [{"role": "user", "content": f"Explain item {i % 7}"},
                 {"role": "assistant", "content": answer}]
        if i % 5 == 0:  # keys only some turns have (Arrow unifies them into one struct)
            turns.append({"from": "human", "value": "thanks", "name": "u1"})
        rows.append({"rid": f"r{i}", "instruction": f"Explain item {i % 7}",
                     "input": "" if i % 3 else "some context", "output": answer,
                     "text": f"Item {i}: {answer}", "messages": turns})
    rows[4]["output"] = rows[4]["text"] = ""
    rows[9]["output"] = " ".join(["long"] * 700)  # over the window: split or truncated
    rows[9]["text"] = rows[9]["output"]
    return rows


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    return path


@pytest.mark.parametrize("options", [
    ["--field", "text", "--overflow", "truncate", "--pad-id", "7"],
    ["--template", "alpaca", "--id-field", "rid", "--layout", "flat", "--seed", "3",
     "--overflow", "split", "--label-separators", "--strategy", "optimal"],
    ["--template", "messages", "--overflow", "drop", "--separator", "none"],
])
def test_pack_on_ray_equals_local(ray_session, tmp_path, capsys, options):
    src = _write_jsonl(tmp_path / "in.jsonl", _alpaca(60))
    common = ["pack", src, "-c", 256, "--no-progress", *options]
    _run(capsys, *common, "-o", tmp_path / "local.parquet")
    _run(capsys, *common, "-o", tmp_path / "ray.parquet", "--ray", "local")
    local = pq.read_table(tmp_path / "local.parquet")
    got = pq.read_table(tmp_path / "ray.parquet").sort_by("window")
    assert got.column("window").to_pylist() == list(range(local.num_rows))
    assert got.drop_columns(["window"]).equals(local)


def test_embed_on_ray_equals_local(ray_session, tmp_path, capsys, actor_threads):
    texts = ["A short one.", "", "Packed rows keep each document's own [CLS] and [SEP].",
             "ünïcode и 日本語 text", "word " * 300, "   ", "the same text", "the same text",
             "Another line of prose about packing windows."]
    src = _write_jsonl(tmp_path / "in.jsonl", [{"body": t, "k": f"d{i}"}
                                               for i, t in enumerate(texts)])
    common = ["embed", src, "--field", "body", "--id-field", "k", "--ids", "--device", "cpu",
              "--chunk-size", 5, "--batch-tokens", 512, "--no-progress"]
    _run(capsys, *common, "-o", tmp_path / "local.npy")
    _run(capsys, *common, "-o", tmp_path / "ray.npy", "--ray", "local")
    local, got = np.load(tmp_path / "local.npy"), np.load(tmp_path / "ray.npy")
    assert local.shape == (len(texts), 384)
    np.testing.assert_array_equal(got, local)  # one torch thread on both sides (the fixture)
    assert (tmp_path / "ray.npy.ids.jsonl").read_bytes() == \
        (tmp_path / "local.npy.ids.jsonl").read_bytes()


def test_dedup_on_ray_equals_local(ray_session, tmp_path, capsys):
    rng = np.random.default_rng(5)
    base = [" ".join(rng.choice([f"w{i}" for i in range(300)], 40)) for _ in range(12)]
    rows = []
    for i in range(48):
        words = base[i % 12].split()
        words[int(rng.integers(len(words)))] = "changed"  # near, not exact, duplicates
        rows.append({"id": f"r{i}", "text": " ".join(words), "topic": i % 3})
    rows += [{"id": "e1", "text": "", "topic": 0}, {"id": "e2", "text": "", "topic": 1}]
    src = _write_jsonl(tmp_path / "in.jsonl", rows)
    common = ["dedup", src, "--method", "minhash", "--threshold", "0.6", "--id-field", "id",
              "--no-progress"]
    _run(capsys, *common, "-o", tmp_path / "local.jsonl", "--report", tmp_path / "local.json")
    _run(capsys, *common, "-o", tmp_path / "ray.jsonl", "--report", tmp_path / "ray.json",
         "--ray", "local")
    local = [json.loads(line) for line in (tmp_path / "local.jsonl").read_text().splitlines()]
    got = [json.loads(line) for line in (tmp_path / "ray.jsonl").read_text().splitlines()]
    assert 0 < len(local) < len(rows)
    assert sorted(got, key=lambda r: r["id"]) == sorted(local, key=lambda r: r["id"])
    ledger = {k: [{f: e[f] for f in ("id", "duplicate_of", "method", "similarity")}
                  for e in json.loads((tmp_path / f"{k}.json").read_text())["duplicates"]]
              for k in ("local", "ray")}
    assert ledger["ray"] == ledger["local"] and len(ledger["local"]) == len(rows) - len(local)
    report = json.loads((tmp_path / "ray.json").read_text())
    assert (report["records"], report["kept"], report["removed"]) == \
        (len(rows), len(local), len(rows) - len(local))
    # the whole report is the local one's, but for the paths, Ray's stage notes and "line"
    mine = json.loads((tmp_path / "local.json").read_text())
    for e in mine["duplicates"]:
        del e["line"]
    ray_stages = report["stages"]["minhash"]
    assert {k: ray_stages[k] for k in mine["stages"]["minhash"]} == mine["stages"]["minhash"]
    skip = ("input", "output", "stages")
    assert {k: v for k, v in report.items() if k not in skip} == \
        {k: v for k, v in mine.items() if k not in skip}

def test_ray_refuses_what_it_cannot_honour(ray_session, tmp_path, capsys):
    src = _write_jsonl(tmp_path / "in.jsonl", _alpaca(12))
    for args, message in [
        (["pack", src, "-c", 64, "-o", tmp_path / "p.parquet", "--skip-bad"], "--skip-bad"),
        (["dedup", src, "-o", tmp_path / "d.jsonl", "--method", "exact"], "only --method"),
        (["pack", src, "-c", 10**12, "-o", tmp_path / "q.parquet"], "--capacity"),
        (["embed", src, "-o", tmp_path / "e.npy", "--device", "tpu"], "is unknown; use auto"),
    ]:
        code = main([str(a) for a in args] + ["--ray", "local"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and message in err[0], (args, err)
