"""Atoms: the units pruning keeps or drops whole (words, numbers, identifiers, URLs, code).

Example:
    >>> spans = atoms("See https://x.org/a?b=1 and foo_bar(3.14).")
    >>> [text for _, _, text in spans]
    ['See', 'https://x.org/a?b=1', 'and', 'foo_bar', '(', '3.14', ').']
"""

from __future__ import annotations

import re

__all__ = ["atoms", "is_protected"]


# One atom = one thing pruning may keep or drop whole. Order matters: the first alternative that
# matches wins, so code spans, URLs, e-mails and numbers are never cut into words.
_ATOM = re.compile(
    r"```.*?(?:```|\Z)"  # fenced code block (unterminated: to the end)
    r"|`[^`\n]+`"  # inline code span
    r"|(?:https?|ftp)://[^\s<>\"'`]+[^\s<>\"'`.,;:!?)\]}]"  # URL, without trailing punctuation
    r"|www\.[^\s<>\"'`]+[^\s<>\"'`.,;:!?)\]}]"
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"  # e-mail
    r"|[-+]?[$€£]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?%?"  # number (1,234.5 / 3e-5 / 12%)
    r"|\w+(?:(?:::|->|[._/\-'’])\w+)*"  # word or identifier: foo_bar a.b x::y state-of-the-art
    r"|[^\w\s]+",  # punctuation run
    re.DOTALL,
)


_PROTECTED = re.compile(
    r"^(?:`|(?:https?|ftp)://|www\.)"  # code, URL
    r"|\d"  # anything with a digit: numbers, versions, ids like A113
    r"|[A-Za-z0-9]_|::|->|@"  # snake_case, C++/Rust paths, e-mail
    r"|^\w+\.\w"  # dotted names: os.path
    r"|[a-z][A-Z]"  # camelCase
    r"|^[A-Z]{2,}"  # acronyms / codes: NASA, BLUEFIN
)


_WORD = re.compile(r"\w")


def atoms(text: str) -> list[tuple[int, int, str]]:
    """Split ``text`` into atoms ``(start, end, text)``; whitespace between atoms is not in any.

    Example:
        >>> [a for _, _, a in atoms("x = `a b` + 1,000.5")]
        ['x', '=', '`a b`', '+', '1,000.5']
    """
    return [(m.start(), m.end(), m.group()) for m in _ATOM.finditer(text)]


def is_protected(atom: str) -> bool:
    """True for atoms pruning must never drop: numbers, identifiers, URLs, code, acronyms.

    Example:
        >>> [is_protected(a) for a in ["the", "3.14", "foo_bar", "getX", "NASA", "`x`"]]
        [False, True, True, True, True, True]
    """
    return bool(_PROTECTED.search(atom))
