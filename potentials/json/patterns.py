"""Schema regexes, searched in bounded time: the ``regex`` package with a timeout.

jsonschema evaluates ``pattern`` and ``patternProperties`` with ``re.search``, which cannot be
interrupted: a pattern with catastrophic backtracking (``^(a+)+b$``) can hang a check for
minutes. Here every search runs on the ``regex`` package (its version-0 syntax is ``re``'s,
and it also compiles what ``re`` cannot, such as the ``\\p{Letter}`` of ECMA-262 schemas) with
a time limit:

    search(p, s) = regex.search(p, s) is not None      when it finishes within PATTERN_TIMEOUT
                   raises PatternTimeout                otherwise

(``re`` is used only for a pattern ``regex`` rejects but ``re`` accepts; such a search is
unbounded.) The verdict on a timeout: while generating, the check is undecided and the prefix
is kept; at ``complete`` the validator raises and the document is rejected.

``extended(cls)`` is a jsonschema validator class with ``pattern``, ``patternProperties`` and
``additionalProperties`` using this search (potentials.json.drafts builds one per draft).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterator

import regex
from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError
from smc.core.errors import SmcSteerError

#: seconds one pattern search may take
PATTERN_TIMEOUT = 0.5


class PatternTimeout(SmcSteerError, TimeoutError):
    """A pattern search ran past PATTERN_TIMEOUT."""


@functools.lru_cache(maxsize=4096)
def compiled(pattern: str) -> Any:
    """The compiled pattern (``regex`` first, then ``re``); regex.error if neither compiles."""
    try:
        return regex.compile(pattern)
    except regex.error:
        try:
            return re.compile(pattern)
        except re.error:
            pass
        raise


def search(pattern: str, text: str) -> bool:
    """Does ``text`` contain a match of ``pattern``? (PatternTimeout past the time limit)"""
    p = compiled(pattern)
    if isinstance(p, re.Pattern):
        return p.search(text) is not None
    try:
        return p.search(text, timeout=PATTERN_TIMEOUT) is not None
    except TimeoutError:
        raise PatternTimeout(
            f"searching {pattern!r} in a string of {len(text)} characters took over "
            f"{PATTERN_TIMEOUT} s"
        ) from None


def maybe_search(pattern: str, text: str) -> bool | None:
    """``search``, or None when it cannot be decided in time."""
    try:
        return search(pattern, text)
    except PatternTimeout:
        return None


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator:
    if validator.is_type(instance, "string") and not search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, pats: dict, instance: Any, schema: Any) -> Iterator:
    if not validator.is_type(instance, "object"):
        return
    for pat, sub in pats.items():
        for k, v in instance.items():
            if search(pat, k):
                yield from validator.descend(v, sub, path=k, schema_path=pat)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator:
    if not validator.is_type(instance, "object"):
        return
    props = schema.get("properties", {})
    pats = list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in props and not any(search(p, k) for p in pats)]
    if validator.is_type(extra, "object"):
        for k in extras:
            yield from validator.descend(instance[k], extra, path=k)
    elif not extra and extras:
        yield ValidationError(f"additional properties are not allowed: {sorted(extras)!r}")


def extended(cls: Any) -> Any:
    """jsonschema validator class ``cls`` with this module's pattern search."""
    return validators.extend(
        cls,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )


def _is_regex(value: object) -> bool:
    if isinstance(value, str):
        compiled(value)
    return True


#: the metaschema's format checker, with "regex" meaning "compiles with re or regex"
SCHEMA_FORMATS = FormatChecker()
SCHEMA_FORMATS.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)
SCHEMA_FORMATS.checkers["regex"] = (_is_regex, (re.error, regex.error))
