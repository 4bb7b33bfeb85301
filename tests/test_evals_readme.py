"""The README's benchmark section is generated from evals/results, never typed by hand."""

import json
import subprocess
import sys
from pathlib import Path

from evals.readme import regenerate

ROOT = Path(__file__).resolve().parents[1]


def test_readme_benchmark_section_is_in_sync():
    proc = subprocess.run([sys.executable, "-m", "evals.readme", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_blocks_render_results_command_and_machine(tmp_path):
    (tmp_path / "demo.md").write_text("# Demo benchmark\n\n## Table\n\n| a |\n|---|\n| 1 |\n")
    (tmp_path / "demo.json").write_text(json.dumps(
        {"command": "python -m evals.demo", "machine": {"cpu": "X", "cores": 2}, "quick": True}))
    text = "intro\n<!-- bench:demo -->\nold numbers\n<!-- /bench:demo -->\n" \
           "<!-- bench:missing -->\n<!-- /bench:missing -->\n"
    out = regenerate(text, tmp_path)
    assert "old numbers" not in out and "| 1 |" in out
    assert "Command: `python -m evals.demo`" in out and "cpu X, cores 2" in out
    assert "#### Table" in out and "# Demo benchmark" not in out
    assert "quick mode" in out
    assert "No results yet: run `python -m evals.missing`" in out
