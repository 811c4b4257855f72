"""JSON Schema drafts 4, 6, 7, 2019-09 and 2020-12: which one a schema declares, its validator,
and the view of a subschema's keywords in Draft 2020-12 terms that the clause compiler reads.

A (sub)schema's draft is the one its ``$schema`` names, else its parent's; the root's default is
2020-12. ``view(s, d)`` rewrites the keywords of subschema s of draft d that the clause
compiler (potentials.json.clauses) draws facts from into their 2020-12 meaning:

    d <= 7:        {"$ref": r, ...}          ->  {"$ref": r}   (siblings of $ref are ignored)
    d <= 2019-09:  "items": [s1..sn]         ->  "prefixItems": [s1..sn],
                   "additionalItems": a      ->  "items": a    (only beside array-form items)
    keywords the draft does not have (const, propertyNames and contains in draft 4, if/then/else
    before 7, dependentSchemas, unevaluated* and $recursiveRef before 2019-09, prefixItems and
    $dynamicRef before 2020-12)  ->  dropped (jsonschema ignores them there too)

The view only ever feeds facts; every check that runs the validator (a finished scalar, the
whole document at ``complete``) runs the declared draft's own validator on the original
subschema, so numeric keywords (draft 4's boolean ``exclusiveMinimum``), ``format`` per draft,
``dependencies`` and draft 4's integer type (1.0 is not an integer there) keep their meaning.
"""

from __future__ import annotations

from typing import Any, Callable

import referencing.jsonschema as rjs
from jsonschema import (
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
)

from potentials.json.patterns import extended

#: draft name -> (stock validator class, referencing specification)
_STOCK = {
    "draft4": (Draft4Validator, rjs.DRAFT4),
    "draft6": (Draft6Validator, rjs.DRAFT6),
    "draft7": (Draft7Validator, rjs.DRAFT7),
    "draft2019-09": (Draft201909Validator, rjs.DRAFT201909),
    "draft2020-12": (Draft202012Validator, rjs.DRAFT202012),
}
ORDER = tuple(_STOCK)
DEFAULT = "draft2020-12"

_URIS = {
    "json-schema.org/draft-04/schema": "draft4",
    "json-schema.org/draft-06/schema": "draft6",
    "json-schema.org/draft-07/schema": "draft7",
    "json-schema.org/draft/2019-09/schema": "draft2019-09",
    "json-schema.org/draft/2020-12/schema": "draft2020-12",
}
_OLDER = ("draft-03", "draft-02", "draft-01", "draft-00")

#: the validator class per draft: the stock one with the regex fallback and time bound of
#: potentials.json.patterns for pattern, patternProperties and additionalProperties
VALIDATORS = {name: extended(cls) for name, (cls, _) in _STOCK.items()}
SPECS = {name: spec for name, (_, spec) in _STOCK.items()}


def draft_of(uri: Any, where: str = "(root)", lookup: Callable[[str], Any] | None = None,
             _seen: tuple = ()) -> str:
    """The draft a ``$schema`` value names: a draft's metaschema URI (http or https, with or
    without an empty fragment), or a custom metaschema that ``lookup`` finds (in the registry)
    whose own ``$schema`` names one. ValueError for anything else, naming ``where`` it was met."""
    if isinstance(uri, str):
        bare = uri.strip()
        for scheme in ("https://", "http://"):
            bare = bare.removeprefix(scheme)
        bare = bare.removesuffix("#")
        if bare in _URIS:
            return _URIS[bare]
        if any(old in uri for old in _OLDER):
            raise ValueError(
                f"$schema {uri!r} at {where}: that draft is not supported "
                "(drafts 4, 6, 7, 2019-09 and 2020-12 are)"
            )
        meta = None
        if lookup is not None and uri not in _seen:
            try:
                meta = lookup(uri)
            except Exception:  # referencing's NoSuchResource and friends
                meta = None
        if isinstance(meta, dict) and "$schema" in meta:
            return draft_of(meta["$schema"], where, lookup, (*_seen, uri))
    raise ValueError(
        f"$schema {uri!r} at {where} names no known JSON Schema draft "
        "(drafts 4, 6, 7, 2019-09 and 2020-12 are supported, and custom metaschemas built on "
        "them that the registry holds)"
    )


def before(draft: str, other: str) -> bool:
    return ORDER.index(draft) < ORDER.index(other)


def view(s: dict, draft: str) -> dict:
    """The keywords of subschema ``s`` (of ``draft``) in 2020-12 terms (see the module doc)."""
    if draft == DEFAULT:
        return s
    if before(draft, "draft2019-09") and "$ref" in s:
        return {"$ref": s["$ref"]}
    out = {k: v for k, v in s.items() if k not in _MISSING[draft]}
    items = s.get("items")
    if isinstance(items, list):
        out["prefixItems"] = items
        out.pop("items")
        if "additionalItems" in s:
            out["items"] = s["additionalItems"]
    out.pop("additionalItems", None)
    return out


_LATER_2019 = {"dependentSchemas", "dependentRequired", "unevaluatedItems",
               "unevaluatedProperties", "$recursiveRef", "$recursiveAnchor", "minContains",
               "maxContains", "$anchor", "$defs"}
_LATER_2020 = {"prefixItems", "$dynamicRef", "$dynamicAnchor"}
#: keywords (that the clause compiler reads or walks) each draft does not have
_MISSING = {
    "draft4": {"const", "propertyNames", "contains", "if", "then", "else"} | _LATER_2019
    | _LATER_2020,
    "draft6": {"if", "then", "else"} | _LATER_2019 | _LATER_2020,
    "draft7": _LATER_2019 | _LATER_2020,
    "draft2019-09": _LATER_2020,
}


def strip_declarations(schema: Any, draft: str, lookup: Callable[[str], Any] | None = None
                       ) -> Any:
    """A copy of ``schema`` without ``$schema`` declarations of ``draft`` (redundant under a
    validator of that draft; jsonschema would otherwise switch to its stock class there).
    ValueError for a declaration of an unknown draft."""
    return _strip(schema, draft, "(root)", lookup)


#: the keywords of drafts 4 to 2020-12 whose value is one subschema (``items`` may instead be a
#: list), a list of subschemas, or a map from names to subschemas (``dependencies`` values may
#: instead be lists of names); potentials.json.clauses walks a subset of them
ONE_SCHEMA = frozenset(
    {"not", "if", "then", "else", "additionalProperties", "propertyNames", "items", "contains",
     "unevaluatedItems", "unevaluatedProperties", "contentSchema", "additionalItems"}
)
LIST_OF_SCHEMAS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
MAP_OF_SCHEMAS = frozenset(
    {"properties", "patternProperties", "dependentSchemas", "$defs", "definitions",
     "dependencies"}
)


def _strip(schema: Any, draft: str, where: str, lookup: Callable[[str], Any] | None) -> Any:
    # iterative over the nesting would be safer for depth; the constructor turns a
    # RecursionError into a clear ValueError
    if not isinstance(schema, dict):
        return schema
    own = draft
    if "$schema" in schema:
        own = draft_of(schema["$schema"], where, lookup)
    out = {}
    for k, v in schema.items():
        if k == "$schema" and own == draft:
            continue
        at = f"{where}/{k}" if where != "(root)" else k
        if k in ONE_SCHEMA and isinstance(v, dict):
            v = _strip(v, own, at, lookup)
        elif k in LIST_OF_SCHEMAS and isinstance(v, list):
            v = [_strip(x, own, f"{at}/{i}", lookup) for i, x in enumerate(v)]
        elif k in MAP_OF_SCHEMAS and isinstance(v, dict):
            v = {name: _strip(x, own, f"{at}/{name}", lookup) for name, x in v.items()}
        out[k] = v
    return out
