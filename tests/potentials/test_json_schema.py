"""potentials.JSONSchema: the Potential contract, exact viability, whitespace, bad schemas."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator, validators

from smc.core.logmath import NEG_INF
from potentials.json import JSONSchema
from potentials.json.potential import END_WHITESPACE
from potentials.testing import (InnerTextKeyContract, MaskKeyContract, PlainTextBudgetContract,
                                PlainTextKeyContract, PotentialContract)

OBJ = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 3}},
    "required": ["a"],
    "additionalProperties": False,
}
TUPLE = {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "null"}], "items": False}
ENUM = {"enum": ["red", "green", 7, None, [1, "x"], {"k": True}]}
TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "number"},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["v"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}
PATTERN = {"type": "string", "pattern": "^[a-c]+$", "minLength": 2}
UNION = {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer"}, {"type": "null"}]}


async def prefix(pot, text: str) -> float:
    return await pot.prefix(text.encode("utf-8"))


async def complete(pot, text: str) -> float:
    return await pot.complete(text.encode("utf-8"))


class Contract(PotentialContract):
    schema: dict = {}
    texts: list[str] = []

    def potential(self):
        return JSONSchema(self.schema)

    def contexts(self):
        out = {b""}
        for t in self.texts:
            x = t.encode("utf-8")
            out.update(x[:i] for i in range(len(x) + 1))
        return sorted(out)


class TestObjectContract(Contract, MaskKeyContract, PlainTextBudgetContract):
    schema = OBJ
    texts = ['{"a":12,"b":"xy"}', '{"b":"x","a":-1}', '{"c":1}', '{"a":"x"}']


class TestTupleContract(Contract, MaskKeyContract):
    schema = TUPLE
    texts = ["[true,null]", "[false,null,1]", "[null]"]


class TestEnumContract(Contract, MaskKeyContract, InnerTextKeyContract):
    schema = ENUM
    texts = ['"green"', '"gray"', "7", "[1,\"x\"]", '{"k":true}', "null", '"\\u0067reen"']


class TestRecursiveRefContract(Contract):
    schema = TREE
    texts = ['{"v":1,"kids":[{"v":2,"kids":[]}]}', '{"kids":[{"w":1}]}']


class TestPatternContract(Contract, MaskKeyContract, PlainTextKeyContract, InnerTextKeyContract):
    schema = PATTERN
    texts = ['"abca"', '"a"', '"abd"', '"\\u0061b"']


ENUM_OR_TEXT = {"anyOf": [{"enum": ["red", "green", "gré"]}, {"type": "string", "pattern": "^g"},
                          {"type": "string", "maxLength": 3}]}


class TestEnumOrTextContract(Contract, MaskKeyContract, InnerTextKeyContract):
    """String states with several configurations (enum literals, a pattern, free text): the
    contract checks their ``alternatives``."""

    schema = ENUM_OR_TEXT
    texts = ['"green"', '"gr"', '"gré"', '"grx"', '"r"', '"blue"', '"\\u0067r"']

    def test_alternatives_are_given_in_strings(self):
        pot = self.potential()
        parts = pot.alternatives(pot.state_of(b'"gr'))
        assert parts is not None and len(parts) == 3
        assert pot.alternatives(pot.state_of(b'"')) is not None
        assert pot.alternatives(pot.initial()) is None


class TestUnionContract(Contract, MaskKeyContract, PlainTextBudgetContract, InnerTextKeyContract):
    schema = UNION
    texts = ['"ab"', '"abc"', '"é"', "12", "1.5", "null", "true"]


@pytest.mark.parametrize(
    "schema, text, viable",
    [
        (OBJ, '{"a": 1', True),
        (OBJ, '{"a":1', True),
        (OBJ, '{"b"', True),
        (OBJ, '{"c', False),  # no allowed key starts with c
        (OBJ, '{"a":"x"', False),  # a must be an integer
        (OBJ, '{"a":1,"a"', False),  # duplicate key
        (OBJ, '{"b":"abcd', False),  # maxLength 3
        (OBJ, '{"b":"x"}', False),  # required a is missing: "}" is dead
        (OBJ, '{"a":1.', False),  # an integer is written as an integer literal
        (OBJ, '{"a":1e', False),  # ... (1.0 and 1e0 are integers in 2020-12: a departure)
        (OBJ, '{"a":-0,', True),
        ({"properties": {"a": {"type": ["integer", "number"]}}}, '{"a":1.5,', True),
        ({"properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}},
         '{"a":1.5e3,', True),
        ({"properties": {"a": {"allOf": [{"type": "integer"}, {"minimum": 1}]}}}, '{"a":2.', False),
        ({"type": "object", "properties": {"b": False}}, '{"b"', False),
        (TUPLE, "[true,null,", False),  # items: false after the prefix items
        (TUPLE, "[null", False),
        (ENUM, '"gr', True),
        (ENUM, '"gx', False),
        (ENUM, "[1,", True),
        (ENUM, "[2", True),  # numbers are judged when they end
        (ENUM, "[2,", False),
        (ENUM, '{"k":false', False),
        (TREE, '{"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[{"x"', False),
        (TREE, '{"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[{"v"', True),
        (PATTERN, '"abd', False),
        (PATTERN, '"\\u0061\\u0062', True),
        (PATTERN, '"a"', False),  # minLength 2
        ({"type": "string", "pattern": "x"}, '"aaax', True),  # unanchored search
        ({"type": "string", "minLength": 2}, '"\\ud83d\\ude00"', False),  # one character
        ({"type": "string", "maxLength": 1}, '"\\ud83d\\ude00"', True),
        ({"type": "string"}, '"\\ud83d"', False),  # unpaired surrogate
        ({"type": "string"}, '"\\ude00', False),
        ({"type": "string"}, '"a\nb"', False),  # raw control character
        (UNION, "true", False),
        (UNION, '"abc', False),
        (UNION, "-", True),
        ({"type": "number", "maximum": 9}, "[", False),
        ({"type": "array", "items": {"maximum": 9}}, "[15", True),  # numbers judged at their end
        ({"type": "array", "items": {"maximum": 9}}, "[15,", False),
        ({"type": "array", "items": {"format": "ipv4"}}, '["1.2.3"', False),  # format at end
        ({"type": "array", "maxItems": 1}, "[1,", False),
        ({"type": "array", "minItems": 2}, "[1]", False),
        ({"type": "object", "maxProperties": 1}, '{"a":1,', False),
        ({"type": "object", "propertyNames": {"maxLength": 2}}, '{"abc', False),
        ({"type": "object", "patternProperties": {"^x": {"type": "null"}},
          "additionalProperties": False}, '{"xa":null', True),
        ({"type": "object", "patternProperties": {"^x": {"type": "null"}},
          "additionalProperties": False}, '{"ya', False),
        ({"allOf": [{"type": "string"}, {"maxLength": 1}]}, '"ab', False),
        ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, "[", False),
        (False, "", False),
        (True, '{"anything": [1, 2]}', True),
        # container keywords no fact enforces are checked by the validator at the closing
        # bracket, so the closing byte of an invalid container is dead
        ({"type": "array", "uniqueItems": True}, "[[1], [1]", True),
        ({"type": "array", "uniqueItems": True}, "[[1], [1]]", False),
        ({"items": {"type": "array", "uniqueItems": True}}, "[[1, 1]", False),
        ({"items": {"type": "array", "uniqueItems": True}}, "[[1, 2]", True),
        ({"type": "array", "contains": {"type": "null"}}, "[1, 2]", False),
        ({"type": "array", "contains": {"type": "null"}}, "[1, null]", True),
        ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, '{"a": 1, "b": 2}', False),
        ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, '{"a": 1, "c": 2}', True),
        ({"items": {"not": {"required": ["x"]}}}, '[{"x": 1}', False),
        ({"items": {"dependentRequired": {"a": ["b"]}}}, '[{"a": 1}', False),
        ({"items": {"dependentRequired": {"a": ["b"]}}}, '[{"a": 1, "b": 0}', True),
        ({"items": {"if": {"required": ["a"]}, "then": {"required": ["b"]}}}, '[{"a": 1}',
         False),
        ({"properties": {"k": {"type": "object", "unevaluatedProperties": False,
                               "allOf": [{"properties": {"a": True}}]}}},
         '{"k": {"a": 1, "z": 2}', False),
        ({"properties": {"k": {"type": "object", "unevaluatedProperties": False,
                               "allOf": [{"properties": {"a": True}}]}}},
         '{"k": {"a": 1}', True),
    ],
)
async def test_viability(schema, text, viable):
    pot = JSONSchema(schema, whitespace="flexible")
    assert (await prefix(pot, text) == 0.0) is viable


@pytest.mark.parametrize(
    "schema, text, valid",
    [
        (OBJ, '{"a":1}', True),
        (OBJ, '{"a":1,"b":"xyz"}', True),
        (OBJ, '{"a":1', False),
        (TREE, '{"v":1,"kids":[{"v":2.5,"kids":[]}]}', True),
        ({"type": "array", "uniqueItems": True}, "[1,1]", False),  # only complete sees it
        ({"type": "array", "uniqueItems": True}, "[1,2]", True),
        ({"type": "number"}, "12", True),  # a top-level number ends at EOS
        ({"type": "number"}, "012", False),
        ({"type": "number"}, "NaN", False),
        ({"type": "number"}, "1e5", True),
        ({"not": {"type": "object", "required": ["a"]}}, '{"a":1}', False),
        ({"type": "string"}, '"\\ud83d\\ude00"', True),
        ({"type": "string", "pattern": "^\\p{Letter}+$"}, '"\u03c0"', True),  # via `regex`
        ({"type": "string", "pattern": "^\\p{Letter}+$"}, '"1"', False),
    ],
)
async def test_complete(schema, text, valid):
    pot = JSONSchema(schema)
    assert (await complete(pot, text) == 0.0) is valid


async def test_whitespace_modes():
    doc = '{ "a" : [ 1 ,\n\t2 ] }'
    compact = JSONSchema(True, whitespace="compact")
    flexible = JSONSchema(True)
    assert flexible.whitespace == "flexible"  # the default, chosen by benchmarks/bench_quality.py
    one = JSONSchema(True, whitespace=1)
    assert await complete(compact, doc) == NEG_INF
    assert await prefix(compact, "{ ") == NEG_INF
    assert await complete(compact, doc.replace(" ", "").replace("\n", "").replace("\t", "")) == 0
    assert await complete(flexible, doc) == 0.0
    assert await complete(flexible, "  \r\n 1") == 0.0
    assert await complete(one, "[1] ") == 0.0
    assert await complete(one, doc) == NEG_INF  # ",\n\t" is a run of two
    assert await complete(one, doc.replace("\n\t", "\n")) == 0.0
    assert await prefix(one, "[1,  ") == NEG_INF
    assert await prefix(flexible, '"a b"') == 0.0  # spaces inside strings are content
    assert await prefix(compact, '"a b"') == 0.0


async def test_whitespace_after_the_document_is_bounded():
    """flexible: END_WHITESPACE (no) bytes after the root value, whatever the runs inside it
    or before it; an int n bounds that run as every other."""
    assert END_WHITESPACE == 0
    flexible, three = JSONSchema(True), JSONSchema(True, whitespace=3)
    inner = '{"a":' + " " * 40 + "[1]}"
    assert await complete(flexible, inner) == 0.0
    assert await complete(flexible, "7") == 0.0
    for end in ("\n", " ", "\r\n", "\t", "\n\n\n"):
        assert await prefix(flexible, inner + end) == NEG_INF
        assert await prefix(flexible, "7" + end) == NEG_INF  # a root number ends at the run
        assert await complete(three, "[1]" + end[:3]) == 0.0
    assert await prefix(three, "[1]    ") == NEG_INF
    assert await prefix(flexible, " " * 40 + "[") == 0.0  # before the document: unbounded
    # the ending set a last step asks: whitespace only where a document can end with some
    assert set(flexible.final_bytes()) & set(b" \t\n\r") == set()
    assert set(three.final_bytes()) >= set(b" \t\n\r")
    assert set(JSONSchema(True, whitespace="compact").final_bytes()) & set(b" \t\n\r") == set()


async def test_odd_bytes_are_dead_not_errors():
    pot = JSONSchema({"type": "string"})
    for bad in (b'"\xff', b'"\xc0\x80', b'"\xed\xa0\x80', b'"\xe2\x82', b"\x00", b'"\x01'):
        assert await pot.complete(bad) == NEG_INF
    assert await pot.prefix(b'"\xe2\x82') == 0.0  # a character cut in two is still alive
    assert await pot.complete('"€"'.encode()) == 0.0


@pytest.mark.parametrize(
    "schema, message",
    [
        ({"type": "strin"}, "type"),
        ({"minLength": -1}, "minLength"),
        ({"pattern": "("}, "pattern"),
        ({"$ref": "#/$defs/missing"}, "cannot resolve $ref"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_schemas_are_rejected(schema, message):
    with pytest.raises(ValueError, match=message.replace("$", r"\$")):
        JSONSchema(schema)


def test_bad_arguments():
    with pytest.raises(TypeError, match="schema must be"):
        JSONSchema(3)
    with pytest.raises(ValueError, match="whitespace"):
        JSONSchema(True, whitespace="loose")
    with pytest.raises(ValueError, match="whitespace"):
        JSONSchema(True, whitespace=-1)


async def test_token_walk_matches_whole_context():
    """Advancing a state over pieces equals reading the whole text at once."""
    pot = JSONSchema(TREE)
    doc = json.dumps({"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}, separators=(",", ":"))
    x = doc.encode()
    state = pot.initial()
    for i in range(0, len(x), 3):
        state = pot.advance(state, x[i : i + 3])
        assert state is not None
    assert await pot.state_complete(state) == 0.0
    assert state.configs == pot.state_of(x).configs


MIXED = {
    "type": ["object", "array", "string", "number", "boolean", "null"],
    "properties": {
        "a": {"oneOf": [{"type": "integer"}, {"type": "string", "minLength": 1}]},
        "b": {"not": {"type": "null"}},
        "k": {"if": {"type": "string"}, "then": {"pattern": "^[a-z]*$"}},
    },
    "patternProperties": {"^v": {"type": ["number", "array"]}},
    "items": {"anyOf": [{"$ref": "#"}, {"type": "boolean"}]},
    "maxItems": 4,
    "maxLength": 5,
}
#: 2020-12 with an integer read as JSON text without a fraction or an exponent (json.dumps
#: writes every float with one of them)
LITERAL_INTEGERS = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, x: isinstance(x, int) and not isinstance(x, bool)
    ),
)
_keys = st.sampled_from(["a", "b", "k", "v", "kids", "vé", "x\n"])
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
VALUES = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=12,
)


@pytest.mark.parametrize("schema", [OBJ, TREE, ENUM, UNION, PATTERN, MIXED], ids=str)
@settings(max_examples=100, deadline=None, derandomize=True)
@given(value=VALUES)
async def test_random_values_agree_with_jsonschema(schema, value):
    """complete == the validator on random values (so a valid value's prefixes all live),
    an integer being an integer literal: a float such as 1.0 is none (the one departure)."""
    pot = JSONSchema(schema, whitespace="flexible")
    want = LITERAL_INTEGERS(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        got = await pot.complete(text.encode("utf-8"))
        assert (got == 0.0) is want.is_valid(value), text


@pytest.mark.parametrize("schema", [OBJ, TREE, ENUM, UNION, PATTERN, MIXED], ids=str)
@settings(max_examples=40, deadline=None, derandomize=True)
@given(value=VALUES)
def test_next_bytes_hold_every_live_byte(schema, value):
    """At every prefix of random documents (escapes, non-ASCII, whitespace, exponents),
    every byte that keeps the state alive is among ``next_bytes``; between values the hook
    does narrow the bytes (it is not None there)."""
    pot = JSONSchema(schema, whitespace="flexible")
    narrowed = 0
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1)):
        data = text.encode("utf-8")
        state = pot.initial()
        for i in range(len(data) + 1):
            if state is None:
                break
            allowed = pot.next_bytes(state)
            if allowed is not None:
                narrowed += 1
                for b in range(256):
                    if pot.advance(state, bytes((b,))) is not None:
                        assert b in allowed, (data[:i], b, sorted(allowed))
            if i < len(data):
                state = pot.advance(state, data[i:i + 1])
    assert narrowed, "next_bytes never narrowed the bytes"


@pytest.mark.parametrize("schema, text", [
    (ENUM, '"gre'), (ENUM, '"'), ({"enum": ["a/b"]}, '"a'),
    ({"type": "string"}, '"\\u00'), ({"type": "string"}, '"\\'),
    ({"type": "string"}, '"\\ud83d'), ({"type": "string"}, '"\\ud83d\\'),
    ({"type": "string"}, '"\xc3'.encode("latin-1").decode("utf-8", "surrogateescape")),
    ({"type": "boolean"}, "tr"), ({"type": "number"}, "-1.5e"), (ENUM, "[1"),
    (OBJ, '{"a":1'), (OBJ, '{"a":1 '), ({"type": "string"}, '"ab'),
])
def test_next_bytes_inside_literals_escapes_and_numbers(schema, text):
    """The states where next_bytes narrows inside a value (enum literals, escapes, surrogate
    halves, partial characters, true/false/null, numbers, free text), exhaustively over the
    256 bytes."""
    pot = JSONSchema(schema)
    state = pot.state_of(text.encode("utf-8", "surrogateescape"))
    assert state is not None, text
    allowed = pot.next_bytes(state)
    live = {b for b in range(256) if pot.advance(state, bytes((b,))) is not None}
    assert allowed is not None, text
    assert live and live <= set(allowed), (text, live - set(allowed))


def test_next_bytes_inside_a_pattern_string_follow_its_automaton():
    """In a string with a pattern, a character's first byte must keep the automaton alive:
    next_bytes is the automaton's live bytes plus the quote and the backslash."""
    pot = JSONSchema({"type": "string", "pattern": "^[0-9]+$"})
    state = pot.state_of(b'"12')
    allowed = set(pot.next_bytes(state))
    live = {b for b in range(256) if pot.advance(state, bytes((b,))) is not None}
    assert live <= allowed and allowed == set(b'0123456789"\\')



STRINGS = {
    "type": "object",
    "properties": {
        "a": {"type": "string", "maxLength": 7, "pattern": "^[a-z ]*$"},
        "b": {"type": "string", "minLength": 2, "format": "date"},
        "k": {"type": "array", "items": {"type": "string", "maxLength": 3}},
    },
    "patternProperties": {"^v[0-9]*$": {"type": "string", "pattern": "x"}},
    "additionalProperties": False,
}
_TEXT = st.text(alphabet="abx -", max_size=9) | st.text(alphabet='ax -A"\\\x7f\x01é', max_size=6)
_STRING_VALUES = st.dictionaries(
    st.sampled_from(["a", "b", "v1", "v22", "z"]),
    _TEXT,
    max_size=3,
) | st.dictionaries(st.just("k"), st.lists(_TEXT, max_size=3), max_size=1)


@pytest.mark.parametrize("schema, values", [(STRINGS, _STRING_VALUES), (MIXED, VALUES), (TREE, VALUES)],
                         ids=["strings", "mixed", "tree"])
@settings(max_examples=80, deadline=None, derandomize=True)
@given(data=st.data(), cut=st.lists(st.integers(1, 7), min_size=1, max_size=8))
def test_multi_byte_steps_equal_byte_steps(schema, values, data, cut):
    """``advance`` over a token (plain text inside strings takes one step for the whole
    token: ``Machine.plain_run``) gives the configurations of stepping byte by byte."""
    pot = JSONSchema(schema, whitespace="flexible")
    doc = json.dumps(data.draw(values), ensure_ascii=False).encode("utf-8")
    assert_token_steps_equal_byte_steps(pot, doc, cut)


def assert_token_steps_equal_byte_steps(pot: JSONSchema, doc: bytes, cut: list[int]) -> None:
    state = by_byte = pot.initial()
    i = k = 0
    while i < len(doc) and state is not None:
        token = doc[i : i + cut[k % len(cut)]]
        state = pot.advance(state, token)
        for b in token:
            by_byte = by_byte if by_byte is None else pot.advance(by_byte, bytes((b,)))
        assert (state is None) == (by_byte is None), doc[: i + len(token)]
        if state is not None:
            assert state.configs == by_byte.configs, doc[: i + len(token)]
        i, k = i + len(token), k + 1


@pytest.mark.parametrize("doc", [
    '{"v1": "aaxb a", "a": "ab cd"}', '{"v22": "bbbbxxb"}', '{"a": "abcdefgh"}', '{"a": "ab-c"}',
    '{"k": ["abc", "abcd"]}', '{"b": "2024-01-02"}', '{"a": "a\\"b"}', '{"v1": "\x7fx\x7f"}',
])
def test_token_steps_inside_strings(doc):
    """Crafted documents through the one-step path: a pattern automaton's state after a
    token (unanchored ``x`` seen or not), maxLength reached inside a token, a dead pattern."""
    pot = JSONSchema(STRINGS)
    for width in (2, 3, 5):
        assert_token_steps_equal_byte_steps(pot, doc.encode(), [width])


def test_plain_run_is_taken_inside_strings_only():
    """The one-step path answers for plain ASCII inside strings and declines elsewhere."""
    pot = JSONSchema(STRINGS)
    inside = pot.state_of(b'{"a": "ab').configs
    assert pot.machine.plain_run(inside, b"c d") is not None
    assert pot.machine.plain_run(inside, b"cdefgh") == frozenset()  # past maxLength 7
    assert pot.machine.plain_run(inside, b"C") == frozenset()  # the pattern dies
    assert pot.machine.plain_run(inside, b'c"') is None  # a quote closes the string
    assert pot.machine.plain_run(inside, "é".encode()) is None  # not ASCII
    assert pot.machine.plain_run(pot.state_of(b'{"a"').configs, b"ab") is None  # not in a string


def test_schemas_with_one_pattern_share_its_automaton():
    """Two schemas (or two compilations of one) using the same pattern get one automaton, so
    their string states have equal text keys and share the lifted string masks per LM."""
    a = JSONSchema({"type": "string", "pattern": "^[a-z]+$"})
    b = JSONSchema({"type": "object", "properties": {"k": {"type": "string", "pattern": "^[a-z]+$"}}})
    ka = a.plain_text_key(a.state_of(b'"ab'))
    kb = b.plain_text_key(b.state_of(b'{"k": "xy'))
    assert ka is not None and ka == kb
    other = JSONSchema({"type": "string", "pattern": "^[a-y]+$"})
    assert other.plain_text_key(other.state_of(b'"ab')) != ka


PATTERNED = {
    "type": "object",
    "properties": {"id": {"type": "integer"}},
    "patternProperties": {"^x-": {"type": "boolean"}, "n$": {"type": "number"}},
    "additionalProperties": {"type": "string"},
}


@pytest.mark.parametrize("doc", [
    {"id": 1, "x-a": True, "len": 2.5, "name": "s"}, {"x-n": True}, {"x-n": 1}, {"z": 1},
    {"id": "1"}, {"x-b": "s"}, {"pan": "s"}, {"other": "s", "more": "t"},
])
async def test_unnamed_keys_share_clauses_by_pattern_verdicts(doc):
    """A key no property names gets its value's clauses from which patternProperties it
    matches: names with the same verdicts share one entry, and the recognizer still agrees
    with jsonschema on every document (a key matching both patterns must satisfy both)."""
    pot = JSONSchema(PATTERNED)
    text = json.dumps(doc)
    want = Draft202012Validator(PATTERNED).is_valid(doc)
    assert (await complete(pot, text) == 0.0) == want
    root = pot.schemas.expand([pot.schemas.root])[0]
    assert root.value_alternatives("x-a") is root.value_alternatives("x-zz")
    assert root.value_alternatives("pan") is root.value_alternatives("len")
    assert root.value_alternatives("other") is root.value_alternatives("more")
    assert root.value_alternatives("x-a") != root.value_alternatives("other")
    assert root.value_alternatives("x-n") != root.value_alternatives("x-a")


@pytest.mark.parametrize("draft", ["http://json-schema.org/draft-04/schema#",
                                   "http://json-schema.org/draft-07/schema#",
                                   "https://json-schema.org/draft/2020-12/schema"])
@pytest.mark.parametrize("member", [
    {"type": "string", "format": "date-time"}, {"format": "email", "title": "mail"},
    {"type": ["string", "null"], "format": "ipv4"}, {"type": "integer", "format": "date"},
    {"type": "string", "format": "uuid", "description": "no checker in old drafts"},
    {"format": "date", "minLength": 10, "maxLength": 10, "propertyOrder": 3},
    {"format": "ipv4", "pattern": "^10[.]"}, {"format": "date", "enum": ["2024-01-01", "ab"]},
    {"oneOf": [{"type": "string"}, {"type": "object", "properties": {"a": {}}, "required": ["a"]}]},
    {"oneOf": [{"format": "ipv4"}, {"pattern": "^1"}]}, {"not": {"maxLength": 2}, "const": "ab"},
    {"anyOf": [{"const": "ab"}, {"enum": ["a@b.org", 3]}, {"format": "date", "maxLength": 8}]},
    {"allOf": [{"minLength": 3}, {"not": {"format": "email"}}], "minimum": 3, "items": {}},
    {"oneOf": [{"if": {"minLength": 3}, "then": {"format": "email"}}, {"maxLength": 2}]},
])
async def test_string_checks_are_jsonschema_verdicts(draft, member):
    """A string member whose only keywords are type, format, lengths and pattern (and
    annotations or unknown words) is checked without a validator pass, any other with it;
    the verdicts are jsonschema's, per draft, when the string ends."""
    import jsonschema

    schema = {"$schema": draft, "type": "object", "additionalProperties": member}
    cls = jsonschema.validators.validator_for(schema)
    check = cls(schema, format_checker=cls.FORMAT_CHECKER)
    pot = JSONSchema(schema)
    alone = JSONSchema({"$schema": draft, **member})  # the member as a root: checked directly
    for value in ["2024-02-30T10:00:00Z", "2024-01-01T10:00:00Z", "2024-01-01", "a@b.org", "ab",
                  "10.0.0.1", "10.0.0.300", "192.168.0.1", "123e4567-e89b-12d3-a456-426614174000",
                  "12-e89b"]:
        doc = {"k": value}
        got = await prefix(pot, json.dumps(doc)) == 0.0
        assert got == check.is_valid(doc), (member, value)
        want = check.evolve(schema=member).is_valid(value)
        assert alone.schemas.member_accepts(alone.schemas.root, value) == want, (member, value)


async def test_transition_memo_is_bounded_and_changes_nothing(monkeypatch):
    """The remembered transitions (one row per set of configurations, keyed by byte or plain
    run) are cleared past STEP_MEMO_LIMIT rows; verdicts are the same with any limit."""
    import potentials.json.potential as js

    docs = [b'{"a": 12, "b": "xy"}', b'{"a": -1}', b'{"b": "x", "a": 3, "c": 1}', b'{"a": "x"}',
            b'{"b": "abcd", "a": 0}']
    want = [await JSONSchema(OBJ).complete(d) for d in docs]
    monkeypatch.setattr(js, "STEP_MEMO_LIMIT", 3)
    pot = JSONSchema(OBJ)
    for d in docs:
        for i in range(1, len(d) + 1):
            pot.state_of(d[:i])
            # cleared when an advance starts past the limit, then one row per set reached
            assert len(pot._memo) <= 3 + i + 1
    assert [await pot.complete(d) for d in docs] == want
    assert want.count(0.0) == 2


def test_completion_key_groups_string_lengths_by_the_characters_still_needed():
    """The budget twist remembers completion lengths per completion_key: inside a plain string
    the key keeps max(minLength - count, 0), not the count, so a long value's states share one
    search; a pattern's automaton keeps the count (its completion may depend on it)."""
    def key(pot, text):
        state = pot.initial()
        state = pot.advance(state, text.encode())
        return pot.completion_key(state)

    plain = JSONSchema({"type": "object", "properties": {"s": {"type": "string", "minLength": 3, "maxLength": 200}}})
    assert key(plain, '{"s": "abc') == key(plain, '{"s": "abcdefghij') == key(plain, '{"s": "' + "x" * 150)
    assert key(plain, '{"s": "ab') != key(plain, '{"s": "abc') != key(plain, '{"s": "a')
    assert key(plain, '{"s": "abc') != key(plain, '{"s": "abc"')  # closed: another state
    patterned = JSONSchema({"type": "string", "pattern": "^[a-z]+$", "maxLength": 50})
    assert key(patterned, '"abc') != key(patterned, '"abcdef')
