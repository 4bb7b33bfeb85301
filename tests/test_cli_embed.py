"""``ctxkit embed``: outputs, ids, streaming in chunks, summary counts, bad input."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pyarrow.parquet as pq
import pytest

from ctxkit.cli import main
from ctxkit.embedding.encoder import PackedEncoder

TEXTS = ["hello world", "", "   ", "packing " * 400, "a second, different sentence.",
         "ünïcödé 日本語 🙂"]


@pytest.fixture(scope="module")
def reference():
    return PackedEncoder(device="cpu").encode(TEXTS)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def test_npy_output_streamed_in_chunks(tmp_path, reference):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": t, "key": f"k{i}"}
                                              for i, t in enumerate(TEXTS)])
    out = tmp_path / "vectors.npy"
    summary = tmp_path / "summary.json"
    rc = main(["embed", str(src), "-o", str(out), "--ids", "--id-field", "key", "--device", "cpu",
               "--chunk-size", "4", "--no-progress", "--report", str(summary)])
    assert rc == 0
    vecs = np.load(out)
    assert vecs.shape == (len(TEXTS), 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(vecs, reference, atol=2e-5)  # chunking changes nothing
    ids = [json.loads(line) for line in (tmp_path / "vectors.npy.ids.jsonl").read_text()
           .splitlines()]
    assert ids == [f"k{i}" for i in range(len(TEXTS))]
    s = json.loads(summary.read_text())
    assert s["texts"] == len(TEXTS) and s["empty"] == 2 and s["truncated"] == 1
    assert 0 < s["utilization"] <= 1 and s["rows"] >= 1 and s["tokens"] > 0
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes left no scratch files


def test_parquet_output_with_ids_and_skipped_records(tmp_path, reference, capsys):
    src = tmp_path / "in.jsonl"
    lines = [json.dumps({"text": t}) for t in TEXTS[:3]] + ['{"text": 5}', "not json"] + \
        [json.dumps({"text": t}) for t in TEXTS[3:]]
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "vectors.parquet"
    rc = main(["embed", str(src), "-o", str(out), "--ids", "--device", "cpu", "--skip-bad",
               "--no-progress"])
    assert rc == 0
    table = pq.read_table(out)
    assert table.column_names == ["id", "embedding"]
    assert table["id"].to_pylist() == ["0", "1", "2", "5", "6", "7"]
    emb = np.array(table["embedding"].to_pylist(), dtype=np.float32)
    np.testing.assert_allclose(emb, reference, atol=2e-5)
    captured = capsys.readouterr()
    assert "skipped 2 bad record" in captured.err
    assert "utilization" in captured.out and "texts/s" in captured.out


def test_bad_record_is_an_error_naming_the_line(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "ok"}, {"body": "no text field"}])
    rc = main(["embed", str(src), "-o", str(tmp_path / "v.npy"), "--device", "cpu",
               "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "in.jsonl:2" in err and "missing field 'text'" in err
    assert not (tmp_path / "v.npy").exists()


def test_bad_options(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "ok"}])
    assert main(["embed", str(src), "-o", str(tmp_path / "v.csv"), "--no-progress"]) == 2
    assert "must end in .npy or .parquet" in capsys.readouterr().err
    assert main(["embed", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "v.npy"),
                 "--device", "cpu", "--no-progress"]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["embed", str(src), "-o", str(tmp_path / "v.npy"), "--model",
                 str(tmp_path / "nomodel"), "--no-progress"]) == 2


def test_empty_input_is_an_error_and_keeps_the_old_output(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text("")
    old = tmp_path / "v.npy"
    old.write_bytes(b"previous")
    assert main(["embed", str(src), "-o", str(old), "--device", "cpu", "--no-progress"]) == 2
    assert "no records in" in capsys.readouterr().err
    assert old.read_bytes() == b"previous"
    assert not list(tmp_path.glob(".*.tmp"))
