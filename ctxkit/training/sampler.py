"""PyTorch samplers over a :class:`~ctxkit.training.balance.BalanceResult`'s windows.

Two ways a trainer shards data, two forms:

- one ``DataLoader`` per process that draws only its own data (plain DDP, like
  ``DistributedSampler``): give ``rank``, and the sampler yields that rank's windows, step after
  step; with ``batch_size=windows_per_step`` each batch is one step (or use
  :class:`BalancedBatchSampler`, whose batches are the steps);
- one global sampler that the trainer splits itself: transformers' ``Trainer`` and TRL's
  ``SFTTrainer`` (through accelerate) give batch ``k`` to process ``k % ranks``. Leave
  ``rank=None``: the sampler yields every step's windows rank after rank, so with
  ``per_device_train_batch_size=windows_per_step`` process ``r`` gets exactly ``steps[s][r]``.
  Return it from ``Trainer._get_train_sampler``.

``set_epoch(e)`` reshuffles the order of the steps (never their contents) with ``(seed, e)``,
identically on every rank, as ``DistributedSampler.set_epoch`` does.

Example:
    >>> from ctxkit.training.balance import balance
    >>> res = balance([[9], [3, 3], [8], [2, 2, 2], [7], [5]], ranks=2, seed=0)
    >>> res.steps
    [[[0], [2]], [[4], [1]], [[3], [5]]]
    >>> list(BalancedSampler(res, rank=1, shuffle=False))
    [2, 1, 5]
    >>> list(BalancedBatchSampler(res, shuffle=False))
    [[0], [2], [4], [1], [3], [5]]
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from torch.utils.data import Sampler

from ctxkit.options import bad_option
from ctxkit.training.balance import BalanceResult

__all__ = ["BalancedBatchSampler", "BalancedSampler"]


class _Steps:
    """The shared part: which rank, and the order of the steps in the current epoch."""

    def __init__(self, result: BalanceResult, rank: int | None, shuffle: bool, seed: int):
        if not isinstance(result, BalanceResult):
            raise bad_option("result", f" must be a BalanceResult from ctxkit.balance, got "
                                       f"{type(result).__name__}")
        if rank is not None and (isinstance(rank, bool) or not isinstance(
                rank, (int, np.integer)) or not 0 <= rank < result.ranks):
            raise bad_option("rank", f" must be None or an integer in 0..{result.ranks - 1}, "
                                     f"got {rank!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise bad_option("seed", f" must be a non-negative integer, got {seed!r}")
        if result.n_steps == 0:  # the sampler would yield nothing, and training would not start
            step = result.ranks * result.windows_per_step
            raise bad_option("result", f" has no step: its {result.n_windows:,} windows are "
                                       f"fewer than one step takes ({result.ranks} ranks x "
                                       f"{result.windows_per_step} windows per step = {step}), "
                                       "so all are leftovers; balance with fewer ranks or "
                                       "windows_per_step, or pack into a smaller capacity")
        self.result, self.rank = result, None if rank is None else int(rank)
        self.shuffle, self.seed, self.epoch = bool(shuffle), int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        """Use the step order of ``epoch`` (call before each epoch, on every rank)."""
        self.epoch = int(epoch)

    def _batches(self) -> Iterator[list[int]]:
        """Per step (in this epoch's order), this rank's windows, or every rank's in turn."""
        steps = self.result.steps
        order = (np.random.default_rng([self.seed, self.epoch]).permutation(len(steps)).tolist()
                 if self.shuffle else range(len(steps)))
        for s in order:
            if self.rank is None:
                yield from (list(windows) for windows in steps[s])
            else:
                yield list(steps[s][self.rank])

    @property
    def _n_batches(self) -> int:
        return self.result.n_steps * (self.result.ranks if self.rank is None else 1)


class BalancedSampler(_Steps, Sampler[int]):
    """Window indices in balanced steps, for ``DataLoader(dataset, sampler=...)``.

    Args:
        result: from :func:`ctxkit.balance` on the plan whose windows index ``dataset``.
        rank: this process's rank, or None for the global order a trainer shards itself
            (module docs).
        shuffle: reorder the steps each epoch (``set_epoch``); False keeps ``result``'s order.
        seed: the shuffle's seed, the same on every rank.

    Leftover windows (``result.leftover``) are never yielded.
    """

    def __init__(self, result: BalanceResult, *, rank: int | None = None, shuffle: bool = True,
                 seed: int = 0):
        _Steps.__init__(self, result, rank, shuffle, seed)

    def __iter__(self) -> Iterator[int]:
        for batch in self._batches():
            yield from batch

    def __len__(self) -> int:
        return self._n_batches * self.result.windows_per_step


class BalancedBatchSampler(_Steps, Sampler[list[int]]):
    """Batches of ``windows_per_step`` window indices, one per rank and step, for
    ``DataLoader(dataset, batch_sampler=...)``; arguments as :class:`BalancedSampler`."""

    def __init__(self, result: BalanceResult, *, rank: int | None = None, shuffle: bool = True,
                 seed: int = 0):
        _Steps.__init__(self, result, rank, shuffle, seed)

    def __iter__(self) -> Iterator[list[int]]:
        return self._batches()

    def __len__(self) -> int:
        return self._n_batches
