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


@pytest.fixture
def actor_threads():
    """Torch on one intra-op thread in this process for the test, as a CPU embedding actor
    runs it (``cpus_per_worker=1``): on some CPUs another thread count changes the last bits
    of a forward pass, about 1e-6, so bit-for-bit parity with Ray holds at equal thread
    counts."""
    torch = pytest.importorskip("torch")
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
