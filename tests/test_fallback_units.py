"""Fallback units: text without sentence ends still yields units that fit the budget."""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxkit.compression.atoms import atoms
from ctxkit.compression.scoring.idf import IdfScorer
from ctxkit.compression.text.fallback_units import cap_units
from ctxkit.compression.text.pipeline import compress
from ctxkit.io.tokenizers import get_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TOK = get_tokenizer("cl100k_base")
SCORER = IdfScorer(table={w: 2.0 for w in "the a of and is to in".split()}, default=12.0)

WORDS = ["the", "server", "alice", "bob", "quantum", "login", "ok", "retry", "émigré", "日本"]
CODE = ["x_1 = foo(y, 3)", "for i in range(10):", "return self.cache[key]", "if a->b: pass",
        "print(\"ok\")", "def f(a, b): return a + b"]
LOG = ["2024-01-01 12:00:01 INFO user=alice action=login", "WARN disk at 91%",
       "ERROR id=A113 https://x.io/a?b=1 failed, retrying - attempt 3", "DEBUG cache hit"]


@st.composite
def unpunctuated(draw):
    """Prose with no sentence ends, a code line or block, or a log on one line or many."""
    kind = draw(st.sampled_from(["words", "code", "log"]))
    n = draw(st.integers(1, 80))
    if kind == "words":
        return " ".join(draw(st.sampled_from(WORDS)) for _ in range(n))
    pool = CODE if kind == "code" else LOG
    sep = draw(st.sampled_from(["\n", " ", "; ", " | "]))
    return sep.join(draw(st.sampled_from(pool)) for _ in range(max(1, n // 5)))


def _check(doc: str, out, budget: int) -> None:
    assert TOK.count(out.text) == out.compressed_tokens <= budget
    # the ledger holds every unit; the dropped ones say why
    assert "".join(u.text for u in out.units).replace(" ", "").replace("\n", "") == \
        doc.replace(" ", "").replace("\n", "")
    assert all(u.kept or u.reason for u in out.units)
    # atoms are never split: every atom of the output is an atom of the input
    assert {a for _, _, a in atoms(out.text)} <= {a for _, _, a in atoms(doc)}
    # a budget that fits the largest atom fits some unit, so something comes back
    if max(TOK.count(a) for _, _, a in atoms(doc)) <= budget:
        assert out.text.strip()


@given(doc=unpunctuated(), budget=st.integers(1, 120),
       granularity=st.sampled_from(["coarse-to-fine", "sentence", "chunk"]),
       query=st.sampled_from([None, "alice login retry"]))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_unpunctuated_text_keeps_content(doc, budget, granularity, query):
    out = compress(doc, budget, query=query, scorer=SCORER, granularity=granularity)
    _check(doc, out, budget)


def test_words_at_a_small_budget():
    out = compress("word " * 20, budget=10, scorer=SCORER)
    assert out.text.startswith("word") and 0 < out.compressed_tokens <= 10


def test_huge_single_line_record():
    line = " ".join(f"speaker{i % 3} said item {i} then, well, more of it - ok"
                    for i in range(4000))
    assert "\n" not in line and TOK.count(line) > 50_000
    out = compress(line, budget=200, query="what about item 1234?", scorer=SCORER)
    _check(line, out, 200)
    assert "item 1234 " in out.text
    assert max(u.tokens for u in out.units) <= 200


def test_force_keep_and_protected_atoms_are_not_cut():
    doc = " ".join(["alpha beta gamma"] * 30 + ["keep this whole phrase"] + ["delta"] * 30)
    url = "https://example.com/" + "a" * 300
    out = compress(doc + " " + url, budget=30, scorer=SCORER,
                   force_keep=["keep this whole phrase"])
    assert "keep this whole phrase" in out.text and out.compressed_tokens <= 30
    assert any(u.text == url for u in out.units)  # one atom larger than the budget: one unit


@pytest.mark.parametrize("cap", [1, 3, 7])
def test_cap_units_round_trip(cap):
    count = lambda texts: [TOK.count(t) for t in texts]  # noqa: E731
    text = "a b, c d; e f - g h\ni j k l m n o p q"
    pieces, owner = cap_units([(text, "")], [4], cap, count)
    assert "".join(b + s for b, s in pieces) == text and set(owner) == {4}
    assert all(TOK.count(b) <= cap for b, _ in pieces)
