"""JSONSchema.completion: a y with x y a valid document, built from the schema (what is open
closed, the required keys still missing written with short values), where the budget twist's
byte search writes ever new keys into an open object and gives up (smc.engine.critics).

Checked by the validator (jsonschema on json.loads(x y), not the recognizer that built y), on hand-written cases
and on every schema of the JSON Schema Test Suite (draft2020-12) after cuts of its valid
instances; the MaskBench schemas, where present, as a user's schemas."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from potentials.json import JSONSchema
from tests.potentials.test_json_conformance import DRAFT, remotes_registry

PERSON = {"type": "object", "required": ["name", "age", "tags"],
          "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 18},
                         "tags": {"type": "array", "items": {"type": "string", "minLength": 2},
                                  "minItems": 2}}}
CLOSED = {"type": "object", "required": ["a", "b"], "additionalProperties": False,
          "properties": {"a": {"type": "string", "pattern": "^[0-9]{3}-[A-Z]+$"},
                         "b": {"enum": ["hello", "world"]}}}
LONG_KEY = {"type": "object", "required": ["sports_celebrity.get_major_achievements"], "additionalProperties": False,
            "properties": {"sports_celebrity.get_major_achievements": {
                "type": "object", "required": ["celebrity_name"], "additionalProperties": False,
                "properties": {"celebrity_name": {"type": "string"}, "team": {"type": "string"}}}}}
TREE = {"$defs": {"n": {"type": "object", "required": ["v"],
                        "properties": {"c": {"$ref": "#/$defs/n"}, "v": {"type": "integer"}}}},
        "$ref": "#/$defs/n"}


@pytest.mark.parametrize("schema, prefix, y", [
    # an open object: the string closes, the required keys still missing follow, sorted
    (PERSON, b'{"name": "Ad', b'","age":18,"tags":["aa","aa"]}'),
    # any keys of its own first (here a nested one, closed on the way out)
    (PERSON, b'{"x": 1, "y": {"z": [1,2', b']},"age":18,"name":"","tags":["aa","aa"]}'),
    # a number under a minimum is written on until it is large enough
    (PERSON, b'{"age": 1', b'8,"name":"","tags":["aa","aa"]}'),
    (PERSON, b"", b'{"age":18,"name":"","tags":["aa","aa"]}'),
    # a pattern's shortest match, an enum's first candidate
    (CLOSED, b'{"a":"12', b'0-A","b":"hello"}'),
    (CLOSED, b'{"b":"wo', b'rld","a":"000-A"}'),
    # recursion through $ref: each open level closed with its required key
    (TREE, b'{"c":{"c":{', b'"v":0},"v":0},"v":0}'),
    # a string format, from its example value
    ({"type": "object", "required": ["d"], "properties": {"d": {"type": "string", "format": "date"}}},
     b"{", b'"d":"2000-01-01"}'),
    # an object that names no key: one written to its patternProperties
    ({"type": "object", "minProperties": 1, "patternProperties": {"^[a-z]+$": {}},
      "additionalProperties": False}, b"{", b'"a":0}'),
    # already complete
    ({"type": "array"}, b"[1]", b""),
    # inside a key of a closed object, or an enum value: the rest of the literal in one move,
    # however long (byte by byte, a 39-byte key name ran past the search's states: None)
    (LONG_KEY, b'{"sports', b'_celebrity.get_major_achievements":{"celebrity_name":""}}'),
    (LONG_KEY, b'{"sports_celebrity.get_major_achievements": {"', b'celebrity_name":""}}'),
    ({"enum": ["a rather long enumerated value, longer than forty bytes", "b\"c"]}, b'"a rather',
     b' long enumerated value, longer than forty bytes"'),
])
def test_completion_is_the_one_built_from_the_schema(schema, prefix, y):
    pot = JSONSchema(schema)
    state = pot.advance(pot.initial(), prefix)
    assert pot.completion(state) == y
    assert Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER).is_valid(
        json.loads(prefix + y))


def test_no_completion_where_none_is_found():
    """A prefix that can no longer be completed (15 under maximum 9 is judged when the number
    ends) gets None, after a bounded search."""
    pot = JSONSchema({"type": "array", "items": {"type": "integer", "minimum": 5, "maximum": 7}})
    assert pot.completion(pot.advance(pot.initial(), b"[1")) is None
    assert pot.completion(pot.advance(pot.initial(), b"[5,")) == b"5]"


COLORS = {"type": "object", "additionalProperties": False,
          "properties": {"color": {"enum": ["red", "rose", "blue"]}, "ok": {"type": "boolean"},
                         "note": {"type": ["null", "string"]}}}


@pytest.mark.parametrize("schema, prefix, rest", [
    # a closed object's key once a character of it is written: the rest and its quote
    (CLOSED, b'{"a', b'"'),
    (LONG_KEY, b'{"sports', b'_celebrity.get_major_achievements"'),
    # not before: which key comes is still a choice
    (CLOSED, b'{"', b""),
    (CLOSED, b'{', b""),
    # an enum value: as far as the candidates left agree
    (COLORS, b'{"color": "r', b""),
    (COLORS, b'{"color": "ro', b'se"'),
    (COLORS, b'{"color": "b', b'lue"'),
    # true, false, null once begun
    (COLORS, b'{"ok": t', b"rue"),
    (COLORS, b'{"ok": fa', b"lse"),
    (COLORS, b'{"note": n', b"ull"),
    # a free string, an open object's key, a number: nothing is committed
    (COLORS, b'{"note": "n', b""),
    (PERSON, b'{"na', b""),
    (PERSON, b'{"age": 3', b""),
])
def test_committed_is_the_rest_of_a_literal_begun(schema, prefix, rest):
    pot = JSONSchema(schema)
    state = pot.advance(pot.initial(), prefix)
    assert pot.committed(state) == rest
    # what is committed is written next by every accepted continuation (in a string, or
    # spelled by an escape), the completion's too
    assert pot.completion(state).startswith(rest)
    if rest:
        assert {b for b in range(256) if pot.advance(state, bytes([b])) is not None} <= {rest[0], ord("\\")}


def _cuts(text: bytes) -> list[bytes]:
    return [b""] + [text[: len(text) * k // 4] for k in (1, 2, 3)]


def test_every_completion_on_the_test_suite_is_valid():
    """Every schema of the JSON Schema Test Suite (draft2020-12) that has a valid instance:
    after the empty text and after cuts at a quarter, half and three quarters of each valid
    instance's JSON text, a completion given is valid under the validator (with formats), and
    one is given for most of them."""
    registry = remotes_registry()
    given = asked = 0
    for path in sorted(DRAFT.glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8")):
            valid = [t["data"] for t in case["tests"] if t["valid"]]
            if not valid:
                continue
            try:
                pot = JSONSchema(case["schema"], registry=registry)
            except Exception:  # schemas the potential refuses: test_json_conformance counts them
                continue
            for data in valid:
                for prefix in _cuts(json.dumps(data).encode()):
                    state = pot.advance(pot.initial(), prefix)
                    if state is None:
                        continue
                    asked += 1
                    y = pot.completion(state)
                    if y is None:
                        continue
                    given += 1
                    doc = json.loads(prefix + y)
                    # jsonschema's validator (with the regex package's patterns, as the
                    # potential's complete uses it), not the recognizer that built y
                    assert pot.validator.is_valid(doc), (path.name, case["description"], prefix, y)
    assert asked > 1000 and given >= 0.9 * asked, (given, asked)


MASKBENCH = Path(__file__).resolve().parents[3] / "shared" / "corpora" / "maskbench"


@pytest.mark.skipif(not MASKBENCH.is_dir(), reason="the MaskBench corpus is not vendored (../shared/corpora)")
def test_maskbench_schemas_get_valid_documents_from_nothing():
    """A seeded sample of 120 MaskBench (JSONSchemaBench) schemas: the completion of the empty
    text, where given, is a valid document, and one is given for at least 95% of them."""
    files = random.Random(0).sample(sorted(MASKBENCH.glob("*.json")), 120)
    given = compiled = 0
    for path in files:
        schema = json.loads(path.read_text(encoding="utf-8"))["schema"]
        try:
            pot = JSONSchema(schema)
        except Exception:  # refused schemas are bench_maskbench's concern
            continue
        compiled += 1
        y = pot.completion(pot.initial())
        if y is not None:
            given += 1
            assert pot.validator.is_valid(json.loads(y)), path.name
    assert given >= 0.95 * compiled, (given, compiled)
