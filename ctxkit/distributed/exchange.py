"""All-to-all exchanges between Ray tasks, sized from the data: the shuffles of the MinHash.

Ray Data's shuffles make one reducer per input block and ignore a requested partition
count in a sort, so a shuffle of a few thousand rows over hundreds of blocks pays for tens
of thousands of shuffle blocks. Here a shuffle is ``M`` map tasks that each return ``P``
objects (``num_returns``) and ``P`` reduce tasks that each take one object from every map
task: ``M x P`` objects, with ``M`` the chunks of input (tens of MB each) and ``P`` chosen
from the data (:func:`~ctxkit.distributed.blocks.hash_partitions`). On one node the objects
are read from shared memory without a copy.

Example:
    >>> refs = exchange([call(split, 2, block) for block in blocks], merge, 1)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ctxkit.distributed.cluster import require_ray

__all__ = ["call", "exchange"]

_TASKS: dict[tuple[Callable, int], Any] = {}


def call(fn: Callable, returns: int, *args: Any) -> list[Any]:
    """Run ``fn(*args)`` as a Ray task returning ``returns`` objects; always a list of
    object refs (``fn`` returns a sequence of that length)."""
    key = (fn, returns)
    if key not in _TASKS:
        ray = require_ray()
        body = fn if returns > 1 else _single(fn)
        _TASKS[key] = ray.remote(num_returns=max(returns, 1))(body)
    out = _TASKS[key].remote(*args)
    return list(out) if returns > 1 else [out]


def _single(fn: Callable) -> Callable:
    def run(*args: Any) -> Any:
        return fn(*args)[0]

    run.__name__ = getattr(fn, "__name__", "task")
    return run


def exchange(map_refs: Sequence[Sequence[Any]], reduce: Callable, returns: int,
             *args: Any) -> list[list[Any]]:
    """Reduce task ``q`` runs ``reduce(*args, map_refs[0][q], map_refs[1][q], ...)``;
    returns each reduce task's ``returns`` refs."""
    parts = len(map_refs[0]) if map_refs else 0
    return [call(reduce, returns, *args, *(m[q] for m in map_refs)) for q in range(parts)]
