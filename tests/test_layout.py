"""The compression and chat packages import one way only: chat -> text -> scoring -> the base
modules (atoms, options, budgeted). An import against that direction (even one inside a
function) fails here, so the layers stay readable from the bottom up."""

import ast
from pathlib import Path

import pytest

import ctxkit

ROOT = Path(ctxkit.__file__).parent

# package (or module) -> the packages it may never import
FORBIDDEN = {
    "ctxkit.compression.atoms": ("ctxkit.compression", "ctxkit.chat"),
    "ctxkit.compression.options": ("ctxkit.compression", "ctxkit.chat"),
    "ctxkit.compression.budgeted": ("ctxkit.compression", "ctxkit.chat"),
    "ctxkit.compression.scoring": ("ctxkit.compression.text", "ctxkit.compression.density",
                                   "ctxkit.chat"),
    "ctxkit.compression.density": ("ctxkit.compression.text", "ctxkit.chat"),
    "ctxkit.compression.text": ("ctxkit.chat",),
}
ALLOWED_BASE = ("ctxkit.compression.atoms", "ctxkit.compression.options",
                "ctxkit.compression.budgeted")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _modules(prefix: str) -> list[Path]:
    base = ROOT.parent / prefix.replace(".", "/")
    return sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]


def _violations(module: str, imported: set[str], forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for name in imported:
        if name == module or name.startswith(module + "."):
            continue  # inside its own layer
        if any(name == b or name.startswith(b + ".") for b in ALLOWED_BASE):
            continue
        if any(name == f or name.startswith(f + ".") for f in forbidden):
            bad.append(name)
    return sorted(bad)


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_one_way(layer):
    for path in _modules(layer):
        assert not _violations(layer, _imports(path), FORBIDDEN[layer]), _module_name(path)


def test_a_backward_import_is_caught():
    imported = {"ctxkit.chat.pipeline", "ctxkit.compression.atoms", "numpy"}
    assert _violations("ctxkit.compression.text", imported, FORBIDDEN[
        "ctxkit.compression.text"]) == ["ctxkit.chat.pipeline"]


@pytest.mark.parametrize("package", ["ctxkit/compression", "ctxkit/compression/text",
                                     "ctxkit/compression/scoring", "ctxkit/chat"])
def test_packages_stay_small(package):
    # about a dozen modules a level: more means a concept wants a package of its own
    modules = list((ROOT.parent / package).glob("*.py"))
    assert len(modules) <= 13, (package, len(modules))


def _long_functions(path: Path, limit: int) -> list[str]:
    """Functions of ``path`` with more than ``limit`` lines, their docstring not counted."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                lines -= first.end_lineno - first.lineno + 1
            if lines > limit:
                out.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_a_long_function_is_caught(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    src = tmp_path / "long.py"
    src.write_text(f'def f():\n    """doc\n    more doc"""\n{body}\n')
    assert _long_functions(src, 60) == ["long.py:1 f (62 lines)"]
    assert _long_functions(src, 62) == []


@pytest.mark.parametrize("package", ["ctxkit/compression", "ctxkit/chat"])
def test_functions_read_as_phases(package):
    # entry points are a few named steps: no function over 60 lines of code
    long = [f for path in sorted((ROOT.parent / package).rglob("*.py"))
            for f in _long_functions(path, 60)]
    assert not long, long
