"""Lazy package attributes: a package names its public functions and classes with the module
that defines each, and a module is imported on first use (``import ctxkit`` stays cheap, and a
public function never shares its package attribute with a submodule of the same name)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any], extra: Sequence[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose globals are ``namespace``;
    ``exports`` maps each public name to its module. A looked-up name is cached in
    ``namespace``, so the hook runs once per name."""
    names = sorted(exports) + list(extra)

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__
