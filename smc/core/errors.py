"""The library's exception root.

Every error smc-steer raises on purpose derives from ``SmcSteerError``, so a caller can catch
them all in one clause. Each also derives from the built-in it always was (``ValueError`` for a
bad value, ``TypeError`` for a value of the wrong type, ...), so code written against those
keeps working.
"""

from __future__ import annotations


class SmcSteerError(Exception):
    """Root of every error smc-steer raises on purpose."""


class InvalidArgument(SmcSteerError, ValueError):
    """An argument or request field with a value outside its domain; the message names it."""


class InvalidArgumentType(SmcSteerError, TypeError):
    """An argument or request field of the wrong type; the message names it."""


class SearchBudgetExceeded(InvalidArgument):
    """A deterministic search (``smc.top_k``) used up its budget of expansions before it could
    answer exactly; a caller may fall back to a heuristic search."""


class RequestTimeout(SmcSteerError, TimeoutError):
    """A run went past its time limit (``generate_many(..., timeout=)``, the batch runner's
    per-request limit) and was cancelled."""
