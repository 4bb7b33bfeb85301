"""The named check behind the time-per-document figures: ``python -m evals.dedup --scaling N``."""

import json

from evals.dedup import main


def test_scaling_writes_every_round_per_size_and_threshold(tmp_path):
    res = main(["--quick", "--scaling", "2", "--out", str(tmp_path)])
    rows = res["rows"]
    assert sorted((r["mode"], r["threshold"], r["docs"]) for r in rows) == [
        (m, t, n) for m in ("fresh", "in_process") for t in (0.7, 0.8) for n in (1000, 2000)]
    for r in rows:
        assert len(r["rounds_us_per_doc"]) == 2
        assert r["best_us_per_doc"] == min(r["rounds_us_per_doc"]) > 0
        assert abs(r["best_user_us"] + r["best_system_us"] - r["best_us_per_doc"]) < 0.2
        if r["docs"] == 1000:
            assert r["best_vs_smallest"] == r["median_vs_smallest"] == 1.0
    saved = json.loads((tmp_path / "dedup_scaling.json").read_text())
    assert saved["command"] == "python -m evals.dedup --quick --scaling 2"
    table = (tmp_path / "dedup_scaling.md").read_text()
    assert "| own process | 0.8 | 2,000 |" in table and "| one process | 0.7 | 1,000 |" in table
