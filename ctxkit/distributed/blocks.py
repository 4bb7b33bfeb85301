"""Small numpy and Ray helpers shared by the distributed stages (no Ray at import time)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ctxkit.distributed.cluster import cluster_cpus, require_ray
from ctxkit.options import bad_option

__all__ = ["Broadcast", "collect_columns", "expand_ranges", "hash_partitions"]

_CACHE: dict[str, Any] = {}


class Broadcast:
    """An object put once into Ray's object store and read zero-copy by every task.

    Wrapping the ``ObjectRef`` keeps Ray Data from resolving it eagerly; each worker process
    fetches it on first use and caches it (numpy arrays are memory-mapped from the store).
    """

    def __init__(self, value: Any) -> None:
        ray = require_ray()
        self.ref = ray.put(value)
        self.key = self.ref.hex()

    def get(self) -> Any:
        if self.key not in _CACHE:
            if len(_CACHE) > 8:  # a long-lived worker serves many runs: keep only recent ones
                _CACHE.pop(next(iter(_CACHE)))
            ray = require_ray()
            _CACHE[self.key] = ray.get(self.ref)
        return _CACHE[self.key]


def expand_ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``arange(lo[i], hi[i])`` for all i; also return which ``i`` each came from.

    Example:
        >>> values, owner = expand_ranges(np.array([0, 5]), np.array([2, 8]))
        >>> values.tolist(), owner.tolist()
        ([0, 1, 5, 6, 7], [0, 0, 1, 1, 1])
    """
    lo = np.asarray(lo, dtype=np.int64)
    counts = np.maximum(np.asarray(hi, dtype=np.int64) - lo, 0)
    owner = np.repeat(np.arange(len(lo), dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    values = lo[owner] + (np.arange(counts.sum(), dtype=np.int64) - starts[owner])
    return values, owner


def collect_columns(ds: Any, columns: list[str]) -> dict[str, np.ndarray]:
    """Pull the given columns of a (small) dataset to the driver as numpy arrays."""
    parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    for batch in ds.select_columns(columns).iter_batches(batch_size=None, batch_format="numpy"):
        for c in columns:
            parts[c].append(np.asarray(batch[c]))
    return {c: (np.concatenate(v) if v else np.empty(0)) for c, v in parts.items()}


def hash_partitions(rows: int, row_bytes: int, num_partitions: int | None = None) -> int:
    """Partitions for a hash shuffle: at least one per CPU, blocks of at most ~128 MiB."""
    if num_partitions is not None:
        if num_partitions < 1:
            raise bad_option("num_partitions", f" must be positive, got {num_partitions}")
        return int(num_partitions)
    by_size = -(-rows * row_bytes // (128 << 20))
    return int(max(cluster_cpus(), by_size, 1))


SHUFFLES = ("auto", "hash", "sort")
# Below this many shuffled rows "auto" takes the sort shuffle: the hash shuffle's aggregator
# actors cost seconds per shuffle to start, which dominates small and medium inputs.
AUTO_HASH_ROWS = 20_000_000


def set_shuffle(ds: Any, shuffle: str | None, rows: int = 0) -> None:
    """Set the shuffle strategy of ``ds`` (and of every dataset derived from it).

    ``"hash"``: Ray's hash shuffle (``SHUFFLE_V2``, its default, best at scale but starting
    aggregator actors costs seconds per shuffle); ``"sort"``: the task-based sort shuffle
    (``SORT_SHUFFLE_PULL_BASED``, cheap to start, fine for small and medium data);
    ``"auto"``: sort below :data:`AUTO_HASH_ROWS` shuffled ``rows``, hash above;
    ``None`` keeps the dataset's own setting.
    """
    if shuffle is None:
        return
    if shuffle not in SHUFFLES:
        raise bad_option("shuffle", f" must be one of {SHUFFLES} or None, got {shuffle!r}")
    if shuffle == "auto":
        shuffle = "sort" if rows < AUTO_HASH_ROWS else "hash"
    from ray.data.context import ShuffleStrategy

    ds.context.shuffle_strategy = (
        ShuffleStrategy.SHUFFLE_V2 if shuffle == "hash" else ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    )


def is_hash_shuffle(ds: Any) -> bool:
    from ray.data.context import ShuffleStrategy

    names = ("HASH_SHUFFLE", "SHUFFLE_V2", "GPU_SHUFFLE")
    return any(ds.context.shuffle_strategy == getattr(ShuffleStrategy, n, object()) for n in names)


def map_key_groups(ds: Any, keys: list[str], fn: Any, num_partitions: int, **kwargs: Any) -> Any:
    """Apply ``fn`` to whole blocks in which every group of equal ``keys`` is complete.

    This is how ``GroupedData.map_groups`` co-locates groups (a hash ``repartition`` on the
    keys, or a range-partitioned ``sort``), but ``fn`` sees a whole partition at once, so it
    can process millions of small groups in one vectorised pass instead of one call each.
    """
    if is_hash_shuffle(ds):
        grouped = ds.repartition(num_partitions, keys=keys)
    else:
        grouped = ds.sort(keys)
    return grouped.map_batches(fn, batch_size=None, batch_format="numpy", **kwargs)
