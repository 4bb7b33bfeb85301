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
token_lists = seqs
eos_id = tok.eos_id
masks = [[0] * min(8, len(x)) + [1] * (len(x) - min(8, len(x))) for x in seqs]
ids = [r["id"] for r in records]
text_or_chunks = texts[:20]
# small random models saved here, for the packed-classification section
import torch as _torch
from transformers import AutoTokenizer as _Tok, BertConfig as _Cfg
from transformers import BertForSequenceClassification as _Clf
from ctxkit.io.tokenizers import minilm_path as _minilm
_torch.manual_seed(0)
for _dir, _labels in (("tiny-classifier", 2), ("tiny-reranker", 1)):
    _Clf(_Cfg(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
              num_labels=_labels)).save_pretrained(_dir)
    _Tok.from_pretrained(str(_minilm())).save_pretrained(_dir)
classifier_dir, reranker_dir = "tiny-classifier", "tiny-reranker"
pairs = [("what is packing?", t) for t in texts[:8]]
"""


def test_readme_python_runs(tmp_path):
    """The tour runs exactly as written; every other python block then runs in its namespace,
    with the placeholders above for the names it leaves to the reader."""
    blocks = _readme_blocks()
    tour = [code for heading, code in blocks if heading == "A tour"]
    assert len(tour) == 1
    rest = [f"# --- {heading}\n{code}" for heading, code in blocks if heading != "A tour"]
    assert {h for h, _ in blocks} >= {"Packing without cross-contamination", "Dedup",
                                      "Compression to a token budget", "Packed embeddings"}
    script = tour[0] + "\nprint('tour ok')\n" + _README_PLACEHOLDERS + "\n".join(rest)
    script += "\nprint('sections ok')\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["tour", "ok", "sections", "ok"]
    assert (tmp_path / "report").is_dir()  # report.plot("report/") wrote its plots
