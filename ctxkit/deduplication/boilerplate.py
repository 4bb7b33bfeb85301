"""Template lines shared across records, found and stripped so dedup compares what varies.

Instruction and tool-use datasets repeat a template in every record: a tool description, a
system preamble, ``### Response:`` markers. Two records that share a 300-character template
and differ in a 150-character task have a Jaccard similarity near 0.5 on their whole text,
so whole-record dedup links records that merely share a template. Here a *boilerplate
line* is a line (compared after stripping surrounding whitespace) that appears in at least
``min_share`` of the records and in at least ``min_count`` of them; it is left out before
shingling. Frequent lines in real text are almost always template: content lines recur in
a handful of records, template lines in hundreds (``docs/dedup.md`` shows the counts on
GPTeacher toolformer). This is the line-frequency filter of C4 and Gopher, applied across
records instead of across pages.

A record made only of boilerplate keeps its whole text (so two such records can still be
exact or near duplicates of each other); nothing is dropped.

Example:
    >>> recs = [f"You are a helpful bot.\\nAnswer briefly.\\nQ{i}: what is {i} + {i}?"
    ...         for i in range(20)]
    >>> out = strip_boilerplate(recs, min_share=0.5)
    >>> out.texts[3], out.lines
    ('Q3: what is 3 + 3?', ['You are a helpful bot.', 'Answer briefly.'])
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Container, Sequence
from dataclasses import dataclass

import numpy as np

from ctxkit.options import bad_option

__all__ = ["MIN_COUNT", "Boilerplate", "min_records", "strip_boilerplate", "strip_lines"]

MIN_COUNT = 5  # a line seen in fewer records is never called boilerplate


@dataclass
class Boilerplate:
    """What :func:`strip_boilerplate` found and what it left of every record.

    Attributes:
        texts: per record, its lines minus the boilerplate ones (joined by newlines), or the
            whole record when every line was boilerplate.
        lines: the boilerplate lines, most frequent first.
        counts: per boilerplate line, the number of records it appears in.
        stripped: per record, True when at least one line was left out.
        whole: per record, True when it was all boilerplate and so kept whole.
    """

    texts: list[str]
    lines: list[str]
    counts: list[int]
    stripped: np.ndarray
    whole: np.ndarray

    def summary(self, top: int = 5, width: int = 80) -> dict[str, object]:
        """A short, JSON-ready account for reports: counts and the most frequent lines."""
        return {
            "lines": len(self.lines),
            "records_stripped": int(self.stripped.sum()),
            "records_all_boilerplate": int(self.whole.sum()),
            "top": [{"line": line[:width], "records": c}
                    for line, c in zip(self.lines[:top], self.counts[:top])],
        }


def min_records(min_share: float, n: int, min_count: int = MIN_COUNT) -> int:
    """The records a line must appear in, of ``n``, to be boilerplate.

    Example:
        >>> min_records(0.01, 100_000), min_records(0.01, 100)
        (1000, 5)
    """
    return max(int(min_count), math.ceil(min_share * n))


def strip_lines(text: str, lines: Sequence[str], common: Container[str]) -> tuple[str, bool, bool]:
    """``text`` (split into stripped ``lines``) without its ``common`` lines: ``(text,
    stripped, whole)``, ``whole`` when every line was common and the text stays as it was.

    Example:
        >>> strip_lines("Hi\\nQ: 2+2?", ["Hi", "Q: 2+2?"], {"Hi"})
        ('Q: 2+2?', True, False)
    """
    kept = [line for line in lines if line not in common]
    if len(kept) == len(lines):
        return text, False, False
    if any(kept):
        return "\n".join(kept).strip("\n"), True, False
    return text, True, True


def strip_boilerplate(
    texts: Sequence[str], min_share: float = 0.01, min_count: int = MIN_COUNT
) -> Boilerplate:
    """Leave out of every record the lines that recur across many records (templates).

    A line counts once per record however often it repeats inside it; it is boilerplate when
    it appears in at least ``max(min_count, ceil(min_share * len(texts)))`` records. Empty
    lines are kept (they carry no shingles of their own).
    """
    if not 0.0 < min_share <= 1.0:
        raise bad_option("min_share", f" must be in (0, 1], got {min_share!r}")
    split = [[line.strip() for line in t.split("\n")] for t in texts]
    seen: Counter[str] = Counter()
    for lines in split:
        seen.update(dict.fromkeys(lines).keys())  # once per record, in order of first sight
    need = min_records(min_share, len(texts), min_count)
    common = {line: c for line, c in seen.items() if c >= need and line}
    n = len(texts)
    stripped = np.zeros(n, dtype=bool)
    whole = np.zeros(n, dtype=bool)
    out = list(texts)
    if common:
        for i, lines in enumerate(split):
            out[i], stripped[i], whole[i] = strip_lines(texts[i], lines, common)
    ranked = sorted(common.items(), key=lambda kv: -kv[1])  # stable: ties by first appearance
    return Boilerplate(texts=out, lines=[k for k, _ in ranked], counts=[c for _, c in ranked],
                       stripped=stripped, whole=whole)
