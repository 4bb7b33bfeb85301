"""Every docstring example in ctxkit runs and prints what it shows."""

import doctest
import importlib
import pkgutil

import pytest

import ctxkit

MODULES = sorted(m.name for m in pkgutil.walk_packages(ctxkit.__path__, "ctxkit."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"

