"""Checks of the public API's arguments, shared by every entry point.

Each helper returns the value (normalised where that helps: numpy integers become ``int``, one
string becomes a list of one text) or raises a one-line :class:`~ctxkit.errors.InputError`
(data) or :class:`~ctxkit.errors.OptionError` (an option) that names the argument, so
``except ctxkit.errors.CtxkitError`` catches every bad call and nothing built-in escapes from
deeper in.

Example:
    >>> text_or_texts("one text", "text_or_texts")
    ['one text']
    >>> try:
    ...     positive_int(0, "budget")
    ... except ValueError as exc:
    ...     print(exc)
    budget must be a positive integer, got 0
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxkit.errors import InputError
from ctxkit.options import bad_option

__all__ = [
    "check_choice",
    "is_collection",
    "is_int",
    "messages_list",
    "non_negative_int",
    "optional_text",
    "positive_int",
    "seed",
    "text_or_texts",
    "texts",
    "unit_interval",
]


def is_int(value: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_collection(value: Any) -> bool:
    """A sized iterable that is not a mapping: a list, tuple, numpy array, dataset column."""
    return (hasattr(value, "__len__") and hasattr(value, "__iter__")
            and not isinstance(value, Mapping))


def _kind(value: Any) -> str:
    return type(value).__name__


def texts(value: Any, name: str = "texts", item: str = "text") -> list[str]:
    """``value`` as a list of str: a list, tuple or other sequence of str, never one str.

    Example:
        >>> texts(("a", "b"))
        ['a', 'b']
    """
    if isinstance(value, (str, bytes)):
        raise InputError(f"{name} must be a list of str, got one {_kind(value)}; "
                         "wrap a single text in a list")
    if not is_collection(value):
        raise InputError(f"{name} must be a list of str, got {_kind(value)}")
    out = list(value)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InputError(f"{item} {i} of {name} is {_kind(t)}, not str")
    return out


def text_or_texts(value: Any, name: str, item: str = "text") -> list[str]:
    """One str as a list of one text; otherwise as :func:`texts`."""
    return [value] if isinstance(value, str) else texts(value, name, item)


def messages_list(value: Any, name: str = "messages") -> list[Any]:
    """``value`` as a list of chat messages (each checked by the message parser)."""
    if isinstance(value, (str, bytes)) or not is_collection(value):
        raise InputError(f"{name} must be a list of messages, got {_kind(value)}")
    return list(value)


def optional_text(value: Any, name: str) -> str | None:
    """None or a str."""
    if value is not None and not isinstance(value, str):
        raise bad_option(name, f" must be a str or None, got {_kind(value)}")
    return value


def positive_int(value: Any, name: str) -> int:
    """An integer >= 1 (numpy integers too)."""
    if not is_int(value) or value <= 0:
        raise bad_option(name, f" must be a positive integer, got {value!r}")
    return int(value)


def non_negative_int(value: Any, name: str) -> int:
    """An integer >= 0."""
    if not is_int(value) or value < 0:
        raise bad_option(name, f" must be a non-negative integer, got {value!r}")
    return int(value)


def finite_number(value: Any, name: str) -> float:
    """A finite real number (a time in seconds, for instance)."""
    ok = (isinstance(value, (int, float, np.integer, np.floating))
          and not isinstance(value, (bool, np.bool_)) and math.isfinite(value))
    if not ok:
        raise bad_option(name, f" must be a finite number, got {value!r}")
    return float(value)


def seed(value: Any, name: str = "seed") -> int | None:
    """None or a non-negative integer (what numpy's generators take)."""
    return None if value is None else non_negative_int(value, name)


def unit_interval(value: Any, name: str, *, low_open: bool = False,
                  high_open: bool = False) -> float:
    """A real number in [0, 1] (ends excluded as asked); NaN and non-numbers are errors."""
    ok = (isinstance(value, (int, float, np.integer, np.floating))
          and not isinstance(value, (bool, np.bool_)) and not math.isnan(value))
    if ok:
        v = float(value)
        ok = (v > 0 if low_open else v >= 0) and (v < 1 if high_open else v <= 1)
    if not ok:
        interval = ("(" if low_open else "[") + "0, 1" + (")" if high_open else "]")
        raise bad_option(name, f" must be a number in {interval}, got {value!r}")
    return float(value)


def check_choice(value: Any, choices: Sequence[str], name: str) -> str:
    """``value`` if it is one of ``choices``, else an ``OptionError`` naming ``name``.

    Example:
        >>> check_choice("ffd", ("bfd", "ffd"), "strategy")
        'ffd'
    """
    if not isinstance(value, str) or value not in choices:
        raise bad_option(name, f" {value!r} is unknown; choose one of {', '.join(choices)}")
    return value
