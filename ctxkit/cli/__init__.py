"""The ``ctxkit`` command: parses arguments, calls a job from :mod:`ctxkit.jobs`, renders it.

One module per command group (:mod:`~ctxkit.cli.packing`, :mod:`~ctxkit.cli.dedup`,
:mod:`~ctxkit.cli.embedding`, :mod:`~ctxkit.cli.compression`, :mod:`~ctxkit.cli.evaluate`,
:mod:`~ctxkit.cli.training`),
the shared options in :mod:`~ctxkit.cli.app`, tables and bars in :mod:`~ctxkit.cli.render`,
exit statuses in :mod:`~ctxkit.cli.main`.
"""

# ruff: noqa: I001 -- command modules in the order `ctxkit --help` lists them
from ctxkit.cli.app import app
from ctxkit.cli import packing  # noqa: F401
from ctxkit.cli import dedup  # noqa: F401
from ctxkit.cli import embedding  # noqa: F401
from ctxkit.cli import compression  # noqa: F401
from ctxkit.cli import evaluate  # noqa: F401
from ctxkit.cli import training  # noqa: F401
from ctxkit.cli.main import main

__all__ = ["app", "main"]
