"""Old import paths that keep working, with a DeprecationWarning, after their modules moved.

``install(table)`` adds an import hook for a table: old module name -> (the new modules its
names now live in, {old name: "new.module:new_name"} for names renamed on the way). An old
module whose code moved whole (one new module, nothing renamed) imports as that very module
(so ``is`` holds and patching either name patches both); one that was split imports as a
module whose attributes are found, on first use, in the new modules.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any, Mapping, Sequence

#: old module -> (new modules, renamed names)
Table = Mapping[str, tuple[Sequence[str], Mapping[str, str]]]


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The import hook of one table (see the module docstring)."""

    def __init__(self, table: Table):
        self.table = dict(table)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.table:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        new_modules, renamed = self.table[spec.name]
        if len(new_modules) == 1 and not renamed:
            warnings.warn(f"{spec.name} is deprecated; import {new_modules[0]} instead",
                          DeprecationWarning, stacklevel=2)
            return importlib.import_module(new_modules[0])
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        old = module.__spec__.name if module.__spec__ else module.__name__
        if module.__name__ != old:  # moved whole: the new module itself
            return
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
                    warnings.warn(f"{old} is deprecated; import {name} from {where}", DeprecationWarning,
                                  stacklevel=2)
                    return getattr(target, name)
            raise AttributeError(f"module {old!r} has no attribute {name!r}")

        module.__getattr__ = __getattr__  # type: ignore[attr-defined]


def install(table: Table) -> None:
    """Put the hook of ``table`` first in ``sys.meta_path`` (once): first, so that a stale copy of
    an old flat module elsewhere on the path (an editable install of an older checkout) is not
    found instead."""
    if not any(isinstance(f, MovedModules) and f.table.keys() == dict(table).keys() for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModules(table))
