"""Predicate: a user's Python checks over text as a Boolean byte-level potential.

With text(x) the UTF-8 decoding of the complete characters of the bytes x (an incomplete last
character is left out) and f, g the user's functions:

    prefix(x)   = 0 if x is valid UTF-8 up to a possibly incomplete last character
                     and g(text(x)) is true (g omitted: always true), else -inf
    complete(x) = 0 if x is valid UTF-8, prefix(x) = 0 and f(x.decode()) is true, else -inf

f and g may be plain or ``async`` functions. g must be monotone (once false, false for every
extension) for the potential to be consistent; results of both are cached per text, so they
should be pure. Exceptions raised by them propagate unchanged.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from typing import Any, Awaitable, Callable

from smc.core.logmath import NEG_INF
from potentials.base import BytePotential
from potentials.text import split_utf8

Check = Callable[[str], bool] | Callable[[str], Awaitable[bool]]


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))


class _Memo:
    """Bounded cache of a check's results by text."""

    def __init__(self, fn: Check, size: int = 65_536):
        self.fn, self.size = fn, size
        self.is_async = _is_async(fn)
        self.results: OrderedDict[str, bool] = OrderedDict()

    def cached(self, text: str) -> bool | None:
        got = self.results.get(text)
        if got is not None:
            self.results.move_to_end(text)
        return got

    def store(self, text: str, value: Any) -> bool:
        value = bool(value)
        self.results[text] = value
        if len(self.results) > self.size:
            self.results.popitem(last=False)
        return value

    def sync(self, text: str) -> bool:
        got = self.cached(text)
        if got is None:
            value = self.fn(text)
            if inspect.isawaitable(value):
                getattr(value, "close", lambda: None)()  # never awaited: close it quietly
                raise TypeError(f"predicate {self.fn!r} returned an awaitable; declare it with "
                                "`async def` so that it is awaited")
            got = self.store(text, value)
        return got

    async def __call__(self, text: str) -> bool:
        got = self.cached(text)
        if got is None:
            value = self.fn(text)
            if inspect.isawaitable(value):
                value = await value
            got = self.store(text, value)
        return got


class Predicate(BytePotential):
    """Boolean potential from ``complete(text) -> bool`` and optional ``prefix(text) -> bool``.

    The state is the bytes so far. A plain ``prefix`` function is checked while advancing (so
    lifting prunes with it); an ``async`` one is checked in ``state_prefix`` (the potential then
    reports ``boolean = False`` so that lifting asks for every candidate).
    """

    def __init__(self, complete: Check, prefix: Check | None = None):
        if not callable(complete):
            raise TypeError(f"Predicate(complete=...) must be callable, got {complete!r}")
        if prefix is not None and not callable(prefix):
            raise TypeError(f"Predicate(prefix=...) must be callable or None, got {prefix!r}")
        self._complete = _Memo(complete)
        self._prefix = _Memo(prefix) if prefix is not None else None
        self.boolean = self._prefix is None or not self._prefix.is_async

    def __repr__(self) -> str:
        return f"Predicate(complete={self._complete.fn!r}, prefix={self._prefix and self._prefix.fn!r})"

    def initial(self) -> bytes:
        return b""

    def advance(self, state: bytes, data: bytes) -> bytes | None:
        new = state + bytes(data)
        parts = split_utf8(new)
        if parts is None:
            return None
        if self._prefix is not None and not self._prefix.is_async:
            if not self._prefix.sync(parts[0]):
                return None
        return new

    async def state_prefix(self, state: bytes) -> float:
        parts = split_utf8(state)
        if parts is None:
            return NEG_INF
        if self._prefix is not None and not await self._prefix(parts[0]):
            return NEG_INF
        return 0.0

    async def state_complete(self, state: bytes) -> float:
        parts = split_utf8(state)
        if parts is None or parts[1] or await self.state_prefix(state) == NEG_INF:
            return NEG_INF
        return 0.0 if await self._complete(parts[0]) else NEG_INF
