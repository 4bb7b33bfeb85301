"""Collation of packed sequences to training tensors: the packing API's names in one place.

The API lives in one module per concept; this module re-exports it, so
``from ctxkit.packing.collate import pack`` and the names below keep working:

- :mod:`ctxkit.packing.result`: :class:`PackResult` (arrays, masks, model inputs) and
  ``IGNORE_INDEX``;
- :mod:`ctxkit.packing.tensors`: :func:`collate_plan` and :func:`plan_segments`, a plan to arrays;
- :mod:`ctxkit.packing.sequences`: :func:`pack`, :func:`pack_arrays` and :func:`add_separators`;
- :mod:`ctxkit.packing.collator`: :class:`PackedCollator`, a ``collate_fn``.

Example:
    >>> from ctxkit.packing.collate import pack
    >>> pack([[1, 2], [3]], capacity=4).input_ids.tolist()
    [[1, 2, 3, 0]]
"""

from __future__ import annotations

from ctxkit.packing.collator import PackedCollator
from ctxkit.packing.options import LAYOUTS, PackOptions
from ctxkit.packing.result import IGNORE_INDEX, PackResult
from ctxkit.packing.sequences import add_separators, pack, pack_arrays
from ctxkit.packing.tensors import collate_plan, plan_segments

__all__ = [
    "IGNORE_INDEX",
    "LAYOUTS",
    "PackOptions",
    "PackResult",
    "PackedCollator",
    "add_separators",
    "collate_plan",
    "pack",
    "pack_arrays",
    "plan_segments",
]
