"""One meaning per flag across every ``ctxkit`` command."""

from collections import defaultdict

import typer

from ctxkit.cli import app

COMMANDS = typer.main.get_command(app).commands


def _options():
    for name, command in COMMANDS.items():
        for param in command.params:
            if param.param_type_name == "option":
                yield name, param


def test_each_short_flag_has_one_long_name():
    longs = defaultdict(set)
    for command, param in _options():
        flags = param.opts + param.secondary_opts
        shorts = [f for f in flags if not f.startswith("--")]
        names = [f for f in flags if f.startswith("--")]
        assert len(shorts) <= 1 and len(param.opts) <= 2, (command, flags)  # no aliases
        for short in shorts:
            longs[short].add(names[0])
    assert all(len(v) == 1 for v in longs.values()), dict(longs)


def test_output_report_and_field_flags_are_the_same_everywhere():
    for command, param in _options():
        if param.name in ("output", "output_dir"):
            assert sorted(param.opts) == ["--output", "-o"], command
        if "report" in param.name or "json" in param.name:
            assert param.opts == ["--report"], command
        if param.name == "field":
            assert param.opts == ["--field"], command
        if param.name == "tokenizer":
            assert sorted(param.opts) == ["--tokenizer", "-t"], command


def test_every_record_command_writes_and_reports_the_same_way():
    for name in ("pack", "dedup", "embed", "classify", "compress", "chat"):
        opts = {o for p in COMMANDS[name].params for o in p.opts}
        assert {"-o", "--output", "--report"} <= opts, name
    assert "--summary-json" not in {o for _, p in _options() for o in p.opts}


def test_no_progress_silences_transformers_bars(tmp_path):
    """``--no-progress`` also turns off transformers' own bars ("Loading weights"), for the
    run only."""
    import json
    import os
    import subprocess
    import sys

    from transformers.utils import logging as hf_logging

    from ctxkit.cli.app import quiet_transformers

    assert hf_logging.is_progress_bar_enabled()
    with quiet_transformers(True):
        assert not hf_logging.is_progress_bar_enabled()
    assert hf_logging.is_progress_bar_enabled()
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": "a short text to embed"}) + "\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "ctxkit.cli", "embed", str(src), "-o",
                           str(tmp_path / "v.npy"), "--device", "cpu", "--no-progress"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Loading weights" not in done.stderr and "it/s" not in done.stderr


def test_help_names_the_input_alike_and_chat_budget_per_conversation():
    from typer.testing import CliRunner

    from ctxkit.cli import app

    runner = CliRunner()
    for command in ("chat", "compress", "density", "dedup", "pack", "embed", "eval"):
        usage = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
        assert "IN" in usage.split("Usage:")[1].splitlines()[0] and "{path}" not in usage
        # flags take no value: no type beside --skip-bad, --progress or --help
        assert "<bool>" not in usage and "--help" in usage and "<path>" in usage
    chat = runner.invoke(app, ["chat", "--help"], env={"COLUMNS": "200"}).output
    assert "per conversation" in chat and "per text" not in chat
