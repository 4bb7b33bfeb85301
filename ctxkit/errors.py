"""The errors ctxkit raises on purpose: the user's input, or a bug of ours.

Two families, because they call for different actions:

- :class:`InputError` (a ``ValueError``): the input or the options are wrong, and the user can
  fix them. It carries where the problem is (:class:`Location`: file and line, element of a
  JSON array, row of a Parquet file) and the record's index and id. The ``ctxkit`` command
  prints it as one line and exits with status 2.
- :class:`InternalError` (a ``RuntimeError``): an invariant of ctxkit itself broke. The
  command exits with status 3 and asks for a bug report.

Example:
    >>> err = RecordError("data.jsonl", 3, "missing field 'text'", "2")
    >>> str(err)
    "data.jsonl:3 (id 2): missing field 'text'"
    >>> isinstance(err, InputError) and isinstance(err, ValueError)
    True
    >>> str(Location("data.json", line=7, element=2))
    'data.json:7 (element 2)'
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CtxkitError",
    "InputError",
    "InputNotFoundError",
    "InternalError",
    "Location",
    "OptionError",
    "RecordError",
    "SequenceTooLongError",
]


@dataclass(frozen=True)
class Location:
    """Where a record is: ``source`` plus a real 1-based ``line`` when the file has lines,
    the 0-based ``element`` of a JSON array, or the 0-based ``row`` of a Parquet file."""

    source: str
    line: int | None = None
    element: int | None = None
    row: int | None = None

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        if self.element is not None:
            where += f" (element {self.element})"
        if self.row is not None:
            where += f" (row {self.row})"
        return where

    def to_dict(self) -> dict[str, object]:
        """The non-empty fields, for JSON reports."""
        return {k: v for k, v in (("line", self.line), ("element", self.element),
                                  ("row", self.row)) if v is not None}


class CtxkitError(Exception):
    """Base of every error ctxkit raises on purpose."""


class InputError(CtxkitError, ValueError):
    """The user's data or options are wrong; ``str()`` is one line saying where and why.

    ``location``, ``index`` (0-based record index) and ``record_id`` are ``None`` when they do
    not apply; ``hint`` is a short suggestion the CLI appends (``"use --skip-bad ..."``).
    """

    def __init__(self, message: str, *, location: Location | None = None,
                 index: int | None = None, record_id: str | None = None,
                 hint: str | None = None):
        self.message, self.location, self.index = message, location, index
        self.record_id, self.hint = record_id, hint
        super().__init__(self._render())

    def _render(self) -> str:
        prefix = "" if self.location is None else str(self.location)
        if self.record_id is not None:
            prefix += f" (id {self.record_id})" if prefix else f"record {self.record_id}"
        return f"{prefix}: {self.message}" if prefix else self.message

    def with_hint(self, hint: str) -> InputError:
        """This error with ``hint`` set (for the CLI to append); returns ``self``."""
        self.hint = hint
        return self


class OptionError(InputError):
    """An option value that cannot work; ``option`` names it as the user types it
    (``--capacity``), and the message says what is wrong and what would work."""

    def __init__(self, option: str, message: str):
        self.option = option
        super().__init__(message)


class InputNotFoundError(InputError, FileNotFoundError):
    """The input path does not exist (also a ``FileNotFoundError``)."""

    def __init__(self, path: object):
        self.path = str(path)
        super().__init__(f"input file not found: {path}")

    def __str__(self) -> str:  # FileNotFoundError would render errno fields otherwise
        return self.message


class RecordError(InputError):
    """A record that cannot be used, with where it is and why.

    ``RecordError(source, line, reason, record_id)``; ``element=`` or ``row=`` name a record of
    a JSON array or a Parquet file, ``index=`` its 0-based position among the file's records.
    """

    def __init__(self, source: str, line: int | None, reason: str,
                 record_id: str | None = None, *, element: int | None = None,
                 row: int | None = None, index: int | None = None):
        self.source, self.line, self.reason = source, line, reason
        super().__init__(reason, location=Location(source, line, element, row), index=index,
                         record_id=record_id)

    def to_dict(self) -> dict[str, object]:
        """``line``, ``id``, ``reason`` and the element/row when the file has them."""
        return {"line": self.line, "id": self.record_id, "reason": self.reason,
                "where": str(self.location), **self.location.to_dict()}


class SequenceTooLongError(InputError):
    """An input longer than the window under ``overflow="error"``.

    ``index``: the first such input; ``tokens``: its length; ``count``: how many are too long.
    """

    def __init__(self, index: int, tokens: int, capacity: int, count: int):
        self.tokens, self.capacity, self.count = tokens, capacity, count
        super().__init__(
            f"input {index} has {tokens} tokens, more than capacity {capacity}; {count} "
            "input(s) are too long (use overflow='split', 'truncate' or 'drop')", index=index)


class InternalError(CtxkitError, RuntimeError):
    """An invariant of ctxkit broke: a bug to report, not something the user can fix."""
