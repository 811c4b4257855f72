"""The import graph of the library: layers point one way, no cycles, no private reach.

Every import statement of every module of smc, potentials and samplers is read from its source
(imports inside functions included; those under ``if TYPE_CHECKING:`` are for annotations and
never run, so they are left out). Each module is mapped to its layer explicitly (LAYERS); a
module may import its own layer and those below it. The neutral layer imports nothing of the
project.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("smc", "potentials", "samplers")

#: module prefix -> layer, bottom to top; the longest matching prefix decides
LAYERS = {
    "smc.core": 0,  # neutral helpers: log-space math, resampling, counters, concurrency, errors
    "smc.backends": 1,  # LM backends
    "potentials": 2,
    "samplers": 3,
    "smc.programs": 4,  # Model and its primitives, the built-in program
    "smc.engine": 5,  # the SMC loop, checkpoints, searches, Result
    "smc.api": 6,  # the request, generate, CLI
    "smc": 6,  # the package's lazy exports and ``python -m smc``
}
LAYER_NAMES = ["neutral", "backends", "potentials", "samplers", "programs", "engine", "api"]
#: the one module allowed to export private names: it wraps Python's own private re/sre internals
PRIVATE_OK = {"potentials._compat"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def is_project(module: str) -> bool:
    return module.split(".")[0] in PACKAGES


def sources() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


MODULES = sources()


class Import:
    def __init__(self, target: str, names: list[str], line: int, in_function: bool):
        self.target, self.names, self.line, self.in_function = target, names, line, in_function


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(module: str) -> list[Import]:
    """Every import the module runs, resolved to absolute module names."""
    tree = ast.parse(MODULES[module].read_text())
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    out: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for sub in child.orelse:
                    visit(sub, in_function)
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend(Import(a.name, [], child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(up + ([base] if base else []))
                out.append(Import(base, [a.name for a in child.names], child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return out


def edges(module: str) -> list[tuple[str, Import]]:
    """(imported project module, the import) pairs: ``from pkg import sub`` names the submodule."""
    found = []
    for imp in imports_of(module):
        if not is_project(imp.target):
            continue
        subs = [f"{imp.target}.{n}" for n in imp.names if f"{imp.target}.{n}" in MODULES]
        found.extend((s, imp) for s in subs)
        if len(subs) < max(len(imp.names), 1):
            found.append((imp.target, imp))
    return found


def test_every_module_has_a_layer():
    for module in MODULES:
        assert layer(module) in range(len(LAYER_NAMES)), module


def test_no_upward_imports():
    bad = []
    for module in MODULES:
        for target, imp in edges(module):
            if layer(target) > layer(module):
                bad.append(f"{module}:{imp.line} ({LAYER_NAMES[layer(module)]}) imports {target} "
                           f"({LAYER_NAMES[layer(target)]})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_the_neutral_layer_imports_nothing_of_the_project():
    bad = [f"{m}:{imp.line} imports {t}" for m in MODULES if layer(m) == 0
           for t, imp in edges(m) if layer(t) != 0]
    assert not bad, "\n".join(bad)


def test_no_project_import_inside_a_function():
    bad = [f"{m}:{imp.line} imports {t} inside a function" for m in MODULES
           for t, imp in edges(m) if imp.in_function]
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph = {m: sorted({t for t, _ in edges(m) if t in MODULES and t != m}) for m in MODULES}
    # Tarjan's strongly connected components: a component of two or more modules is a cycle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            connect(v)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_private_names_imported_across_modules():
    bad = []
    for module in MODULES:
        for imp in imports_of(module):
            if not is_project(imp.target) or imp.target in PRIVATE_OK:
                continue
            for name in imp.names:
                if name.startswith("_") and f"{imp.target}.{name}" not in MODULES:
                    bad.append(f"{module}:{imp.line} imports {imp.target}.{name}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("module", ["smc.programs.model", "smc.engine.loop", "smc.api.request"])
def test_the_checker_sees_real_edges(module):
    """The graph is not empty by mistake: these modules import the layers below them."""
    assert any(layer(t) < layer(module) for t, _ in edges(module))
