"""Bad input found inside a Ray worker, carried to the driver as a typed exception.

A worker raises :class:`WorkerInputError` (message and record id as fields); every stage asks
Ray Data to re-raise a worker's own exception (:func:`raise_worker_errors`), so the driver gets
it back as the ``cause`` of Ray's task error and :func:`worker_input_error` finds it there.
No traceback text is parsed.

Example:
    >>> err = WorkerInputError("record 'b': field 'text' must hold text, got int", record="b")
    >>> worker_input_error(RuntimeError("wrapped")) is None, err.record
    (True, 'b')
"""

from __future__ import annotations

from typing import Any

from ctxkit.errors import InputError

__all__ = ["WorkerInputError", "raise_worker_errors", "worker_input_error"]


class WorkerInputError(InputError):
    """A record a worker cannot use: ``message`` is one line naming it, ``record`` its id."""

    def __init__(self, message: str, record: Any = None) -> None:
        super().__init__(message)
        self.message, self.record = message, record

    def __reduce__(self):
        # Ray appends its own retry notes to ``args``; rebuild from the fields instead.
        return type(self), (self.message, self.record)

    def __str__(self) -> str:
        return self.message


def raise_worker_errors(ds: Any) -> Any:
    """Make Ray Data re-raise a worker's exception itself, not a bare ``UserCodeException``
    (whose cause does not survive the trip to the driver). Affects ``ds`` and the datasets
    derived from it; Ray versions without the setting keep their default."""
    if hasattr(ds.context, "raise_original_map_exception"):
        ds.context.raise_original_map_exception = True
    return ds


def worker_input_error(exc: BaseException) -> WorkerInputError | None:
    """The :class:`WorkerInputError` behind ``exc`` (Ray's ``cause``, then ``__cause__``)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, WorkerInputError):
            # RayTaskError(WorkerInputError) subclasses it: prefer the plain cause it carries
            cause = getattr(exc, "cause", None)
            return cause if isinstance(cause, WorkerInputError) else exc
        exc = getattr(exc, "cause", None) or exc.__cause__
    return None
