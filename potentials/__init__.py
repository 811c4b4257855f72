"""Potentials: weights on sequences (constraints are 0/1 weights). See potentials.base.

Layout: the contract (``base``), lifting to token vocabularies (``lift``), products, the LM as a
potential (``lm``), ``predicate``, the twists' helpers (``lookahead``, ``finishing``), the shipped
contract checks (``testing``), and one package per constraint family: ``regex``, ``json``,
``grammar``.

The flat modules of earlier releases (``potentials.fsm``, ``potentials.json_schema``, ...) still
import, with a DeprecationWarning, as the very module that replaced them (``MOVED``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from typing import Any

_EXPORTS = {
    "Potential": "potentials.base",
    "BytePotential": "potentials.base",
    "Regex": "potentials.regex",
    "Grammar": "potentials.grammar",
    "JSONSchema": "potentials.json",
    "Predicate": "potentials.predicate",
    "Product": "potentials.base",
    "Lifted": "potentials.lift",
    "LMPotential": "potentials.lm",
}

#: old module path -> the module that holds its code now
MOVED = {
    "potentials.fsm": "potentials.regex.automaton",
    "potentials.regex_syntax": "potentials.regex.syntax",
    "potentials.regex_chars": "potentials.regex.chars",
    "potentials.regex_relax": "potentials.regex.relax",
    "potentials.regex_completion": "potentials.regex.completion",
    "potentials.json_schema": "potentials.json.potential",
    "potentials.json_machine": "potentials.json.machine",
    "potentials.json_clauses": "potentials.json.clauses",
    "potentials.json_drafts": "potentials.json.drafts",
    "potentials.json_patterns": "potentials.json.patterns",
    "potentials.earley": "potentials.grammar.earley",
    "potentials.product": "potentials.base",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'potentials' has no attribute {name!r}")


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path of ``MOVED`` as its new module (the same object, so ``is`` holds and
    monkeypatching either name patches both), warning once per import."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec):
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} is deprecated; import {new} instead", DeprecationWarning,
                      stacklevel=2)
        # the new module keeps its own name and spec: only sys.modules learns the old name
        return importlib.import_module(new)

    def exec_module(self, module: Any) -> None:
        pass


# first in line: another finder (an editable install of an older checkout, say) could still see
# a flat file under the old name
if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())
