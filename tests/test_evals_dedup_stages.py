"""evals.dedup_stages: every stage of minhash_dedup timed, on replicas of equal work."""

import json

import pytest

from evals.dedup_stages import STAGES, corpora, main


def test_stage_profile_times_every_stage_of_every_size(tmp_path):
    res = main(["--quick", "--base", "300", "--copies", "1", "2", "--rounds", "2",
                "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "dedup_stages.json").read_text())
    assert saved["command"] == ("python -m evals.dedup_stages --quick --base 300 --copies 1 2"
                                " --rounds 2")
    assert list(saved["sizes"]) == ["300", "600"] == list(res["sizes"])
    for rounds in saved["sizes"].values():
        assert len(rounds) == 2
        for times in rounds:
            assert list(times) == list(STAGES)
            assert all(user >= 0 and system >= 0 for user, system in times.values())
        # the whole run takes measurable CPU (a profile of nothing would read all zeros)
        assert sum(t[0] for r in rounds for t in r.values()) > 0
    text = (tmp_path / "dedup_stages.md").read_text()
    assert "| signatures |" in text and "| all stages |" in text and "| 600 |" in text


def test_every_size_is_copies_of_one_resample():
    texts = corpora(200, [1, 3], seed=0)
    assert {n: len(t) for n, t in texts.items()} == {200: 200, 600: 600}
    # each copy maps characters one to one, so the larger corpus holds every text three times
    # over, by length
    assert sorted(map(len, texts[600])) == sorted(list(map(len, texts[200])) * 3)


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        main(["--rounds", "0"])
