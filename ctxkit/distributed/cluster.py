"""Connecting to Ray: the optional import, cluster start-up and a quiet Ray Data context.

Ray is an optional dependency (the ``ray`` extra). Everything in :mod:`ctxkit.distributed`
calls :func:`require_ray` first, so a missing install fails with one clear line instead of an
``ImportError`` deep inside a stage.

Example:
    >>> from ctxkit.distributed import local_cluster
    >>> with local_cluster(num_cpus=2):          # doctest: +SKIP
    ...     ...                                   # ray.data pipelines run here
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["RayMissingError", "cluster_gpus", "init_ray", "local_cluster", "require_ray"]

_INSTALL_HINT = "pip install 'ctxkit[ray]'  (or: pip install 'ray[data]>=2.30')"


class RayMissingError(ImportError):
    """Ray (with Ray Data) is not installed; the message says how to install the extra."""


def require_ray() -> ModuleType:
    """Import and return ``ray`` with Ray Data, or raise :class:`RayMissingError`.

    Example:
        >>> require_ray().__name__   # doctest: +SKIP
        'ray'
    """
    try:
        import ray
        import ray.data  # noqa: F401  (the Data library is a separate extra of ray)
    except ImportError as exc:
        raise RayMissingError(
            f"ctxkit.distributed needs Ray Data, which is not installed ({exc}). "
            f"Install the optional extra: {_INSTALL_HINT}"
        ) from exc
    return ray


# Below this many CPUs Ray Data's per-operator resource reservation is turned off: it holds
# a share of the CPUs for each operator of a pipeline, and with two or four CPUs a read
# followed by a map then keeps a core idle most of the time.
RESERVE_FROM_CPUS = 8


def quiet_data_context() -> None:
    """Turn off Ray Data's progress bars and per-run banners (the CLI draws its own), and
    fit its resource reservation to the cluster (:data:`RESERVE_FROM_CPUS`)."""
    ray = require_ray()
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    ctx.enable_operator_progress_bars = False
    ctx.op_resource_reservation_enabled = cluster_cpus() >= RESERVE_FROM_CPUS


def init_ray(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    ship_code: bool | None = None,
    quiet: bool = True,
) -> Any:
    """Connect to a Ray cluster (``address``: ``"auto"``, ``"ray://host:10001"``, ``host:6379``)
    or start a local one (``address=None`` or ``"local"``); a no-op when Ray is already up.

    ``ship_code`` sends this ctxkit package to the workers (``runtime_env["py_modules"]``), for
    clusters where ctxkit is not installed on every node; by default only when connecting to
    an existing cluster. Returns what ``ray.init`` returns (or ``None`` if already initialised).
    """
    ray = require_ray()
    if ray.is_initialized():
        if quiet:
            quiet_data_context()
        return None
    local = address in (None, "", "local")
    kwargs: dict[str, Any] = {"include_dashboard": False} if local else {}
    if local:
        kwargs.update(num_cpus=num_cpus, num_gpus=num_gpus)
    if ship_code if ship_code is not None else not local:
        kwargs["runtime_env"] = {"py_modules": [str(Path(__file__).resolve().parents[1])]}
    if quiet:
        kwargs.update(log_to_driver=False, logging_level=logging.WARNING)
    # Workers of a local cluster must import ctxkit from wherever the driver found it.
    root = str(Path(__file__).resolve().parents[2])
    if local and root not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH", "")) if p
        )
    info = ray.init(address=None if local else address, **kwargs)
    if quiet:
        quiet_data_context()
    return info


@contextlib.contextmanager
def local_cluster(num_cpus: int = 2, num_gpus: int | None = None) -> Iterator[Any]:
    """A local Ray instance for the duration of the block (tests, examples, one-off runs).

    Shuts Ray down afterwards only if this call started it.
    """
    ray = require_ray()
    started = not ray.is_initialized()
    info = init_ray(None, num_cpus=num_cpus, num_gpus=num_gpus)
    try:
        yield info
    finally:
        if started:
            ray.shutdown()


def cluster_gpus() -> int:
    """Whole GPUs the connected cluster offers (0 on CPU-only clusters)."""
    ray = require_ray()
    return int(ray.cluster_resources().get("GPU", 0))


def cluster_cpus() -> int:
    """CPUs the connected cluster offers (at least 1)."""
    ray = require_ray()
    return max(1, int(ray.cluster_resources().get("CPU", 1)))
