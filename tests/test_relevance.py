import os

import numpy as np
import pytest

from ctxkit.compression.scoring.idf import IdfScorer
from ctxkit.compression.scoring.lexical import (
    Relevance,
    bm25,
    hybrid_relevance,
    lexical_relevance,
    spread_to_neighbors,
    terms,
)
from ctxkit.compression.text.pipeline import compress
from ctxkit.io.tokenizers import get_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TOK = get_tokenizer("cl100k_base")
SCORER = IdfScorer(table={w: 1.0 for w in "the a of in is was to and who".split()}, default=12.0)


def _unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def test_lexical_relevance_is_bm25_scaled_to_one():
    units = ["the cat sat on the mat", "a dog ran", "cat cat cat"]
    rel = lexical_relevance(units, "cat")
    raw = bm25(units, "cat")
    assert isinstance(rel, Relevance)
    assert rel.scores.max() == 1.0 and rel.scores[1] == 0.0
    assert rel.order.tolist() == np.argsort(-raw, kind="stable").tolist()
    # nothing shared with the query, or nothing at all: zeros, never NaN
    assert lexical_relevance(units, "zebra").scores.tolist() == [0.0, 0.0, 0.0]
    assert lexical_relevance([], "cat").scores.size == 0
    assert lexical_relevance(["", "!!"], "cat").scores.tolist() == [0.0, 0.0]


def test_bm25_matches_inflected_forms():
    units = ["He played three seasons for the Eagles.", "He was born in Texas.",
             "Over forty variants of the aircraft exist."]
    assert bm25(units, "Which team did he play for?").argmax() == 0
    assert bm25(units, "How many variants are there?").argmax() == 2
    assert bm25(units, "born in texas")[1] > 0 and bm25(units, "zebra").max() == 0
    # numbers and accents: unchanged by the stemmer, folded on both sides
    assert terms("In 1992 Kolozsvár won") == ["in", "1992", "kolozsvar", "won"]
    assert terms("") == [] and terms("!!") == []


def test_bm25_from_many_threads_matches_one_thread():
    from concurrent.futures import ThreadPoolExecutor

    units = [f"unit {i} plays running variants of talks {i % 7}" for i in range(200)]
    queries = ["played", "runs", "variant", "talking 3"] * 8
    want = [bm25(units, q) for q in queries]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda q: bm25(units, q), queries))
    for w, g in zip(want, got):
        np.testing.assert_array_equal(w, g)


def test_hybrid_uses_cached_embeddings_and_fuses_both_signals():
    units = ["alpha report 2021", "beta summary", "gamma notes", "delta memo"]
    query = "alpha report"
    q = _unit([1, 0, 0])
    # dense alone prefers unit 1; BM25 alone prefers unit 0
    emb = np.stack([_unit([0.6, 0.8, 0]), _unit([0.7, 0.7, 0]), _unit([0, 1, 0]),
                    _unit([0, 0, 1])])
    dense_only = hybrid_relevance(units, query, embeddings=emb, query_embedding=q,
                                  lexical_weight=0.0)
    assert dense_only.order[0] == 1
    fused = hybrid_relevance(units, query, embeddings=emb, query_embedding=q)
    assert fused.order[0] == 0  # the exact name match wins a near tie in cosine
    assert fused.scores.min() == 0.0 and fused.scores.max() == 1.0
    assert np.allclose(fused.dense, emb @ q) and fused.lexical[0] > 0
    with pytest.raises(ValueError, match="3 rows for 4 units"):
        hybrid_relevance(units, query, embeddings=emb[:3], query_embedding=q)
    with pytest.raises(ValueError, match="lexical_weight"):
        hybrid_relevance(units, query, embeddings=emb, query_embedding=q, lexical_weight=-1)
    assert hybrid_relevance([], query).scores.size == 0


def test_hybrid_single_unit_and_constant_signals():
    q = _unit([1, 0])
    one = hybrid_relevance(["only"], "x", embeddings=_unit([1, 0])[None], query_embedding=q)
    assert one.scores.tolist() == [1.0]
    same = hybrid_relevance(["a", "b"], "zzz", embeddings=np.stack([q, q]), query_embedding=q)
    assert same.scores.tolist() == [1.0, 1.0]  # no signal: all equal, never NaN


def test_neighbors_lend_relevance_to_adjacent_units():
    assert spread_to_neighbors(np.array([0.0, 1.0, 0.0, 0.0]), 0.5).tolist() == \
        [0.5, 1.0, 0.5, 0.0]
    assert spread_to_neighbors(np.array([2.0]), 0.5).tolist() == [2.0]
    units = ["When is the launch?", "It is on Friday.", "I like tea.", "Dogs bark."]
    q = _unit([1, 0, 0])
    emb = np.stack([_unit([1, 0.1, 0]), _unit([0.2, 1, 0]), _unit([0.1, 1, 0]),
                    _unit([0, 0, 1])])
    plain = hybrid_relevance(units, "launch", embeddings=emb, query_embedding=q)
    spread = hybrid_relevance(units, "launch", embeddings=emb, query_embedding=q, neighbors=0.5)
    assert plain.scores[1] < plain.scores[0] and spread.scores[1] > plain.scores[1]
    assert spread.order[:2].tolist() == [0, 1]


def test_hybrid_with_the_bundled_model_catches_a_paraphrase():
    units = ["The Eiffel Tower stands in Paris.", "Bananas are rich in potassium.",
             "The stock market fell on Monday."]
    rel = hybrid_relevance(units, "Which French city has the famous iron landmark?")
    assert rel.order[0] == 0 and rel.dense is not None


# --- coarse-to-fine compression ---------------------------------------------------------------

PASSAGES = [
    "Physics quiz\nWho got the answer right? Nobody did. The quiz ran late.",
    "Nobel Prize in Physics\nThe first Nobel Prize in Physics was awarded in 1901. Wilhelm "
    "Röntgen of Germany received it for discovering X-rays.",
    "Prize draw\nWho got the first prize in the raffle? A neighbour. Tickets cost a dollar.",
    "Literature\nThe first literature prize went to Sully Prudhomme of France in 1901.",
]


def test_coarse_to_fine_keeps_the_answer_in_its_passage():
    query = "Who got the first Nobel Prize in Physics?"
    budget = TOK.count(PASSAGES[1]) + 2
    out = compress(PASSAGES, budget, query=query, scorer=SCORER)
    assert out.granularity == "coarse-to-fine"
    assert "Röntgen" in out.text and out.compressed_tokens <= budget
    assert {u.chunk for u in out.kept} == {1}
    # sentence units ranked alone lose the answer: its sentence shares no word with the query
    flat = compress(PASSAGES, budget, query=query, scorer=SCORER, granularity="sentence")
    assert "Röntgen" not in flat.text


def test_coarse_to_fine_fills_the_rest_with_the_best_sentences_of_the_next_chunk():
    query = "Who got the first Nobel Prize in Physics?"
    budget = TOK.count(PASSAGES[1]) + 25
    out = compress(PASSAGES, budget, query=query, scorer=SCORER)
    chunks = {u.chunk for u in out.kept}
    assert 1 in chunks and len(chunks) > 1 and out.compressed_tokens <= budget
    partial = [c for c in chunks if not all(u.kept for u in out.units if u.chunk == c)]
    assert partial  # a chunk at the budget's edge contributes some sentences, not all


def test_coarse_to_fine_on_a_string_ranks_its_paragraphs():
    doc = "\n\n".join(PASSAGES)
    out = compress(doc, TOK.count(PASSAGES[1]) + 2, query="first Nobel Prize in Physics",
                   scorer=SCORER)
    assert "Röntgen" in out.text
    verbatim = compress(doc, 10_000, query="x", scorer=SCORER)
    assert verbatim.text == doc  # paragraph separators kept as they were


def test_defaults_rank_with_the_bundled_model():
    query = "Who received the first Nobel Prize in Physics?"
    out = compress(PASSAGES, TOK.count(PASSAGES[1]) + 2, query=query)
    assert out.scorer == "embedding" and out.granularity == "coarse-to-fine"
    assert "Röntgen" in out.text
