"""Multi-hop relevance between chunks: a chunk that a relevant chunk refers to is relevant too.

Multi-hop questions ("which army did the general of X join?") need a second chunk that shares
no word with the question: it is reached through an entity named only in the first chunk (the
bridge). Iterative retrieval follows such links with a second query; here the link is read
from the text itself, without a model:

- a chunk's *name* is its title-like prefix (:func:`chunk_names`): the text before ``": "`` or
  a short first line at the chunk's start, as RAG passages are commonly written (``"Title:
  body"``, ``"Title\\nbody"``), without a trailing parenthetical ("The Visit (2015 film)" is
  named "The Visit"); a chunk without one has no name and is never a hop target;
- chunk ``j`` is *referred to* by sentence ``s`` of another chunk when ``s`` contains ``j``'s
  name as a phrase (case, accents and punctuation ignored), and by the query when it does;
- a referred chunk inherits the relevance of what refers to it (:func:`bridge_relevance`)::

      hop_j = max( [query names j],  max_{s in chunk i != j, s names j}  rel_i * w_s )
      rel'_j = max(rel_j, hop_j),    w_s = (1 + srel_s) / 2 if srel_s > 0 else 0

  where ``rel_i`` is chunk ``i``'s relevance (in [0, 1], best chunk 1) and ``srel_s`` the
  referring sentence's own query relevance as a share of its chunk's best sentence's. A
  reference is worth what the sentence making it is worth to the query: the bridge sentence
  (the first hop's most relevant) passes its chunk's whole relevance to the chunk it names, any
  other sentence sharing a query word at least half of it, a name dropped in a sentence with
  no query word nothing. A chunk is never scored above the best chunk that refers to it, so
  the first hop stays ahead of the second; a chunk the query itself names is fully relevant.

Example:
    >>> chunks = ["Jan Romer: Jan Romer was a general. He joined the Austro-Hungarian Army.",
    ...           "Austro-Hungarian Army: It was the ground force of the Dual Monarchy.",
    ...           "Polish Army: The army of Poland."]
    >>> chunk_names(chunks)
    ['Jan Romer', 'Austro-Hungarian Army', 'Polish Army']
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Sequence

import numpy as np

from ctxkit.compression.text.units import render_units

__all__ = ["MAX_NAME_WORDS", "bridge_relevance", "chunk_links", "chunk_names", "chunk_texts",
           "mentions"]

# a title-like prefix is a name, not a sentence: Wikipedia titles and headings are a few words
# (HotpotQA's longest titles have about ten)
MAX_NAME_WORDS = 12

_PREFIX = re.compile(r"\s*([^\n]{1,200}?)(?::[ \t]+|[ \t]*\n)")
_SENTENCE_END = re.compile(r"[a-z]{2}[.!]\s")
_PAREN = re.compile(r"\s*\([^()]*\)\s*$")
# a title line that reads as a name: words and light punctuation, no code operator or bracket
_NAME_LINE = re.compile(r"[\w\s,.'’&-]+")
_NON_WORD = re.compile(r"[\W_]+")


def normalise(text: str) -> str:
    """Lowercase, accents and punctuation dropped, words joined by one space, padded by spaces
    so that ``" name " in normalise(text)`` matches whole words.

    Example:
        >>> normalise("Kolozsvár Ghetto, (Cluj)")
        ' kolozsvar ghetto cluj '
    """
    folded = unicodedata.normalize("NFKD", html.unescape(text).casefold())
    folded = "".join(c for c in folded if not unicodedata.combining(c))
    return " " + " ".join(_NON_WORD.sub(" ", folded).split()) + " "


def chunk_names(chunks: Sequence[str]) -> list[str | None]:
    """The title-like prefix of each chunk (module docstring), or None.

    Example:
        >>> chunk_names(["The Visit (2015 film): A horror film.", "Paris\\nThe capital.",
        ...              "No title here. Just text: with a colon."])
        ['The Visit', 'Paris', None]
    """
    return [title[0] if (title := _title(chunk)) else None for chunk in chunks]


def _title(chunk: str) -> tuple[str, re.Match[str]] | None:
    """The chunk's name and the match of its whole prefix, or None (module docstring)."""
    m = _PREFIX.match(chunk)
    name = _PAREN.sub("", m.group(1)).strip() if m else ""
    words = name.split()
    # a prefix holding a sentence end is body text, not a title ("Mr. O'Brien" and
    # "J. R. Williams" are abbreviations and initials, not sentence ends)
    if not words or len(words) > MAX_NAME_WORDS or _SENTENCE_END.search(name + " "):
        return None
    return (name, m) if normalise(name).strip() else None


def mentions(texts: Sequence[str], names: Sequence[str | None]) -> np.ndarray:
    """``[len(texts), len(names)]`` boolean: text ``t`` names chunk ``j`` as a whole phrase.

    Example:
        >>> mentions(["He joined the Austro-Hungarian army."], ["Austro-Hungarian Army", None,
        ...          "Army"]).tolist()
        [[True, False, True]]
    """
    # names indexed by their first word: each text is read once, whatever the number of names
    by_first: dict[str, list[tuple[int, tuple[str, ...]]]] = {}
    for j, name in enumerate(names):
        words = tuple(normalise(name).split()) if name else ()
        if words:
            by_first.setdefault(words[0], []).append((j, words))
    out = np.zeros((len(texts), len(names)), dtype=bool)
    for i, text in enumerate(texts):
        words = normalise(text).split()
        for k, w in enumerate(words):
            for j, key in by_first.get(w, ()):
                if tuple(words[k:k + len(key)]) == key:
                    out[i, j] = True
    return out


def bridge_relevance(chunk_rel: np.ndarray, names: Sequence[str | None],
                     sentences: Sequence[str], owner: Sequence[int], sentence_rel: np.ndarray,
                     query: str) -> np.ndarray:
    """Chunk relevance raised by references (module docstring formula), in [0, 1].

    ``chunk_rel``: each chunk's relevance, best 1; ``sentences`` with their chunk ``owner`` and
    query relevance ``sentence_rel`` (any non-negative scale; compared within each chunk).

    Example:
        >>> rel = bridge_relevance(np.array([1.0, 0.1, 0.2]), ["A", "B", "C"],
        ...                        ["A joined B.", "B is old.", "C is new."], [0, 1, 2],
        ...                        np.array([0.8, 0.0, 0.0]), "who did A join?")
        >>> rel.tolist()
        [1.0, 1.0, 0.2]
    """
    chunk_rel = np.asarray(chunk_rel, dtype=np.float64)
    n = len(chunk_rel)
    if n < 2 or not any(names):
        return chunk_rel
    own = np.asarray(owner)
    srel = np.asarray(sentence_rel, dtype=np.float64)
    best = np.zeros(n)
    np.maximum.at(best, own, srel)
    # each sentence's share of its chunk's best sentence relevance
    share = np.divide(srel, best[own], out=np.zeros_like(srel), where=best[own] > 0)
    weight = np.where(share > 0, (1 + share) / 2, 0.0)
    refs = mentions(list(sentences), names)  # [sentences, chunks]
    refs[np.arange(len(own)), own] = False  # a chunk naming itself is no reference
    hop = ((chunk_rel[own] * weight)[:, None] * refs).max(axis=0) if len(own) else np.zeros(n)
    named = mentions([query], names)[0].astype(np.float64)
    return np.maximum(chunk_rel, np.maximum(hop, named))


def chunk_texts(pairs: Sequence[tuple[str, str]], owner: Sequence[int]) -> list[str]:
    """The text of each chunk, rendered from its ``(unit, separator)`` pairs.

    Example:
        >>> chunk_texts([("A.", " "), ("B.", "\\n\\n"), ("C.", "")], [0, 0, 1])
        ['A. B.', 'C.']
    """
    own = np.asarray(owner)
    n = int(own.max()) + 1 if own.size else 0
    return [render_units(pairs, np.flatnonzero(own == c)) for c in range(n)]


def chunk_links(pairs: Sequence[tuple[str, str]], owner: Sequence[int]) -> np.ndarray:
    """``[chunks, chunks]`` boolean, symmetric: one chunk names the other.

    Example:
        >>> chunk_links([("A: A met B.", ""), ("B: B is old.", ""), ("C: C.", "")],
        ...             [0, 1, 2]).astype(int).tolist()
        [[0, 1, 0], [1, 0, 0], [0, 0, 0]]
    """
    texts = chunk_texts(pairs, owner)
    refs = mentions(texts, chunk_names(texts))
    np.fill_diagonal(refs, False)
    return refs | refs.T


def repeated_title(unit: str) -> int:
    """Characters of ``unit``'s title-like prefix (module docstring; with its ``": "`` or line
    break) when the rest of the unit repeats every word of it, else 0: such a title says
    nothing its sentence does not, so dropping it loses no word of information. A title line
    (one ending in a line break) counts only when it reads as a name (words and light
    punctuation) and the next line opens with it: the first line of code ("for i in
    range(10):", "import requests", "<form>") is a statement, never dropped.

    Example:
        >>> repeated_title("Jan Romer: Jan Romer was a Polish general.")
        11
        >>> repeated_title("Mary Poppins (disambiguation): Mary Poppins is a series.")
        0
        >>> repeated_title("for i in range(3):\\n    print(i in range(3))")
        0
    """
    title = _title(unit)
    if title is None:
        return 0
    name, m = title
    rest = normalise(unit[m.end():])
    # "Title: body" on one line; a title line must read as a name and open the next line
    inline = m.group(0).rstrip(" \t").endswith(":") and unit[m.end():m.end() + 1] not in "\r\n"
    if not inline and not (_NAME_LINE.fullmatch(name) and rest.startswith(normalise(name))):
        return 0
    return m.end() if all(f" {w} " in rest for w in normalise(m.group(1)).split()) else 0
