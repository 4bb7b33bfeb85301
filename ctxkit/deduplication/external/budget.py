"""The memory budget of a dedup run: how it is given, its default, whether the in-memory
path fits it, and the sizes the out-of-core path derives from it.

The in-memory path holds about 14 bytes per byte of JSONL input (``docs/dedup.md``: 7 KB per
record of 500 bytes); when that exceeds the budget the out-of-core path runs instead, whose
working set is a few partitions of spill files, each sized to a fraction of the budget.

Example:
    >>> parse_memory("1.5G"), parse_memory("512M"), parse_memory("2000000")
    (1610612736, 536870912, 2000000)
    >>> Budget(1 << 30).parts(10_000_000, 24)
    2
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from ctxkit.errors import OptionError

__all__ = ["DEFAULT_SHARE", "IN_MEMORY_FACTOR", "Budget", "default_memory", "parse_memory"]

DEFAULT_SHARE = 0.25  # of the machine's RAM: room for the page cache and other work
IN_MEMORY_FACTOR = 14  # peak bytes of the in-memory MinHash path per byte of input
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_memory(value: str | int) -> int:
    """Bytes from ``"2G"``, ``"512MB"``, ``"1.5GiB"`` or a plain number of bytes (at least
    1M: below that the fixed costs of the run are the budget). An int is taken as it is, so
    tests can force many tiny partitions.

    Example:
        >>> parse_memory("64M")
        67108864
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise OptionError("--memory", f"--memory must be positive, got {value!r}")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise OptionError("--memory", f"--memory must be a size like 2G or 512M, got {value!r}")
    size = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if size < 1 << 20:
        raise OptionError("--memory", f"--memory must be at least 1M, got {value!r}")
    return size


def default_memory() -> int:
    """:data:`DEFAULT_SHARE` of the machine's physical memory (4 GB when unknown)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 16 << 30
    return int(total * DEFAULT_SHARE)


@dataclass(frozen=True)
class Budget:
    """Sizes derived from a memory budget of ``bytes``."""

    bytes: int

    @property
    def part_bytes(self) -> int:
        """The most bytes of one spill partition loaded at once (sorting needs about three
        times that)."""
        return max(256, self.bytes // 8)

    def parts(self, rows: int, row_bytes: int, most: int = 256) -> int:
        """Partitions (a power of two, at most ``most``) so one holds at most
        :attr:`part_bytes` of ``rows`` rows of ``row_bytes``."""
        need = math.ceil(rows * row_bytes / self.part_bytes)
        return min(most, 1 << max(0, need - 1).bit_length())

    def rows(self, row_bytes: int, least: int = 1024) -> int:
        """Rows of ``row_bytes`` that fit in one partition's share."""
        return max(least, self.part_bytes // max(1, row_bytes))

    def fits(self, input_bytes: int) -> bool:
        """Whether the in-memory path's peak for this input stays within the budget."""
        return input_bytes * IN_MEMORY_FACTOR <= self.bytes
