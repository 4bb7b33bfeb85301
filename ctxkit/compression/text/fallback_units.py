"""Fallback units: text without sentence boundaries is cut on other boundaries.

Transcripts, chat logs, code, lists without full stops and one-line records have no sentence
ends, so sentence splitting leaves one unit that can be larger than the whole budget, and a
selection of whole units then keeps nothing. :func:`cap_units` cuts every unit over ``cap``
tokens on the strongest boundary it has, in this order:

1. lines (a newline in the gap);
2. clauses: after ``;`` or ``,``, or before a dash standing alone (`` - ``), with adjacent
   clauses merged back while they fit ``cap``;
3. a token window: runs of atoms sized to ``cap`` tokens.

Cuts fall only between atoms (:func:`ctxkit.compression.atoms.atoms`), never inside a number,
identifier, URL or code span, and never inside a ``force_keep`` string, so those stay whole;
an atom larger than ``cap`` stays one unit. The separators are kept, so the pieces render back
to the unit exactly (:func:`ctxkit.compression.text.units.render_units`).

Example:
    >>> count = lambda texts: [len(t.split()) for t in texts]  # a word is a token here
    >>> pieces, owner = cap_units([("one two three four five six", "")], [0], 3, count)
    >>> [p for p, _ in pieces]
    ['one two', 'three four', 'five six']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from ctxkit.compression.atoms import atoms

__all__ = ["MAX_UNIT_TOKENS", "cap_units"]

# Longest unit a sentence-level selection scores whole: the bundled MiniLM reads 256 word
# pieces (about 200 cl100k tokens) and ignores the rest, so a longer unit is ranked on its head.
MAX_UNIT_TOKENS = 200

_LINE, _CLAUSE, _WINDOW, _NO_CUT = 0, 1, 2, 3
_DASH = re.compile(r"^[-–—]$")

Counter = Callable[[Sequence[str]], Sequence[int]]


def cap_units(pairs: Sequence[tuple[str, str]], owner: Sequence[int], cap: int,
              count: Counter, force_keep: Sequence[str] = (), size: int | None = None
              ) -> tuple[list[tuple[str, str]], list[int]]:
    """``pairs`` with every unit over ``cap`` tokens cut into pieces of at most ``size``
    tokens (default ``cap``; see the module docstring), and the chunk ``owner`` of each
    piece. ``count`` maps texts to their token counts.

    Example:
        >>> count = lambda texts: [len(t.split()) for t in texts]
        >>> pieces, _ = cap_units([("a b, c d; e f g", "\\n")], [7], 3, count)
        >>> pieces
        [('a b,', ' '), ('c d;', ' '), ('e f g', '\\n')]
    """
    cap = max(1, int(cap))
    size = cap if size is None else max(1, min(int(size), cap))
    counts = count([b for b, _ in pairs])
    out: list[tuple[str, str]] = []
    out_owner: list[int] = []
    for (body, sep), o, n in zip(pairs, owner, counts):
        pieces = [(body, sep)] if n <= cap else _cut(body, size, count, force_keep)
        pieces[-1] = (pieces[-1][0], sep)
        out.extend(pieces)
        out_owner.extend([o] * len(pieces))
    return out, out_owner


def _cut(body: str, cap: int, count: Counter, force_keep: Sequence[str]
         ) -> list[tuple[str, str]]:
    spans = atoms(body)
    n = len(spans)
    if n < 2:
        return [(body, "")]
    starts = np.array([s for s, _, _ in spans])
    ends = np.array([e for _, e, _ in spans])
    kind = np.array([_gap_kind(body[ends[i]:starts[i + 1]], spans[i][2], spans[i + 1][2])
                     for i in range(n - 1)], dtype=np.int8)
    for needle in force_keep:
        for m in re.finditer(re.escape(needle), body):
            # gaps i with ends[i] < m.end() and starts[i + 1] > m.start() lie inside it
            lo = int(np.searchsorted(starts, m.start(), side="right")) - 1
            hi = int(np.searchsorted(ends, m.end(), side="left"))
            kind[max(lo, 0):max(hi, 0)] = _NO_CUT

    def text(r: tuple[int, int]) -> str:
        return body[starts[r[0]]:ends[r[1] - 1]]

    # lines, counted exactly: each that fits is a unit
    lines = _ranges(0, n, kind, _LINE)
    done: list[tuple[int, int]] = []
    todo: list[tuple[int, int, int]] = []  # (start, end, tokens) of ranges still over cap
    for r, k in zip(lines, count([text(r) for r in lines])):
        if k <= cap:
            done.append(r)
        else:
            todo.append((*r, k))
    # clauses of the long lines, merged while they fit: sized by characters at the line's
    # tokens per character, then the merged pieces counted exactly
    groups: list[list[tuple[int, int]]] = []
    for a, b, k in todo:
        per_char = k / max(1, ends[b - 1] - starts[a])
        parts = _ranges(a, b, kind, _CLAUSE)
        groups.extend(_merge(parts, [per_char * (ends[y - 1] - starts[x]) for x, y in parts],
                             0.9 * cap))
    merged = [(g[0][0], g[-1][1]) for g in groups]
    over: list[tuple[int, int]] = []
    for g, r, k in zip(groups, merged, count([text(r) for r in merged])):
        if k <= cap:
            done.append(r)
        elif len(g) > 1:
            over.extend(g)
        else:
            done.extend(_windows(r, k, kind, cap, count, text))
    for r, k in zip(over, count([text(r) for r in over])):
        done.extend([r] if k <= cap else _windows(r, k, kind, cap, count, text))
    done.sort()
    return [(text(r), body[ends[r[1] - 1]:starts[r[1]]] if r[1] < n else "") for r in done]


def _ranges(a: int, b: int, kind: np.ndarray, level: int) -> list[tuple[int, int]]:
    """Atom ranges of ``[a, b)`` cut at every gap of ``level`` or stronger."""
    bounds = [a, *(a + 1 + np.flatnonzero(kind[a:b - 1] <= level)).tolist(), b]
    return list(zip(bounds[:-1], bounds[1:]))


def _gap_kind(gap: str, left: str, right: str) -> int:
    if "\n" in gap:
        return _LINE
    if gap and (left[-1] in ";," or _DASH.match(right)):
        return _CLAUSE
    return _WINDOW


def _merge(parts: list[tuple[int, int]], sizes: Sequence[float], target: float
           ) -> list[list[tuple[int, int]]]:
    """Adjacent ranges grouped while their estimated tokens stay within ``target``."""
    groups: list[list[tuple[int, int]]] = []
    total = target + 1
    for r, k in zip(parts, sizes):
        if total + k <= target:
            groups[-1].append(r)
            total += k
        else:
            groups.append([r])
            total = k
    return groups


def _windows(r: tuple[int, int], tokens: int, kind: np.ndarray, cap: int, count: Counter,
             text) -> list[tuple[int, int]]:
    """``r`` cut into runs of atoms of at most ``cap`` tokens (sized by the range's tokens per
    atom, then halved where a run still counts over)."""
    a, b = r
    allowed = a + 1 + np.flatnonzero(kind[a:b - 1] < _NO_CUT)
    if allowed.size == 0:
        return [r]
    step = max(1, int(0.9 * cap * (b - a) / max(tokens, 1)))
    bounds = [a]
    while bounds[-1] + step < b:
        k = int(np.searchsorted(allowed, bounds[-1] + step, side="right")) - 1
        if k < 0 or allowed[k] <= bounds[-1]:  # no cut within a step: the next one after
            k = int(np.searchsorted(allowed, bounds[-1], side="right"))
        if k >= allowed.size:
            break
        bounds.append(int(allowed[k]))
        if bounds[-1] >= b:
            break
    bounds.append(b)
    runs = list(zip(bounds[:-1], bounds[1:]))
    out = []
    for run, n in zip(runs, count([text(x) for x in runs])):
        if n <= cap or run[1] - run[0] < 2:
            out.append(run)
            continue
        mid = allowed[(allowed > run[0]) & (allowed < run[1])]
        if mid.size == 0:
            out.append(run)
            continue
        cut = int(mid[np.argmin(np.abs(mid - (run[0] + run[1]) / 2))])
        for half in ((run[0], cut), (cut, run[1])):
            out.extend(_windows(half, max(1, n // 2), kind, cap, count, text))
    return out
