"""Shared fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_session():
    """One local 2-CPU Ray instance for every Ray test of the session (it takes ~10 s to
    start), with the cheap task-based sort shuffle as the default."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    from ray.data.context import ShuffleStrategy

    from ctxkit.distributed import init_ray

    started = not ray.is_initialized()
    init_ray(num_cpus=2)
    ctx = ray.data.DataContext.get_current()
    saved = ctx.shuffle_strategy
    ctx.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    yield ray
    ctx.shuffle_strategy = saved
    if started:
        ray.shutdown()
