"""JSONSchema under drafts 4, 6, 7 and 2019-09: each draft's keywords enforced while generating,
its validator at complete, and clear errors for drafts this project does not know.

The failure class these guard (found with benchmarks/bench_maskbench.py): a schema declaring
an older draft in ``$schema`` used to be opaque, so an invalid document lived until EOS.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft4Validator, Draft6Validator, Draft7Validator, Draft201909Validator

from smc.core.logmath import NEG_INF
from potentials.json import JSONSchema
from potentials.testing import MaskKeyContract

D4 = "http://json-schema.org/draft-04/schema#"
D6 = "http://json-schema.org/draft-06/schema#"
D7 = "http://json-schema.org/draft-07/schema"
D2019 = "https://json-schema.org/draft/2019-09/schema"

PERSON4 = {
    "$schema": D4,
    "id": "http://example.com/person.json",
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 4},
        "age": {"$ref": "#/definitions/age"},
        "tags": {"type": "array", "items": [{"type": "integer"}, {"type": "boolean"}],
                 "additionalItems": False},
    },
    "required": ["name"],
    "additionalProperties": False,
    "definitions": {"age": {"type": "integer", "minimum": 0, "exclusiveMinimum": True}},
}
TREE2019 = {
    "$schema": D2019,
    "$recursiveAnchor": True,
    "type": "object",
    "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
                                                      "items": {"$recursiveRef": "#"}}},
    "additionalProperties": False,
}


async def viable(schema, text: str) -> bool:
    return await JSONSchema(schema, whitespace="flexible").prefix(text.encode()) == 0.0


async def valid(schema, text: str) -> bool:
    return await JSONSchema(schema, whitespace="flexible").complete(text.encode()) == 0.0


@pytest.mark.parametrize(
    "schema, text, alive",
    [
        (PERSON4, '{"name": "Bo", "x', False),  # additionalProperties: false, while generating
        (PERSON4, '{"name": "Bobby', False),  # maxLength 4
        (PERSON4, '{"age": 0,', False),  # draft-4 boolean exclusiveMinimum, when 0 ends
        (PERSON4, '{"age": 1,', True),
        (PERSON4, '{"age": 1.0,', False),  # 1.0 is no integer in draft 4
        (PERSON4, '{"tags": [1, true', True),
        (PERSON4, '{"tags": [true', False),  # array-form items: position 0 is an integer
        (PERSON4, '{"tags": [1, true,', False),  # additionalItems: false
        ({"$schema": D4, "type": "object", "properties": {"k": {"const": 1}}}, '{"k": "x"',
         True),  # const is no keyword of draft 4
        ({"$schema": D4, "propertyNames": {"maxLength": 1}}, '{"abc"', True),  # nor this
        ({"$schema": D6, "propertyNames": {"maxLength": 1}}, '{"abc', False),
        ({"$schema": D6, "type": "object", "properties": {"k": {"const": 1}}}, '{"k": "x"',
         False),
        ({"$schema": D6, "type": "array", "items": {"exclusiveMaximum": 3}}, "[3,", False),
        # up to draft 7, $ref overrides its siblings: "type": "string" is not asserted
        ({"$schema": D7, "definitions": {"n": {"type": "number"}},
          "properties": {"a": {"$ref": "#/definitions/n", "type": "string"}}}, '{"a": 5', True),
        ({"$schema": D7, "definitions": {"n": {"type": "number"}},
          "properties": {"a": {"$ref": "#/definitions/n", "type": "string"}}}, '{"a": "', False),
        # from 2019-09 on, siblings of $ref apply
        ({"$schema": D2019, "$defs": {"n": {"type": ["number", "string"]}},
          "properties": {"a": {"$ref": "#/$defs/n", "type": "string"}}}, '{"a": 5', False),
        (TREE2019, '{"v": 1, "kids": [{"v": 2, "kids": [{"w"', False),  # $recursiveRef
        (TREE2019, '{"v": 1, "kids": [{"v": 2, "kids": [{"v"', True),
        ({"$schema": D7, "type": "string", "format": "ipv4"}, '"1.2.3"', False),
        # draft-4 dependencies: decided when the object closes
        ({"$schema": D4, "items": {"dependencies": {"a": ["b"]}}}, '[{"a": 1}', False),
        ({"$schema": D4, "items": {"dependencies": {"a": ["b"]}}}, '[{"a": 1, "b": 1}', True),
        # a subschema declaring another draft follows that draft
        ({"properties": {"a": {"$schema": D4, "type": "integer"}}}, '{"a": 1.0,', False),
        # 2020-12 reads 1.0 as an integer, but an integer is written as one (a departure)
        ({"properties": {"a": {"type": "integer"}}}, '{"a": 1.0,', False),
        ({"properties": {"a": {"type": "number"}}}, '{"a": 1.0,', True),
        # ... with the root's format checker, as jsonschema (uuid is no draft-4 format)
        ({"properties": {"a": {"$schema": D4, "format": "uuid"}}}, '{"a": "x",', False),
    ],
)
async def test_draft_keywords_enforced_while_generating(schema, text, alive):
    assert await viable(schema, text) is alive


@pytest.mark.parametrize(
    "schema, text, ok",
    [
        (PERSON4, '{"name": "Bo", "age": 3, "tags": [1, false]}', True),
        (PERSON4, '{"age": 3}', False),
        ({"$schema": D4, "dependencies": {"a": ["b"]}}, '{"a": 1}', False),  # at the end
        ({"$schema": D4, "dependencies": {"a": ["b"]}}, '{"a": 1, "b": 2}', True),
        ({"$schema": D7, "dependencies": {"a": {"required": ["c"]}}}, '{"a": 1}', False),
        ({"$schema": D2019, "type": "array", "items": [{"type": "null"}],
          "additionalItems": {"type": "string"}}, '[null, "x", "y"]', True),
        ({"$schema": D2019, "type": "array", "items": [{"type": "null"}],
          "additionalItems": {"type": "string"}}, '[null, "x", 3]', False),
        (TREE2019, '{"v": 1, "kids": [{"v": 2, "kids": []}]}', True),
        # keywords of later drafts are no keywords here: not enforced, not checked
        ({"$schema": D6, "if": {"type": "string"}, "then": {"maxLength": 1}}, '"abc"', True),
        ({"$schema": D7, "if": {"type": "string"}, "then": {"maxLength": 1}}, '"abc"', False),
        ({"$schema": D4, "type": "array", "contains": {"type": "null"}}, "[1]", True),
        ({"$schema": D7, "type": "array", "contains": {"type": "null"}}, "[1]", False),
    ],
)
async def test_declared_draft_decides_at_complete(schema, text, ok):
    assert await valid(schema, text) is ok


@pytest.mark.parametrize(
    "schema, message",
    [
        ({"$schema": "http://json-schema.org/draft-03/schema#"}, "draft-03.*not supported"),
        ({"$schema": "http://example.com/my-dialect"}, "names no known JSON Schema draft"),
        ({"properties": {"a": {"$schema": "http://json-schema.org/draft-03/schema#"}}},
         "properties/a"),
        # a subschema reached by $ref through a non-keyword, which no metaschema checked
        ({"$schema": D4, "x": {"items": {"id": {"type": "integer"}}},
          "properties": {"a": {"$ref": "#/x"}}}, r"invalid subschema at /x/items \(draft4\)"),
        # draft 4 wants enum items unique
        ({"$schema": D4, "enum": ["a", "a"]}, r"draft4\) at enum: .* non-unique"),
        # valid in 2020-12 but not in draft 4 (exclusiveMinimum is a boolean there)
        ({"$schema": D4, "properties": {"a": {"exclusiveMinimum": 3}}},
         r"draft4\) at properties/a/exclusiveMinimum"),
    ],
)
def test_unknown_drafts_and_invalid_schemas_are_errors(schema, message):
    with pytest.raises(ValueError, match=message):
        JSONSchema(schema)


DRAFT_SCHEMAS = [
    (Draft4Validator, PERSON4),
    (Draft6Validator, {"$schema": D6, "type": ["object", "array", "integer"],
                       "items": [{"const": 1}], "additionalItems": {"type": "boolean"},
                       "properties": {"a": {"exclusiveMinimum": 0}},
                       "propertyNames": {"pattern": "^[a-c]+$"}}),
    (Draft7Validator, {"$schema": D7, "if": {"type": "object"},
                       "then": {"required": ["a"]}, "else": {"type": "array"},
                       "items": {"$ref": "#/definitions/s"},
                       "definitions": {"s": {"type": ["string", "boolean"], "maxLength": 2}}}),
    (Draft201909Validator, TREE2019),
]
_keys = st.sampled_from(["name", "age", "tags", "a", "b", "v", "kids"])
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=10,
)


@pytest.mark.parametrize("cls, schema", DRAFT_SCHEMAS, ids=lambda x: getattr(x, "__name__", ""))
@settings(max_examples=80, deadline=None, derandomize=True)
@given(value=VALUES)
async def test_random_values_agree_with_the_drafts_validator(cls, schema, value):
    """complete == the declared draft's validator, and a valid value's prefixes all live."""
    pot = JSONSchema(schema)
    want = cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(value)
    text = json.dumps(value, separators=(",", ":")).encode()
    assert (await pot.complete(text) == 0.0) is want
    if want:
        state = pot.initial()
        for b in text:
            state = pot.advance(state, bytes((b,)))
            assert state is not None


# ------------------------------------------------------------------ bounded checks
CATASTROPHIC = {"type": "string", "allOf": [{"pattern": "^a{30,}b?$"},
                                            {"pattern": "^(?=a)(a+)+b$"}]}


async def test_catastrophic_pattern_is_checked_in_bounded_time():
    pot = JSONSchema(CATASTROPHIC)
    text = ('"' + "a" * 30 + '"').encode()
    start = time.perf_counter()
    assert await pot.prefix(text[:-1]) == 0.0  # the regular pattern can still hold
    # the closing quote runs the search of the other one (bounded): no match
    assert await pot.prefix(text) == NEG_INF
    assert await pot.complete(text) == NEG_INF
    assert await pot.complete(('"' + "a" * 30 + 'b"').encode()) == 0.0
    # generous: each search is cut at PATTERN_TIMEOUT (0.5 s); re took 68 s here
    assert time.perf_counter() - start < 10


async def test_pattern_timeout_verdicts(monkeypatch):
    """A search cut by the time limit keeps a prefix alive and fails the document."""
    import potentials.json.patterns as jp

    def slow(pattern, text):
        raise jp.PatternTimeout("stand-in for a search past the limit")

    schema = {"type": "object", "properties": {"k": {"type": "string",
                                                     "pattern": "^(?=x)(x+)+y$"}}}
    pot = JSONSchema(schema)
    monkeypatch.setattr(jp, "search", slow)
    assert await pot.prefix(b'{"k":"xx"') == 0.0
    assert await pot.complete(b'{"k":"xxy"}') == NEG_INF


def nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_deep_schema_is_a_clear_error():
    with pytest.raises(ValueError, match=r"nested too deeply \(JSON nesting depth \d+\)"):
        JSONSchema(nested(400))


async def test_moderately_deep_schema_works():
    pot = JSONSchema(nested(30))
    doc = '{"a":' * 30 + '"x"' + "}" * 30
    assert await pot.complete(doc.encode()) == 0.0


def test_cli_reports_deep_and_unknown_schemas_in_one_line(tmp_path, capsys):
    """The CLI builds the constraint before loading a model: bad schemas cost no model load."""
    from smc.api.cli import main

    for schema, message in ((nested(400), "nested too deeply"),
                            ({"$schema": "http://json-schema.org/draft-03/schema#"}, "draft-03")):
        path = tmp_path / "schema.json"
        path.write_text(json.dumps(schema))
        assert main(["generate", "--prompt", "x", "--json-schema", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


class TestDraft4Contract(MaskKeyContract):
    def potential(self):
        return JSONSchema(PERSON4, whitespace="flexible")

    def contexts(self):
        out = {b""}
        for t in ('{"name": "Bo", "age": 3, "tags": [1, false]}', '{"age": 1.0}',
                  '{"tags": [1, true, 2]}', '{"x": 1}'):
            x = t.encode()
            out.update(x[:i] for i in range(len(x) + 1))
        return sorted(out)


class TestContainerCheckContract(MaskKeyContract):
    """States carry where checked containers start: advance must stay consistent with it."""

    def potential(self):
        return JSONSchema({"type": "array", "items": {"type": "array", "uniqueItems": True},
                           "uniqueItems": True}, whitespace="flexible")

    def contexts(self):
        out = {b""}
        for t in ("[[1, 2], [2, 1]]", "[[1, 1]]", "[[1], [1]]", " [ [ ] ]"):
            x = t.encode()
            out.update(x[:i] for i in range(len(x) + 1))
        return sorted(out)


@pytest.mark.slow
async def test_embedded_vocabulary_masks_agree_with_brute_force(embedded_lm):
    """Lifted masks of a draft-4 schema and of a container check (the mask_key then carries
    the container's text) equal token-by-token advancing over the whole vocabulary."""
    from tests.potentials.test_lift import brute_force

    lm = embedded_lm
    eos, special = set(lm.eos_token_ids), set(lm.special_token_ids)
    unique = {"type": "array", "items": {"type": "array", "uniqueItems": True}}
    for schema, texts in ((PERSON4, ['{"name": "Bo", "', '{"tags": [1', '{"age": 0']),
                          (unique, ["[[1, 1", "[[1, 2", "[[1, 2], [2, 2"])):
        byte_pot = JSONSchema(schema, whitespace="flexible")
        lifted = byte_pot.lift(lm)
        for text in texts:
            ctx = tuple(lm.encode(text))
            ctx_bytes = b"".join(lm.vocab[t] for t in ctx)
            want = await brute_force(byte_pot, lm.vocab, eos, special, ctx_bytes)
            got = await lifted.logw_next(ctx)
            np.testing.assert_array_equal(got, want, err_msg=text)
