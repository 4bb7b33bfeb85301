"""MinHash options (one validated definition), template stripping, large-cluster warnings."""

import json
import random
from pathlib import Path

import numpy as np
import pytest

import ctxkit
from ctxkit.deduplication.boilerplate import strip_boilerplate
from ctxkit.deduplication.minhash import minhash_dedup
from ctxkit.deduplication.options import DEFAULT_THRESHOLD, MinHashOptions
from ctxkit.deduplication.result import cluster_warnings
from ctxkit.errors import OptionError
from evals._common import data_dir

TOOLFORMER = (data_dir() or Path("/nonexistent")) / "gpteacher/toolformer-dedupe-only-dataset.json"


def _tool_records(n: int, seed: int = 0) -> list[str]:
    """Records of two tools, each with its own multi-line description, asking varied things."""
    rng = random.Random(seed)
    tools = {
        "weather": "Useful for when you want to get weather information from the OpenMeteo "
                   "API. The input should be a question in natural language.",
        "wikipedia": "A wrapper around Wikipedia. Useful for when you need to display general "
                     "information about people, places, companies, historical events.",
    }
    vocab = [f"{a}{b}" for a in "bcdfghklmnprstvz" for b in ("ash", "ine", "oro", "ult", "em")]
    out = []
    for i in range(n):
        name = "weather" if i % 3 else "wikipedia"
        ask = " ".join(rng.sample(vocab, 9))
        out.append(f"toolformer: enabled\ntoolformer access: {name}\n{tools[name]}\n"
                   f"{name}(query)\n{ask}\n\nHere it is: {name}('{ask[:20]}')")
    return out


def test_defaults_and_validation():
    opts = MinHashOptions()
    assert opts.threshold == DEFAULT_THRESHOLD == 0.7 and opts.banding() == (32, 4)
    assert MinHashOptions.build(opts, threshold=None, seed=3).seed == 3
    bad = [
        ({"threshold": 0}, "threshold"), ({"threshold": 1.5}, "threshold"),
        ({"threshold": True}, "threshold"), ({"num_perm": 0}, "num_perm"),
        ({"ngram": 2.5}, "ngram"), ({"unit": "line"}, "unit"), ({"verify": "maybe"}, "verify"),
        ({"bands": 4}, "both bands and rows"), ({"bands": 64, "rows": 4}, "exceeds num_perm"),
        ({"max_bucket": 1}, "max_bucket"), ({"boilerplate": 0}, "boilerplate"),
        ({"scheme": "legacy"}, "scheme"), ({"min_recall": 1.0}, "min_recall"),
    ]
    for kwargs, match in bad:
        with pytest.raises(ValueError, match=match):
            MinHashOptions(**kwargs)
    with pytest.raises(TypeError, match="unknown MinHash option"):
        MinHashOptions.build(num_perms=64)
    # every entry point takes the same options, by keyword or as one object
    texts = _tool_records(30)
    a = minhash_dedup(texts, options=MinHashOptions(threshold=0.6, seed=5))
    b = ctxkit.dedup(texts, method="minhash", threshold=0.6, seed=5)
    assert a.duplicate_of.tolist() == b.duplicate_of.tolist()
    assert ctxkit.MinHashOptions is MinHashOptions


def test_strip_boilerplate_keeps_what_varies_and_loses_no_record():
    texts = _tool_records(40) + ["", "only one line"]
    out = strip_boilerplate(texts, min_share=0.1)
    assert out.lines[0] == "toolformer: enabled" and out.counts[0] == 40
    assert len(out.lines) == 7  # enabled + (access, description, call) for each of 2 tools
    assert all("toolformer" not in t for t in out.texts[:40])
    assert out.texts[-2:] == ["", "only one line"] and out.stripped.sum() == 40
    # a record made only of template lines keeps its whole text
    alone = strip_boilerplate(["a\nb", "a\nb", "a\nb", "a\nb", "a\nb", "a\nc"], min_share=0.5)
    assert alone.texts[0] == "a\nb" and alone.whole[:5].all() and alone.texts[5] == "c"
    # below min_count nothing is boilerplate, however large the share
    assert strip_boilerplate(["x\ny", "x\nz"], min_share=0.5).lines == []
    with pytest.raises(ValueError, match="min_share"):
        strip_boilerplate(texts, min_share=0)


def test_template_dedup_warns_and_boilerplate_option_fixes_it():
    texts = _tool_records(200)
    texts += [texts[7], texts[8].replace("Here it is", "Here it is!")]  # two true repeats
    whole = minhash_dedup(texts, threshold=0.5)
    assert whole.n_removed > 150 and whole.warnings and "template" in whole.warnings[0]
    varying = minhash_dedup(texts, threshold=0.5, boilerplate=0.01)
    assert varying.removed.tolist() == [200, 201] and varying.warnings == []
    assert varying.duplicate_of[200] == 7 and varying.duplicate_of[201] == 8
    assert varying.info["boilerplate"]["lines"] == 7
    staged = ctxkit.dedup(texts, method=["exact", "minhash"], threshold=0.5)
    assert staged.warnings and staged.n_removed == whole.n_removed


def test_cluster_warnings_threshold():
    assert cluster_warnings([[0, 1, 2]], 10) == []  # small inputs never warn
    assert cluster_warnings([list(range(19))], 40) == []
    assert len(cluster_warnings([list(range(20))], 40)) == 1
    assert cluster_warnings([list(range(25))], 1000) == []  # 2.5% is no swallow


@pytest.mark.skipif(not TOOLFORMER.exists(), reason="shared GPTeacher data not present")
def test_real_toolformer_records_stay_linear_and_match_exhaustive_pairs():
    """The real templated set: candidates grow linearly (a star per large bucket), and the
    clusters equal those of verifying every pair of every bucket (max_bucket unbounded)."""
    rows = json.loads(TOOLFORMER.read_text())[:1500]
    texts = ["\n".join(str(r.get(k) or "") for k in ("instruction", "input", "response"))
             for r in rows]
    small = minhash_dedup(texts[:750], threshold=0.8)
    res = minhash_dedup(texts, threshold=0.8)
    assert res.info["candidates"] < 2.6 * small.info["candidates"]
    full = minhash_dedup(texts, threshold=0.8, max_bucket=10**6)
    assert full.info["candidates"] > 2 * res.info["candidates"]
    # nothing is removed that exhaustive verification keeps; recall of removals >= 98%
    assert set(res.removed.tolist()) <= set(full.removed.tolist())
    assert res.n_removed >= 0.98 * full.n_removed
    assert np.all(res.pair_scores >= 0.8)


def test_dedup_routes_each_option_set_to_its_method():
    from ctxkit.deduplication.options import MinHashOptions, SemanticOptions

    texts = ["the cat sat on the mat today", "the cat sat on the mat yesterday", "a dog barked"]

    class Encoder:  # no model: texts 0 and 1 embed alike, 2 apart
        def encode(self, batch):
            return np.array([[1.0, 0.0] if "cat" in t else [0.0, 1.0] for t in batch])

    both = ctxkit.dedup(texts, method=["minhash", "semantic"], encoder=Encoder(),
                        options=[MinHashOptions(threshold=0.99), SemanticOptions(threshold=0.99)])
    assert both.keep.tolist() == [0, 2]
    assert both.method[1] == "semantic"  # MinHash at 0.99 left the pair to the semantic stage
    alone = ctxkit.dedup(texts, method="minhash", options=MinHashOptions(threshold=0.5))
    assert alone.keep.tolist() == [0, 2] and alone.method[1] == "minhash"
    with pytest.raises(OptionError, match="not the option set of any selected method"):
        ctxkit.dedup(texts, method="exact", options=SemanticOptions())
