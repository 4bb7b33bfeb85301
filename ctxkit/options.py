"""The base of every stage's option set: a frozen dataclass with ``replace`` and ``resolve``.

Each stage declares its options once (:class:`ctxkit.packing.options.PackOptions`,
:class:`ctxkit.embedding.options.EmbedOptions`, ...) as a frozen dataclass deriving from
:class:`OptionSet` and validates them in ``__post_init__``. A function decorated with
:func:`takes_options` takes one keyword per field without writing them again: its signature
is generated from the option set, and every keyword the caller writes applies. Functions not
yet decorated keep their keyword arguments and turn them into the option set with
:meth:`OptionSet.resolve`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from ctxkit.errors import OptionError

__all__ = ["OptionSet", "bad_option", "cli_option_error", "takes_options"]

T = TypeVar("T", bound="OptionSet")
F = TypeVar("F", bound=Callable[..., Any])


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
    def from_call(cls: type[T], options: T | None, given: dict[str, Any]) -> T:
        """The options of a call: ``options`` (or the defaults) with every keyword in ``given``
        applied, whatever its value: a keyword the caller wrote always wins.

        Example:
            >>> from ctxkit.compression.options import CompressOptions
            >>> CompressOptions.from_call(CompressOptions(reorder="sort"),
            ...                           {"reorder": "original"}).reorder
            'original'
        """
        if options is None:
            return cls(**given)
        if not isinstance(options, cls):
            raise bad_option("options", f" must be a {cls.__name__} or None, got "
                                        f"{type(options).__name__}")
        return options.replace(**given) if given else options

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
            raise bad_option("options", f" must be a {cls.__name__} or None, got "
                                        f"{type(options).__name__}")
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        changed = {k: v for k, v in kwargs.items()
                   if not (type(v) is type(defaults[k]) and v == defaults[k])}
        return options.replace(**changed) if changed else options


def takes_options(option_set: type[OptionSet], into: str = "options") -> Callable[[F], F]:
    """Give the decorated function one keyword-only parameter per field of ``option_set``.

    The function declares a keyword-only ``options`` parameter (or the name ``into`` gives)
    and none of the fields; it is called with that parameter resolved by
    :meth:`OptionSet.from_call` (the caller's ``options``, or the defaults, with every field
    keyword the caller wrote applied). The public signature
    (``help``, ``inspect.signature``) lists the fields at their defaults, so the option set is
    the one place they are declared. On a class, decorate ``__init__``.

    Example:
        >>> @dataclasses.dataclass(frozen=True)
        ... class Shape(OptionSet):
        ...     side: int = 2
        >>> @takes_options(Shape)
        ... def area(*, options: Shape) -> int:
        ...     return options.side ** 2
        >>> area(), area(side=3), area(options=Shape(side=5), side=2)
        (4, 9, 4)
        >>> [(p.name, p.default) for p in inspect.signature(area).parameters.values()]
        [('options', None), ('side', 2)]
    """
    fields = dataclasses.fields(option_set)
    names = frozenset(f.name for f in fields)

    def decorate(function: F) -> F:
        sig = inspect.signature(function)
        own = sig.parameters
        if into not in own or own[into].kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(f"{function.__qualname__} must take a keyword-only {into!r}")
        if names & set(own):
            raise TypeError(f"{function.__qualname__} declares option keyword(s) "
                            f"{sorted(names & set(own))} that {option_set.__name__} declares")

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            given = {k: kwargs.pop(k) for k in names.intersection(kwargs)}
            kwargs[into] = option_set.from_call(kwargs.get(into), given)
            return function(*args, **kwargs)

        params = [p.replace(default=None, annotation=f"{option_set.__name__} | None")
                  if name == into else p for name, p in own.items()]
        params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                     default=f.default, annotation=f.type) for f in fields]
        call.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        call.__option_set__ = option_set  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return decorate
