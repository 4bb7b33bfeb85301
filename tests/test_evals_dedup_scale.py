"""evals.dedup_scale: the generated corpus, the pair scores, and one tiny run end to end."""

import json

import numpy as np

from evals.dedup_scale import Corpus, main, pair_scores, predicted


def test_corpus_is_deterministic_and_records_redraw_alone(tmp_path):
    a, b = Corpus(0), Corpus(0)
    roots = a.write(tmp_path / "c.jsonl", 300)
    rows = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows[250:]] == [b.record(i)[0] for i in range(250, 300)]
    assert (roots < np.arange(300)).mean() > 0.1  # planted copies point back
    originals = [r["text"] for i, r in enumerate(rows) if roots[i] == i]
    assert len(originals) > 200 and all(30 <= len(t.split()) <= 140 for t in originals)


def test_pair_scores_and_report_parsing(tmp_path):
    truth = np.array([0, 0, 0, 3])
    assert pair_scores(truth, np.array([0, 0, 2, 3])) == {
        "precision": 1.0, "recall": 0.3333, "f1": 0.5}
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps({"duplicates": [{"id": "2", "duplicate_of": "0"}]}, indent=2))
    assert predicted(rep, 4).tolist() == [0, 1, 0, 3]


def test_tiny_run_is_identical_both_ways(tmp_path):
    report = main(["--sizes", "1500", "--memory", "2M", "--out", str(tmp_path)])
    row = report["sizes"][0]
    assert row["identical"] and row["runs"]["out-of-core"]["f1"] > 0.8
    assert (tmp_path / "dedup_scale.md").exists()
