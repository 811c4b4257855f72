"""Schema regexes: Python ``re`` as jsonschema uses it, with the ``regex`` package as fallback.

jsonschema evaluates ``pattern`` and ``patternProperties`` with ``re.search``. Patterns ``re``
cannot compile but the ``regex`` package can (Unicode property escapes such as ``\\p{Letter}``,
common in ECMA-262 schemas) would make that validator raise; here they are searched with
``regex`` instead, so

    search(p, s) = re.search(p, s)       if re compiles p
                   regex.search(p, s)    otherwise

and ``Validator`` is Draft202012Validator with ``pattern``, ``patternProperties`` and
``additionalProperties`` using it.
jsonschema switches to its stock class at any subschema naming the 2020-12 dialect in
``$schema``; ``same_dialect`` drops those (redundant) declarations so the switch never happens.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterator

import regex
from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError


@functools.lru_cache(maxsize=4096)
def compiled(pattern: str) -> Any:
    """The compiled pattern (``re`` first, then ``regex``); re.error/regex.error if neither."""
    try:
        return re.compile(pattern)
    except re.error:
        return regex.compile(pattern)


def search(pattern: str, text: str) -> bool:
    return compiled(pattern).search(text) is not None


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


Validator = validators.extend(
    Draft202012Validator,
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


DIALECT = "https://json-schema.org/draft/2020-12/schema"
_ONE = ("not", "if", "then", "else", "additionalProperties", "propertyNames", "items",
        "contains", "unevaluatedItems", "unevaluatedProperties", "contentSchema")
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")


def same_dialect(schema: Any) -> Any:
    """A copy of ``schema`` without ``$schema`` declarations of Draft 2020-12 (a no-op there)."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k == "$schema" and isinstance(v, str) and v.rstrip("#") == DIALECT:
            continue
        if k in _ONE:
            v = same_dialect(v)
        elif k in _MANY and isinstance(v, list):
            v = [same_dialect(x) for x in v]
        elif k in _NAMED and isinstance(v, dict):
            v = {name: same_dialect(x) for name, x in v.items()}
        out[k] = v
    return out
