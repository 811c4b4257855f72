"""The sharing rule: what the particles of a run share, and how a particle is cloned.

An object is *shared* by all particles when it is an LM backend or its class declares
``shared_by_particles = True`` (AsyncLM, Potential, TokenSampler and ``Shared`` do, once, in
their base classes). Cloning a particle (``clone_state``) keeps every shared object it reaches,
at any depth, and deep-copies everything else; a checkpoint (smc.engine.checkpoint) names every
shared object by its attribute path (``shared_paths``) instead of pickling it, and ``resume``
binds the names again from ``lm=`` and ``shared={name: object}``.
"""

from __future__ import annotations

import copy
import types
import weakref
from typing import Any, Iterator

from smc.backends.base import is_lm

class Shared:
    """A container whose contents all particles share: ``Shared(table=t).table is t`` in every
    clone, and a checkpoint names it (by its attribute path) instead of pickling it.

    To make a class of your own shared, declare ``shared_by_particles = True`` on it instead.
    """

    shared_by_particles = True

    def __init__(self, **items: Any):
        self.__dict__.update(items)


def is_shared(obj: Any) -> bool:
    """The sharing rule: ``obj`` is an LM backend, or its class declares ``shared_by_particles = True``."""
    how = _HOW.get(type(obj)) or _classify(type(obj))
    return how == "shared" or (how[0] == "?" and is_lm(obj))


#: values that are their own copy (as copy.deepcopy treats them)
ATOMIC_TYPES = frozenset({
    type(None), bool, int, float, complex, str, bytes, range, type, type(Ellipsis),
    types.FunctionType, types.BuiltinFunctionType, types.MethodType, weakref.ref,
})
_MISSING = object()
#: per class, how clone_state copies its instances: "shared" (kept), "plain" (attribute by
#: attribute: copy.deepcopy's default protocol), "deepcopy" (a protocol of its own), or "?plain"
#: / "?deepcopy" when only the instance can tell whether it is an LM (protocol members set in
#: __init__); classes are classified once, when first met
_HOW: dict[type, str] = {}


def _classify(t: type) -> str:
    if getattr(t, "shared_by_particles", False) is True:
        how = "shared"
    else:
        plain = (
            all(k.__module__ != "builtins" for k in t.__mro__[:-1])  # not a dict, list, ... subclass
            and not hasattr(t, "__deepcopy__")
            and t.__reduce_ex__ is object.__reduce_ex__
            and t.__reduce__ is object.__reduce__
            and t.__getstate__ is object.__getstate__
            and not hasattr(t, "__setstate__")
            and all("__slots__" not in vars(k) for k in t.__mro__[:-1])
            and hasattr(t, "__dict__")
        )
        how = "plain" if plain else "deepcopy"
        if hasattr(t, "next_token_logprobs"):  # an LM by the protocol, if it has vocab and EOS ids
            how = "?" + how
    _HOW[t] = how
    return how


def clone_state(obj: Any, memo: dict[int, Any] | None = None) -> Any:
    """copy.deepcopy(obj), except that every shared object it reaches (``is_shared``) is kept.

    Lists, dicts, tuples, sets and plain objects are copied here (fast: program state is mostly
    these); anything else goes to copy.deepcopy with the shared objects inside it registered in
    its memo first, so the rule holds at every depth.
    """
    return _clone(obj, {} if memo is None else memo)


def _clone(x: Any, memo: dict[int, Any]) -> Any:
    t = type(x)
    if t in ATOMIC_TYPES:
        return x
    y = memo.get(id(x), _MISSING)
    if y is not _MISSING:
        return y
    if t is list:
        if ATOMIC_TYPES.issuperset(map(type, x)):  # e.g. token ids: a plain copy
            y = memo[id(x)] = x.copy()
        else:
            y = memo[id(x)] = []
            y.extend(v if type(v) in ATOMIC_TYPES else _clone(v, memo) for v in x)
        return y
    if t is dict:
        y = memo[id(x)] = {}
        for k, v in x.items():
            y[_clone(k, memo)] = _clone(v, memo)
        return y
    if t is tuple:
        items = [_clone(v, memo) for v in x]
        y = memo[id(x)] = x if all(a is b for a, b in zip(items, x)) else tuple(items)
        return y
    if t is set or t is frozenset:
        y = memo[id(x)] = t(_clone(v, memo) for v in x)
        return y
    how = _HOW.get(t) or _classify(t)
    if how == "shared" or (how[0] == "?" and is_lm(x)):
        memo[id(x)] = x
        return x
    if how[-5:] == "plain":
        y = memo[id(x)] = t.__new__(t)
        d = y.__dict__
        for k, v in x.__dict__.items():
            d[k] = v if type(v) in ATOMIC_TYPES else _clone(v, memo)
        return y
    for s in shared_inside(x):
        memo[id(s)] = s
    return copy.deepcopy(x, memo)


def children(x: Any) -> list[tuple[str, Any]]:
    """(path suffix, child) for the members of ``x`` that a copy or a pickle of it visits: a
    container's items, then its attributes (``__dict__`` and ``__slots__``)."""
    if isinstance(x, dict):
        out = [(f"[{k!r}]", v) for k, v in x.items()] + [(f"<key {k!r}>", k) for k in x if type(k) not in ATOMIC_TYPES]
    elif isinstance(x, (list, tuple)):
        out = [(f"[{i}]", v) for i, v in enumerate(x)]
    elif isinstance(x, (set, frozenset)):
        out = [(f"<{v!r}>", v) for v in x]
    else:
        out = []
    out += [(f".{k}", v) for k, v in getattr(x, "__dict__", {}).items()]
    for k in type(x).__mro__:
        for name in vars(k).get("__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(x, name):
                out.append((f".{name}", getattr(x, name)))
    return out


def shared_paths(root: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(path, object) for every shared object reachable from ``root`` without passing through
    another shared object, each once, at the first path found breadth-first (e.g. "context.lm")."""
    seen: set[int] = set()
    queue = [(prefix, root)]
    while queue:
        nxt = []
        for path, x in queue:
            if type(x) in ATOMIC_TYPES or id(x) in seen:
                continue
            seen.add(id(x))
            if is_shared(x):
                yield path, x
                continue
            nxt.extend((f"{path}{suffix}".lstrip("."), c) for suffix, c in children(x))
        queue = nxt


def shared_inside(x: Any) -> Iterator[Any]:
    """Every shared object reachable from ``x`` (see ``shared_paths``)."""
    return (obj for _, obj in shared_paths(x))


