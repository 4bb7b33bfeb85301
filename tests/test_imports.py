"""ctxkit's modules: no import cycle, every module imports in any order, none past the line
limit (one concept per module)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ctxkit"


def module_names() -> dict[str, Path]:
    """``{dotted name: path}`` of every module of the ctxkit package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(tree: ast.AST):
    """Every import statement, in functions too, except under ``if TYPE_CHECKING:`` (never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    """Module -> the ctxkit modules it imports. An edge goes to the module named
    (``from ctxkit.a import b`` is ``ctxkit.a.b`` when that is a module, else ``ctxkit.a``),
    not to the packages above it."""
    modules = module_names()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None.

    Example:
        >>> find_cycle({"a": {"b"}, "b": {"a"}})
        ['a', 'b', 'a']
        >>> find_cycle({"a": {"b"}, "b": set()}) is None
        True
    """
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "ctxkit.deduplication.minhash" in graph["ctxkit.deduplication.pipeline"]
    assert "ctxkit.deduplication.signatures" in graph["ctxkit.deduplication.lsh"]


def test_no_import_cycle_between_ctxkit_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_module_imports_in_any_order():
    names = sorted(module_names())
    code = (
        "import importlib, sys\n"
        f"names = {names!r}\n"
        "for order in (sorted(names, reverse=True), sorted(names)):\n"
        "    for mod in [m for m in sys.modules if m == 'ctxkit' or m.startswith('ctxkit.')]:\n"
        "        del sys.modules[mod]\n"
        "    for name in order:\n"
        "        importlib.import_module(name)\n"
        "print('ok', len(names))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok", str(len(names))]


# One concept per module: a module past this many lines is doing more than one thing.
MAX_MODULE_LINES = 500


def test_no_module_is_over_the_line_limit():
    over = {}
    for path in module_names().values():
        rel = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            over[rel] = lines
    assert over == {}, f"modules over {MAX_MODULE_LINES} lines (split them): {over}"


def test_the_line_limit_can_fail(tmp_path, monkeypatch):
    big = tmp_path / "ctxkit" / "big.py"
    big.parent.mkdir()
    big.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "ctxkit")
    with pytest.raises(AssertionError, match="ctxkit/big.py"):
        test_no_module_is_over_the_line_limit()
