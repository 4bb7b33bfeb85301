"""Exact dedup, normalization and the dedup() dispatch."""

import re
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.deduplication.exact import ExactDeduper, exact_dedup, text_digests
from ctxkit.deduplication.normalize import Normalization, normalize_texts, normalized_codepoints
from ctxkit.deduplication.pipeline import DedupResult, dedup
from ctxkit.errors import InputError

ALPHABET = "aB \t\n\u3000\u00a0é,!_\U0001f600\x00ß\ufb01"


def reference_normalize(text, norm):
    if norm.nfkc:
        text = unicodedata.normalize("NFKC", text)
    if norm.case:
        text = text.casefold()
    if norm.punctuation:
        text = re.sub(r"[^\w\s]|_", " " if norm.whitespace else "", text)
    if norm.whitespace:
        text = " ".join(text.split())
    return text


NORMS = st.builds(Normalization, st.booleans(), st.booleans(), st.booleans(), st.booleans())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet=ALPHABET, max_size=12), max_size=6), NORMS)
def test_vectorized_normalization_matches_reference(texts, norm):
    assert normalize_texts(texts, norm) == [reference_normalize(t, norm) for t in texts]


def test_normalized_codepoints_offsets():
    cps, off = normalized_codepoints(["  A\tB ", "", "c"])
    assert off.tolist() == [0, 3, 3, 4]
    assert "".join(map(chr, cps)) == "a bc"


def test_known_duplicates():
    texts = [
        "Hello World",  # 0
        "hello   world",  # 1 case + whitespace
        "ＨＥＬＬＯ world",  # 2 full-width: NFKC
        "Hello, World!",  # 3 differs unless punctuation is stripped
        "something else",  # 4
        "\tHello World\n",  # 5
    ]
    res = exact_dedup(texts)
    assert res.keep.tolist() == [0, 3, 4]
    assert res.duplicate_of.tolist() == [-1, 0, 0, -1, -1, 0]
    assert res.clusters == [[0, 1, 2, 5]]
    assert exact_dedup(texts, punctuation=True).keep.tolist() == [0, 4]
    assert exact_dedup(texts, case=False, nfkc=False).keep.tolist() == [0, 1, 2, 3, 4]


def test_keep_rules():
    texts = ["ab", "AB ", "  ab", "zz"]
    assert exact_dedup(texts, keep="first").keep.tolist() == [0, 3]
    assert exact_dedup(texts, keep="last").keep.tolist() == [2, 3]
    assert exact_dedup(texts, keep="longest").keep.tolist() == [2, 3]  # "  ab": 4 chars, ties first
    assert exact_dedup(texts, scores=[0.1, 0.9, 0.5, 0.0]).keep.tolist() == [1, 3]
    with pytest.raises(ValueError, match="keep must be one of"):
        exact_dedup(texts, keep="best")
    with pytest.raises(ValueError, match="one value per text"):
        exact_dedup(texts, scores=[1.0])


def test_empty_one_word_and_odd_texts():
    texts = ["", "word", "", " ", "Word", "a\x00b", "a\x00b", "\ud800x", "\U0001f600"]
    res = exact_dedup(texts)
    assert res.duplicate_of.tolist() == [-1, -1, 0, 0, 1, -1, 5, -1, -1]
    assert exact_dedup([]).keep.tolist() == []
    assert dedup([]).n == 0


def test_streaming_matches_batch():
    texts = ["x", "y", " X", "z", "Y ", "x"]
    d = ExactDeduper()
    assert [d.add(t) for t in texts[:3]] + d.add_many(texts[3:]) == [None, None, 0, None, 1, 0]
    batch = exact_dedup(texts)
    assert batch.duplicate_of.tolist() == [-1, -1, 0, -1, 1, 0]


def test_digests_are_stable():
    # A stable, documented digest: BLAKE2b-128 of the normalized UTF-8 text.
    import hashlib

    assert text_digests(["Ab  c"])[0] == hashlib.blake2b(b"ab c", digest_size=16).digest()


def check_invariants(res: DedupResult, n: int):
    assert res.n == n
    assert np.all(np.diff(res.keep) > 0)
    kept = np.zeros(n, dtype=bool)
    kept[res.keep] = True
    assert np.all(res.duplicate_of[kept] == -1)
    removed = np.flatnonzero(~kept)
    assert np.all(res.duplicate_of[removed] >= 0)
    assert np.all(kept[res.duplicate_of[removed]]), "duplicate_of must point to a kept item"
    assert sorted(i for c in res.clusters for i in c) == sorted(
        set(removed.tolist()) | set(res.duplicate_of[removed].tolist())
    )
    for cluster in res.clusters:
        assert kept[cluster[0]] and not kept[cluster[1:]].any()
    assert all((m == "") == k for m, k in zip(res.method, kept))
    assert len(res.ledger()) == len(removed)


WORDS = st.sampled_from(["alpha", "beta", "gamma", "delta", "Alpha", "BETA", "eps"])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(WORDS, max_size=8).map(" ".join), max_size=25),
    st.sampled_from(["first", "last", "longest"]),
)
def test_staged_dedup_invariants(texts, keep):
    res = dedup(texts, method=["exact", "minhash"], threshold=0.5, keep=keep, num_perm=64)
    check_invariants(res, len(texts))
    exact = dedup(texts, method="exact", keep=keep)
    # The second stage only removes more: everything exact removed stays removed.
    assert set(exact.removed.tolist()) <= set(res.removed.tolist())


def test_staged_chain_resolution():
    # 2 is an exact duplicate of 1; MinHash then merges 1 into 0: 2 must point to 0.
    texts = [
        "the quick brown fox jumps over the lazy dog",
        "The quick brown fox jumps over the lazy dog!",
        "the quick brown fox jumps over the lazy dog!",
        "completely different text",
    ]
    res = dedup(texts, method=["exact", "minhash"], threshold=0.6)
    assert res.duplicate_of.tolist() == [-1, 0, 0, -1]
    assert res.method == ["", "minhash", "exact", ""]
    assert res.matched.tolist() == [-1, 0, 1, -1]
    rows = {r["id"]: r for r in res.ledger(ids=["a", "b", "c", "d"])}
    assert rows["c"] == {
        "id": "c",
        "duplicate_of": "a",
        "method": "exact",
        "similarity": 1.0,
        "matched": "b",
    }


def test_dispatch_errors():
    with pytest.raises(InputError, match=r"text 1 of texts is NoneType"):
        dedup(["a", None])
    with pytest.raises(ValueError, match="unknown dedup method"):
        dedup(["a"], method="fuzzy")
    with pytest.raises(InputError, match="not accepted"):
        dedup(["a"], method="exact", num_perm=64)
    with pytest.raises(ValueError, match="twice"):
        dedup(["a"], method="exact,exact")
    with pytest.raises(ValueError, match="unknown method"):
        dedup(["a"], method="minhash", threshold={"fuzzy": 0.3})
    # a threshold no stage uses, or out of range, is an error, not silently ignored
    with pytest.raises(ValueError, match="takes no threshold"):
        dedup(["a"], method="exact", threshold=0.8)
    with pytest.raises(ValueError, match="between 0 and 1, got 1.5"):
        dedup(["a"], method="exact", threshold=1.5)
    with pytest.raises(ValueError, match="without a threshold"):
        dedup(["a"], method="exact,minhash", threshold={"exact": 0.5})
    with pytest.raises(ValueError, match=r"threshold for semantic must be a similarity"):
        dedup(["a"], method="semantic", threshold={"semantic": 2})
    with pytest.raises(ValueError, match=r"between 0 and 1, got 0 \(0 would make everything"):
        dedup(["a"], method="exact,minhash", threshold=0)
    assert dedup(
        ["a b c d e f", "a b c d e f g"], method="minhash", threshold={"minhash": 0.6}
    ).keep.tolist() == [0]


def test_package_name_and_function_name_agree():
    import ctxkit
    import ctxkit.deduplication.minhash  # noqa: F401  (binds ctxkit.dedup to the package)

    assert ctxkit.dedup(["a", "A"]).keep.tolist() == [0]
    assert ctxkit.dedup_messages([]).kept == []
