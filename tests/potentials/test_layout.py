"""The package layout's public promises: the old flat module paths still import, warn, and are
the new modules themselves; the family packages export their potentials."""

import importlib
import sys

import pytest

import potentials


@pytest.mark.parametrize("old", sorted(potentials.MOVED))
def test_an_old_module_path_warns_and_is_the_new_module(old):
    new = importlib.import_module(potentials.MOVED[old])
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=old.replace(".", r"\.")):
        got = importlib.import_module(old)
    assert got is new


def test_from_import_of_an_old_name_gives_the_same_object():
    from potentials.json.potential import JSONSchema
    from potentials.regex.automaton import compile_regex

    sys.modules.pop("potentials.json_schema", None)
    sys.modules.pop("potentials.fsm", None)
    with pytest.warns(DeprecationWarning):
        from potentials.json_schema import JSONSchema as old_schema
    with pytest.warns(DeprecationWarning):
        from potentials.fsm import compile_regex as old_compile
    assert old_schema is JSONSchema and old_compile is compile_regex


def test_the_public_names_and_the_family_packages():
    from potentials.grammar import Grammar
    from potentials.json import JSONSchema
    from potentials.regex import Regex

    assert potentials.Regex is Regex and potentials.Grammar is Grammar
    assert potentials.JSONSchema is JSONSchema
    for name in potentials.__all__:
        assert getattr(potentials, name).__name__ == name


ROOT = __import__("pathlib").Path(potentials.__file__).parent


def _module_name(path):
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(tree, name):
    """The potentials.* modules a module imports when it is imported (TYPE_CHECKING blocks
    left out: they never run)."""
    import ast

    out = set()
    is_package = (ROOT.parent / name.replace(".", "/") / "__init__.py").exists()
    package = name if is_package else name.rpartition(".")[0]

    def visit(nodes):
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                # ``from package import module`` imports the module (its package is imported
                # first anyway, as for every submodule)
                subs = {f"{base}.{a.name}" for a in node.names}
                subs = {m for m in subs if (ROOT.parent / (m.replace(".", "/") + ".py")).exists()}
                out.update(subs if len(subs) == len(node.names) else subs | {base})
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)
    visit(tree.body)
    return out


def test_no_import_cycles_and_no_imports_inside_functions():
    """Each module of potentials imports what it needs at its top, and the import graph has no
    cycle (potentials._compat alone imports inside functions: it probes private APIs)."""
    import ast

    modules, trees = {}, {}
    for path in sorted(ROOT.rglob("*.py")):
        name = _module_name(path)
        trees[name] = ast.parse(path.read_text())
        modules[name] = path
    inner = []
    for name, tree in trees.items():
        if name == "potentials._compat":
            continue
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner += [f"{name}.{fn.name}: {ast.unparse(n)}" for n in ast.walk(fn)
                          if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert inner == []
    graph = {n: {m for m in _top_level_imports(t, n) if m in modules and m != n}
             for n, t in trees.items()}
    state: dict[str, int] = {}

    def cycle_from(n, path):
        state[n] = 1
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return path + [n, m]
            if m not in state:
                got = cycle_from(m, path + [n])
                if got:
                    return got
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            assert cycle_from(n, []) is None


def test_no_private_name_is_imported_across_modules():
    """potentials/ and samplers/ import only public names of each other's modules (the
    adapter for Python's private re internals, potentials._compat, is the one exception)."""
    import ast

    offenders = []
    for pkg in ("potentials", "samplers"):
        for path in sorted((ROOT.parent / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                        "potentials", "samplers", "smc") and node.module != "potentials._compat":
                    offenders += [f"{path.name}: from {node.module} import {a.name}"
                                  for a in node.names
                                  if a.name.startswith("_") and a.name != "_compat"]
    assert offenders == []


def test_the_hooks_table_covers_the_byte_contract_and_names_real_checks():
    """``potentials.contract.HOOKS`` and ``REQUIRED`` state every member of the byte contract
    once (the members every potential has, and ``state_of``, its derived helper, aside), and
    each named check exists in potentials.testing."""
    import potentials.testing as testing
    from potentials.contract import HOOKS, REQUIRED, ByteContract, Potential

    def bare(name):
        return name.split("(")[0]

    own = {k for k in vars(ByteContract) if not k.startswith("_") and not hasattr(Potential, k)}
    own -= {"size", "eos_ids", "state_of"}
    assert own == {bare(k) for k in [*REQUIRED, *HOOKS]}
    for hook in HOOKS.values():
        if hook.check is not None:
            cls, test = hook.check.split(".")
            assert callable(getattr(getattr(testing, cls), test)), hook.check


def test_docs_design_shows_the_hooks_table():
    """docs/design.md ("Potentials") shows REQUIRED and HOOKS row for row."""
    from potentials.contract import HOOKS, REQUIRED

    doc = (ROOT.parent / "docs" / "design.md").read_text()
    for name, meaning in REQUIRED.items():
        assert f"| `{name}` | {meaning} |" in doc, name
    for name, h in HOOKS.items():
        check = f"`{h.check}`" if h.check else "none"
        assert f"| `{name}` | {h.claim} | {h.use} | {check} |" in doc, name
