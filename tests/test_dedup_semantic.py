"""Semantic dedup: tiled exact pairs, SemDeDup partition, encoder plug-in, the bundled model."""

import os

import numpy as np
import pytest

from ctxkit.deduplication.pipeline import dedup
from ctxkit.deduplication.semantic import embed, pairs_exact, pairs_kmeans, semantic_dedup


def clustered(n=600, dim=32, seed=0):
    """Unit vectors: groups of near-copies around random centers, plus loners."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(-(-n // 3), dim))
    emb = np.repeat(centers, 3, axis=0)[:n] + rng.normal(scale=0.12, size=(n, dim))
    return (emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float32)


def brute_pairs(emb, t):
    sims = emb @ emb.T
    i, j = np.nonzero(np.triu(sims >= t, k=1))
    return set(zip(i.tolist(), j.tolist()))


@pytest.mark.parametrize("block", [7, 64, 2048])
def test_tiled_pairs_equal_brute_force(block):
    emb = clustered(200)
    pairs, cos = pairs_exact(emb, 0.9, block=block)
    assert {tuple(p) for p in pairs.tolist()} == brute_pairs(emb, 0.9)
    assert np.allclose(cos, np.einsum("ij,ij->i", emb[pairs[:, 0]], emb[pairs[:, 1]]), atol=1e-5)


def test_kmeans_partition_is_a_subset_with_high_recall_and_deterministic():
    emb = clustered(900)
    exact = brute_pairs(emb, 0.9)
    pairs, _ = pairs_kmeans(emb, 0.9, seed=3)
    found = {tuple(p) for p in pairs.tolist()}
    assert found <= exact  # never a false pair: the partition only skips comparisons
    assert len(found) >= 0.9 * len(exact)
    again, _ = pairs_kmeans(emb, 0.9, seed=3)
    assert np.array_equal(pairs, again)
    res = semantic_dedup(["x"] * 900, embeddings=emb, partition="kmeans", seed=3)
    assert res.info["partition"] == "kmeans"


class CountingEncoder:
    """Any object with encode(texts) -> array plugs in (e.g. ctxkit.PackedEncoder)."""

    def __init__(self):
        self.calls = 0

    def encode(self, texts):
        self.calls += 1
        return np.array([[t.count("a"), t.count("b"), 1.0] for t in texts])


def test_custom_encoder_and_staged_semantic():
    enc = CountingEncoder()
    texts = ["aaab", "AAAB", "baaa", "bbbb", "abab"]
    res = dedup(texts, method=["exact", "semantic"], threshold=0.99, encoder=enc)
    assert enc.calls == 1  # the semantic stage embeds only the 4 survivors, in one call
    assert res.duplicate_of.tolist() == [-1, 0, 0, -1, -1]  # "baaa" embeds like "aaab"
    assert res.method == ["", "exact", "semantic", "", ""]
    with pytest.raises(ValueError, match="expected"):
        embed(["a", "b"], encoder=type("Bad", (), {"encode": lambda self, t: np.ones(3)})())
    with pytest.raises(ValueError, match="partition"):
        semantic_dedup(["a"], embeddings=np.ones((1, 2)), partition="lsh")
    assert semantic_dedup([], embeddings=np.zeros((0, 3))).n == 0


@pytest.fixture(scope="module")
def minilm():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ctxkit.deduplication.semantic import default_encoder

    return default_encoder()


def test_bundled_model_finds_paraphrases(minilm):
    texts = [
        "What is the capital of France?",
        "Can you tell me the capital of France?",
        "How do I sort a list in Python?",
        "what's France's capital city?",
        "",
    ]
    res = semantic_dedup(texts, threshold=0.88, encoder=minilm)
    assert res.duplicate_of.tolist() == [-1, 0, -1, 0, -1]
    assert (res.similarity[[1, 3]] >= 0.88).all()
    emb = embed(texts, minilm)
    assert emb.shape == (5, 384) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)


def test_one_embed_for_every_stage():
    """Semantic dedup and relevance scoring share one embed: same function, same empty shape."""
    from ctxkit.compression.scoring.lexical import embed as relevance_embed
    from ctxkit.embedding.vectors import embed as shared

    assert embed is shared and relevance_embed is shared
    assert embed([]).shape == (0, 384)
    v = embed(["Paris is the capital of France.", "Paris is the capital of France.", ""])
    assert v.shape == (3, 384) and abs(float(v[0] @ v[1]) - 1) < 1e-5
    with pytest.raises(TypeError, match="list of texts"):
        embed("one string")


def test_a_chained_member_is_reported_against_the_item_it_matched():
    """0~1 and 1~2 are above the threshold, 0~2 is not: 2 goes with 0's cluster, matched to 1."""
    angles = np.radians([0, 30, 60])
    emb = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    res = dedup(["a", "b", "c"], method="semantic", threshold=0.85, embeddings=emb)
    assert res.duplicate_of.tolist() == [-1, 0, 0]
    assert res.matched.tolist() == [-1, 0, 1]
    np.testing.assert_allclose(res.similarity[1:], [np.cos(np.radians(30))] * 2)
    rows = res.ledger(ids=["a", "b", "c"])
    assert rows[1]["matched"] == "b" and rows[1]["duplicate_of"] == "a"
    assert rows[1]["similarity"] >= 0.85
