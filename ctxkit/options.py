"""The base of every stage's option set: a frozen dataclass with ``replace`` and ``resolve``.

Each stage declares its options once (:class:`ctxkit.packing.options.PackOptions`,
:class:`ctxkit.embedding.options.EmbedOptions`, ...) as a frozen dataclass deriving from
:class:`OptionSet` and validates them in ``__post_init__``; public functions keep their
keyword arguments and turn them into the option set with :meth:`OptionSet.resolve`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from ctxkit.errors import OptionError

__all__ = ["OptionSet", "bad_option", "cli_option_error"]

T = TypeVar("T", bound="OptionSet")


def bad_option(option: str, rest: str) -> OptionError:
    """An :class:`~ctxkit.errors.OptionError` whose message is ``option`` followed by ``rest``
    (``bad_option("capacity", " must be positive")``); ``rest`` is kept as ``detail`` so a
    front end can name the option its own way (:func:`cli_option_error`)."""
    err = OptionError(option, f"{option}{rest}")
    err.detail = rest
    return err


def cli_option_error(exc: OptionError) -> OptionError:
    """``exc`` as the CLI says it: the keyword ``batch_tokens`` becomes ``--batch-tokens``.

    Example:
        >>> str(cli_option_error(bad_option("pad_id", " must be an integer")))
        '--pad-id must be an integer'
    """
    flag = "--" + exc.option.removeprefix("--").replace("_", "-")
    detail = getattr(exc, "detail", None)
    return OptionError(flag, f"{flag}{detail}" if detail is not None else str(exc))


class OptionSet:
    """Mixin for frozen option dataclasses (subclasses are ``@dataclass(frozen=True)``)."""

    _what = "option"  # how error messages name the options ("packing option", ...)

    def replace(self: T, **changes: Any) -> T:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def resolve(cls: type[T], options: T | None, **kwargs: Any) -> T:
        """The options a function was called with: ``options`` when given, with every keyword
        that differs from its default applied on top; else the keywords alone.

        A keyword left at its default cannot tell "not given" from "given as the default", so
        it never overrides ``options``.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(kwargs) - names
        if unknown:
            raise TypeError(f"unknown {cls._what}(s): {', '.join(sorted(unknown))}")
        if options is None:
            return cls(**kwargs)
        if not isinstance(options, cls):
            raise TypeError(f"options must be a {cls.__name__}, got {type(options).__name__}")
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        changed = {k: v for k, v in kwargs.items()
                   if not (type(v) is type(defaults[k]) and v == defaults[k])}
        return options.replace(**changed) if changed else options
