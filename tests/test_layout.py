"""The layers of the code (README, "How the code is laid out"), checked on the imports
themselves: parsed with ast, every import counted, including function-level ones."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("accounting", "leakaudit")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """Modules of the two packages that ``path`` imports (absolute names). ``from pkg import
    sub`` imports the module ``pkg.sub`` (not ``pkg`` itself) when ``pkg.sub`` is one."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = {f"{mod}.{a.name}" for a in node.names} & modules
            found.update(subs if subs else {mod})
    return {m for m in found if m.split(".")[0] in PACKAGES}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    edges = {}
    for name, path in modules.items():
        # "from .x import y" may name a module or an attribute: keep the modules
        edges[name] = {m for m in _imports(path, name, set(modules))
                       if m in modules and m != name}
    return edges


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            # a package's __init__ importing its own submodules is not a cycle
            if node == nxt.rpartition(".")[0] or nxt == node.rpartition(".")[0]:
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_no_import_cycle(graph):
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"


def test_the_cycle_detector_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("low, forbidden", [
    ("accounting", "leakaudit"),
    ("leakaudit.attacks", "leakaudit.fl"),
    ("leakaudit.attacks", "leakaudit.defenses"),
    ("leakaudit.attacks", "leakaudit.auditing"),
    ("leakaudit.defenses", "leakaudit.fl"),
    ("leakaudit.defenses", "leakaudit.auditing"),
    ("leakaudit.defenses", "leakaudit.attacks"),
    ("leakaudit.fl", "leakaudit.auditing"),
    ("leakaudit.fl", "leakaudit.attacks"),
    ("leakaudit.grads", "leakaudit"),
])
def test_layers_import_only_downwards(graph, low, forbidden):
    bad = sorted(f"{m} -> {t}" for m, targets in graph.items() if _under(m, low)
                 for t in targets if _under(t, forbidden) and not _under(t, low))
    assert not bad, "imports against the layers: " + "; ".join(bad)


def test_importing_the_attacks_loads_neither_the_simulator_nor_the_defenses():
    code = ("import sys, leakaudit.attacks; "
            "print(sorted(m for m in sys.modules if m.startswith(('leakaudit.fl', "
            "'leakaudit.defenses', 'leakaudit.auditing'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.strip()
    assert out == "[]"
