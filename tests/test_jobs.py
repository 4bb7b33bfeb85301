"""The job layer without the CLI: plain functions returning report objects."""

import json

import pytest

from ctxkit.compression.text.pipeline import REASON_CODES
from ctxkit.errors import InputError, OptionError
from ctxkit.jobs import (
    ChatReport,
    CompressReport,
    DedupReport,
    PackReport,
    Source,
    Target,
    run_chat,
    run_compress,
    run_dedup,
    run_pack,
)

FACTS = ("The vault code is 7781. The cafeteria serves soup on Mondays. The courier arrives "
         "at noon. The parking lot was repainted. The vault code is 7781. ")


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_pack_report_accounts_for_every_record(tmp_path):
    src = jsonl(tmp_path / "in.jsonl", [{"text": "word " * n, "id": f"r{n}"} for n in
                                        (0, 3, 40, 7)])
    seen = []

    def progress(description, total=None):
        import contextlib

        @contextlib.contextmanager
        def bar():
            yield lambda n=1: seen.append((description, n))
        return bar()

    rep = run_pack(Source(src, id_field="id"), Target(tmp_path / "o.parquet",
                                                      tmp_path / "r.json"),
                   capacity=16, overflow="truncate", progress=progress)
    assert isinstance(rep, PackReport)
    assert rep.records == 4 and rep.empty == ["r0"] and rep.truncated == ["r40"]
    assert dict(rep.id_lists)["truncated"] == ["r40"] and seen == [("tokenizing", 4)]
    assert json.loads((tmp_path / "r.json").read_text())["truncated"] == ["r40"]
    too_long = r"record r40 \(.*in\.jsonl:3\) has \d+ tokens, more than --capacity 16"
    with pytest.raises(InputError, match=too_long):
        run_pack(Source(src, id_field="id"), Target(tmp_path / "o2.parquet"), capacity=16)
    assert not (tmp_path / "o2.parquet").exists()
    with pytest.raises(OptionError) as info:
        run_pack(Source(src), Target(tmp_path / "o.parquet"), capacity=16, layout="ragged")
    assert info.value.option == "--layout"


def test_dedup_report_lists_every_removal(tmp_path):
    rows = [{"text": "alpha beta gamma delta"}, {"text": "alpha beta gamma delta"},
            {"text": "something else"}]
    rep = run_dedup(Source(jsonl(tmp_path / "in.jsonl", rows)), Target(tmp_path / "o.jsonl"),
                    method="exact,minhash")
    assert isinstance(rep, DedupReport)
    assert (rep.records, rep.kept) == (3, 2)
    assert rep.duplicates == [{"id": "1", "duplicate_of": "0", "method": "exact",
                               "matched": "0", "similarity": 1.0, "line": 2}]
    assert rep.summary()[2] == ("removed", 1)


def test_compress_reasons_are_codes_not_prose(tmp_path):
    src = jsonl(tmp_path / "in.jsonl", [{"text": FACTS * 2, "q": "What is the vault code?"}])
    rep = run_compress(Source(src), Target(tmp_path / "o.jsonl"), budget=12, query_field="q")
    assert isinstance(rep, CompressReport)
    codes = dict(rep.reasons)
    assert set(codes) <= set(REASON_CODES)
    assert codes["duplicate"] >= 1 and rep.tables[0][0] == "dropped units by reason"
    dropped = rep.ledger[0]["dropped"]
    assert all(d["code"] and d["reason"] for d in dropped)
    assert "7781" in json.loads((tmp_path / "o.jsonl").read_text())["text"]


def test_chat_report_codes(tmp_path):
    msgs = [{"role": "system", "content": "Be terse."},
            {"role": "user", "content": "My locker code is 4417."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "thanks!"},
            {"role": "assistant", "content": "The weather is sunny with a light breeze."},
            {"role": "user", "content": "What is my locker code?"}]
    src = tmp_path / "chat.json"
    src.write_text(json.dumps(msgs))
    # 34 tokens: room for the locker turn whole, not for a shortened weather turn as well
    rep = run_chat(Source(src), Target(tmp_path / "out.json"), budget=34, keep_last=1)
    assert isinstance(rep, ChatReport)
    assert dict(rep.tables[0][1]) == {"filler": 2, "over_budget": 1}
    out = json.loads((tmp_path / "out.json").read_text())
    assert [m["content"] for m in out] == ["Be terse.", "My locker code is 4417.",
                                           "What is my locker code?"]


def test_records_own_id_names_them_in_reports_and_outputs(tmp_path):
    from ctxkit.jobs import run_embed

    rows = [{"id": "doc-a", "text": "alpha beta gamma delta"},
            {"id": "doc-b", "text": "alpha beta gamma delta"},
            {"id": 7, "text": "something else entirely"},
            {"text": "no id of its own here"},  # no id: its position
            {"id": None, "text": "a null id is no id at all"}]
    src = jsonl(tmp_path / "in.jsonl", rows)
    rep = run_dedup(Source(src), Target(tmp_path / "o.jsonl"), method="exact")
    assert [(d["id"], d["duplicate_of"]) for d in rep.duplicates] == [("doc-b", "doc-a")]
    rep = run_embed(Source(src), Target(tmp_path / "v.npy"), ids=True, device="cpu")
    ids = (tmp_path / "v.npy.ids.jsonl").read_text().splitlines()
    assert [json.loads(i) for i in ids] == ["doc-a", "doc-b", "7", "3", "4"]
    # --id-field still chooses
    rows = [{**r, "key": f"k{i}"} for i, r in enumerate(rows)]
    src = jsonl(tmp_path / "in.jsonl", rows)
    rep = run_dedup(Source(src, id_field="key"), Target(tmp_path / "o.jsonl"), method="exact")
    assert [(d["id"], d["duplicate_of"]) for d in rep.duplicates] == [("k1", "k0")]
