"""An adapter imported without its framework says which extra to install."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("adapter,package", [("langchain", "langchain_core"),
                                             ("llamaindex", "llama_index")])
def test_a_missing_framework_is_an_import_error_naming_the_extra(adapter, package):
    code = (f"import sys; sys.modules[{package!r}] = None\n"  # as if not installed
            f"import ctxkit.integrations.{adapter}\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert f"ImportError: ctxkit.integrations.{adapter} needs" in proc.stderr
    assert f"pip install 'ctxkit[{adapter}]'" in proc.stderr
