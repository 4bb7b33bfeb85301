"""compress_chat's cold-call cascade: a cheap first stage picks the turns the encoder embeds."""

import zlib

import numpy as np
import pytest

import ctxkit.compression.scoring.embedding as es
import ctxkit.compression.scoring.shortlist as cascade
from ctxkit.chat.memory import ChatMemory
from ctxkit.chat.pipeline import compress_chat
from ctxkit.compression.scoring.embedding import EmbeddingScorer
from ctxkit.compression.scoring.registry import get_scorer

NOUNS = ["kayak", "violin", "garden", "passport", "bakery", "tortoise", "lantern", "marathon",
         "pottery", "telescope", "orchard", "saxophone", "canoe", "quilt", "museum", "puppy"]
HISTORY = [{"role": "user" if i % 2 == 0 else "assistant",
            "content": f"On day {i} I talked about the {NOUNS[i % 16]} and the "
                       f"{NOUNS[(i * 7) % 16]} near house {i % 11}."}
           for i in range(240)]
QUESTION = {"role": "user", "content": "What did I say about the telescope near house 3?"}
MESSAGES = HISTORY + [QUESTION]
PIECES: list[str] = []  # texts whose word pieces the first stage read


def _vec(text: str) -> np.ndarray:
    v = np.random.default_rng(zlib.crc32(text.encode())).normal(size=384)
    return v / np.linalg.norm(v)


@pytest.fixture
def encoder(monkeypatch):
    """Deterministic stand-ins for MiniLM and its word pieces; records what is embedded."""
    seen: list[str] = []

    def fake(texts, dtype="fast"):
        seen.extend(texts)
        return np.stack([_vec(t) for t in texts])

    def pieces(self, texts):
        PIECES.extend(texts)
        return np.stack([_vec(t.lower()) for t in texts])

    monkeypatch.setattr(es, "embed", fake)
    monkeypatch.setattr(cascade.WordPieces, "_vectors", pieces)
    PIECES.clear()
    get_scorer("embedding").clear_cache()  # the scorer every call naming "embedding" shares
    yield seen
    get_scorer("embedding").clear_cache()


def test_encoder_embeds_only_the_candidates(encoder):
    budget = 1200
    out = compress_chat(MESSAGES, budget)
    embedded = set(encoder) - {QUESTION["content"]}
    # candidates fill the room once (the turn crossing it included), never the whole history
    assert cascade.CANDIDATE_FLOOR <= len(embedded) < len(HISTORY) // 2
    assert out.compressed_tokens <= budget
    encoder.clear()
    get_scorer("embedding").clear_cache()
    compress_chat(MESSAGES, budget, scorer=EmbeddingScorer(candidates=0))
    # the old path: every turn but the kept tail (the last turn and the question)
    assert len(set(encoder) - {QUESTION["content"]}) == len(HISTORY) - 1


def test_cascade_equals_uncascaded_when_candidates_cover_every_turn(encoder, monkeypatch):
    full = compress_chat(MESSAGES, 1500, scorer=EmbeddingScorer(candidates=0))
    monkeypatch.setattr(cascade, "CANDIDATE_ROOMS", 100.0)
    covered = compress_chat(MESSAGES, 1500)
    assert covered.kept == full.kept and covered.messages == full.messages
    assert [(c.index, c.action, c.score) for c in covered.ledger] == \
        [(c.index, c.action, c.score) for c in full.ledger]


def test_short_history_is_not_cascaded(encoder):
    units = [m["content"] for m in HISTORY[:cascade.CANDIDATE_FLOOR]]
    scorer = EmbeddingScorer()
    within = scorer.relevance_within(units, QUESTION["content"], [20] * len(units), room=40)
    assert np.array_equal(within, scorer.relevance(units, QUESTION["content"]))


def test_embedded_turns_rank_above_the_others(encoder):
    units = [m["content"] for m in HISTORY]
    rel = EmbeddingScorer().relevance_within(units, QUESTION["content"], [20] * len(units),
                                             room=2010)
    embedded = np.array([u in set(encoder) for u in units])
    assert embedded.sum() == 101  # 2010 tokens of 20-token turns, the one crossing it included
    assert rel[embedded].min() >= 0.5 >= rel[~embedded].max()
    assert "telescope" in units[int(np.argmax(rel))]


@pytest.mark.parametrize("budget", [400, 900, 2500, 5000])
def test_no_budget_exceeded_and_memory_agrees(encoder, budget):
    out = compress_chat(MESSAGES, budget)
    assert out.compressed_tokens <= budget
    mem = ChatMemory(budget)
    mem.extend(MESSAGES)
    assert mem.compress().kept == out.kept


def test_first_stage_and_candidates_on_plain_data():
    scores = cascade.first_stage(["the tide tables", "bread and jam", "high tide at noon"],
                                 "when is high tide",
                                 vectors=lambda t: np.stack([_vec(x) for x in t]))
    assert scores.shape == (3,) and scores.max() == 1.0 and scores.min() == 0.0
    assert scores[1] < max(scores[0], scores[2])
    picked = cascade.pick_candidates(np.array([0.3, 0.9, 0.1, 0.6]), np.array([5, 50, 5, 5]),
                                     20, floor=1)
    assert picked.tolist() == [1]  # the best unit alone already fills the volume
    assert cascade.pick_candidates(np.zeros(3), np.ones(3, int), 10, floor=1).tolist() == \
        [0, 1, 2]


def test_word_piece_vectors_of_the_bundled_model():
    v = cascade.WordPieces()(["the violin concert", "a violin recital", "tax forms", ""])
    assert v.shape == (4, 384) and np.allclose(np.linalg.norm(v[:3], axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] and not v[3].any()


def test_word_piece_vectors_are_the_same_from_a_bf16_table():
    from ctxkit.embedding.encoder import PackedEncoder

    texts = ["the violin concert", "a violin recital", "tax forms", "", "x " * 400]
    exact = cascade.WordPieces(PackedEncoder(device="cpu", dtype="float32"))(texts)
    half = cascade.WordPieces(PackedEncoder(device="cpu", dtype="bfloat16"))(texts)
    # bf16 rounds each table entry (8 bits of mantissa); the sum runs in fp32
    assert np.allclose(exact, half, atol=1e-2) and not half[3].any()
    assert (exact[:3] * half[:3]).sum(1).min() > 0.9999


def test_word_piece_vectors_are_the_mean_of_the_models_word_pieces():
    from ctxkit.embedding.encoder import PackedEncoder

    enc = PackedEncoder(device="cpu", dtype="float32")
    texts = ["Caroline: I went to a LGBTQ support group!", "", "Ünïcode 日本語 🙂 naïve",
             "word " * 600, "[CLS] tokens [SEP] stay text"]
    bb = enc.backbone
    table = bb.encoder.get_input_embeddings().weight if bb.fused is None else bb.fused.word
    ids = bb.tokenizer(texts, add_special_tokens=False, truncation=True,
                       max_length=enc.max_seq_length)["input_ids"]
    want = np.stack([table[x].detach().mean(0).numpy() if x else np.zeros(384) for x in ids])
    want /= np.maximum(np.linalg.norm(want, axis=1, keepdims=True), 1e-12)
    np.testing.assert_allclose(cascade.WordPieces(enc)(texts), want, atol=1e-5)


def test_a_growing_history_reads_each_turns_word_pieces_once(encoder):
    mem = ChatMemory(budget=600)
    for message in MESSAGES[:200]:
        mem.add(message)
    mem.compress()  # cold: the first stage reads every turn, the encoder the shortlist
    cold = len(PIECES)
    mem.add(MESSAGES[199] | {"content": "One more turn about the kayak."})
    mem.compress()  # the steady state: every turn's features, once
    assert cold >= 100 and len(set(PIECES)) == len(PIECES)
    embedded = set(encoder)
    assert {m["content"] for m in MESSAGES[:200]} <= embedded
    first, calls = len(PIECES), len(encoder)
    mem.add(MESSAGES[200])
    mem.compress()
    # the new turn only (it is also the question), for the first stage and the encoder
    assert len(PIECES) - first == 1 and encoder[calls:] == [MESSAGES[200]["content"]]
