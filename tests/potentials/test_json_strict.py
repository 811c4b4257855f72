"""Strict mode (potentials.json.strict): which subschemas close, that closing only narrows a
schema (the JSON Schema Test Suite), and JSONSchema(S, strict=True) as a potential."""

from __future__ import annotations

import asyncio
import json
import pickle

import pytest
from jsonschema import Draft202012Validator

from smc.core.errors import InvalidArgument, InvalidArgumentType
from smc.core.logmath import NEG_INF
from potentials.json import JSONSchema
from potentials.json.strict import closed_schema
from potentials.segments.forms import constraint_part
from potentials.testing import MaskKeyContract
from tests.potentials.test_json_conformance import DRAFT, remotes_registry

A = {"type": "integer"}
CLOSED = {"additionalProperties": False}


@pytest.mark.parametrize("schema,closed", [
    # nested objects close at every level
    ({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": A}}}},
     {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": A}, **CLOSED}}, **CLOSED}),
    # two allOf branches that each name keys: closing either would reject {"a", "b"}
    ({"allOf": [{"properties": {"a": A}}, {"properties": {"b": A}}]}, None),
    # a branch beside one that names no keys closes
    ({"allOf": [{"properties": {"a": A}}, {"required": ["a"]}]},
     {"allOf": [{"properties": {"a": A}, **CLOSED}, {"required": ["a"]}]}),
    # branches that only require keys leave the node closable
    ({"properties": {"a": A}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
     {"properties": {"a": A}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}], **CLOSED}),
    # a branch naming keys combined with the node's own keys: both stay open
    ({"properties": {"a": A}, "anyOf": [{"properties": {"b": A}}]}, None),
    # alternatives close one by one
    ({"oneOf": [{"properties": {"a": A}}, {"properties": {"b": A}}]},
     {"oneOf": [{"properties": {"a": A}, **CLOSED}, {"properties": {"b": A}, **CLOSED}]}),
    # a local $ref with nothing beside it: its target closes
    ({"$ref": "#/$defs/X", "$defs": {"X": {"properties": {"x": A}}}},
     {"$ref": "#/$defs/X", "$defs": {"X": {"properties": {"x": A}, **CLOSED}}}),
    # a $ref beside properties (2020-12 combines them): both open
    ({"$ref": "#/$defs/X", "properties": {"y": A}, "$defs": {"X": {"properties": {"x": A}}}}, None),
    # a reference this walk cannot follow may name keys: the node stays open
    ({"$ref": "https://example.com/x.json", "properties": {"y": A}}, None),
    # under not / if / then: closing could widen the schema, or the condition names keys
    ({"not": {"properties": {"a": A}}}, None),
    ({"properties": {"k": A}, "if": {"properties": {"k": {"const": 1}}}, "then": {"properties": {"x": A}}}, None),
    # an object without named properties is a free-form map; patternProperties already decide
    ({"type": "object", "properties": {}}, None),
    ({"properties": {"a": A}, "patternProperties": {"^x": A}}, None),
    ({"properties": {"a": A}, "additionalProperties": A}, None),
    # closing would leave no valid value: required or minProperties beyond the named keys,
    # minItems beyond the tuple, a const/enum, contains
    ({"properties": {"a": A}, "required": ["a", "b"]}, None),
    ({"properties": {"a": A}, "minProperties": 2}, None),
    ({"prefixItems": [A], "minItems": 2}, None),
    ({"properties": {"a": A}, "const": {"a": 1, "b": 2}}, None),
    ({"prefixItems": [A], "contains": {"type": "string"}}, None),
    # tuples: 2020-12 prefixItems, older drafts' array-form items
    ({"prefixItems": [A]}, {"prefixItems": [A], "items": False}),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "items": [A]},
     {"$schema": "http://json-schema.org/draft-07/schema#", "items": [A], "additionalItems": False}),
])
def test_which_subschemas_close(schema, closed):
    draft = "draft7" if "draft-07" in schema.get("$schema", "") else "draft2020-12"
    given = json.dumps(schema)
    assert closed_schema(schema, draft) == (schema if closed is None else closed)
    assert json.dumps(schema) == given  # the argument is left as it was


#: the suite's instances that are valid under S and not under closed(S): each has a key or an
#: item its schema does not name
NARROWED = {
    ("additionalProperties.json", "additionalProperties are allowed by default", "additional properties are allowed"),
    ("anyOf.json", "anyOf complex types", "both anyOf valid (complex)"),
    ("not.json", "forbidden property", "property absent"),
    ("prefixItems.json", "a schema given for prefixItems", "array with additional items"),
    ("prefixItems.json", "additional items are allowed by default", "only the first item is validated"),
    ("properties.json", "object properties validation", "doesn't invalidate other properties"),
    *(("uniqueItems.json", case, test) for case in ("uniqueItems with an array of items", "uniqueItems=false with an array of items")
      for test in ("unique array extended from [false, true] is valid", "unique array extended from [true, false] is valid")),
    *(("uniqueItems.json", "uniqueItems=false with an array of items", test)
      for test in ("non-unique array extended from [false, true] is valid", "non-unique array extended from [true, false] is valid")),
}


def test_closing_only_narrows_the_suites_schemas():
    """Over every draft 2020-12 case of the JSON Schema Test Suite: no instance is valid under
    closed(S) and invalid under S, and the instances closing removes are exactly NARROWED."""
    registry = remotes_registry()
    narrowed, changed = set(), 0
    for path in sorted(DRAFT.glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8")):
            schema = case["schema"]
            closed = closed_schema(schema)
            changed += closed != schema
            for test in case["tests"]:
                try:
                    before = Draft202012Validator(schema, registry=registry).is_valid(test["data"])
                except Exception:  # patterns Python's re cannot compile (\p{...})
                    continue
                after = Draft202012Validator(closed, registry=registry).is_valid(test["data"])
                assert before or not after, (path.name, case["description"], test["description"])
                if before and not after:
                    narrowed.add((path.name, case["description"], test["description"]))
    assert narrowed == NARROWED
    assert changed >= 40


OPEN = {"type": "object", "properties": {"a": {"type": "integer"}, "t": {"type": "array", "prefixItems": [{"type": "boolean"}]}},
        "required": ["a"]}


class TestStrictContract(MaskKeyContract):
    texts = ['{"a":1}', '{"a":1,"b":2}', '{"t":[true],"a":0}', '{"t":[true,1],"a":0}', '{"b":1}']

    def potential(self):
        return JSONSchema(OPEN, strict=True)

    def contexts(self):
        out = {b""}
        for t in self.texts:
            x = t.encode()
            out.update(x[:i] for i in range(len(x) + 1))
        return sorted(out)


def verdict(pot: JSONSchema, text: str) -> float:
    return asyncio.run(pot.complete(text.encode()))


def test_strict_rejects_keys_and_items_the_schema_does_not_name():
    strict, plain = JSONSchema(OPEN, strict=True), JSONSchema(OPEN)
    for text in ('{"a":1,"b":2}', '{"t":[true,1],"a":0}'):
        assert verdict(plain, text) == 0.0 and verdict(strict, text) == NEG_INF
    for prefix in ('{"a":1,"b', '{"t":[true,'):  # dead as soon as the extra key or item opens
        assert asyncio.run(plain.prefix(prefix.encode())) == 0.0
        assert asyncio.run(strict.prefix(prefix.encode())) == NEG_INF
    assert verdict(strict, '{"t":[true],"a":0}') == 0.0
    with pytest.raises(ValueError, match="not valid under the schema"):
        strict.parse('{"a": 1, "b": 2}')


def test_a_finished_document_is_also_valid_under_the_schema_as_given():
    """Closing a oneOf branch can let a document match one branch only where it matched two:
    valid under closed(S), invalid under S. The strict potential checks S too."""
    schema = {"oneOf": [{"type": "object", "properties": {"a": A}}, {"type": "object", "required": ["b"]}]}
    doc = {"a": 1, "b": 2}
    assert Draft202012Validator(closed_schema(schema)).is_valid(doc)
    assert not Draft202012Validator(schema).is_valid(doc)
    assert verdict(JSONSchema(schema, strict=True), json.dumps(doc)) == NEG_INF
    assert verdict(JSONSchema(schema, strict=True), '{"a": 1}') == 0.0


def test_strict_is_kept_by_pickle_and_repr_and_checked():
    pot = JSONSchema(OPEN, strict=True)
    again = pickle.loads(pickle.dumps(pot))
    assert again.strict and verdict(again, '{"a":1,"b":2}') == NEG_INF
    assert "strict=True" in repr(pot) and "strict" not in repr(JSONSchema(OPEN))
    with pytest.raises(InvalidArgumentType, match="strict must be True or False"):
        JSONSchema(OPEN, strict="yes")


def test_json_form_takes_strict_beside_json_schema():
    assert constraint_part({"json_schema": OPEN, "strict": True}, "c").strict
    assert not constraint_part({"json_schema": OPEN}, "c").strict
    with pytest.raises(InvalidArgument, match="c.strict applies to a json_schema constraint, not regex"):
        constraint_part({"regex": "a", "strict": True}, "c")
    with pytest.raises(InvalidArgumentType, match="c.strict must be true or false"):
        constraint_part({"json_schema": OPEN, "strict": 1}, "c")
