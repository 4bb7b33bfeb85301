import json

import numpy as np
import pytest

from ctxkit.evaluate import evaluate
from ctxkit.tokenize import get_tokenizer


def make_texts(n=60, seed=0):
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "token", "window", "pack", "context"]
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 120)))) for _ in range(n)]


def test_lengths_and_utilization_figures_are_consistent():
    texts = make_texts()
    rep = evaluate(texts, capacity=64, sections=("lengths", "utilization"), seed=1)
    tok = get_tokenizer("cl100k_base")
    lengths = np.array([tok.count(t) for t in texts])
    sec = rep.sections["lengths"]
    assert sec["tokens"] == lengths.sum()
    assert sec["over_window"] == (lengths > 64).sum()
    assert sec["tokens_lost_to_truncation"] == np.clip(lengths - 64, 0, None).sum()
    util = rep.sections["utilization"]
    real = np.minimum(lengths, 64).sum()
    assert util["real_tokens"] == real
    assert util["lower_bound"] == -(-real // 64)
    for name, m in util["methods"].items():
        if name != "length-grouped":
            assert m["windows"] >= util["lower_bound"]
            assert m["utilization"] == pytest.approx(real / (m["windows"] * 64))
    assert util["methods"]["naive padding"]["windows"] == len(texts)
    assert util["methods"]["bfd"]["windows"] <= util["methods"]["greedy"]["windows"]


def test_report_renders_json_markdown_and_plots(tmp_path):
    rep = evaluate(make_texts(20), capacity=128, sections=("lengths", "utilization"))
    data = json.loads(rep.to_json())
    assert set(data["sections"]) == {"lengths", "utilization"}
    plots = rep.plot(tmp_path)
    assert sorted(p.name for p in plots) == ["lengths.png", "utilization.png"]
    assert all(p.stat().st_size > 1000 for p in plots)
    md = rep.to_markdown([str(p) for p in plots])
    assert "## Utilization" in md and "*How it was computed:*" in md
    assert "![utilization](utilization.png)" in md


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one text"):
        evaluate([])
    with pytest.raises(ValueError, match="unknown section"):
        evaluate(["x"], sections=("nope",))
    with pytest.raises(ValueError, match="capacity"):
        evaluate(["x"], capacity=0)
