"""Multi-hop selection in compress's defaults: a chunk named only by a relevant chunk (the
bridge entity) is kept, and at a tight budget both hops survive as sentences."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxkit.compression.text import selection
from ctxkit.compression.text.multihop import (
    bridge_relevance,
    chunk_names,
    mentions,
    normalise,
    repeated_title,
)
from ctxkit.compression.text.pipeline import REASON_CODES, compress

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
    from ctxkit.compression.scoring.idf import IdfScorer
    from ctxkit.compression.text.units import input_units

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


def test_a_first_sentence_ranks_just_below_the_best_sentence_it_borrows_from():
    chunks = ["Romer: He liked tea. Romer joined the regiment that Napoleon founded.",
              "Garden club: Gardeners grow beans. They grow peas."]
    for share in (0.4, 1.0):
        scores = _scores(chunks, share)
        # the first sentence comes with the best (far above the rest), just below it: when only
        # one of the two fits, the sentence whose own relevance earned the score is kept
        assert 0 < scores[1] - scores[0] < 1e-6 and scores[0] > scores[2:].max() + 0.1
    out = compress(chunks, 12, query=QUERY, scorer="idf")
    assert out.text == "Romer joined the regiment that Napoleon founded."


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


def test_repeated_title_is_a_prefix_whose_every_word_the_sentence_repeats():
    assert repeated_title("Jan Romer: Jan Romer was a Polish general.") == len("Jan Romer: ")
    # the parenthetical counts: its words must be in the sentence too
    film = "The Visit (2015 film): The Visit is a 2015 American horror film."
    assert film[repeated_title(film):] == "The Visit is a 2015 American horror film."
    assert repeated_title("Mary Poppins (disambiguation): Mary Poppins is a series.") == 0
    assert repeated_title("Paris\nParis is the capital of France.") == len("Paris\n")
    # case, accents and punctuation do not matter; a missing word does
    assert repeated_title("Kolozsvár Ghetto: The kolozsvar ghetto was small.") > 0
    assert repeated_title("Jan Romer: Romer was a general.") == 0
    # no title: body text before a colon, a time, a title with nothing after it
    for text in ("Plain text. With a: colon with text", "At 10:30 we meet at 10.",
                 "Jan Romer: ", "Title only"):
        assert repeated_title(text) == 0


def test_a_repeated_title_costs_nothing_and_is_in_the_ledger():
    chunks = ["Vistula Legion: The Vistula Legion was a Polish formation raised by Napoleon "
              "in 1807. Its soldiers served in Spain and in Russia for five years.",
              "Town band: A band plays marches on parade days in the square. Its members "
              "practise every Tuesday in the old school hall."]
    lead = "The Vistula Legion was a Polish formation raised by Napoleon in 1807."
    from ctxkit.io.tokenizers import get_tokenizer

    tok = get_tokenizer("cl100k_base")
    both = lead + " Its soldiers served in Spain and in Russia for five years."
    budget = tok.count(both)  # room for the chunk's two sentences, not for its title too
    out = compress(chunks, budget, query="Who raised the Vistula Legion, and where did its "
                   "soldiers serve?", scorer="idf")
    assert out.text == both and out.compressed_tokens <= budget
    unit = out.units[0]
    assert unit.kept and unit.code == "title_repeated" and unit.code in REASON_CODES
    assert unit.compressed == lead and unit.dropped_words == ["Vistula", "Legion:"]
    assert unit.text.startswith("Vistula Legion: ")  # the ledger keeps the input unit
    # force_keep keeps the unit verbatim, title included; word pruning decides on its own
    forced = compress(chunks, budget + 10, query="Who raised it?", scorer="idf",
                      force_keep="Vistula Legion:")
    assert forced.text.startswith("Vistula Legion: The Vistula Legion")
    pruned = compress(chunks, 40, query="Who raised the Vistula Legion?", scorer="idf",
                      token_drop=0.2)
    assert all(u.code != "title_repeated" for u in pruned.units)
    # a title the sentence does not repeat stays
    titled = "Legion history: " + lead
    other = compress([titled, chunks[1]], tok.count(titled),
                     query="Who raised the Vistula Legion?", scorer="idf")
    assert other.text == titled and other.units[0].code is None


_NAMES = ["Jan Romer", "Vistula Legion", "The Visit (2015 film)", "Paris", "Kolozsvár Ghetto"]
_BODIES = ["{name} was a Polish general.", "It was raised in 1807.", "{name} is a film by a "
           "director.", "The city of {name} is old.", "Nothing repeats the name here."]


@st.composite
def titled_chunks(draw):
    chunks = []
    for _ in range(draw(st.integers(1, 6))):
        name = draw(st.sampled_from(_NAMES))
        spoken = _PAREN_RE.sub("", name)
        body = " ".join(draw(st.sampled_from(_BODIES)).format(name=spoken)
                        for _ in range(draw(st.integers(1, 3))))
        chunks.append(f"{name}: {body}")
    return chunks


_PAREN_RE = re.compile(r"\s*\([^()]*\)")


@given(chunks=titled_chunks(), budget=st.integers(1, 60),
       granularity=st.sampled_from(["coarse-to-fine", "sentence", "chunk"]),
       query=st.sampled_from([None, "Who was the general?", "Which film?"]))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_repeated_titles_never_break_the_budget_or_lose_a_word(chunks, budget, granularity,
                                                                query):
    out = compress(chunks, budget, query=query, scorer="idf", granularity=granularity)
    assert out.compressed_tokens <= budget and out.text.strip()
    for u in out.units:
        if u.code == "title_repeated":
            assert u.kept and u.text.endswith(u.compressed) and u.compressed in out.text
            # every dropped title word is still in what the unit emits
            emitted = normalise(u.compressed)
            assert all(f" {w} " in emitted for w in normalise(" ".join(u.dropped_words)).split())


@pytest.mark.parametrize("code", [
    "for i in range(1, 11):\n    for j in range(1, 11):\n        print(i * j, end=' ')",
    "SELECT * FROM customers\nWHERE EXISTS (SELECT 1 FROM orders WHERE customers.id = 1)",
    "<form>\n  <label for='name'>Name:</label><br>\n</form>",
    "import requests\nfrom bs4 import BeautifulSoup\nhtml = requests.get(url).text",
    "def total(lower, upper): \n    total = lower + upper\n    return total",
])
def test_a_first_line_of_code_is_never_dropped_as_a_title(code):
    # the title rule dropped "for i in range(1, 11):" from code whose body repeats its words
    assert repeated_title(code) == 0
    chunks = [code, "Bananas are yellow and grow in bunches.", "The sky is blue today."]
    out = compress(chunks, 60, query="print a multiplication table", scorer="idf",
                   granularity="chunk")
    assert code in out.text and not any(u.code == "title_repeated" for u in out.units)
