"""potentials._compat: the private re/_sre/jsonschema APIs the project uses still have the
shapes it reads, and when one does not the failure names the module."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from potentials import _compat
from potentials._compat import C, IncompatibleUpstream, problems, subtrees

ROOT = Path(__file__).resolve().parents[2]
PRIVATE = re.compile(r"re\._parser|re\._constants|\b_sre\b|jsonschema\._utils|\._resolver\b|"
                     r"_resolver=|_base_uri|getwidth\(|\.state\.flags|sre_parse|sre_c\b")


def test_every_private_api_has_the_expected_shape():
    assert problems() == []
    _compat.require("re")
    _compat.require("jsonschema")


def test_no_private_api_is_used_outside_the_adapter():
    """Every use goes through potentials._compat, so its checks cover all of them."""
    offenders = []
    for pkg in ("smc", "potentials", "samplers"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.name == "_compat.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#")[0]
                if PRIVATE.search(code) and "potentials._compat" not in code:
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []


def test_every_opcode_the_compilers_name_is_checked():
    used = set()
    for name in ("regex/automaton.py", "grammar/potential.py"):
        used |= set(re.findall(r"\bC\.([A-Z_]+)", (ROOT / "potentials" / name).read_text()))
    assert used and used <= set(_compat.USED_CONSTANTS), used - set(_compat.USED_CONSTANTS)


def _without(module, *names):
    """A stand-in for ``module`` lacking ``names``."""
    return types.SimpleNamespace(**{k: getattr(module, k) for k in dir(module) if k not in names})


def test_missing_constants_name_re_constants():
    got = problems("re", constants=_without(C, "POSSESSIVE_REPEAT", "NEGATE"))
    assert got == ["re._constants has no NEGATE, POSSESSIVE_REPEAT"]


def test_changed_parse_trees_name_re_parser():
    real = _compat._sre_parse

    def old_layout(pattern, flags):  # SUBPATTERN av without the flag fields (Python 3.5's)
        tree = real.parse(pattern, flags)
        for i, (op, av) in enumerate(tree.data):
            if op is C.SUBPATTERN:
                tree.data[i] = (op, (av[0], av[3]))
        return tree

    got = problems("re", parser=types.SimpleNamespace(parse=old_layout))
    assert got and all(m.startswith("re._parser") for m in got)
    assert any("'(?i:a)'" in m for m in got)
    assert problems("re", parser=types.SimpleNamespace()) == ["re._parser has no function parse"]


def test_changed_case_functions_name_sre():
    got = problems("re", sre=_without(_compat._sre, "unicode_tolower"))
    assert got == ["_sre has no function unicode_tolower"]
    wrong = types.SimpleNamespace(unicode_iscased=lambda cp: True, unicode_tolower=lambda cp: cp)
    got = problems("re", sre=wrong)
    assert len(got) == 2 and all(m.startswith("_sre.unicode_") for m in got)


def test_changed_jsonschema_names_the_module():
    got = problems("jsonschema", jsonschema_utils=types.SimpleNamespace())
    assert got == ["jsonschema._utils has no function equal"]
    got = problems("jsonschema", jsonschema_utils=types.SimpleNamespace(equal=lambda a, b: a == b))
    assert got == ["jsonschema._utils.equal no longer means JSON equality"]

    class NoResolver:
        __name__ = "NoResolver"

        def __init__(self, schema):
            self.schema = schema

    got = problems("jsonschema", validator_cls=NoResolver)
    assert got == ["jsonschema validators (NoResolver) have no _resolver"]

    class IgnoresResolver:  # a validator whose evolve drops _resolver
        def __init__(self, schema):
            self._resolver = Draft202012Validator(schema)._resolver

        def evolve(self, schema, _resolver=None):
            return Draft202012Validator(schema)

    got = problems("jsonschema", validator_cls=IgnoresResolver)
    assert got == ["jsonschema: validator.evolve(schema=, _resolver=) does not evaluate with the "
                   "given resolver"]


def test_require_raises_naming_the_adapter_and_versions(monkeypatch):
    monkeypatch.setattr(_compat, "problems", lambda group: ["re._parser has no function parse"])
    _compat.require.cache_clear()
    try:
        with pytest.raises(IncompatibleUpstream) as err:
            _compat.require("re")
        msg = str(err.value)
        assert "potentials/_compat.py" in msg and "re._parser has no function parse" in msg
        assert "Python 3." in msg and "jsonschema " in msg
    finally:
        _compat.require.cache_clear()


def test_subtrees_reaches_every_nested_sequence():
    tree = _compat.parse_regex(r"(a)(?:b|cd)e*?(?>f)(?<=g)(?(1)h|i)")
    seen = []

    def walk(seq):
        for op, av in seq:
            if op is C.LITERAL:
                seen.append(chr(av))
            for sub in subtrees(op, av):
                walk(sub)

    walk(_compat.tree_items(tree))
    assert sorted(seen) == list("abcdefghi")


def test_a_removed_module_fails_at_import_naming_it():
    code = ("import sys; sys.modules['re._parser'] = None\n"
            "try:\n    import potentials._compat\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.startswith("IncompatibleUpstream"), out.stdout + out.stderr
    assert "potentials/_compat.py" in out.stdout and "re._parser" in out.stdout
