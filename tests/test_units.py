import pytest

from ctxkit.compression.text.units import split_units


def sentences(text):
    return [u for u, _ in split_units(text)]


@pytest.mark.parametrize("text, pieces", [
    # the names HotpotQA's supporting sentences hold
    ("He was born in St. Croix. He moved.", ["He was born in St. Croix.", "He moved."]),
    ("Dr. Lakshminarayana said so. Yes.", ["Dr. Lakshminarayana said so.", "Yes."]),
    ('"Quitters, Inc." by Stephen King is a story. Next.',
     ['"Quitters, Inc." by Stephen King is a story.', "Next."]),
    ("Ken St. Andre wrote it. Ok.", ["Ken St. Andre wrote it.", "Ok."]),
    ("Col. Sanders founded KFC. He died.", ["Col. Sanders founded KFC.", "He died."]),
    # a short capitalised or dotted word before a lowercase one
    ("The Mt. of Olives is near. Yes!", ["The Mt. of Olives is near.", "Yes!"]),
    ("Use tools, e.g. hammers. Fine.", ["Use tools, e.g. hammers.", "Fine."]),
    # "No." abbreviates a number only before one
    ("No. I did not. See No. 5 here.", ["No.", "I did not.", "See No. 5 here."]),
    # titles and places before a name
    ("Prof. Dr. Adriana Blagoeva conducts. Rep. Ryan Zinke left. Mt. Everest is high.",
     ["Prof. Dr. Adriana Blagoeva conducts.", "Rep. Ryan Zinke left.", "Mt. Everest is high."]),
    # works, dates and pages: abbreviations before a number only
    ("The duets of Op. 32 are famous. Abu Talib (d. 996) wrote. Set in approx. 2020. Ok.",
     ["The duets of Op. 32 are famous.", "Abu Talib (d. 996) wrote.", "Set in approx. 2020.",
      "Ok."]),
    ("Macbeth (c. 1606) is a play. See pp. 12-14. It ends.",
     ["Macbeth (c. 1606) is a play.", "See pp. 12-14.", "It ends."]),
    ("He wrote Vol. 2 later. It was plan b. The end.",
     ["He wrote Vol. 2 later.", "It was plan b.", "The end."]),
])
def test_abbreviations_do_not_end_a_sentence(text, pieces):
    assert sentences(text) == pieces


@pytest.mark.parametrize("text, pieces", [
    ("ok. sounds good. see you", ["ok.", "sounds good.", "see you"]),
    ("Really? yes. sure! fine", ["Really?", "yes.", "sure!", "fine"]),
    ("we went home. it rained.\nbye", ["we went home.", "it rained.", "bye"]),
])
def test_lowercase_chat_still_splits(text, pieces):
    assert sentences(text) == pieces


@pytest.mark.parametrize("text, pieces", [
    ("Written by P. L. Travers. Then more.", ["Written by P. L. Travers.", "Then more."]),
    ("Directed by M. Night Shyamalan. Ok.", ["Directed by M. Night Shyamalan.", "Ok."]),
])
def test_initials_do_not_end_a_sentence(text, pieces):
    assert sentences(text) == pieces


def test_split_is_lossless_around_abbreviations():
    text = 'Mr. A met Mrs. B (of Acme Co.) on Monday. "Quitters, Inc." is by Jr. King.\nEnd.'
    pairs = split_units(text)
    assert "".join(b + s for b, s in pairs) == text
    assert len(pairs) == 3
