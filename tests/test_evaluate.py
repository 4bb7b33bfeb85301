import json

import numpy as np
import pytest

from ctxkit.evaluation.harness import evaluate
from ctxkit.io.tokenizers import get_tokenizer


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
        if name != "length-grouped batches":
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


def test_redundancy_and_density_use_content_not_boilerplate():
    facts = [f"fact number {i}: the {w} costs {i * 7} coins" for i, w in
             enumerate(["apple", "pear", "plum", "fig", "kiwi", "lime"])]
    content = facts + [facts[0], facts[1].upper()]  # two duplicates
    template = "Below is an instruction that describes a task. " * 5
    texts = [template + c for c in content]
    rep = evaluate(texts, content=content, capacity=256,
                   sections=("redundancy", "density"), compress_sample=0)
    red = rep.sections["redundancy"]["methods"]
    assert red["exact"]["removed"] == 2  # case folding catches the upper-cased copy
    assert red["exact + minhash"]["removed"] == 2
    medians = rep.sections["density"]["medians"]
    assert medians["all texts"]["texts"] == 8 and medians["after dedup"]["texts"] == 6
    # on the templated texts themselves everything would look alike
    # (at Jaccard 0.5: this short repeated template is half of each text's 5-gram set)
    boiler = evaluate(texts, capacity=256, sections=("redundancy",), dedup_threshold=0.5)
    assert boiler.sections["redundancy"]["methods"]["exact + minhash"]["removed"] > 2
    with pytest.raises(ValueError, match="one entry per text"):
        evaluate(texts, content=content[:3])


def test_cli_eval_writes_report(tmp_path):
    from ctxkit.cli import main

    src = tmp_path / "data.jsonl"
    rows = [{"instruction": f"Explain item {i}", "input": "", "output": f"It is item {i}. " * 9}
            for i in range(30)]
    rows.append({"instruction": "no output field"})
    src.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "report"
    assert main([str(src), "eval"][::-1] + ["--template", "alpaca", "-o", str(out)]) == 2
    code = main(["eval", str(src), "--template", "alpaca", "--capacity", "512", "-o", str(out),
                 "--skip-bad", "--embedding", "--embed-sample", "8"])
    assert code == 0
    data = json.loads((out / "report.json").read_text())
    assert set(data["sections"]) == {"lengths", "utilization", "redundancy", "density",
                                     "embedding"}
    assert data["dataset"]["skipped_records"][0]["line"] == 31
    assert data["sections"]["embedding"]["min_cosine"] > 0.9999
    md = (out / "report.md").read_text()
    for name in ("lengths", "utilization", "redundancy", "density", "embedding"):
        assert (out / f"{name}.png").exists() and f"![{name}]({name}.png)" in md


def test_eval_output_that_names_a_file_is_refused(tmp_path, capsys):
    # `-o report.md` made a folder called report.md
    from ctxkit.cli import main

    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "a short record"}\n{"text": "another record"}\n', encoding="utf-8")
    assert main(["eval", str(src), "-o", str(tmp_path / "report.md")]) == 2
    assert "--output names the report folder" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "report.md").exists()
