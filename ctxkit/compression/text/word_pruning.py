"""Word-level pruning inside kept units, LLMLingua-2 style: the lowest self-information
droppable atoms go first (filler words before all), protected atoms and ``force_keep`` strings
never.

Example:
    >>> import numpy as np
    >>> prune_atoms("um the value is 42", np.array([9.0, 1.0, 8.0, 5.0, 9.0]), 0.4, set(), [])
    ('value is 42', ['um', 'the'])
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ctxkit.compression.atoms import atoms, is_protected

__all__ = ["FILLER", "fit_tokens", "prune_atoms", "render_atoms"]

FILLER = frozenset(
    "um uh erm hmm basically actually literally really very just quite simply honestly "
    "anyway well so okay ok like totally definitely".split()
)


def render_atoms(text: str, spans: Sequence[tuple[int, int, str]], keep: np.ndarray) -> str:
    """``text`` with the atoms where ``keep`` is False removed, whitespace tidied."""
    parts: list[str] = []
    last_end = None
    for i, (start, end, atom) in enumerate(spans):
        if not keep[i]:
            continue
        if last_end is not None:
            gap = text[last_end:start]
            sep = text[spans[i - 1][1]:start] if i else ""
            if "\n" in gap and "\n" not in sep:
                sep = "\n"
            elif not sep and any(ch.isspace() for ch in gap):
                sep = " "
            parts.append(sep)
        parts.append(atom)
        last_end = end
    return "".join(parts)


def prune_atoms(text: str, bits: np.ndarray, share: float, protect: set[str],
                 force_keep: Sequence[str]) -> tuple[str, list[str]]:
    """Drop the ``share`` lowest-information droppable atoms of ``text``."""
    spans = atoms(text)
    if not spans or share <= 0:
        return text, []
    droppable = _droppable(text, spans, protect, force_keep)
    cand = np.flatnonzero(droppable)
    k = int(np.ceil(share * len(spans)))
    k = min(k, len(cand))
    if k == 0:
        return text, []
    value = _atom_value(spans, bits)
    drop = cand[np.argsort(value[cand], kind="stable")[:k]]
    keep = np.ones(len(spans), dtype=bool)
    keep[drop] = False
    return render_atoms(text, spans, keep), [spans[i][2] for i in sorted(drop)]


def _atom_value(spans: Sequence[tuple[int, int, str]], bits: np.ndarray) -> np.ndarray:
    value = np.asarray(bits, dtype=np.float64).copy()
    for i, (_, _, a) in enumerate(spans):
        if a.lower() in FILLER:
            value[i] = 0.0  # filler first
    return value


def _droppable(text: str, spans: Sequence[tuple[int, int, str]], protect: set[str],
               force_keep: Sequence[str]) -> np.ndarray:
    ok = np.array([not is_protected(a) and a.lower() not in protect for _, _, a in spans],
                  dtype=bool)
    for needle in force_keep:
        for m in re.finditer(re.escape(needle), text):
            for i, (s, e, _) in enumerate(spans):
                if s < m.end() and e > m.start():
                    ok[i] = False
    return ok


def fit_tokens(pairs, bits, prunable, budget, tok, protect, force, render
                ) -> dict[int, tuple[str, list[str]]]:
    """Token granularity: drop the globally least informative words until the text fits."""
    order = []  # (value, unit, atom) for every droppable atom of a prunable unit
    spans_of: dict[int, list] = {}
    for i in np.flatnonzero(prunable):
        spans = atoms(pairs[i][0])
        spans_of[int(i)] = spans
        ok = _droppable(pairs[i][0], spans, protect, force)
        value = _atom_value(spans, bits[i])
        order.extend((float(value[j]), int(i), int(j)) for j in np.flatnonzero(ok))
    order.sort()
    keep = {i: np.ones(len(s), dtype=bool) for i, s in spans_of.items()}
    compressed: dict[int, tuple[str, list[str]]] = {}
    excess = tok.count(render(compressed)) - budget
    done = 0
    while excess > 0 and done < len(order):
        # a word is ~1.3 tokens: drop a bit less than the excess, then count exactly again
        step = max(1, int(excess * 0.8))
        touched = set()
        for _, i, j in order[done:done + step]:
            keep[i][j] = False
            touched.add(i)
        done += step
        for i in touched:
            spans = spans_of[i]
            compressed[i] = (render_atoms(pairs[i][0], spans, keep[i]),
                             [spans[j][2] for j in np.flatnonzero(~keep[i])])
        excess = tok.count(render(compressed)) - budget
    return compressed

