"""The embedding scorer's cold call: the BM25 shortlist and the scorer's own vector cache."""

import zlib

import numpy as np
import pytest

import ctxkit.compression.scoring.embedding as es
from ctxkit.compression.scoring.cache import TextCache
from ctxkit.compression.scoring.embedding import EmbeddingScorer
from ctxkit.compression.scoring.registry import get_scorer
from ctxkit.compression.text.pipeline import compress
from ctxkit.errors import OptionError

CHUNKS = [f"Passage {i} tells of {w} and the harbour of town {i % 7}."
          for i, w in enumerate(["ships", "bread", "rain", "kings", "bees", "maps", "iron",
                                 "salt", "wine", "owls", "clocks", "silk"] * 3)]
QUERY = "Which passage tells of the bees in the harbour?"


@pytest.fixture
def encoder(monkeypatch):
    """A deterministic stand-in for MiniLM that records every text it is asked to embed."""
    seen: list[str] = []

    def fake(texts, dtype="fast"):
        seen.extend(texts)
        vecs = np.stack([np.random.default_rng(zlib.crc32(t.encode())).normal(size=384)
                         for t in texts])
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)

    monkeypatch.setattr(es, "embed", fake)
    get_scorer("embedding").clear_cache()
    yield seen
    get_scorer("embedding").clear_cache()


def test_second_call_embeds_nothing_new(encoder):
    first = compress(CHUNKS, 60, query=QUERY)
    assert encoder, "the first call embeds"
    before = len(encoder)
    second = compress(CHUNKS, 60, query=QUERY)  # the scorer "embedding" names, its cache
    assert len(encoder) == before and second.text == first.text
    compress(CHUNKS[:5] + ["A new passage about owls."], 20, query=QUERY)
    assert encoder[before:] == ["A new passage about owls."]


def test_cascade_equals_full_ranking_when_it_covers_every_unit(encoder):
    for chunks in (CHUNKS, [c.replace("Passage", "Note") for c in CHUNKS]):
        full = compress(chunks, 80, query=QUERY, scorer=EmbeddingScorer(candidates=0))
        covered = compress(chunks, 80, query=QUERY,
                           scorer=EmbeddingScorer(candidates=len(chunks)))
        assert covered.text == full.text
        assert [u.score for u in covered.units] == [u.score for u in full.units]


def test_cascade_embeds_only_the_shortlist(encoder):
    scorer = EmbeddingScorer(candidates=5)
    rel = scorer.relevance(CHUNKS, QUERY)
    assert len(set(encoder)) == 6  # five units and the query
    ranked = np.argsort(-rel, kind="stable")
    assert (rel[ranked[:5]] >= 0.5).all() and (np.delete(rel, ranked[:5]) == 0).all()
    assert "bees" in CHUNKS[int(ranked[0])]


def test_lru_evicts_least_recent():
    cache = TextCache(max_entries=2)
    calls = []

    def encode(texts):
        calls.append(list(texts))
        return np.zeros((len(texts), 4))

    cache.rows(["a", "b"], encode, dim=4)
    cache.rows(["a"], encode, dim=4)  # "b" is now the least recent
    cache.rows(["c"], encode, dim=4)
    cache.rows(["a", "b"], encode, dim=4)
    assert calls == [["a", "b"], ["c"], ["b"]] and len(cache) == 2
    assert TextCache(0).values(["a", "a"], lambda keys: [k * 2 for k in keys]) == ["aa", "aa"]
    with pytest.raises(OptionError, match="cache_size"):
        TextCache(-1)


def test_cached_dot_products_equal_the_rows_times_the_vector():
    rng = np.random.default_rng(0)
    table = {f"t{i}": rng.standard_normal(8).astype(np.float32) for i in range(3000)}
    cache = TextCache(max_entries=2500)

    def encode(texts):
        return np.stack([table[t] for t in texts])

    texts = [f"t{i}" for i in rng.permutation(3000)[:2200]] + ["t1", "t1"]
    v = rng.standard_normal(8)
    expect = encode(texts) @ v.astype(np.float32)
    assert np.allclose(cache.dots(texts, v, encode), expect, atol=1e-5)  # encoded first
    assert np.allclose(cache.dots(texts, v, encode), expect, atol=1e-5)  # read in place
    assert cache.dots([], v, encode).shape == TextCache().dots([], v, encode).shape == (0,)


def test_bad_candidates():
    with pytest.raises(OptionError, match="candidates"):
        EmbeddingScorer(candidates=-1)
    with pytest.raises(OptionError, match="dtype 'int8' is unknown"):
        EmbeddingScorer(dtype="int8")


def test_each_scorer_owns_its_cache(monkeypatch):
    asked: list[tuple[str, int]] = []

    def fake(texts, dtype="fast"):
        asked.append((dtype, len(texts)))
        return np.ones((len(texts), 384)) / np.sqrt(384)

    monkeypatch.setattr(es, "embed", fake)
    shared = get_scorer("embedding")
    shared.clear_cache()
    try:
        units = CHUNKS[:5]
        assert get_scorer("embedding") is shared
        shared.relevance(units, QUERY)
        get_scorer("embedding").relevance(units, QUERY)  # its cache answers
        exact = EmbeddingScorer(dtype="float32")
        exact.relevance(units, QUERY)  # fp32 vectors go to that scorer's own cache
        exact.relevance(units, QUERY)
        assert asked == [("fast", 6), ("float32", 6)]
        assert len(shared.cache) == len(exact.cache) == 6
        small = EmbeddingScorer(cache_size=2)
        small.relevance(units, QUERY)
        assert len(small.cache) == 2  # the size the user set, least recent first out
        assert get_scorer("embedding", cache_size=2) is not shared
    finally:
        shared.clear_cache()
