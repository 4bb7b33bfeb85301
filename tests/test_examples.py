"""The scripts in examples/ run as a user would run them, from another directory."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip()


def _readme_blocks() -> list[tuple[str, str]]:
    """``(section heading, code)`` of every python block in the README."""
    blocks, heading = [], ""
    for part in re.split(r"(^## [^\n]*$|^```python\n.*?^```$)",
                         (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.M | re.S):
        if part.startswith("## "):
            heading = part[3:].strip()
        elif part.startswith("```python"):
            blocks.append((heading, part.split("\n", 1)[1].rsplit("```", 1)[0]))
    return blocks


# Names the README's per-section snippets use for the user's own data, bound to the tour's.
_README_PLACEHOLDERS = """
lengths = [len(x) for x in seqs]
"""


def test_readme_python_runs(tmp_path):
    """The tour runs exactly as written; every other python block then runs in its namespace,
    with the placeholders above for the names it leaves to the reader."""
    blocks = _readme_blocks()
    tour = [code for heading, code in blocks if heading == "Quick start"]
    assert len(tour) == 1
    # the training recipe needs a model: tests/test_peer_training.py runs it on a tiny Llama
    rest = [f"# --- {heading}\n{code}" for heading, code in blocks
            if heading not in ("Quick start", "Train with TRL or transformers")]
    assert {h for h, _ in blocks} >= {"Compress a chat for an app",
                                      "Compress retrieved passages for RAG", "Dedup a dataset",
                                      "Pack for SFT", "Embed packed", "Measure a dataset"}
    script = tour[0] + "\nprint('tour ok')\n" + _README_PLACEHOLDERS + "\n".join(rest)
    script += "\nprint('sections ok')\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["tour", "ok", "sections", "ok"]
    assert (tmp_path / "report").is_dir()  # report.plot("report/") wrote its plots
