"""docs/benchmarks.md and the README's headline table are generated from evals/results."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from evals.benchmarks_page import RESULTS, render_page, stale, write
from evals.headline import render_headline

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300


def test_page_and_headline_are_up_to_date_with_committed_results():
    proc = subprocess.run([sys.executable, "-m", "evals.benchmarks_page", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_readme_holds_the_headline_block_with_a_command_per_row():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = render_headline(RESULTS)
    assert block in readme
    rows = [line for line in block.splitlines()[3:-1]]
    assert len(rows) >= 6
    assert all("`python -m evals." in row for row in rows), rows


def _fake_results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    results.mkdir()
    (results / "demo.md").write_text("# Demo benchmark\n\n## Table\n\n| a |\n|---|\n| 1 |\n")
    (results / "demo.json").write_text(json.dumps(
        {"command": "python -m evals.demo", "machine": {"cpu": "X", "cores": 2},
         "git_commit": "0123456789abcdef", "quick": True}))
    return results


def test_page_renders_tables_command_machine_and_commit(tmp_path):
    page = render_page(_fake_results(tmp_path))
    assert "## Demo benchmark" in page and "### Table" in page and "| 1 |" in page
    assert "Command: `python -m evals.demo`" in page and "cpu X, cores 2" in page
    assert "commit `0123456789`" in page and "quick mode" in page


def test_stale_page_and_headline_are_detected_and_rewritten(tmp_path):
    results = _fake_results(tmp_path)
    page, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    readme.write_text("intro\n<!-- headline -->\nold figures\n<!-- /headline -->\nend\n")
    assert set(stale(results, page, readme)) == {page, readme}
    assert set(write(results, page, readme)) == {page, readme}
    assert stale(results, page, readme) == []
    assert "old figures" not in readme.read_text() and "no results from" in readme.read_text()
    (results / "demo.md").write_text("# Demo benchmark\n\n| a |\n|---|\n| 2 |\n")
    assert stale(results, page, readme) == [page]


def test_headline_reads_the_committed_figures(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    data = json.loads((results / "chat_scaling.json").read_text())
    data["scaling"][0]["turn_median_ms"] = 12345.0
    (results / "chat_scaling.json").write_text(json.dumps(data))
    assert "`ChatMemory` 12,345 ms" in render_headline(results)
    assert "12,345 ms" not in render_headline(RESULTS)
