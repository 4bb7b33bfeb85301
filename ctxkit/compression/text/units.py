"""Units of a text for compression: splitting into sentences or paragraphs, the input's
units with the chunk each belongs to, units holding ``force_keep`` strings, and rendering a
selection back with the separators that stood between the units.

A sentence ends at ``.``, ``!`` or ``?`` (with any closing quote or bracket) before a space, or
at a line break, except where the full stop belongs to a name or an abbreviation:

- after a lone capital, an initial ("P. L. Travers", "M. Night Shyamalan");
- after a known abbreviation (:data:`ABBREVIATIONS`: "St. Croix", "Dr. Lakshminarayana");
- before a lowercase word when the word before the stop is abbreviation-like: short and
  capitalised ("Quitters, Inc." by Stephen King, "Mt. of Olives") or dotted ("e.g. this").
  A lowercase word alone does not prevent a split, so all-lowercase chat ("ok. sounds good.
  see you") still splits into sentences.

Example:
    >>> pairs = split_units("One. Two!\\n\\nThree")
    >>> render_units(pairs, [0, 2])
    'One.\\n\\nThree'
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ctxkit.errors import InputError

__all__ = ["forced_mask", "input_units", "render_units", "split_units"]

_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_PARA = re.compile(r"[ \t]*\n[ \t]*\n\s*")
# a full stop after a lone capital is an initial ("P. L. Travers", "M. Night"), not a sentence end
_SENT = re.compile(r"(?:(?<=[.!?])(?<!\b[A-Z]\.)|(?<=[.!?][\"')\]]))[ \t]+(?=\S)|[ \t]*\n\s*")
# Titles and name parts written before or inside a name ("St. Croix", "Ken St. Andre",
# "Dr. Lakshminarayana", "Col. Sanders") and company suffixes ("Acme Co. Ltd."): a split after
# their full stop cuts a name in two and leaves fragments like "Col." that a selection can keep
# alone. As in punkt, a known abbreviation does not end a sentence; the cost where one does
# ("... Apple Inc. The company ...") is one longer unit.
# These abbreviate before a number only ("No. 5", "Op. 32", "(d. 1325)", "c. 1603"); before a
# word "No." is an answer and a single letter is an initial or a sentence's last word.
_NUMBER_ABBREVIATIONS = frozenset({"No", "Op", "Vol", "vol", "pp", "c", "ca", "d", "b", "fl"})
ABBREVIATIONS = frozenset({"St", "Dr", "Mr", "Mrs", "Ms", "Prof", "Jr", "Sr", "Co", "vs", "Col",
                           "Gen", "Lt", "Sgt", "Capt", "Gov", "Sen", "Rep", "Inc", "Ltd", "Corp",
                           "Rev", "Hon", "Mt", "Ft", "approx"}) | _NUMBER_ABBREVIATIONS
# the word before a full stop and any closing quotes or brackets after it
_LAST_WORD = re.compile(r"(\w+(?:\.\w+)*)\.[\"')\]]*\Z")
# a short capitalised word ("Inc", "Mt", "Corp") or a dotted one ("e.g", "a.m")
_ABBREVIATION_LIKE = re.compile(r"[A-Z][a-z]{0,3}|\w{1,3}(?:\.\w{1,3})+")
_LIST_MARKER = re.compile(r"^(?:\d{1,3}|[A-Za-z]|[ivx]{1,4})[.)]$")


def _ends_sentence(text: str, m: re.Match) -> bool:
    """Whether the boundary ``m`` of :data:`_SENT` ends a sentence (see the module docstring)."""
    if "\n" in m.group():
        return True
    # a window as long as any abbreviation keeps the check constant-time on long texts
    last = _LAST_WORD.search(text[max(0, m.start() - 24):m.start()])
    if last is None:
        return True
    word, after = last.group(1), text[m.end():m.end() + 4].lstrip("\"'([")
    if word in ABBREVIATIONS and (word not in _NUMBER_ABBREVIATIONS or after[:1].isdigit()):
        return False
    return not (after[:1].islower() and _ABBREVIATION_LIKE.fullmatch(word))


def _split_prose(text: str, pattern: re.Pattern) -> list[tuple[str, str]]:
    pieces: list[tuple[str, str]] = []
    pos = 0
    for m in pattern.finditer(text):
        if pattern is _SENT and not _ends_sentence(text, m):
            continue
        if m.start() > pos:
            pieces.append((text[pos:m.start()], m.group()))
        elif pieces:
            pieces[-1] = (pieces[-1][0], pieces[-1][1] + m.group())
        pos = m.end()
    if pos < len(text):
        pieces.append((text[pos:], ""))
    # "1. First item": a list marker is not a sentence of its own
    merged: list[tuple[str, str]] = []
    for piece in pieces:
        if merged and _LIST_MARKER.match(merged[-1][0]):
            body, sep = merged.pop()
            piece = (body + sep + piece[0], piece[1])
        merged.append(piece)
    return merged


def split_units(text: str, granularity: str = "sentence") -> list[tuple[str, str]]:
    """Split ``text`` into ``(unit, separator)`` pairs whose concatenation is ``text``
    without its leading whitespace. Fenced code blocks are always one unit.

    Example:
        >>> split_units("One. Two!\\n\\nThree")
        [('One.', ' '), ('Two!', '\\n\\n'), ('Three', '')]
        >>> [u for u, _ in split_units("One. Two!\\n\\nThree", "chunk")]
        ['One. Two!', 'Three']
    """
    pattern = _PARA if granularity == "chunk" else _SENT
    body = text.lstrip()
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _FENCE.finditer(body):
        out.extend(_split_prose(body[pos:m.start()], pattern))
        rest = body[m.end():]
        sep = rest[: len(rest) - len(rest.lstrip())]
        out.append((m.group(), sep))
        pos = m.end() + len(sep)
    out.extend(_split_prose(body[pos:], pattern))
    return out


def render_units(units: Sequence[tuple[str, str]], order: Sequence[int],
                 marker: str = "") -> str:
    """Join units ``order`` with the strongest separator found between them; neighbours keep
    the exact separator that stood between them (empty where a long run was cut mid-word).
    ``marker``: shown between units that were not neighbours, so that clauses of different
    sentences never read as one.

    Example:
        >>> render_units([("a,", " "), ("b", ""), ("(c)", "")], [0, 1, 2])
        'a, b(c)'
        >>> render_units([("A prize of 1 lakh (equal to", " "), ("two lakh).", " "),
        ...               ("the goddess of knowledge.", "")], [0, 2], marker="…")
        'A prize of 1 lakh (equal to … the goddess of knowledge.'
    """
    parts: list[str] = []
    prev = None
    for i in order:
        if prev is not None and i == prev + 1:
            parts.append(units[prev][1])
        elif prev is not None:
            gap = [units[j][1] for j in range(prev, i)] if i > prev else [units[prev][1]]
            sep = max(gap, key=lambda s: (s.count("\n"), len(s))) or " "
            if marker:
                sep = f"{sep}{marker}{sep}" if "\n" in sep else f" {marker} "
            parts.append(sep)
        parts.append(units[i][0])
        prev = i
    return "".join(parts)


def input_units(text_or_chunks: str | Sequence[str], granularity: str
                ) -> tuple[list[tuple[str, str]], list[int]]:
    """The ``(unit, separator)`` pairs of a text or a list of chunks, and the chunk of each.

    Example:
        >>> input_units(["One. Two.", "Three."], "sentence")
        ([('One.', ' '), ('Two.', '\\n\\n'), ('Three.', '')], [0, 0, 1])
    """
    if isinstance(text_or_chunks, str):
        # coarse-to-fine ranks a string's paragraphs, keeping the separators between them
        paras = split_units(text_or_chunks, "chunk") if granularity == "coarse-to-fine" else []
        chunks = [p for p, _ in paras] or [text_or_chunks]
        joins = [sep for _, sep in paras] or [""]
    elif isinstance(text_or_chunks, (list, tuple)):
        chunks = list(text_or_chunks)
        joins = ["\n\n"] * (len(chunks) - 1) + [""]
    else:
        raise InputError("compress needs a str or a list of str chunks, got "
                         f"{type(text_or_chunks).__name__}")
    for i, c in enumerate(chunks):
        if not isinstance(c, str):
            raise InputError(f"chunk {i} is {type(c).__name__}, not str", index=i)
    units: list[tuple[str, str]] = []
    owner: list[int] = []
    for ci, chunk in enumerate(chunks):
        if not isinstance(text_or_chunks, str) and granularity == "chunk":
            pieces = [(chunk.strip(), "")] if chunk.strip() else []
        else:
            pieces = split_units(chunk, "chunk" if granularity == "chunk" else "sentence")
        if pieces:
            pieces[-1] = (pieces[-1][0].rstrip(), joins[ci])
        units.extend(pieces)
        owner.extend([ci] * len(pieces))
    return units, owner


def forced_mask(units: list[tuple[str, str]], force_keep: Sequence[str]) -> np.ndarray:
    """Units overlapping an occurrence of a force_keep string, found in the joined text.

    Example:
        >>> forced_mask([("Call", " "), ("me", " "), ("now", "")], ["me now"]).tolist()
        [False, True, True]
    """
    mask = np.zeros(len(units), dtype=bool)
    if not force_keep:
        return mask
    starts, pos = [], 0
    for body, sep in units:
        starts.append(pos)
        pos += len(body) + len(sep)
    starts_arr = np.array(starts)
    joined = "".join(b + s for b, s in units)
    for needle in force_keep:
        for m in re.finditer(re.escape(needle), joined):
            first = int(np.searchsorted(starts_arr, m.start(), side="right")) - 1
            last = int(np.searchsorted(starts_arr, m.end() - 1, side="right")) - 1
            mask[first:last + 1] = True
    return mask
