"""Potentials: weights on sequences (constraints are 0/1 weights). See potentials.base."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Potential": "potentials.base",
    "BytePotential": "potentials.base",
    "Regex": "potentials.regex",
    "Grammar": "potentials.grammar",
    "JSONSchema": "potentials.json_schema",
    "Predicate": "potentials.predicate",
    "Product": "potentials.product",
    "Lifted": "potentials.lift",
    "LMPotential": "potentials.lm",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'potentials' has no attribute {name!r}")
