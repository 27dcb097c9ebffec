"""The code rules of DEVELOPERS.md that a parser can check: no underscore name used across
modules, no function over 80 lines, and benchmarks that use the library's public API only
(no private name, no assignment into it). The layers and cycles are in test_layout.py."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the repository's Python packages (tests included: they use the public names too)
SOURCES = ("accounting", "leakaudit", "benchmarks", "tests")
LIBRARY = ("accounting", "leakaudit")
MAX_LINES = 80

#: underscore names used across modules today, each "module -> name", each with why. A stale
#: entry fails the test too. None today: keep it that way.
PRIVATE_ALLOWED: set[str] = set()
#: functions over MAX_LINES that stay for now, each with why: "module.function". None today.
LONG_ALLOWED: set[str] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _files() -> dict[str, Path]:
    return {_module_name(p): p for pkg in SOURCES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@dataclass(frozen=True)
class Scan:
    """What the checks read of one file, from one parse and one walk: ``nodes``, the imports,
    underscore attributes, ``setattr`` calls and assignments into attributes (``ast.walk``
    order); ``functions``, each function's name below the module (".f", ".C.m") and lines."""

    nodes: tuple[ast.AST, ...]
    functions: tuple[tuple[str, int], ...]


def _kept(node: ast.AST) -> bool:
    return isinstance(node, (ast.Import, ast.ImportFrom)) or (
        isinstance(node, ast.Attribute) and _private(node.attr)) or (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id == "setattr") or (
        isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) for t in node.targets)
    ) or (isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute))


def _functions(tree: ast.Module) -> tuple[tuple[str, int], ...]:
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):   # no def inside an expression (a lambda is one)
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((f"{prefix}.{child.name}", child.end_lineno - child.lineno + 1))
                visit(child, f"{prefix}.{child.name}")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}.{child.name}")
            else:
                visit(child, prefix)

    visit(tree, "")
    return tuple(found)


@functools.cache
def scan(path: Path) -> Scan:
    """``path`` parsed and walked once per session (every check reads the same files); the
    tree itself is not kept."""
    tree = ast.parse(path.read_text())
    return Scan(tuple(n for n in ast.walk(tree) if _kept(n)), _functions(tree))


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def private_uses(module: str, path: Path, modules: set[str]) -> set[str]:
    """"module -> target._name" for each underscore name of another module of the repository
    that ``module`` imports (``from x import _name``) or reads (``x._name``, ``x`` a module
    it imported). Modules whose own name starts with an underscore (``leakaudit._validate``)
    are internal to the repository, not to one module: their public names may be used."""
    nodes = scan(path).nodes
    found, aliases = set(), {}
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, path.name == "__init__.py", node)
            if source not in modules and source.split(".")[0] not in SOURCES:
                continue
            for a in node.names:
                target = f"{source}.{a.name}"
                if target in modules:
                    aliases[a.asname or a.name] = target
                elif _private(a.name):
                    found.add(f"{module} -> {target}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules:
                    aliases[a.asname or a.name.split(".")[0]] = \
                        a.name if a.asname else a.name.split(".")[0]
    for node in nodes:
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain, base = [node.attr], node.value
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in aliases:
                owner = ".".join([aliases[base.id], *reversed(chain[1:])])
                if owner in modules and owner != module:
                    found.add(f"{module} -> {owner}.{node.attr}")
    return found


def long_functions(module: str, path: Path) -> set[str]:
    """"module.function" (or "module.Class.method") of each function over MAX_LINES lines."""
    return {f"{module}{name}" for name, lines in scan(path).functions if lines > MAX_LINES}


@pytest.fixture(scope="module")
def files() -> dict[str, Path]:
    return _files()


def test_no_underscore_name_is_used_across_modules(files):
    modules = set(files)
    found = set().union(*(private_uses(m, p, modules) for m, p in files.items()))
    assert not found - PRIVATE_ALLOWED, "make these public (or move the code): " + \
        "; ".join(sorted(found - PRIVATE_ALLOWED))
    assert not PRIVATE_ALLOWED - found, "gone, drop from PRIVATE_ALLOWED: " + \
        "; ".join(sorted(PRIVATE_ALLOWED - found))


def test_no_function_is_over_80_lines(files):
    found = set().union(*(long_functions(m, p) for m, p in files.items()))
    assert not found - LONG_ALLOWED, "split these: " + "; ".join(sorted(found - LONG_ALLOWED))
    assert not LONG_ALLOWED - found, "gone, drop from LONG_ALLOWED: " + \
        "; ".join(sorted(LONG_ALLOWED - found))


def test_the_checks_find_what_they_should(tmp_path):
    pkg = tmp_path / "leakaudit"
    pkg.mkdir()
    (pkg / "a.py").write_text("def _h():\n    pass\n")
    (pkg / "b.py").write_text("from .a import _h\nfrom leakaudit import a\n"
                              "a._h()\n\ndef f():\n" + "    x = 1\n" * MAX_LINES)
    modules = {"leakaudit.a", "leakaudit.b"}
    assert private_uses("leakaudit.b", pkg / "b.py", modules) == {"leakaudit.b -> leakaudit.a._h"}
    assert long_functions("leakaudit.b", pkg / "b.py") == {"leakaudit.b.f"}
    (pkg / "c.py").write_text("from leakaudit._validate import check_int\n")
    assert private_uses("leakaudit.c", pkg / "c.py", modules | {"leakaudit._validate"}) == set()


def _library_names(nodes: tuple[ast.AST, ...]) -> set[str]:
    names = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARY:
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names
                         if a.name.split(".")[0] in LIBRARY)
    return names


def reaches_inside(path: Path) -> list[str]:
    """What a benchmark script does to the library beyond its public API: a private name
    imported or read (from a private module too), ``setattr`` on it, an assignment into it."""
    nodes = scan(path).nodes
    names, found = _library_names(nodes), []

    def rooted(e: ast.AST) -> bool:
        while isinstance(e, (ast.Attribute, ast.Call, ast.Subscript)):
            e = e.func if isinstance(e, ast.Call) else e.value
        return isinstance(e, ast.Name) and e.id in names

    for node in nodes:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARY:
            if any(_private(p) for p in (node.module or "").split(".")) or \
                    any(_private(a.name) for a in node.names):
                found.append(f"{path.name}:{node.lineno} imports from {node.module}")
        elif isinstance(node, ast.Attribute) and _private(node.attr) and rooted(node.value):
            found.append(f"{path.name}:{node.lineno} reads {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "setattr" and node.args and rooted(node.args[0]):
            found.append(f"{path.name}:{node.lineno} setattr on {ast.unparse(node.args[0])}")
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [f"{path.name}:{node.lineno} assigns {ast.unparse(t)}" for t in targets
                      if isinstance(t, ast.Attribute) and rooted(t.value)]
    return found


def test_benchmarks_use_the_public_api_of_the_library():
    found = [f for p in sorted((ROOT / "benchmarks").rglob("*.py")) for f in reaches_inside(p)]
    assert not found, "; ".join(found)


def test_the_benchmark_check_finds_a_reach_inside(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text("import leakaudit\nfrom leakaudit._validate import check_int\n"
                      "from leakaudit.fl import simulate as s\nleakaudit.fl._x\n"
                      "setattr(s, 'y', 1)\ns.z = 2\n")
    assert sorted(f.split(" ", 1)[1] for f in reaches_inside(script)) == [
        "assigns s.z", "imports from leakaudit._validate", "reads leakaudit.fl._x",
        "setattr on s"]
