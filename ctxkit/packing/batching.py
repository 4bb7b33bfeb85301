"""Length-grouped padded batches: the usual alternative to packing, for inference and reports.

Sequences are sorted by length and cut into batches whose padded size (rows x longest row)
fits a token budget, so little compute goes to padding without any change to attention.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from ctxkit import validate
from ctxkit.errors import InputError
from ctxkit.packing.plan import lengths_array

__all__ = ["LengthBatches", "length_grouped_batches"]


@dataclass
class LengthBatches:
    """Batches of input indices; each batch is padded to its longest member.

    ``padded_tokens`` is the sum over batches of rows x longest, ``real_tokens`` the sum of
    lengths; ``empty`` lists zero-length inputs, which are in no batch.
    """

    batches: list[np.ndarray]
    batch_tokens: int
    real_tokens: int
    padded_tokens: int
    empty: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def n_batches(self) -> int:
        return len(self.batches)

    @property
    def utilization(self) -> float:
        """Real tokens / padded tokens (1.0 means no padding); 0.0 with no batches."""
        return self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0

    @property
    def padding_tokens(self) -> int:
        return self.padded_tokens - self.real_tokens


def length_grouped_batches(
    lengths,
    *,
    batch_tokens: int,
    max_rows: int | None = None,
    seed: int | None = None,
) -> LengthBatches:
    """Group sequences of similar length into batches of at most ``batch_tokens`` padded tokens.

    Longest first, each batch takes as many of the next sequences as fit
    ``rows x longest <= batch_tokens`` (and ``rows <= max_rows``). A sequence longer than
    ``batch_tokens`` is an error naming it; zero-length ones are listed in ``empty``.
    ``seed`` shuffles the order of the batches (not their contents).

    Example:
        >>> res = length_grouped_batches([5, 100, 7, 90, 6], batch_tokens=200)
        >>> [b.tolist() for b in res.batches]
        [[1, 3], [2, 4, 0]]
        >>> res.padded_tokens, res.real_tokens
        (221, 208)
    """
    validate.positive_int(batch_tokens, "batch_tokens")
    if max_rows is not None:
        validate.positive_int(max_rows, "max_rows")
    validate.seed(seed)
    arr = lengths_array(lengths)
    too_long = np.flatnonzero(arr > batch_tokens)
    if too_long.size:
        i = int(too_long[0])
        raise InputError(
            f"input {i} has {int(arr[i])} tokens, more than batch_tokens {batch_tokens}; "
            f"{too_long.size} input(s) are too long (truncate them first)"
        )
    empty = np.flatnonzero(arr == 0)
    active = np.flatnonzero(arr > 0)
    order = active[np.argsort(-arr[active], kind="stable")]
    sorted_len = arr[order].tolist()
    rows_cap = max_rows if max_rows is not None else len(order) or 1
    starts, i = [], 0
    while i < len(order):  # one step per batch
        starts.append(i)
        i += min(batch_tokens // sorted_len[i], rows_cap)
    bounds = [*starts, len(order)]
    batches = [order[a:b] for a, b in itertools.pairwise(bounds)]
    padded = sum((b - a) * sorted_len[a] for a, b in itertools.pairwise(bounds))
    if seed is not None:
        perm = np.random.default_rng(seed).permutation(len(batches)).tolist()
        batches = [batches[p] for p in perm]
    return LengthBatches(
        batches=batches, batch_tokens=int(batch_tokens), real_tokens=int(arr.sum()),
        padded_tokens=int(padded), empty=empty,
    )
