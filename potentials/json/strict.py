"""Strict mode: a schema's open objects and arrays closed where doing so only narrows it.

    closed(S) = S with "additionalProperties": false added to each object subschema that
                names ``properties`` and says nothing about other keys, and the tail of each
                tuple (2020-12 ``prefixItems`` without ``items``; array-form ``items`` without
                ``additionalItems`` in older drafts) closed the same way,

so a document valid under closed(S) has no keys or items that S does not name. JSON Schema
leaves such objects open, and a sampled model fills them with keys copied from the schema in
its prompt; masking engines close them by default (xgrammar's ``strict_mode``, outlines), and
OpenAI's structured outputs require ``"additionalProperties": false`` under ``strict``.

A subschema is closed only where it alone decides which keys its object may have: it is reached
from the root through ``properties``, ``patternProperties``, ``additionalProperties``,
``items``, ``prefixItems`` and ``additionalItems`` (the value moves to a child), and through
``allOf``/``anyOf``/``oneOf`` branches and local ``$ref``s only where no sibling keyword or
sibling branch names keys of the same object (``{"allOf": [{"properties": {"a": ...}},
{"properties": {"b": ...}}]}`` stays open: closing either branch would reject every document
with both keys). Nothing under ``not``, ``if``/``then``/``else``, ``contains``,
``propertyNames``, ``dependentSchemas``/``dependencies``, a nested ``$schema`` or ``$id``, or
reached by a non-local reference, is changed, nor is an object schema whose own branches name
keys, or one that closing would leave with no valid value (``required`` or ``minProperties``
asking for keys it does not name, ``minItems`` beyond a tuple, ``const``/``enum``,
``contains``). ``JSONSchema(S, strict=True)`` generates under closed(S) and checks every
finished document against S as well, so its documents are valid under S whatever closing did.
"""

from __future__ import annotations

from typing import Any, Iterator
from urllib.parse import unquote

from potentials.json.drafts import DEFAULT

#: keywords that name keys of the object they sit on (a sibling of one of these, or a branch
#: combined with one, keeps its object open)
OBJECT_KEYS = ("properties", "patternProperties", "additionalProperties", "unevaluatedProperties")
#: keywords that name items of the array they sit on
ARRAY_KEYS = ("prefixItems", "items", "additionalItems", "unevaluatedItems")
#: keywords whose subschemas apply to a child value (key -> the shape of its value)
_CHILDREN = {"properties": "map", "patternProperties": "map", "additionalProperties": "one",
             "items": "one_or_list", "prefixItems": "list", "additionalItems": "one"}
#: keywords whose subschemas apply to the same value and are combined with their siblings
_COMBINED = ("allOf",)
#: keywords whose branches are alternatives to each other, each combined with the siblings
_ALTERNATIVES = ("anyOf", "oneOf")
#: keywords whose subschemas apply to the same value as the node they sit on, with the shape of
#: their value: a node is left open when one of them names keys too
_IN_PLACE = {"allOf": "list", "anyOf": "list", "oneOf": "list", "then": "one", "else": "one",
             "dependentSchemas": "map", "dependencies": "map"}


def closed_schema(schema: Any, draft: str = DEFAULT) -> Any:
    """closed(``schema``) (module docstring) for a root schema of ``draft``: a copy, ``schema``
    itself untouched."""
    if not isinstance(schema, dict):
        return schema
    walk = _Walk(schema, draft)
    walk.visit(schema, True)
    chosen = set() if walk.dynamic else {key for key, ok in walk.reach.items() if ok}
    return _copy(schema, chosen, draft, {})


class _Walk:
    """Which subschemas are reached only where closing them narrows the whole schema.

    reach[id(s)] is True while every path from the root to s allows closing s, False once one
    does not (a node reached both ways stays open)."""

    def __init__(self, root: dict, draft: str):
        self.root, self.draft = root, draft
        self.reach: dict[int, bool] = {}
        self.seen: set[tuple[int, bool]] = set()
        self.dynamic = False  # a dynamic reference may reach any subschema: nothing is closed

    def visit(self, node: Any, ok: bool) -> None:
        if not isinstance(node, dict) or (id(node), ok) in self.seen:
            return
        self.seen.add((id(node), ok))
        if node is not self.root and ("$schema" in node or "$id" in node or "id" in node):
            ok = False  # another draft or base URI: references below resolve elsewhere
        ref = self.target(node.get("$ref"))
        inner = [b for k, kind in _IN_PLACE.items() for b in _subschemas(node.get(k), kind)] + [ref]
        own = self.declares_beside(node) or any(self.declares(b, set()) for b in inner)
        self.reach[id(node)] = self.reach.get(id(node), True) and ok and not own
        self.dynamic = self.dynamic or "$dynamicRef" in node or "$recursiveRef" in node
        old_ref = self.draft in ("draft4", "draft6", "draft7") and "$ref" in node
        if not old_ref:  # up to draft 7 the siblings of $ref are ignored
            for key, kind in _CHILDREN.items():
                for child in _subschemas(node.get(key), kind):
                    self.visit(child, ok)
        branches = [(k, i, b) for k in _COMBINED + _ALTERNATIVES if isinstance(node.get(k), list)
                    and not old_ref for i, b in enumerate(node[k])]
        if ref is not None:
            branches.append(("$ref", 0, ref))
        for key, i, branch in branches:
            # combined with this branch: the node's own keywords, and every branch that is not
            # an alternative to it
            others = [b for k, j, b in branches
                      if (k, j) != (key, i) and not (k == key and k in _ALTERNATIVES)]
            alone = old_ref or not (_names(node, OBJECT_KEYS + ARRAY_KEYS)
                                    or any(self.declares(b, set()) for b in others))
            self.visit(branch, ok and alone)
        for key, kind in _BLOCKED.items():
            for child in _subschemas(node.get(key), kind):
                self.visit(child, False)

    def target(self, ref: Any) -> dict | None:
        """The subschema a local JSON-pointer reference ("#" or "#/...") names, else None."""
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            return None
        node: Any = self.root
        for part in ref[2:].split("/") if ref != "#" else ():
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node if isinstance(node, dict) else None

    def declares(self, node: Any, seen: set[int]) -> bool:
        """Does ``node``, or a subschema combined with it in place, name keys or items?"""
        if not isinstance(node, dict) or id(node) in seen:
            return False
        seen.add(id(node))
        if _names(node, OBJECT_KEYS + ARRAY_KEYS) or self.declares_beside(node):
            return True
        inner = [b for k in _COMBINED + _ALTERNATIVES + ("then", "else")
                 for b in _subschemas(node.get(k), "list" if k not in ("then", "else") else "one")]
        inner.append(self.target(node.get("$ref")))
        return any(self.declares(b, seen) for b in inner)

    def declares_beside(self, node: dict) -> bool:
        """Does a reference on ``node`` that this walk cannot follow (dynamic, or not a local
        JSON pointer) bring subschemas that may name keys? Assumed so."""
        return (_names(node, ("$dynamicRef", "$recursiveRef"))
                or "$ref" in node and self.target(node["$ref"]) is None)


def _names(node: dict, keys: tuple) -> bool:
    return any(k in node for k in keys)


#: keywords under which nothing is closed (closing there could widen the schema, or their
#: subschemas are combined with keywords beside them), with the shape of their value
_BLOCKED = {"not": "one", "if": "one", "then": "one", "else": "one", "contains": "one",
            "propertyNames": "one", "unevaluatedProperties": "one", "unevaluatedItems": "one",
            "dependentSchemas": "map", "dependencies": "map"}


def _subschemas(value: Any, kind: str) -> Iterator[Any]:
    """The subschemas in a keyword's value of shape ``kind`` (one, list, map, one_or_list);
    anything that is not a schema (a list of names in ``dependencies``) is passed over."""
    if value is None:
        return
    if kind == "map" and isinstance(value, dict):
        values = list(value.values())
    elif kind in ("list", "one_or_list") and isinstance(value, list):
        values = value
    else:
        values = [value]
    yield from (v for v in values if isinstance(v, dict))


def _copy(node: Any, chosen: set[int], draft: str, done: dict[int, Any]) -> Any:
    """A deep copy of ``node`` with each chosen object or tuple subschema closed."""
    if isinstance(node, list):
        return [_copy(v, chosen, draft, done) for v in node]
    if not isinstance(node, dict):
        return node
    if id(node) in done:
        return done[id(node)]
    out = done[id(node)] = {k: _copy(v, chosen, draft, done) for k, v in node.items()}
    if id(node) in chosen and not _names(node, ("const", "enum")):
        props = node.get("properties")
        if (isinstance(props, dict) and props and not _names(node, OBJECT_KEYS[1:])
                and _fits(node.get("required", []), props) and _at_most(node.get("minProperties"), len(props))):
            out["additionalProperties"] = False
        tuple_key, tail = ("prefixItems", "items") if draft == DEFAULT else ("items", "additionalItems")
        prefix = node.get(tuple_key)
        if (isinstance(prefix, list) and not _names(node, (tail, "unevaluatedItems", "contains"))
                and _at_most(node.get("minItems"), len(prefix))):
            out[tail] = False
    return out


def _fits(required: Any, props: dict) -> bool:
    """Are all the ``required`` names among ``props`` (else closing leaves no valid object)?"""
    return isinstance(required, list) and all(name in props for name in required)


def _at_most(bound: Any, size: int) -> bool:
    """Is a min* ``bound`` (absent: None) at most ``size`` (else closing leaves nothing valid)?"""
    return bound is None or isinstance(bound, (int, float)) and bound <= size
