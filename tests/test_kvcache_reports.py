"""KV-cache figures in the compress, chat and eval results and reports (``--kv-model``), from
Python, the job layer and the ``ctxkit`` command, with one-line errors for bad options."""

from __future__ import annotations

import json
import os
import re

import pytest

import ctxkit
from ctxkit.cli import main
from ctxkit.errors import OptionError
from ctxkit.jobs import Source, Target, run_chat, run_compress, run_eval

os.environ.setdefault("HF_HUB_OFFLINE", "1")
LLAMA3 = 131_072  # bytes per token of llama-3.1-8b in bf16
TEXT = ("Project Falcon has a budget of $1,250,000. The office plants were watered. "
        "The lead engineer is Ada Byte. Lunch was pasta. The launch is on 2027-03-01. ") * 3
CHAT = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "My locker code is 4417. " + "Weather talk. " * 30},
        {"role": "assistant", "content": "Noted. " + "More filler here. " * 30},
        {"role": "user", "content": "Unrelated chatter about lunch. " * 10},
        {"role": "user", "content": "What is my locker code?"}]


def windowed_model(tmp_path, window: int = 16):
    """A model directory whose config caps every layer at ``window`` tokens (Mistral-style):
    2 layers x 2 (K, V) x 1 KV head x 8 dims x 2 bytes = 64 bytes per token."""
    model = tmp_path / "tiny-swa"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "mistral", "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "hidden_size": 16, "sliding_window": window}))
    return model


def one_line(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


# ----- Python results ------------------------------------------------------------------------


def test_results_and_chat_memory_report_kv():
    out = ctxkit.compress(TEXT, budget=30, scorer="idf")
    kv = out.kv_cache("llama-3.1-8b")
    assert (kv.before.bytes, kv.after.bytes) == (out.original_tokens * LLAMA3,
                                                 out.compressed_tokens * LLAMA3)
    assert kv.saved_bytes > 0 and str(kv).startswith("llama-3.1-8b KV cache (bfloat16): ")
    assert out.kv_cache("llama-3.1-8b", dtype="fp8").after.bytes == kv.after.bytes // 2

    chat = ctxkit.compress_chat(CHAT, budget=60, keep_last=1, scorer="idf")
    assert chat.kv_cache("falcon-7b").before.bytes == chat.original_tokens * 8192
    mem = ctxkit.ChatMemory(budget=60, keep_last=1, scorer="idf")
    mem.extend(CHAT)
    live = mem.kv_cache("falcon-7b")
    assert live.to_dict() == chat.kv_cache("falcon-7b").to_dict()
    assert live.ratio < 1


# ----- jobs ----------------------------------------------------------------------------------


def test_compress_job_text_and_records(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    rep = run_compress(Source(src), Target(tmp_path / "out.txt", tmp_path / "r.json"),
                       budget=30, scorer="idf", kv_model="llama-3.1-8b")
    rows = dict(rep.summary())
    assert rows["KV cache before (llama-3.1-8b, bfloat16)"] == \
        ctxkit.kvcache.accounting.format_bytes(rep.original_tokens * LLAMA3)
    saved = (rep.original_tokens - rep.compressed_tokens) * LLAMA3
    share = 1 - rep.compressed_tokens / rep.original_tokens
    assert rows["KV cache saved"].endswith(f"({share:.1%})")
    written = json.loads((tmp_path / "r.json").read_text())["kv_cache"]
    assert written["saved_bytes"] == saved and written["per_token_bytes"] == LLAMA3
    assert any(n.startswith("KV cache: llama-3.1-8b, GQA: 32 layers") for n in rep.notes)

    # records: each record is its own sequence, capped at the window on its own
    model = windowed_model(tmp_path)
    records = tmp_path / "in.jsonl"
    records.write_text("".join(json.dumps({"text": t}) + "\n"
                               for t in (TEXT, "Short note.", TEXT[:200])))
    rep = run_compress(Source(records), Target(tmp_path / "out.jsonl", tmp_path / "r2.json"),
                       budget=20, scorer="idf", kv_model=str(model), kv_dtype="float32")
    ledger = json.loads((tmp_path / "r2.json").read_text())
    before = sum(min(r["original_tokens"], 16) for r in ledger["records"])
    after = sum(min(r["compressed_tokens"], 16) for r in ledger["records"])
    assert (ledger["kv_cache"]["before_bytes"], ledger["kv_cache"]["after_bytes"]) == \
        (before * 128, after * 128)  # float32: 64 bytes per token in bf16, 128 in fp32
    assert rep.kv.before.tokens == rep.original_tokens and rep.kv.before.sequences == 3


def test_chat_job_replay_reports_each_turn(tmp_path):
    src = tmp_path / "chat.json"
    src.write_text(json.dumps(CHAT))
    rep = run_chat(Source(src), Target(tmp_path / "out.json", tmp_path / "r.json"), budget=200,
                   keep_last=1, scorer="idf", replay=True, kv_model="llama-3.1-8b")
    assert len(rep.turns) == len(CHAT)
    for row in rep.turns:
        assert row["history_kv_bytes"] == row["history_tokens"] * LLAMA3
        assert row["window_kv_bytes"] == row["window_tokens"] * LLAMA3
    table = dict(rep.tables)["per-turn budget (history -> window)"]
    assert re.search(r"tok \([\d,]+ cached\), KV [\d.]+ [KM]iB -> [\d.]+ [KM]iB, \d+ kept",
                     table[-1][1])
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["kv_cache"]["before_bytes"] == rep.original_tokens * LLAMA3
    assert report["turns"][-1]["window_kv_bytes"] == rep.compressed_tokens * LLAMA3
    assert dict(rep.summary())["KV cache after"] == \
        ctxkit.kvcache.accounting.format_bytes(rep.compressed_tokens * LLAMA3)
    # without --kv-model nothing changes
    plain = run_chat(Source(src), Target(tmp_path / "o2.json"), budget=200, keep_last=1,
                     scorer="idf", replay=True)
    assert "history_kv_bytes" not in plain.turns[0] and plain.kv is None
    assert not any("KV" in str(k) for k, _ in plain.summary())


def test_eval_padded_vs_packed_by_hand(tmp_path):
    tok = ctxkit.get_tokenizer("cl100k_base")
    texts = [" ".join(["word"] * n) for n in (10, 200, 50, 30, 7)]
    lengths = [tok.count(t) for t in texts]
    assert lengths == [10, 200, 50, 30, 7]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    rep = run_eval(Source(src), Target(tmp_path / "ev"), capacity=64, density=False,
                   dedup=False, kv_model="llama-3.1-8b", kv_batch_size=2)
    kv = rep.evaluation.sections["kv_cache"]
    gib = LLAMA3 / 2**30
    # truncated to 64: [10, 64, 50, 30, 7]; padded batches of 2 rows in input order:
    # [10, 64] -> 2 x 64, [50, 30] -> 2 x 50, [7] -> 1 x 7 = 235 token slots
    longest = kv["methods"]["padded to longest"]
    assert longest["batches"] == 3 and longest["kv_over_pass_gib"] == pytest.approx(235 * gib)
    assert longest["peak_kv_per_batch_mib"] == pytest.approx(128 * LLAMA3 / 2**20)
    # bfd: [64], [50, 10], [30, 7] = 3 windows, batches of 2 rows: 3 x 64 slots
    packed = kv["methods"]["packed (bfd)"]
    assert packed["batches"] == 2 and packed["kv_over_pass_gib"] == pytest.approx(192 * gib)
    assert packed["real_token_share"] == pytest.approx(161 / 192)
    assert kv["methods"]["padded to window"]["kv_over_pass_gib"] == pytest.approx(320 * gib)
    assert kv["packed_over_padded_pass"] == pytest.approx(192 / 235)
    summary = dict(rep.summary())
    assert summary["KV per token (llama-3.1-8b, bfloat16; batches of 2 rows)"] == "128 KiB"
    assert summary["packed (bfd): KV per batch (mean) / one pass"] == "12.0 MiB / 24.0 MiB"
    md = (tmp_path / "ev" / "report.md").read_text()
    assert "## KV-cache memory" in md and "| packed (bfd) | 2 |" in md
    assert "%" not in md.split("## Timings")[1]  # seconds, even for the utilization step
    assert json.loads((tmp_path / "ev" / "report.json").read_text())["sections"]["kv_cache"]


def test_eval_kv_before_and_after_dedup_and_compression(tmp_path):
    tok = ctxkit.get_tokenizer("cl100k_base")
    texts = ["The vault code is 7781 and the courier arrives at noon on Mondays.",
             "A short unrelated note about soup.",
             "The vault code is 7781 and the courier arrives at noon on Mondays.",  # duplicate
             "Release notes: fixed the parser, sped up packing and rewrote the docs. " * 4]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    rep = run_eval(Source(src), Target(tmp_path / "ev"), capacity=256,
                   kv_model=str(windowed_model(tmp_path)))
    stages = rep.evaluation.sections["kv_cache"]["stages"]
    capped = [min(tok.count(t), 16) for t in texts]  # each text one sequence, window 16
    assert stages["all texts"]["kv_gib"] * 2**30 == pytest.approx(64 * sum(capped))
    kept = capped[:2] + capped[3:]
    assert stages["after dedup"]["texts"] == 3
    assert stages["after dedup"]["kv_saved_share"] == pytest.approx(1 - sum(kept) / sum(capped))
    sample = stages["compression sample"]
    assert sample["texts"] >= 1 and stages["compression sample at 1/2"]["tokens"] < \
        sample["tokens"]
    assert "KV of all texts -> after dedup" in dict(rep.summary())


# ----- the command -----------------------------------------------------------------------------


def test_cli_reports_kv(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    assert main(["compress", str(src), "-b", "30", "--scorer", "idf", "-o",
                 str(tmp_path / "out.txt"), "--kv-model", "mistral-7b"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "KV cache before (mistral-7b, bfloat16)" in out and "KV cache saved" in out
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps(CHAT))
    assert main(["chat", str(chat), "-b", "200", "--keep-last", "1", "--scorer", "idf", "-o",
                 str(tmp_path / "o.json"), "--replay", "--kv-model", "gemma-2-9b",
                 "--kv-dtype", "fp8"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "KV cache before (gemma-2-9b, fp8)" in out
    assert re.search(r"tok \([\d,]+ cached\), KV [\d.]+ [KMG]iB", out)
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"text": TEXT[: 40 * k]}) + "\n" for k in range(1, 9)))
    assert main(["eval", str(data), "-o", str(tmp_path / "ev"), "--capacity", "128",
                 "--no-density", "--no-dedup", "--kv-model", "llama-3.1-70b"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "KV per token (llama-3.1-70b, bfloat16; batches of 8" in out and "320 KiB" in out
    assert "packed (bfd): KV per batch (mean) / one pass" in out


@pytest.mark.parametrize("args, match", [
    (["--kv-model", "llama-9"], r"--kv-model: unknown model 'llama-9': not a preset"),
    (["--kv-dtype", "fp7"], r"--kv-dtype: unknown KV-cache dtype 'fp7'"),
])
@pytest.mark.parametrize("command", ["compress", "chat", "eval"])
def test_bad_kv_options_are_one_line_before_any_output(tmp_path, capsys, command, args, match):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": TEXT, "messages": CHAT}) + "\n")
    out = tmp_path / ("ev" if command == "eval" else "out.jsonl")
    base = {"compress": ["-b", "30", "--scorer", "idf"], "chat": ["-b", "60", "--scorer", "idf"],
            "eval": ["--no-density", "--no-dedup"]}[command]
    if args[0] == "--kv-dtype":
        args = [*args, "--kv-model", "llama-3.1-8b"]
    assert main([command, str(src), "-o", str(out), *base, *args]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and re.search(match, lines[0]), err
    assert not out.exists()


def test_bad_model_configs_name_the_file(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    model = tmp_path / "broken"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_attention_heads": 8, "hidden_size": 64}))
    assert main(["compress", str(src), "-b", "30", "--scorer", "idf", "-o",
                 str(tmp_path / "o.txt"), "--kv-model", str(model)]) == 2
    assert re.search(r"error: --kv-model: broken: missing num_hidden_layers", one_line(capsys))
    (model / "config.json").write_text("{not json")
    assert main(["compress", str(src), "-b", "30", "--scorer", "idf", "-o",
                 str(tmp_path / "o.txt"), "--kv-model", str(model)]) == 2
    assert re.search(r"config.json: not valid JSON \(line 1", one_line(capsys))
    assert main(["eval", str(tmp_path / "in.txt"), "-o", str(tmp_path / "ev"),
                 "--kv-model", "gpt2", "--kv-batch-size", "0"]) == 2
    assert "--kv-batch-size must be >= 1, got 0" in one_line(capsys)
    with pytest.raises(OptionError) as info:
        run_eval(Source(src), Target(tmp_path / "ev"), kv_model="nope")
    assert info.value.option == "--kv-model"
