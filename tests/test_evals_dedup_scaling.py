"""The named check behind the time-per-document figures: ``python -m evals.dedup --scaling N``."""

import json
import random
import time

from evals.dedup import main
from evals.dedup_corpus import disjoint_replicas


def test_scaling_writes_every_round_per_corpus_size_and_threshold(tmp_path, monkeypatch):
    # the runs in processes of their own are checked apart (below): here every run stays in
    # this process, which keeps the whole schedule of two rounds quick
    monkeypatch.setattr("evals.dedup_scaling.MODES", ("in_process",))
    res = main(["--quick", "--scaling", "2", "--out", str(tmp_path)])
    rows = res["rows"]
    # the replicas go on past the resamples' sizes (to 32 copies in a full run, 4 here)
    sizes = {"mix": [1000, 2000], "replicas": [1000, 2000, 4000]}
    assert sorted((r["corpus"], r["mode"], r["threshold"], r["docs"]) for r in rows) == [
        (c, "in_process", t, n) for c in ("mix", "replicas")
        for t in (0.7, 0.8) for n in sizes[c]]
    for r in rows:
        larger = sizes[r["corpus"]][1:]
        # the smallest size runs before the first larger one and after each, in two rounds
        runs = 2 * (len(larger) + 1) if r["docs"] == 1000 else 2
        assert len(r["rounds_us_per_doc"]) == len(r["paired_ratios"]) == runs
        assert r["best_us_per_doc"] == min(r["rounds_us_per_doc"]) > 0
        assert abs(r["best_user_us"] + r["best_system_us"] - r["best_us_per_doc"]) < 0.2
        assert r["candidates_per_doc"] > 0
        if r["docs"] == 1000:
            assert r["best_vs_smallest"] == r["median_vs_smallest"] == 1.0
            assert r["paired_ratios"] == [1.0] * runs and r["median_paired_ratio"] == 1.0
            continue
        # each run over the mean of the smallest size's runs just before and after it; odd
        # rounds visit the larger sizes largest first
        small = next(s for s in rows if (s["corpus"], s["mode"], s["threshold"], s["docs"])
                     == (r["corpus"], r["mode"], r["threshold"], 1000))["rounds_us_per_doc"]
        beside = []
        for rnd in range(2):
            k = (larger if rnd == 0 else larger[::-1]).index(r["docs"])
            first = rnd * (len(larger) + 1) + k
            beside.append((small[first] + small[first + 1]) / 2)
        for ratio, x, y in zip(r["paired_ratios"], r["rounds_us_per_doc"], beside):
            assert abs(ratio * y - x) < 0.1 + 0.01 * x  # the runs are rounded to 0.1 us
        assert min(r["paired_ratios"]) <= r["median_paired_ratio"] <= max(r["paired_ratios"])
    saved = json.loads((tmp_path / "dedup_scaling.json").read_text())
    assert saved["command"] == "python -m evals.dedup --quick --scaling 2"
    table = (tmp_path / "dedup_scaling.md").read_text()
    assert "| mix | one process | 0.8 | 2,000 |" in table
    assert "| replicas | one process | 0.7 | 1,000 |" in table
    assert "in 1, 2, 4 copies" in table
    # the summary: one line per corpus, run and threshold, a median ratio per size
    summary = table.split("Median x smallest by size:")[1].split("Every run:")[0]
    assert "| corpus | run | threshold | 1,000 | 2,000 | 4,000 |" in summary
    line = next(x for x in summary.splitlines() if x.startswith("| mix | one process | 0.7 |"))
    assert line.endswith("| - |")  # the mix has no 4,000
    rows = [x for x in summary.splitlines() if x.startswith(("| mix |", "| replicas |"))]
    assert len(rows) == 4  # 2 corpora x 2 thresholds
    # the smallest size is its own reference; a larger size may also read 1.00 by chance
    assert all(x.split("|")[4].strip() == "1.00" for x in rows)
    assert "Runs of one size spread by " in summary  # the noise the paired ratios divide out
    # with rensa installed (the bench extra) its growth on the same replicas is read beside
    if saved["reference"] is not None:
        assert [r["docs"] for r in saved["reference"]["rows"]] == [1000, 2000, 4000]
        assert "through rensa in one process" in table


def test_fresh_runs_time_each_size_in_a_process_of_its_own():
    """``fresh``: every run is ``python -m evals.dedup_oneshot`` on the pickled texts, which
    reports its own CPU time and LSH candidates per document."""
    from evals.dedup_scaling import bench_scaling

    rng = random.Random(3)
    words = [f"w{i}" for i in range(300)]
    texts = [" ".join(rng.choices(words, k=20)) for _ in range(400)]
    texts += [t + " again" for t in texts[:100]]
    res = bench_scaling({"mix": {250: texts[:250], 500: texts}}, [0.7], 1, ("fresh",))
    rows = {r["docs"]: r for r in res["rows"]}
    assert sorted(rows) == [250, 500] and {r["mode"] for r in rows.values()} == {"fresh"}
    assert len(rows[250]["rounds_us_per_doc"]) == 2 and len(rows[500]["rounds_us_per_doc"]) == 1
    assert rows[500]["candidates_per_doc"] > rows[250]["candidates_per_doc"] >= 0
    assert all(r["best_us_per_doc"] > 0 for r in rows.values())


def test_disjoint_replicas_hold_the_same_work_per_document():
    """Copies share no shingle: every candidate and every removal stays inside one copy,
    and k copies remove about k times what one does (LSH draws differ between copies)."""
    from ctxkit.deduplication.pipeline import dedup

    rng = random.Random(5)
    words = [w + str(i) for i in range(40) for w in ("tool", "call", "Paris", "today")]
    unit = [" ".join(rng.choices(words, k=12)) for _ in range(300)]
    unit += [t.replace(" ", "  ", 1) + " ok" for t in unit[:100]]  # near-duplicates
    texts = disjoint_replicas(unit, 3, random.Random(0))
    assert sorted(len(t) for t in texts) == sorted(len(t) for t in unit * 3)
    copy = [(ord(t[0]) - 0x4E00) // 36 for t in texts]
    assert sorted(copy) == [0] * 400 + [1] * 400 + [2] * 400
    one = dedup(disjoint_replicas(unit, 1, random.Random(0)), method="minhash", threshold=0.7)
    three = dedup(texts, method="minhash", threshold=0.7)
    assert all(copy[a] == copy[b] for a, b in three.pairs.tolist())
    assert all(copy[i] == copy[j] for i, j in enumerate(three.duplicate_of.tolist()) if j >= 0)
    assert 0.9 * 3 * one.n_removed <= three.n_removed <= 1.1 * 3 * one.n_removed
    assert 90 <= one.n_removed <= 100


def test_scaling_reference_sandwiches_a_baseline_on_the_same_replicas():
    """The baseline's growth on the replicas, read beside ctxkit's: the same sandwich (the
    smallest size before and after each larger one, every other round largest first)."""
    from evals.dedup_scaling import _markdown_reference, scaling_reference

    calls = []

    def method(texts, threshold):
        calls.append(len(texts))
        # CPU time the clock can see (a run that took none would divide by zero)
        end = time.process_time() + 2e-4 * len(texts)
        while time.process_time() < end:
            pass
        return 2 * len(texts)  # "candidates"

    replicas = {n: ["a b c d e f"] * n for n in (10, 20, 40)}
    ref = scaling_reference(replicas, 0.7, 2, method=method, name="fake")
    # a warm-up, then two rounds
    assert calls == [10] + [10, 20, 10, 40, 10] + [10, 40, 10, 20, 10]
    assert ref["method"] == "fake" and ref["rounds"] == 2
    rows = {r["docs"]: r for r in ref["rows"]}
    assert sorted(rows) == [10, 20, 40]
    assert len(rows[10]["rounds_us_per_doc"]) == 6 and rows[10]["median_paired_ratio"] == 1.0
    for n in (20, 40):
        r = rows[n]
        assert r["candidates_per_doc"] == 2.0
        assert len(r["rounds_us_per_doc"]) == len(r["paired_ratios"]) == 2
        assert min(r["paired_ratios"]) <= r["median_paired_ratio"] <= max(r["paired_ratios"])
        assert r["mode"] == "in_process" and r["corpus"] == "replicas"
    text = "\n".join(_markdown_reference(ref))
    assert "(1, 2, 4 copies) through fake in one process, at 0.7, 2 rounds" in text
    assert "| 40 | 2.0 |" in text
    assert _markdown_reference(None) == []
