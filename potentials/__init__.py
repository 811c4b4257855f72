"""Potentials: weights on sequences (constraints are 0/1 weights). See potentials.base.

Layout: the contract (``base``), lifting to token vocabularies (``lift``), products, the LM as a
potential (``lm``), ``predicate``, ``choice``, the twists' helpers (``lookahead``, ``last_step``), the shipped
contract checks (``testing``), and one package per constraint family: ``regex``, ``json``,
``grammar``, ``segments`` (constraints in sequence, tool calls, reasoning).

The flat modules of earlier releases (``potentials.fsm``, ``potentials.json_schema``, ...) still
import, with a DeprecationWarning, as the very module that replaced them (``MOVED``).
"""

from __future__ import annotations

import importlib
from typing import Any

from smc.core.deprecation import install as install_moved

_EXPORTS = {
    "Potential": "potentials.base",
    "BytePotential": "potentials.base",
    "Regex": "potentials.regex",
    "Grammar": "potentials.grammar",
    "JSONSchema": "potentials.json",
    "Predicate": "potentials.predicate",
    "Choice": "potentials.choice",
    "Segments": "potentials.segments",
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
    "potentials.finishing": "potentials.last_step",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'potentials' has no attribute {name!r}")

install_moved({old: ((new,), {}) for old, new in MOVED.items()})
