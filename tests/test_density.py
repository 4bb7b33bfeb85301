import math
import os
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.compression.density import DensityResult, density, near_duplicates, text_density
from ctxkit.compression.scoring.idf import IdfScorer
from ctxkit.errors import InputError
from ctxkit.io.tokenizers import get_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TOK = get_tokenizer("cl100k_base")


def test_single_text_metrics_match_definitions():
    text = "alpha beta gamma alpha beta gamma delta"
    scorer = IdfScorer(table={"alpha": 2.0, "beta": 3.0, "gamma": 4.0, "delta": 5.0})
    rep = density(text, scorer=scorer)
    assert isinstance(rep, DensityResult) and len(rep.texts) == 1
    t = rep.texts[0]
    ids = TOK.encode(text)
    assert t.tokens == len(ids)
    assert t.distinct_token_ratio == pytest.approx(len(set(ids)) / len(ids))
    grams = [tuple(ids[i:i + 3]) for i in range(len(ids) - 2)]
    assert t.distinct_ngram_ratio == pytest.approx(len(set(grams)) / len(grams))
    assert t.compression_ratio == pytest.approx(len(zlib.compress(text.encode(), 9))
                                                / len(text.encode()))
    counts = np.unique(ids, return_counts=True)[1]
    p = counts / counts.sum()
    assert t.entropy == pytest.approx(-(p * np.log2(p)).sum())
    assert t.self_information == pytest.approx(((2 + 3 + 4) * 2 + 5) / len(ids))
    assert t.score == pytest.approx(t.self_information * t.distinct_ngram_ratio)


def test_repetition_lowers_density():
    fresh = "Quantum tunnelling lets electrons cross barriers classical physics forbids."
    rep = density([fresh, " ".join([fresh] * 4)])
    a, b = rep.texts
    assert b.distinct_ngram_ratio < a.distinct_ngram_ratio
    assert b.compression_ratio < a.compression_ratio
    assert b.score < a.score


def test_corpus_redundancy_and_clusters():
    texts = ["the quick brown fox jumps over the lazy dog near the river bank",
             "The quick brown fox jumps over the lazy dog near the river bank!",
             "completely different words about tax law and accounting rules here",
             "the quick brown fox jumps over the lazy dog near the river bank",
             ""]
    rep = density(texts, scorer=None)
    assert rep.duplicate_of == [-1, 0, -1, 0, -1]
    assert rep.near_duplicate_share == pytest.approx(2 / 5)
    assert rep.dedup_saved_tokens == rep.texts[1].tokens + rep.texts[3].tokens
    assert rep.clusters[0]["keep"] == 0 and rep.clusters[0]["duplicates"] == [1, 3]
    assert rep.texts[4].tokens == 0 and rep.texts[4].score is None
    d = rep.to_dict()
    assert d["n_texts"] == 5 and d["texts"][1]["duplicate_of"] == 0
    assert set(d["summary"]["tokens"]) == {"mean", "p10", "p50", "p90"}


def test_near_duplicates_minhash_threshold():
    base = " ".join(f"w{i}" for i in range(40))
    edited = base.replace("w20", "changed")  # Jaccard of 3-shingles ~ 0.86
    other = " ".join(f"v{i}" for i in range(40))
    assert near_duplicates([base, edited, other], threshold=0.7) == [-1, 0, -1]
    assert near_duplicates([base, edited, other], threshold=1.0) == [-1, -1, -1]
    with pytest.raises(ValueError, match="threshold"):
        near_duplicates([base], threshold=0)


def test_semantic_novelty():
    rep = density(["A cat sat on the mat.", "A kitten sat on the rug.",
                   "Interest rates rose sharply."], scorer=None, semantic=True)
    assert rep.novelty[2] > rep.novelty[0]
    assert all(0 <= v <= 1 for v in rep.novelty)


def test_bad_input_and_edge_cases():
    with pytest.raises(InputError, match="text 1 of text_or_texts is int"):
        density(["ok", 3])
    with pytest.raises(ValueError, match="n must be"):
        density("x", n=0)
    assert density([]).texts == []
    rep = density("\ufffd\x00 bytes: caf\u00e9 \udcff".encode("utf-8", "surrogatepass")
                  .decode("utf-8", "replace"))
    assert rep.texts[0].tokens > 0
    huge = "word " * 50_000
    t = density(huge, scorer=None).texts[0]
    assert t.tokens == TOK.count(huge) and t.distinct_ngram_ratio < 0.01


@given(st.text(max_size=300))
@settings(max_examples=50, deadline=None)
def test_metrics_in_range(text):
    t = text_density(text, TOK.encode(text), None)
    assert 0 <= t.distinct_token_ratio <= 1 and 0 <= t.distinct_ngram_ratio <= 1
    assert t.entropy >= 0 and t.entropy <= math.log2(max(t.tokens, 1)) + 1e-9


def test_novelty_in_blocks_equals_the_full_matrix(monkeypatch):
    # More texts than one block of the similarity matrix: the blocked maximum must equal
    # the maximum over the full n x n matrix with the diagonal excluded.
    import ctxkit.compression.scoring.lexical
    from ctxkit.compression.density import _novelty

    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(2100, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs[5] = vecs[2100 - 3]  # a duplicate across blocks: novelty 0 for both
    monkeypatch.setattr(ctxkit.compression.scoring.lexical, "embed",
                        lambda texts: vecs[: len(texts)])
    got = np.array(_novelty([str(i) for i in range(len(vecs))]))
    sims = vecs @ vecs.T
    np.fill_diagonal(sims, -1.0)
    want = np.clip(1.0 - sims.max(axis=1), 0.0, 1.0)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert got[5] == pytest.approx(0.0, abs=1e-6) and got[2097] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("kw", [{"threshold": 0}, {"threshold": 1.5}, {"n": 0},
                                {"top_clusters": -1}, {"semantic": "yes"}, {"tokenizer": 3}])
def test_bad_density_options_are_option_errors(kw):
    from ctxkit.compression.options import DensityOptions
    from ctxkit.errors import OptionError

    with pytest.raises(OptionError, match=next(iter(kw))):
        density(["a b c", "d e f"], **kw)
    assert density(["a b c"], options=DensityOptions(n=2), scorer=None).texts


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a", "b", " ", ".", "!", "cat ", "sat ", "Mat "]),
                         max_size=12).map("".join), max_size=8))
def test_near_duplicates_equal_the_dedup_pipeline(texts):
    """The exact finder of one call gives the MinHash pipeline's answer on small inputs:
    near-duplicates, exact copies up to case and punctuation, texts that normalize to
    nothing."""
    from ctxkit.deduplication.near import _by_minhash, near_duplicates

    assert near_duplicates(texts) == _by_minhash(list(texts), 0.8)
    assert near_duplicates(texts, 1.0) == _by_minhash(list(texts), 1.0)


_PIECES = st.sampled_from(["the", "The", "cat", "sat.", "sat", "Cat!", "on", "mat", "  ", "\n",
                           "?", "ünï", "42"])


def _reference_pairs(texts, threshold):
    """Every pair's Jaccard over Python sets of normalized word 3-grams (a short text is one
    shingle): the brute-force reference of similar_pairs."""
    from ctxkit.deduplication.normalize import Normalization, normalize_texts

    sets = []
    for text in normalize_texts(texts, Normalization(punctuation=True)):
        words = text.split()
        sets.append({tuple(words[k:k + 3]) for k in range(max(1, len(words) - 2))}
                    if words else set())
    return [(i, j) for i in range(len(sets)) for j in range(i + 1, len(sets))
            if sets[i] and sets[j] and len(sets[i] & sets[j]) / len(sets[i] | sets[j])
            >= threshold]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_PIECES, max_size=8).map(" ".join), max_size=6),
       st.sampled_from([0.3, 0.5, 0.8, 1.0]))
def test_similar_pairs_are_every_pair_at_the_threshold(texts, threshold):
    from ctxkit.deduplication.near import shingle_sets, similar_pairs

    i, j, _ = similar_pairs(shingle_sets(texts), threshold)
    assert list(zip(i.tolist(), j.tolist())) == _reference_pairs(texts, threshold)


def test_many_shared_shingles_go_to_minhash(monkeypatch):
    import ctxkit.deduplication.near as near

    texts = [f"the same template line for every record {k}" for k in range(30)]
    exact = near.near_duplicates(texts, 0.6)
    monkeypatch.setattr(near, "EXACT_PAIR_WORK", 10)
    assert near.near_duplicates(texts, 0.6) == exact == near._by_minhash(texts, 0.6)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_PIECES, max_size=8).map(" ".join), max_size=7),
       st.sampled_from([0.3, 0.5, 0.8, 1.0]))
def test_small_inputs_path_equals_the_sparse_product(texts, threshold):
    import ctxkit.deduplication.near as near

    small = near.near_duplicates(texts, threshold)
    old = near.SMALL_TEXTS
    near.SMALL_TEXTS = -1  # every input through shingle hashes and the sparse product
    try:
        assert near.near_duplicates(texts, threshold) == small
    finally:
        near.SMALL_TEXTS = old


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.lists(_PIECES, max_size=8).map(" ".join),
                          st.sampled_from(["user", "assistant"])), max_size=12),
       st.lists(st.integers(1, 4), max_size=6), st.sampled_from([0.3, 0.5, 0.8]))
def test_a_growing_history_finds_the_repeats_a_fresh_one_finds(turns, steps, threshold):
    # ChatMemory asks about a history that grows at its end: the repeats found turn by turn
    # (GrowingPairs) are the ones a fresh store finds on the whole history
    from ctxkit.chat.features import ChatFeatures

    texts, roles = [t for t, _ in turns], [r for _, r in turns]
    growing = ChatFeatures("cl100k_base", "idf")
    n = 0
    for step in steps + [len(turns)]:
        n = min(len(turns), n + step)
        fresh = ChatFeatures("cl100k_base", "idf")
        assert growing.near_duplicates(texts[:n], roles[:n], threshold).tolist() == \
            fresh.near_duplicates(texts[:n], roles[:n], threshold).tolist()
    edited = texts[:n][::-1]  # not an extension: found afresh
    assert growing.near_duplicates(edited, roles[:n], threshold).tolist() == \
        ChatFeatures("cl100k_base", "idf").near_duplicates(edited, roles[:n], threshold).tolist()


def test_the_density_command_prints_units(tmp_path, capsys):
    from ctxkit.cli import main

    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "The cat sat on the mat today."}\n'
                   '{"text": "Quarterly revenue rose 12% to $4.1M in Q3."}\n', encoding="utf-8")
    assert main(["density", str(src), "-o", str(tmp_path / "d.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "score (mean, bits per token)" in out and "entropy (mean, bits per token)" in out
