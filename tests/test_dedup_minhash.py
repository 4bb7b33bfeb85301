"""MinHash: shingling, datasketch equivalence and interop, estimate accuracy, LSH, clusters."""

import random

import numpy as np
import pytest
from datasketch import LeanMinHash, MinHash, MinHashLSH
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.deduplication.interop import datasketch_hashfunc, from_datasketch, to_datasketch
from ctxkit.deduplication.jaccard import pair_jaccard, shingle_sets
from ctxkit.deduplication.lsh import (
    band_keys,
    candidate_pairs,
    candidate_probability,
    choose_bands,
)
from ctxkit.deduplication.minhash import minhash_dedup
from ctxkit.deduplication.normalize import Normalization, normalize_texts
from ctxkit.deduplication.shingle import shingle_hash, shingle_hashes, shingles
from ctxkit.deduplication.signatures import (
    empty_rows,
    hash_values,
    permutations,
    signatures,
    signatures_from_hashes,
)
from ctxkit.deduplication.unionfind import connected_components, representatives
from ctxkit.deduplication.verify import (
    estimate_jaccard,
    match_upper_bounds,
    verify_margin,
    verify_pairs,
    verify_pairs_exact,
)


def exact_jaccard(
    a: str, b: str, ngram: int = 5, unit: str = "char", normalization: Normalization | None = None
) -> float:
    """The exact Jaccard similarity of two texts' shingle sets, one Python set each: the
    reference the vectorized scorers are checked against."""
    va, vb = (
        set(hash_values([t], ngram, unit, normalization, scheme="affine64")[0].tolist())
        for t in (a, b)
    )
    if not va and not vb:
        return 1.0
    return len(va & vb) / len(va | vb)


class UnionFind:
    """Union-find over 0..n-1 (grows on demand), rooted at the smallest index: the reference
    :func:`connected_components` is checked against.

    Path halving keeps ``find`` near-constant; rooting at the smallest member keeps the
    answer independent of the order of ``union`` calls.

    """

    def __init__(self, n: int = 0) -> None:
        self.parent = list(range(n))

    def __len__(self) -> int:
        return len(self.parent)

    def _grow(self, i: int) -> None:
        if i >= len(self.parent):
            self.parent.extend(range(len(self.parent), i + 1))

    def find(self, i: int) -> int:
        self._grow(i)
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        ri, rj = self.find(i), self.find(j)
        if ri != rj:
            lo, hi = (ri, rj) if ri < rj else (rj, ri)
            self.parent[hi] = lo

    def labels(self) -> np.ndarray:
        """The root (smallest member) of every element."""
        return np.array([self.find(i) for i in range(len(self.parent))], dtype=np.int64)


TEXT = st.text(alphabet="ab c\té\U0001f600\u3000x", max_size=14)


@settings(max_examples=80, deadline=None)
@given(st.lists(TEXT, max_size=5), st.sampled_from(["char", "word"]), st.integers(1, 5))
def test_vectorized_shingles_match_reference(texts, unit, n):
    h, off = shingle_hashes(texts, n=n, unit=unit)
    for i, text in enumerate(texts):
        assert h[off[i] : off[i + 1]].tolist() == [shingle_hash(s) for s in shingles(text, n, unit)]


@settings(max_examples=60, deadline=None)
@given(st.lists(TEXT, max_size=6), st.integers(1, 5), st.integers(1, 9))
def test_shingles_hashed_in_blocks_match_one_pass(texts, n, block):
    """Windows are hashed a cache-sized block at a time; any block size, including ones
    that cut a text or a window's run of valid positions, gives the same hashes."""
    from ctxkit.deduplication.shingle import _P_CHAR, _codepoints, _ngrams

    cps, offsets = _codepoints(texts)
    whole, off = _ngrams(cps, offsets, n, _P_CHAR)
    blocked, off_b = _ngrams(cps, offsets, n, _P_CHAR, block=block)
    assert off.tolist() == off_b.tolist() and whole.tolist() == blocked.tolist()
    assert whole.tolist() == [shingle_hash(s) for t in texts for s in shingles(t, n)]


def corpus(seed=0, n=40):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(300)]
    return [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 60))) for _ in range(n)] + [
        "",
        "x",
        "ab",
    ]


@pytest.mark.parametrize("scheme", ["affine32", "affine64"])
def test_sha1_signatures_equal_datasketch_default(scheme):
    texts = corpus()
    sig = signatures(texts, num_perm=64, seed=5, hashfunc="sha1", scheme=scheme)
    for text, row in zip(normalize_texts(texts), sig):
        m = MinHash(num_perm=64, seed=5, scheme=scheme)
        m.update_batch([s.encode("utf-8") for s in shingles(text, 5)])
        assert np.array_equal(m.hashvalues, row)


@pytest.mark.parametrize("unit", ["char", "word"])
def test_fast_signatures_equal_datasketch_with_ctxkit_hashfunc(unit):
    texts = corpus(1)
    sig = signatures(texts, num_perm=32, seed=9, unit=unit, ngram=3)
    for text, row in zip(normalize_texts(texts), sig):
        m = MinHash(num_perm=32, seed=9, hashfunc=datasketch_hashfunc())
        m.update_batch(shingles(text, 3, unit))
        assert np.array_equal(m.hashvalues, row)


def test_permutations_are_datasketchs():
    a, b = permutations(16, seed=3)
    assert np.array_equal(np.stack([a, b]), MinHash(num_perm=16, seed=3).permutations)


def test_datasketch_lsh_loads_ctxkit_signatures():
    texts = [
        "the cat sat on the mat today",
        "the cat sat on the mat today!",
        "dogs bark at night",
        "",
    ]
    raw = Normalization(nfkc=False, case=False, whitespace=False)
    sig = signatures(texts, num_perm=128, seed=1, hashfunc="sha1", normalization=raw)
    lean = to_datasketch(sig, seed=1)
    assert all(isinstance(m, LeanMinHash) for m in lean)
    # An index built by datasketch itself from its own default MinHash of raw shingles...
    lsh = MinHashLSH(threshold=0.5, num_perm=128)
    for i, text in enumerate(texts[:3]):
        m = MinHash(num_perm=128, seed=1)
        m.update_batch([s.encode() for s in shingles(text, 5)])
        lsh.insert(f"d{i}", m)
    # ...answers queries made with ctxkit signatures.
    assert sorted(lsh.query(lean[1])) == ["d0", "d1"]
    assert lsh.query(lean[2]) == ["d2"]
    assert lean[0].jaccard(lean[1]) == pytest.approx(estimate_jaccard(sig, np.array([[0, 1]]))[0])
    assert np.array_equal(from_datasketch(lean), sig)
    # and a ctxkit-built index of LeanMinHash works too.
    lsh2 = MinHashLSH(threshold=0.5, num_perm=128)
    for i, m in enumerate(lean):
        lsh2.insert(i, m)
    assert sorted(lsh2.query(lean[0])) == [0, 1]


def random_pair(rng, size_a, size_b, shared):
    """Two word sets with a known overlap; exact Jaccard = shared / (a + b - shared)."""
    base = rng.sample(range(10**6), size_a + size_b - shared)
    a = base[:size_a]
    b = base[:shared] + base[size_a:]
    return (
        " ".join(f"t{x}" for x in a),
        " ".join(f"t{x}" for x in b),
        shared / (size_a + size_b - shared),
    )


def test_jaccard_estimate_no_worse_than_datasketch():
    rng = random.Random(42)
    ours, theirs = [], []
    for k in range(150):
        size_a, size_b = rng.randint(20, 200), rng.randint(20, 200)
        shared = rng.randint(0, min(size_a, size_b))
        a, b, truth = random_pair(rng, size_a, size_b, shared)
        sig = signatures([a, b], num_perm=128, seed=k, unit="word", ngram=1)
        ours.append(abs(estimate_jaccard(sig, np.array([[0, 1]]))[0] - truth))
        ma, mb = MinHash(num_perm=128, seed=k), MinHash(num_perm=128, seed=k)
        ma.update_batch([w.encode() for w in a.split()])
        mb.update_batch([w.encode() for w in b.split()])
        theirs.append(abs(ma.jaccard(mb) - truth))
    mae, mae_ds = np.mean(ours), np.mean(theirs)
    # Same estimator, different shingle hash: equal up to sampling noise (~0.03 MAE each).
    assert mae <= mae_ds * 1.1, (mae, mae_ds)
    assert mae < 0.04


def test_pair_jaccard_is_exact():
    rng = random.Random(5)
    texts = ["".join(rng.choice("abcd ") for _ in range(rng.randint(0, 25))) for _ in range(30)]
    values, offsets = hash_values(texts)
    keys, set_offsets = shingle_sets(values, offsets)
    pairs = np.array([(i, j) for i in range(30) for j in range(i, 30)])
    want = [exact_jaccard(texts[i], texts[j]) for i, j in pairs]
    for chunk in (3, 1 << 22):
        assert pair_jaccard(keys, set_offsets, pairs, chunk=chunk).tolist() == pytest.approx(want)


@pytest.mark.parametrize("bitmap_bytes", [0, 2 * 8 * 82, 64 << 20])
def test_exact_scorer_with_frequent_shingle_bitmaps_is_exact(monkeypatch, bitmap_bytes):
    """Templated records: most shingles are a shared template's, kept as bitmap bits; the
    rest are looked up. Any split (none, a few words, the full 64) gives the exact Jaccard."""
    from ctxkit.deduplication.jaccard import _ExactJaccard

    monkeypatch.setattr(_ExactJaccard, "bitmap_bytes", bitmap_bytes)
    rng = random.Random(9)
    template = "toolformer: enabled\nA wrapper around Wikipedia. Useful for general facts.\n"
    words = ["alpha", "beta", "gamma", "delta", "tokyo", "paris", "42", "ok"]
    texts = [template * rng.randint(0, 2) + " ".join(rng.choices(words, k=rng.randint(0, 12)))
             for _ in range(80)] + ["", "abc"]
    ids = np.arange(len(texts))
    scorer = _ExactJaccard(texts, ids, ngram=5, unit="char", normalization=None,
                           hashfunc="fast", scheme="affine32")
    pairs = np.array([(i, j) for i in range(len(texts)) for j in range(i, len(texts))])
    want = [exact_jaccard(texts[i], texts[j]) for i, j in pairs]
    assert scorer(pairs, chunk=7).tolist() == pytest.approx(want)


@pytest.mark.parametrize("bitmap_bytes", [0, 2 * 8 * 90, 64 << 20])
def test_exact_scorer_with_bitmaps_per_component_is_exact_across_components(
        monkeypatch, bitmap_bytes):
    """Several template families: given the pairs it will score, the scorer picks frequent
    shingles per connected component (small components pooled). Bits then mean different
    shingles in different components, so a pair across two components (which callers never
    ask for, but may) takes the slow path; every pair stays exact."""
    from ctxkit.deduplication.jaccard import _ExactJaccard

    monkeypatch.setattr(_ExactJaccard, "bitmap_bytes", bitmap_bytes)
    monkeypatch.setattr(_ExactJaccard, "group_min", 4)
    rng = random.Random(11)
    templates = ["toolformer: enabled\nA wrapper around Wikipedia. Useful for facts.\n",
                 "You are a calculator. Answer with a number only, then stop.\n",
                 "Translate the following sentence into French, keeping names.\n"]
    words = ["alpha", "beta", "gamma", "delta", "tokyo", "paris", "42", "ok"]
    texts = [templates[i % 3] + " ".join(rng.choices(words, k=rng.randint(0, 10)))
             for i in range(60)] + ["", "hello world once", "hello world twice"]
    # one component per family (a chain through its records), a small pooled one, and
    # texts no pair names
    pairs = np.array([(i, i + 3) for i in range(54)] + [(61, 62)])
    scorer = _ExactJaccard(texts, np.arange(len(texts)), pairs, ngram=5, unit="char",
                           normalization=None, hashfunc="fast", scheme="affine32")
    if bitmap_bytes:
        assert len(scorer.frequent) == 4  # three families and the pool
    every = np.array([(i, j) for i in range(len(texts)) for j in range(i, len(texts))])
    want = [exact_jaccard(texts[i], texts[j]) for i, j in every]
    assert scorer(every, chunk=7).tolist() == pytest.approx(want)
    none = np.empty((0, 2), dtype=np.int64)
    empty = _ExactJaccard(texts, none.ravel(), none, ngram=5, unit="char", normalization=None,
                          hashfunc="fast", scheme="affine32")
    assert empty(none).tolist() == []


def test_exact_scorer_when_normalization_lengthens_texts():
    """NFKC turns one character into several ("⑽" into "(10)"), so a text can have more
    shingles than characters; and the texts the scorer samples (256 spread over the group)
    are short here while the others are long, so its key buffer, sized from the sample,
    must grow. Both stay exact."""
    import unicodedata

    from ctxkit.deduplication.jaccard import _ExactJaccard

    rng = random.Random(3)
    long = [c for c in map(chr, range(0x2000, 0x10000))
            if len(unicodedata.normalize("NFKC", c)) >= 4][:60]
    sampled = set(np.linspace(0, 2099, 256).astype(np.int64).tolist())
    texts = ["".join(rng.choices(long, k=rng.randint(0, 5 if i in sampled else 600)))
             for i in range(2100)]
    scorer = _ExactJaccard(texts, np.arange(len(texts)), ngram=5, unit="char",
                           normalization=Normalization(), hashfunc="fast", scheme="affine32")
    pairs = np.array([(rng.randrange(len(texts)), rng.randrange(len(texts))) for _ in range(300)])
    want = [exact_jaccard(texts[i], texts[j], normalization=Normalization()) for i, j in pairs]
    assert scorer(pairs).tolist() == pytest.approx(want)


def test_verify_pairs_exact_from_a_mapping_of_texts():
    texts = ["abcdefghij", "abcdefghik", "zzzzzzzzzz", "abcdefgxyz"]
    sig = signatures(texts, num_perm=64)
    cand = np.array([[0, 1], [0, 3], [1, 3], [0, 2]])
    # A batch of a distributed run only holds the texts its pairs name.
    subset = {i: texts[i] for i in (0, 1, 2, 3)}
    pairs, scores = verify_pairs_exact(sig, cand, 0.5, subset)
    truth = [exact_jaccard(texts[i], texts[j]) for i, j in cand]
    assert pairs.tolist() == [p for p, t in zip(cand.tolist(), truth) if t >= 0.5]
    assert np.allclose(scores, [t for t in truth if t >= 0.5])
    assert 0 < verify_margin(0.5, 128) < 0.25


def test_exact_jaccard_reference():
    assert exact_jaccard("abcdef", "abcdef") == 1.0
    assert exact_jaccard("abcdef", "abcdeg") == pytest.approx(1 / 3)
    assert exact_jaccard("", "") == 1.0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=30),
    st.integers(2, 6),
)
def test_candidate_pairs_match_brute_force(rows, max_bucket):
    keys = np.array(rows, dtype=np.uint64)
    got = {tuple(p) for p in candidate_pairs(keys, max_bucket=1000).tolist()}
    n = len(keys)
    want = {(i, j) for i in range(n) for j in range(i + 1, n) if (keys[i] == keys[j]).any()}
    assert got == want
    # Above max_bucket a bucket is a star: the pairs change but the components do not.
    capped = candidate_pairs(keys, max_bucket=max_bucket)
    assert np.array_equal(
        connected_components(n, capped),
        connected_components(n, np.array(sorted(want)).reshape(-1, 2)),
    )


def test_large_buckets_are_stars_and_candidates_stay_linear():
    """A template shared by every text puts them all in one bucket in every band: the
    candidates must be a star per band (n - 1 pairs each), not n**2 / 2."""
    n, bands = 3000, 8
    keys = np.repeat(np.arange(bands, dtype=np.uint64)[None, :], n, axis=0)
    cand = candidate_pairs(keys, max_bucket=32)
    assert n - 1 <= len(cand) <= bands * (n - 1)
    # each band has one hub (a member of every pair it yields), drawn afresh per band
    for band in range(bands):
        star = candidate_pairs(keys[:, [band]], first_band=band)
        hub = np.bincount(star.ravel(), minlength=n).argmax()
        assert len(star) == n - 1 and (star == hub).any(axis=1).all()
    hubs = {int(np.bincount(candidate_pairs(keys[:, [b]], first_band=b).ravel()).argmax())
            for b in range(bands)}
    assert len(hubs) > 1
    # small buckets still give all their pairs
    small = np.repeat(np.arange(100, dtype=np.uint64), 4)[:, None]
    assert len(candidate_pairs(small, max_bucket=4)) == 100 * 6


def test_candidate_pairs_per_band_with_ids_equal_the_whole_call():
    """What the distributed stage does: one band's rows, named by global ids."""
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 5, (400, 3)).astype(np.uint64)
    whole = {tuple(p) for p in candidate_pairs(keys, max_bucket=8).tolist()}
    ids = np.arange(400)
    parts = set()
    for band in range(3):
        shuffled = rng.permutation(400)
        got = candidate_pairs(keys[shuffled, band][:, None], max_bucket=8, ids=ids[shuffled],
                              first_band=band)
        parts |= {tuple(p) for p in got.tolist()}
    assert parts == whole


def test_choose_bands_targets_recall():
    for t in (0.3, 0.5, 0.7, 0.8, 0.9):
        b, r = choose_bands(t, 128)
        assert b * r <= 128
        assert candidate_probability(t, b, r) >= 0.995
        assert r == 1 or candidate_probability(t, 128 // (r + 1), r + 1) < 0.995
    with pytest.raises(ValueError):
        choose_bands(0.0)


def test_band_keys_and_verification():
    sig = np.array([[1, 2, 3, 4], [1, 2, 9, 9], [5, 6, 3, 4]], dtype=np.uint32)
    keys = band_keys(sig, 2, 2)
    assert keys[0, 0] == keys[1, 0] and keys[0, 1] == keys[2, 1] and keys[1, 1] != keys[2, 1]
    cand = candidate_pairs(keys)
    assert cand.tolist() == [[0, 1], [0, 2]]
    pairs, scores = verify_pairs(sig, cand, 0.5)
    assert pairs.tolist() == [[0, 1], [0, 2]] and scores.tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="exceeds num_perm"):
        band_keys(sig, 3, 2)


@settings(max_examples=30, deadline=None)
@given(
    num_perm=st.sampled_from([1, 7, 8, 128, 300, 512]),
    n=st.integers(2, 40),
    spread=st.sampled_from([2, 300, 2**32 - 1]),
    threshold=st.floats(0.05, 1.0),
    seed=st.integers(0, 2**16),
)
def test_low_byte_bound_never_loses_a_pair(num_perm, n, spread, threshold, seed):
    # The cheap first pass of verification compares low bytes only; it must bound the true
    # count from above (so no pair at the threshold is dropped), and verify_pairs must equal
    # the plain "estimate >= threshold" filter over all candidates.
    rng = np.random.default_rng(seed)
    sig = rng.integers(0, spread, (n, num_perm), dtype=np.uint64).astype(np.uint32)
    pairs = np.array([(i, j) for i in range(n) for j in range(i + 1, n)], dtype=np.int64)
    bound = match_upper_bounds(sig, pairs)
    exact = np.round(estimate_jaccard(sig, pairs) * num_perm).astype(np.int64)
    assert (bound >= exact).all()
    low_equal = ((sig[pairs[:, 0]] & 0xFF) == (sig[pairs[:, 1]] & 0xFF)).sum(axis=1)
    assert (bound == low_equal).all()
    kept, scores = verify_pairs(sig, pairs, threshold)
    est = estimate_jaccard(sig, pairs)
    assert kept.tolist() == pairs[est >= threshold].tolist()
    assert scores.tolist() == est[est >= threshold].tolist()


def test_union_find_transitivity():
    # a~b and b~c put a, b, c in one cluster even though a and c were never compared.
    labels = connected_components(6, np.array([[0, 1], [1, 2], [4, 5]]))
    assert labels.tolist() == [0, 0, 0, 3, 4, 4]
    uf = UnionFind()
    for i, j in [(5, 4), (2, 1), (1, 0)]:
        uf.union(i, j)
    uf.find(3)
    assert uf.labels().tolist() == labels.tolist()


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 20).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30),
        )
    )
)
def test_union_find_equals_components(case):
    n, edges = case
    uf = UnionFind(n)
    for i, j in edges:
        uf.union(i, j)
    cc = connected_components(n, np.array(edges, dtype=np.int64).reshape(-1, 2))
    assert uf.labels().tolist() == cc.tolist()
    rep = representatives(cc, np.arange(n, dtype=float))  # highest index wins
    for i in range(n):
        assert rep[i] == max(j for j in range(n) if cc[j] == cc[i])


def test_empty_and_one_word_texts():
    texts = ["", "", "word", "word", "Word.", "a", "A", "   "]
    sig = signatures(texts, num_perm=32)
    assert empty_rows(sig).tolist() == [True, True, False, False, False, False, False, True]
    res = minhash_dedup(texts, threshold=0.9)
    # Empty texts are left to the exact stage; identical one-word texts match.
    assert res.duplicate_of.tolist() == [-1, -1, -1, 2, -1, -1, 5, -1]


def test_finds_injected_near_duplicates():
    rng = random.Random(3)
    vocab = [f"word{i}" for i in range(2000)]
    originals = [" ".join(rng.choice(vocab) for _ in range(80)) for _ in range(60)]
    texts = list(originals)
    truth = {}
    for i in range(0, 60, 3):
        words = originals[i].split()
        for k in rng.sample(range(len(words)), 5):  # ~6% word edits
            words[k] = rng.choice(vocab)
        truth[len(texts)] = i
        texts.append(" ".join(words).upper())
    for verify in ("exact", "estimate"):
        res = minhash_dedup(texts, threshold=0.5, verify=verify)
        assert {i: int(res.duplicate_of[i]) for i in res.removed} == truth
        assert res.info["bands"] * res.info["rows"] <= 128
        assert (res.pair_scores >= 0.5).all() and len(res.pairs) == len(truth)


def test_deterministic_with_seed():
    texts = corpus(7, 60)
    a = signatures(texts, seed=11)
    assert np.array_equal(a, signatures(texts, seed=11))
    assert not np.array_equal(a, signatures(texts, seed=12))
    # Batching and chunking never change the result.
    assert np.array_equal(a, signatures(texts, seed=11, batch_size=7))
    assert np.array_equal(a, signatures(texts, seed=11, batch_chars=50))
    values, offsets = shingle_hashes(normalize_texts(texts))
    v32 = (values >> np.uint64(32)).astype(np.uint32)
    assert np.array_equal(a, signatures_from_hashes(v32, offsets, 128, 11, chunk=5))
    for verify in ("exact", "estimate"):
        r1, r2 = (
            minhash_dedup(texts, 0.3, seed=4, verify=verify),
            minhash_dedup(texts, 0.3, seed=4, verify=verify),
        )
        assert r1.duplicate_of.tolist() == r2.duplicate_of.tolist()
        assert np.array_equal(r1.pairs, r2.pairs) and np.array_equal(r1.pair_scores, r2.pair_scores)


def test_bad_parameters():
    with pytest.raises(ValueError, match="num_perm"):
        signatures(["a"], num_perm=0)
    with pytest.raises(ValueError, match="unit"):
        signatures(["a"], unit="line")
    with pytest.raises(ValueError, match="scheme"):
        signatures(["a"], scheme="legacy")
    with pytest.raises(ValueError, match="threshold"):
        minhash_dedup(["a"], threshold=1.5)
    with pytest.raises(ValueError, match="both bands and rows"):
        minhash_dedup(["a"], bands=4)
    with pytest.raises(ValueError, match="verify"):
        minhash_dedup(["a"], verify="maybe")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 50), max_size=40), st.integers(1, 6), st.integers(1, 60)
)
def test_signature_batches_cover_every_text_once_within_their_limits(lengths, items, total):
    from ctxkit.deduplication.signatures import _batches

    spans = _batches(lengths, items, total)
    assert [i for a, b in spans for i in range(a, b)] == list(range(len(lengths)))
    for a, b in spans:
        assert 1 <= b - a <= items
        # over the character limit only as a single text
        assert sum(lengths[a:b]) <= total or b - a == 1
        # greedy: the next text would not have fit
        if b < len(lengths) and b - a < items:
            assert sum(lengths[a : b + 1]) > total


def test_signatures_of_huge_empty_and_short_texts_do_not_depend_on_batches():
    texts = ["", "short one", "x" * 300_000, "", "a b c d e f g " * 2000, "tiny"] * 3
    ref = np.stack([signatures([t], num_perm=32)[0] for t in texts])
    for size, chars in ((4096, 1 << 17), (2, 10), (5, 1 << 30)):
        assert np.array_equal(signatures(texts, num_perm=32, batch_size=size,
                                         batch_chars=chars), ref)
    with pytest.raises(ValueError, match="batch_chars"):
        signatures(texts, batch_chars=0)


def test_minhash_dedup_turns_numpy_huge_page_advice_off_and_restores_it(monkeypatch):
    import ctxkit.deduplication.minhash as mh

    setter = np._core.multiarray._set_madvise_hugepage
    seen = []
    real = mh.signatures

    def spy(*args, **kwargs):
        now = setter(False)  # reads the setting (and puts it back)
        setter(now)
        seen.append(now)
        return real(*args, **kwargs)

    monkeypatch.setattr(mh, "signatures", spy)
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    texts = ["a b c d e f g", "a b c d e f g h", "x y z"]
    before = setter(True)
    try:
        assert minhash_dedup(texts, threshold=0.7).keep.tolist() == [0, 2]
        assert seen == [False] and setter(True) is True  # restored after the call
        with pytest.raises(ValueError):
            minhash_dedup(texts, threshold=0.7, sig=np.zeros((1, 128), dtype=np.uint32))
        assert setter(True) is True  # restored after an error too
        monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")  # an explicit choice is left alone
        minhash_dedup(texts, threshold=0.7)
        assert seen == [False, True]
    finally:
        setter(before)


def test_huge_page_advice_is_restored_after_concurrent_calls(monkeypatch):
    import threading

    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    setter = np._core.multiarray._set_madvise_hugepage
    texts = [f"record {i} with some words in it" for i in range(300)]
    before = setter(True)
    try:
        errors = []

        def run():
            try:
                minhash_dedup(texts, threshold=0.7)
            except Exception as exc:  # noqa: BLE001  (reported below)
                errors.append(exc)

        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors and not any(t.is_alive() for t in threads)
        assert setter(True) is True  # the last call out put the advice back
    finally:
        setter(before)


def test_on_stage_wraps_every_stage_in_order():
    from contextlib import contextmanager

    from ctxkit.deduplication.minhash import STAGES

    entered, left = [], []

    @contextmanager
    def hook(name):
        entered.append(name)
        yield
        left.append(name)

    texts = ["a b c d e f g", "a b c d e f g h", "x y z"]
    res = minhash_dedup(texts, threshold=0.7, on_stage=hook)
    assert res.keep.tolist() == [0, 2]
    assert entered == left == [s for s in STAGES if s != "boilerplate"]
    entered.clear()
    minhash_dedup(texts, verify="estimate", boilerplate=0.5, on_stage=hook,
                  sig=signatures(texts))
    assert entered == ["boilerplate", "band keys", "candidate pairs", "estimates",
                       "connected components", "representatives"]


def test_to_datasketch_without_datasketch_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasketch", None)  # import datasketch now fails
    with pytest.raises(ImportError, match=r"pip install 'ctxkit\[datasketch\]'"):
        to_datasketch(signatures(["some text"], num_perm=8))
    # everything else works without it
    assert minhash_dedup(["a b c d e f g", "a b c d e f g h"]).n_removed == 1
