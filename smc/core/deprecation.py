"""Old import paths that keep working, with a DeprecationWarning, after their modules moved.

``MovedModules(table)`` is an import hook: importing an old module name gives a module whose
attributes are looked up, on first use and with a warning, in the new modules the table names
(a name renamed on the way is written ``"new.module:new_name"`` under its old name).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from typing import Any, Mapping, Sequence


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old module names of ``table``: old name -> (new modules searched in order,
    {old attribute name: "new.module:new_name"} for renamed attributes)."""

    def __init__(self, table: Mapping[str, tuple[Sequence[str], Mapping[str, str]]]):
        self.table = dict(table)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.table:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        old = module.__name__
        new_modules, renamed = self.table[old]

        def __getattr__(name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            if name in renamed:
                where, new_name = renamed[name].split(":")
                found = getattr(importlib.import_module(where), new_name)
                warnings.warn(f"{old}.{name} is now {where}.{new_name}", DeprecationWarning, stacklevel=2)
                return found
            for where in new_modules:
                target = importlib.import_module(where)
                if hasattr(target, name):
                    warnings.warn(f"{old} moved: import {name} from {where}", DeprecationWarning, stacklevel=2)
                    return getattr(target, name)
            raise AttributeError(f"module {old!r} has no attribute {name!r}")

        module.__getattr__ = __getattr__  # type: ignore[attr-defined]


def install(table: Mapping[str, tuple[Sequence[str], Mapping[str, str]]]) -> None:
    """Register a ``MovedModules`` hook for ``table`` (once per table's first name)."""
    if not any(isinstance(f, MovedModules) and f.table.keys() & table.keys() for f in sys.meta_path):
        sys.meta_path.append(MovedModules(table))
