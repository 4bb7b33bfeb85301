"""The packing options, declared and validated once.

:class:`PackOptions` is what :func:`ctxkit.pack`, :func:`~ctxkit.packing.collate.pack_arrays`,
:class:`~ctxkit.packing.collate.PackedCollator`, :func:`~ctxkit.packing.hf.pack_dataset`, the
Ray adapter (:func:`ctxkit.distributed.pack`) and ``ctxkit pack`` take or build, so every entry
point has the same defaults and rejects the same bad values with the same one-line message.

Example:
    >>> opts = PackOptions(capacity=4096, separator_id=2, seed=0)
    >>> opts.layout, opts.replace(layout="flat").layout
    ('padded', 'flat')
    >>> try:
    ...     PackOptions(capacity=10**12)
    ... except ValueError as exc:
    ...     print(exc)
    capacity 1,000,000,000,000 is more than the 16,777,216 tokens a window can hold
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxkit.options import OptionSet, bad_option
from ctxkit.validate import check_choice

__all__ = [
    "LAYOUTS",
    "MAX_CAPACITY",
    "MAX_TOKEN_ID",
    "OVERFLOW_POLICIES",
    "STRATEGIES",
    "PackOptions",
    "check_capacity",
    "check_choice",
]

STRATEGIES = ("bfd", "ffd", "wrapped", "greedy", "optimal")
OVERFLOW_POLICIES = ("error", "split", "truncate", "drop")
LAYOUTS = ("padded", "flat")
# 16 M tokens: above every model's context window. One padded row of that many int64 ids is
# already 128 MiB per array, and larger values (10**12, 2**63) would only fail later trying to
# allocate terabytes, or overflow the int32 cu_seqlens.
MAX_CAPACITY = 2**24
# Token ids are in 0..2**31-1: every vocabulary is far smaller, and int32 ids (what many
# kernels and Arrow columns use) hold them. A negative id or 2**40 would be written into
# input_ids as it is and fail (or index out of range) only inside the model.
MAX_TOKEN_ID = 2**31 - 1


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_capacity(value: Any, name: str = "capacity") -> int:
    """``value`` as an int in ``1..MAX_CAPACITY``, or a one-line
    :class:`~ctxkit.errors.OptionError` (a ``ValueError``) naming ``name``.

    Example:
        >>> check_capacity(np.int64(512))
        512
    """
    if not _is_int(value) or value <= 0:
        raise bad_option(name, f" must be a positive integer, got {value!r}")
    if value > MAX_CAPACITY:
        raise bad_option(name, f" {int(value):,} is more than the {MAX_CAPACITY:,} tokens a "
                               "window can hold")
    return int(value)


def _check_token_id(value: Any, name: str, optional: bool) -> int | None:
    if value is None and optional:
        return None
    if not _is_int(value) or not 0 <= value <= MAX_TOKEN_ID:
        kind = f"a token id in 0..{MAX_TOKEN_ID:,}" + (" or None" if optional else "")
        raise bad_option(name, f" must be {kind}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class PackOptions(OptionSet):
    """How sequences are packed into windows (see :func:`ctxkit.pack` for each field).

    Attributes:
        capacity: window length in tokens, separators included (``1..MAX_CAPACITY``).
        strategy: ``bfd``, ``ffd``, ``wrapped``, ``greedy`` or ``optimal``.
        overflow: sequences over ``capacity``: ``error``, ``split``, ``truncate`` or ``drop``.
        separator_id: token appended after every non-empty sequence (e.g. EOS), or None.
        label_separators: keep the separator as a label (the model learns to emit it).
        pad_id: token id of the padding in the padded layout.
        seed: shuffle the windows with this seed; None keeps the planner's order.
        layout: ``padded`` (``[rows, capacity]``) or ``flat`` (``[1, T]``, padding-free).
    """

    capacity: int = 2048
    strategy: str = "bfd"
    overflow: str = "error"
    separator_id: int | None = None
    label_separators: bool = False
    pad_id: int = 0
    seed: int | None = None
    layout: str = "padded"

    def __post_init__(self) -> None:
        # normalise numpy integers to int so options compare, hash and pickle plainly
        set_ = object.__setattr__
        set_(self, "capacity", check_capacity(self.capacity))
        check_choice(self.strategy, STRATEGIES, "strategy")
        check_choice(self.overflow, OVERFLOW_POLICIES, "overflow")
        check_choice(self.layout, LAYOUTS, "layout")
        set_(self, "separator_id", _check_token_id(self.separator_id, "separator_id", True))
        set_(self, "pad_id", _check_token_id(self.pad_id, "pad_id", False))
        if not isinstance(self.label_separators, (bool, np.bool_)):
            raise bad_option("label_separators", f" must be True or False, got "
                                                 f"{self.label_separators!r}")
        set_(self, "label_separators", bool(self.label_separators))
        if self.seed is not None:
            if not _is_int(self.seed) or self.seed < 0:
                raise bad_option("seed", f" must be a non-negative integer or None, got "
                                         f"{self.seed!r}")
            set_(self, "seed", int(self.seed))

    _what = "packing option"

    @classmethod
    def resolve(cls, options: PackOptions | None, **kwargs: Any) -> PackOptions:
        """:meth:`ctxkit.options.OptionSet.resolve`; a ``capacity`` of None means "not given".

        Example:
            >>> PackOptions.resolve(PackOptions(capacity=64, seed=1), strategy="ffd").seed
            1
            >>> PackOptions.resolve(None, capacity=None, layout="flat").capacity
            2048
        """
        if kwargs.get("capacity", 0) is None:
            del kwargs["capacity"]
        return super().resolve(options, **kwargs)
