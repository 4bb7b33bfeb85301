"""link_pairs: rounds of exact scores give exactly the clusters of scoring every pair."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxkit.deduplication.linking as linking
from ctxkit.deduplication.linking import link_pairs
from ctxkit.deduplication.unionfind import connected_components


def reference_rounds(n, pairs, scores, threshold, margin, exact, big, first):
    """The plain form of link_pairs' rounds: each round the next stretch of the pending pairs
    (most similar first, each stretch twice the last), less those inside one component of
    more than ``big`` texts, by the components of all links so far recomputed over all
    ``n`` texts."""
    scores = scores.copy()
    linked = scores >= threshold + margin
    todo = np.flatnonzero(np.abs(scores - threshold) < margin)
    todo = todo[np.argsort(-scores[todo], kind="stable")]
    size = first
    while len(todo):
        batch, todo = todo[:size], todo[size:]
        if linked.any():
            labels = connected_components(n, pairs[linked])
            members = np.bincount(labels, minlength=n)
            a, b = labels[pairs[batch, 0]], labels[pairs[batch, 1]]
            batch = batch[(a != b) | (members[a] <= big)]
        if len(batch):
            scores[batch] = exact(pairs[batch])
            linked[batch] = scores[batch] >= threshold
        size *= 2
    return pairs[linked], scores[linked]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), m=st.integers(0, 300), big=st.sampled_from([1, 3, 8, 1000]),
       first=st.sampled_from([1, 2, 8, 4096]), seed=st.integers(0, 2**32 - 1))
def test_rounds_give_the_clusters_of_scoring_every_pair(n, m, big, first, seed):
    rng = np.random.default_rng(seed)
    # a few dense groups (a template's records) plus chance pairs, with repeats
    group = rng.integers(0, max(1, n // 6), n)
    a = rng.integers(0, n, m)
    b = np.where(rng.random(m) < 0.7, rng.permutation(n)[group[a] % n], rng.integers(0, n, m))
    pairs = np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1)
    pairs = np.unique(pairs[pairs[:, 0] != pairs[:, 1]], axis=0).reshape(-1, 2)
    threshold, margin = 0.7, 0.1
    estimates = rng.uniform(0.5, 0.9, len(pairs))
    truth = np.clip(estimates + rng.normal(0, 0.05, len(pairs)), 0, 1)
    asked = []

    def exact(p):
        asked.append(p.tolist())
        rows = [np.flatnonzero((pairs == q).all(axis=1))[0] for q in p]
        return truth[rows]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(linking, "FIRST_ROUND", first)  # many rounds on a small graph
        linked, scores = link_pairs(n, pairs, estimates, threshold, margin, exact, big=big)
    sure = estimates >= threshold + margin
    unsure = np.abs(estimates - threshold) < margin
    want = pairs[sure | (unsure & (truth >= threshold))]
    assert (connected_components(n, linked) == connected_components(n, want)).all()
    assert sum(map(len, asked)) <= int(unsure.sum())
    # the same rounds, pairs and results as recomputing every component before each round
    ours, asked[:] = asked[:], []
    ref = reference_rounds(n, pairs, estimates, threshold, margin, exact, big, first)
    assert asked == ours
    assert linked.tolist() == ref[0].tolist() and scores.tolist() == ref[1].tolist()
    # every linked pair is a true link, with its exact score where it was asked for
    got = {tuple(p): s for p, s in zip(linked.tolist(), scores.tolist())}
    for i in np.flatnonzero(sure | (unsure & (truth >= threshold))):
        if tuple(pairs[i]) in got:
            assert got[tuple(pairs[i])] == (estimates[i] if sure[i] else truth[i])
    assert set(got) <= {tuple(p) for p in want.tolist()}
    # a cluster of at most ``big`` texts was never skipped: all its links are reported
    labels = connected_components(n, want)
    size = np.bincount(labels, minlength=n)
    for p in want[size[labels[want[:, 0]]] <= big].tolist():
        assert tuple(p) in got
