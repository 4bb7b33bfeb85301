"""Multi-hop selection in compress's defaults: a chunk named only by a relevant chunk (the
bridge entity) is kept, and at a tight budget both hops survive as sentences."""

import numpy as np

from ctxkit.compression import selection
from ctxkit.compression.multihop import bridge_relevance, chunk_names, mentions, normalise
from ctxkit.compression.prune import compress

QUERY = "Who founded the regiment that Romer joined?"
FIRST = ("Jan Romer: Jan Romer was a Polish general who joined the regiment called the "
         "Vistula Legion in 1890. He later fought at Limanowa and was wounded twice.")
SECOND = ("Vistula Legion: The Vistula Legion was a Polish formation raised by Napoleon in "
          "1807. Its soldiers served in Spain and in Russia for five years.")
DISTRACTORS = [  # each shares one word with the query, as retrieval distractors do
    "Regiment of Foot: The regiment fought in many wars across the empire. "
    "Its colours hang in the cathedral of the county town.",
    "Garden club: Gardeners grow beans in the beds that the club joined last year. "
    "They grow peas and onions there every summer.",
    "Romer scale: The Romer scale is a tool for reading map grid references precisely. "
    "It is printed on clear plastic and sold with most walking maps.",
    "Town band: A band plays marches on parade days in the square. "
    "Its members practise every Tuesday in the old school hall.",
]
CHUNKS = [FIRST, *DISTRACTORS[:2], SECOND, *DISTRACTORS[2:]]


def test_second_hop_shares_no_word_with_the_query():
    # the premise of the fixture: only the bridge entity leads to the second chunk
    words = set(normalise(QUERY).split()) - {"the", "that", "who"}
    assert not words & set(normalise(SECOND.split(":", 1)[1]).split())


def test_bridge_chunk_is_kept_where_one_pass_scoring_drops_it(monkeypatch):
    budget = 110
    out = compress(CHUNKS, budget, query=QUERY, scorer="idf")
    assert out.compressed_tokens <= budget
    assert "raised by Napoleon" in out.text and "joined the regiment" in out.text
    # the same call without the second hop loses it: the test can fail
    monkeypatch.setattr(selection, "bridge_relevance", lambda rel, *a: rel)
    one_pass = compress(CHUNKS, budget, query=QUERY, scorer="idf")
    assert "raised by Napoleon" not in one_pass.text


def _scores(chunks, share):
    from ctxkit.compression.idf import IdfScorer
    from ctxkit.compression.units import input_units

    pairs, owner = input_units(chunks, "coarse-to-fine")
    tokens = np.array([len(b.split()) for b, _ in pairs])
    return selection.coarse_to_fine_scores(pairs, owner, np.zeros(len(pairs)), IdfScorer(),
                                           QUERY, budget=int(tokens.sum() * share),
                                           tokens=tokens)


def test_a_tight_budget_ranks_sentences_first_when_the_evidence_spans_two_chunks():
    linked = ["Romer: Romer joined the Vistula Legion. He liked tea. He liked coffee.",
              "Vistula Legion: Napoleon founded the regiment in 1807."]
    filler, other = 2, 3  # "He liked tea." of the top chunk; the regiment sentence
    loose, tight = _scores(linked, 1.0), _scores(linked, 0.4)  # 2 / 0.8 chunks' worth
    assert tight[other] - tight[filler] > loose[other] - loose[filler] > 0
    assert tight[0] == tight[:3].max()  # a chunk's first sentence comes with its best
    # no chunk named: one chunk holds the evidence, and the chunk ranking stays first
    alone = [linked[0], "Legion history: Napoleon founded the regiment in 1807."]
    assert _scores(alone, 0.4).tolist() == _scores(alone, 1.0).tolist()


def test_chunk_names_are_title_like_prefixes():
    assert chunk_names([FIRST, "Paris\nThe capital.", "The Visit (2015 film): A film.",
                        "Procter &amp; Gamble: A company.", "Plain text. With a: colon",
                        "Ist das Ihr Fahrrad, Mr. O'Brien?: A radio play."]) == [
        "Jan Romer", "Paris", "The Visit", "Procter &amp; Gamble", None,
        "Ist das Ihr Fahrrad, Mr. O'Brien?"]


def test_mentions_ignore_case_accents_punctuation_and_entities():
    found = mentions(["Between the Kolozsvar ghetto and Procter & Gamble Co.",
                      "Nothing here about Kolozsvárosi things."],
                     ["Kolozsvár Ghetto", "Procter &amp; Gamble", "Gamble Co", "Ghet"])
    assert found.tolist() == [[True, True, True, False], [False, False, False, False]]


def test_bridge_relevance_follows_relevant_sentences_only():
    sentences = ["A met B.", "A likes C.", "B is old.", "C is new.", "D is here."]
    owner = [0, 0, 1, 2, 3]
    srel = np.array([1.0, 0.0, 0.0, 0.0, 0.0])  # only "A met B." is relevant
    rel = bridge_relevance(np.array([1.0, 0.1, 0.1, 0.2]), ["A", "B", "C", "D"], sentences,
                           owner, srel, "whom did A meet?")
    assert rel.tolist() == [1.0, 1.0, 0.1, 0.2]
    # a chunk the query names is fully relevant; no names: unchanged
    named = bridge_relevance(np.array([1.0, 0.1, 0.1, 0.2]), ["A", "B", "C", "D"], sentences,
                             owner, np.zeros(5), "is D here?")
    assert named.tolist() == [1.0, 0.1, 0.1, 1.0]
    assert bridge_relevance(np.array([1.0, 0.5]), [None, None], sentences[:2], [0, 1],
                            srel[:2], "q").tolist() == [1.0, 0.5]
