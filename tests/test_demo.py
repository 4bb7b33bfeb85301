"""`ctxkit demo`: every stage runs on the generated data, reports sane figures, fast and
deterministically."""

import dataclasses
import re
import time

import numpy as np
import pytest

from ctxkit.cli import main
from ctxkit.demo import (
    chat_stage,
    demo_chat,
    demo_dataset,
    demo_records,
    record_text,
    run_demo,
)


@pytest.fixture(scope="module")
def default_run():
    """The demo exactly as `ctxkit demo` runs it, timed in CPU seconds (robust to load)."""
    t0 = time.process_time()
    run = run_demo()
    return run, time.process_time() - t0


def _without_timings(value):
    """A stage as plain data, minus wall-clock fields (and the PackResult, compared apart)."""
    if dataclasses.is_dataclass(value):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items()
                if "seconds" not in k and k != "batch"}
    if isinstance(value, list | tuple):
        return [_without_timings(v) for v in value]
    return value


def test_default_demo_is_fast(default_run):
    run, cpu_seconds = default_run
    # ~20 CPU s measured on 2 cores (torch uses both): "about a minute" with room for load
    assert cpu_seconds < 90, cpu_seconds
    assert run.data.records and len(run.data.records) == 2000


def test_dedup_stage_finds_planted_copies(default_run):
    run, _ = default_run
    d = run.dedup
    assert d.records == len(d.kept) + d.removed_exact + d.removed_minhash
    assert d.planted == 100 and d.planted_found >= 95  # near copies of 5% of the records
    assert d.removed_exact > 0 and d.removed_minhash > 0
    assert 0 < d.tokens_after < d.tokens_before
    assert d.kept == sorted(d.kept) and len(set(d.kept)) == len(d.kept)
    gone, kept, method, sim = d.example
    ids = [r["id"] for r in run.data.records]
    assert ids.index(gone) not in d.kept and ids.index(kept) in d.kept
    assert method == "minhash" and sim >= d.threshold
    # the example is a planted copy of the record it names, or of one in its cluster
    assert run.data.copy_of[ids.index(gone)] >= 0


def test_near_copies_are_near_and_keep_their_own_ids():
    data = demo_dataset(300, seed=5, near_copies=0.1)
    assert data.n_copies == 30
    ids = [r["id"] for r in data.records]
    assert len(set(ids)) == 300
    for i in np.flatnonzero(data.copy_of >= 0):
        copy, src = record_text(data.records[i]), record_text(data.records[data.copy_of[i]])
        assert data.copy_of[i] < i and copy != src
        assert set(copy.lower().split()) & set(src.lower().split())
    assert demo_dataset(300, seed=5, near_copies=0.0).records == demo_records(300, seed=5)
    with pytest.raises(ValueError, match="near_copies"):
        demo_dataset(10, near_copies=1.5)


def test_chat_stage_fits_budget_and_keeps_the_fact(default_run):
    run, _ = default_run
    c = run.chat
    assert c.tokens_after <= c.budget < c.tokens_before
    assert c.budget == int(c.tokens_before * 0.25)
    assert c.fact_kept and c.fact in c.question or "project code" in c.question
    assert c.dropped + c.shortened == len(c.ledger) > 0
    assert c.messages_kept + c.dropped == c.messages
    assert sum(c.reasons.values()) == c.dropped
    assert c.reasons["filler"] > 0 and c.reasons["duplicate"] > 0  # thanks!, re-asked turns
    chat = demo_chat(40, seed=0)
    assert chat.messages[-1]["role"] == "user" and len(chat.messages) == 80


def test_chat_stage_rejects_bad_ratio():
    with pytest.raises(ValueError, match="ratio"):
        chat_stage(demo_chat(5), ratio=0)


def test_pack_stage_packs_kept_records_without_loss(default_run):
    run, _ = default_run
    p = run.pack
    assert p.n_records == len(run.dedup.kept)
    by = {row.method: row for row in p.strategies}
    assert list(by) == ["padding, 1 per row", "greedy", "bfd, blocks of 1,000 (TRL)", "bfd",
                        "optimal"]
    assert by["optimal"].windows <= by["bfd"].windows <= by["greedy"].windows
    assert by["bfd"].windows < by["padding, 1 per row"].windows == p.n_records
    batch = p.batch
    assert batch.n_windows == by["bfd"].windows >= batch.lower_bound
    assert batch.utilization > 0.95
    # every token is placed once or reported as truncated (one EOS per record)
    assert batch.total_tokens + batch.tokens_truncated == p.total_tokens + p.n_records
    assert 0 < p.target_tokens < p.total_tokens  # prompts are masked from the loss


def test_embed_stage_matches_encode_with_less_padding(default_run):
    run, _ = default_run
    e = run.embed
    assert e.texts == 128 and e.dim == 384
    if e.device == "cpu":  # fp32: equal to rounding; a GPU runs half precision
        assert e.min_cosine > 0.99999 and e.max_abs_diff < 1e-4
    else:
        assert e.min_cosine > 0.99
    assert e.utilization > 0.9 and e.utilization > e.encode_utilization
    assert 0 < e.rows_packed < e.texts and e.tokens > e.texts
    assert e.seconds > 0 and e.encode_seconds > 0


def test_every_stage_has_a_report(default_run):
    run, _ = default_run
    for stage in (run.dedup, run.chat, run.pack, run.embed):
        rows = stage.rows()
        assert len(rows) >= 5
        assert all(isinstance(k, str) and k and v is not None and str(v) for k, v in rows)


def test_same_seed_same_results_other_seed_other_data(default_run):
    run, _ = default_run
    again = run_demo(embed_texts=0)
    assert again.data.records == run.data.records
    assert np.array_equal(again.data.copy_of, run.data.copy_of)
    for name in ("dedup", "chat", "pack"):
        assert _without_timings(getattr(again, name)) == _without_timings(getattr(run, name))
    assert np.array_equal(again.pack.batch.input_ids, run.pack.batch.input_ids)
    other = run_demo(200, seed=1, embed_texts=0)
    assert other.data.records != run.data.records[:200]
    assert other.chat.fact != run.chat.fact or other.chat.messages != run.chat.messages


def test_run_demo_rejects_bad_sizes():
    for kwargs in ({"n": 0}, {"capacity": 0}, {"embed_texts": -1}):
        with pytest.raises(ValueError):
            run_demo(**kwargs)


def test_cli_prints_every_stage(capsys, tmp_path):
    data = tmp_path / "demo.jsonl"
    assert main(["demo", "--n", "120", "--capacity", "512", "--embed-texts", "8",
                 "--write-data", str(data)]) == 0
    captured = capsys.readouterr()
    text = re.sub(r"\s+", " ", captured.out)
    for title in ("1. dedup", "2. compression", "3. packing", "4. packed embedding"):
        assert title in text
    for label in ("planted copies found", "fact it needs", "lower bound", "min cosine to encode",
                  "padding, 1 per row", "optimal"):
        assert label in text
    assert sum(1 for _ in open(data, encoding="utf-8")) == 120
    assert main(["demo", "--n", "50", "--embed-texts", "-1"]) == 2



def test_written_data_runs_through_the_commands_with_their_defaults(capsys, tmp_path):
    import json

    from ctxkit.deduplication.options import MinHashOptions

    data, kept = tmp_path / "demo.jsonl", tmp_path / "kept.jsonl"
    assert main(["demo", "--n", "150", "--capacity", "512", "--embed-texts", "0",
                 "--write-data", str(data)]) == 0
    assert main(["dedup", str(data), "-o", str(kept), "--report", str(tmp_path / "r.json"),
                 "--no-progress"]) == 0, capsys.readouterr().err
    run = run_demo(150, capacity=512, chat_turns=6, embed_texts=0)
    assert run.dedup.threshold == MinHashOptions().threshold  # the demo runs what dedup runs
    ids = [json.loads(line)["id"] for line in kept.read_text().splitlines()]
    assert ids == [run.data.records[i]["id"] for i in run.dedup.kept]
    assert main(["pack", str(data), "-c", "2048", "--template", "alpaca", "-o",
                 str(tmp_path / "p.parquet"), "--no-progress"]) == 0
