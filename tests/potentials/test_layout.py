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
