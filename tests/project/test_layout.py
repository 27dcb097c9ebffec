"""The layers of the code (README, "How the code is laid out"), checked on the imports
themselves: parsed with ast, every import counted, including function-level ones."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


#: the layers, bottom to top: a module imports only from its own unit or from units of
#: lower layers (a unit is a package or a module; within the bottom layer of leakaudit the
#: units may use one another, the cycle test keeps them apart); ``APART`` lists the pairs
#: that sit in order but must not meet.
LAYERS: list[tuple[str, ...]] = [
    ("accounting",),
    ("leakaudit._validate", "leakaudit._jsonsafe", "leakaudit.grads", "leakaudit.data",
     "leakaudit.models", "leakaudit.optim", "leakaudit.metrics", "leakaudit.records",
     "leakaudit.reporting", "leakaudit.neighbours"),
    ("leakaudit.defenses",),
    ("leakaudit.fl",),
    ("leakaudit.attacks",),
    ("leakaudit.auditing", "leakaudit.empirical"),
    ("leakaudit.interop",),
    ("leakaudit.api",),
    ("leakaudit.cli", "leakaudit"),
    ("leakaudit.__main__",),
]
#: (importer, imported) pairs the order allows but the design does not: the attacks see
#: neither the simulator nor the defenses; the two audits are siblings; the adapters load
#: neither the simulator nor the defenses; the empirical audit uses the Defense protocol,
#: the registry and the public ops, never a concrete defense
APART: list[tuple[str, str]] = [
    ("leakaudit.attacks", "leakaudit.defenses"),
    ("leakaudit.attacks", "leakaudit.fl"),
    ("leakaudit.interop", "leakaudit.defenses"),
    ("leakaudit.interop", "leakaudit.fl"),
    ("leakaudit.interop", "leakaudit.attacks"),
    ("leakaudit.interop", "leakaudit.auditing"),
    ("leakaudit.interop", "leakaudit.empirical"),
]
#: modules of a unit another may import though the unit is apart from it
OPEN = {"leakaudit.empirical": ("leakaudit.defenses", "leakaudit.defenses.base",
                                "leakaudit.defenses.ops")}
SHARED = 1  # index of the layer whose units may import one another


def _unit(module: str) -> tuple[int, str]:
    """(layer index, unit) of ``module``: the longest unit naming it (the root package
    ``leakaudit`` only names its own __init__)."""
    best = None
    for i, layer in enumerate(LAYERS):
        for unit in layer:
            hit = module == unit if unit == "leakaudit" else _under(module, unit)
            if hit and (best is None or len(unit) > len(best[1])):
                best = (i, unit)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return best


def _against_layers(module: str, target: str) -> str | None:
    """Why ``module`` importing ``target`` is against the layers (None if it is not)."""
    (i, unit), (j, other) = _unit(module), _unit(target)
    if unit == other:
        return None
    if j > i:
        return "imports upwards"
    if j == i and i != SHARED:
        return "imports a sibling"
    if any(_under(module, low) and _under(target, high) for low, high in APART):
        return "imports what it must not see"
    if unit in OPEN and _under(target, "leakaudit.defenses") and target not in OPEN[unit]:
        return "imports a concrete defense"
    return None


def test_every_module_is_in_one_layer(graph):
    for module in graph:
        _unit(module)


def test_layers_import_only_downwards(graph):
    bad = sorted(f"{m} -> {t} ({why})" for m, targets in graph.items() for t in targets
                 if (why := _against_layers(m, t)))
    assert not bad, "imports against the layers: " + "; ".join(bad)


def test_the_layer_rule_refuses_what_it_should():
    assert _against_layers("leakaudit.fl.simulate", "leakaudit.auditing.results")
    assert _against_layers("leakaudit.auditing.auditor", "leakaudit.empirical.game")
    assert _against_layers("leakaudit.empirical.api", "leakaudit.auditing.results")
    assert _against_layers("leakaudit.attacks.base", "leakaudit.defenses.base")
    assert _against_layers("leakaudit.interop.opacus", "leakaudit.fl.observe")
    assert _against_layers("leakaudit.empirical.game", "leakaudit.defenses.adaclip")
    assert _against_layers("accounting.rdp", "leakaudit.grads")
    assert _against_layers("leakaudit.records", "leakaudit.fl")
    assert not _against_layers("leakaudit.empirical.game", "leakaudit.defenses.base")
    assert not _against_layers("leakaudit.interop.opacus", "leakaudit.records")
    assert not _against_layers("leakaudit.models", "leakaudit.data")
    assert not _against_layers("leakaudit.cli", "leakaudit.api")


@pytest.mark.slow  # over a second of CPU: make test, not make test-fast
def _loaded_by(module: str, prefixes: tuple[str, ...]) -> str:
    """The modules under ``prefixes`` that a fresh ``import module`` loads, as printed."""
    code = (f"import sys, {module}; "
            f"print(sorted(m for m in sys.modules if m.startswith({prefixes!r})))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT).stdout.strip()


@pytest.mark.slow
def test_importing_the_attacks_loads_neither_the_simulator_nor_the_defenses():
    assert _loaded_by("leakaudit.attacks",
                      ("leakaudit.fl", "leakaudit.defenses", "leakaudit.auditing")) == "[]"


@pytest.mark.slow  # over a second of CPU: make test, not make test-fast
def test_importing_an_adapter_loads_neither_the_simulator_nor_the_defenses():
    assert _loaded_by("leakaudit.interop.opacus", ("leakaudit.fl", "leakaudit.defenses",
                                                   "leakaudit.auditing",
                                                   "leakaudit.empirical")) == "[]"
