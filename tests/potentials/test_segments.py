"""Segments, triggered tags and reasoning: the shipped contract, a brute-force oracle on every
short string, exact prefix viability (a segment's constraint dead-ends the text at once), and
the forms' parsers."""

import asyncio
import itertools

import pytest

from potentials import JSONSchema, Regex
from potentials.choice import Choice
from potentials.segments import Constrained, FreeText, Literal, Segments, Tag, Triggered
from potentials.segments.forms import (
    parse_tool_calls,
    reasoning,
    split_reasoning,
    structural_tag,
    tools_constraint,
)
from potentials.testing import CompleteKeyContract, MaskKeyContract, PotentialContract
from smc.core.errors import InvalidArgument, InvalidArgumentType
from smc.core.logmath import NEG_INF

INT_OBJ = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
           "additionalProperties": False}


def small():
    """free text ended by "ab" (at most 2 bytes before it), then c+ or d, then "e"."""
    return Segments([FreeText("ab", max_bytes=2), Regex("c+|d"), "e"])


class TestSmallContract(MaskKeyContract, CompleteKeyContract):
    def potential(self):
        return small()

    def contexts(self):
        return [b"", b"x", b"y", b"a", b"xa", b"xy", b"xyz", b"ab", b"xab", b"abc", b"abcc",
                b"abce", b"abde", b"abdd", b"aab", b"abd", b"xyab", b"xyzab", b"\xc3", b"\xc3\xa9ab"]


class TestAnswerContract(PotentialContract):
    def potential(self):
        return Segments([FreeText("<answer>"), JSONSchema(INT_OBJ), "</answer>"])

    def contexts(self):
        return [b"", b"so", b"so <ans", b"so <answer>", b"<answer>{", b'<answer>{"a": 1',
                b'<answer>{"a": 1}', b'<answer>{"a": 1} ', b'<answer>{"a": 1}</answer>',
                b'<answer>{"b', b"<answer>x", b'<answer>{"a": 1}</answer>x']


def tool_tags():
    add = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    return [Tag("<f=add>", JSONSchema(add), "</f>"), Tag("<f=say>", Choice(["hi", "yo"]), "</f>")]


class TestTriggeredContract(MaskKeyContract):
    def potential(self):
        return Segments([Triggered(tool_tags(), ["<f="], at_least_one=True)])

    def contexts(self):
        return [b"", b"ok", b"ok <", b"ok <f", b"ok <f=", b"<f=s", b"<f=say>h", b"<f=say>hi</f>",
                b"<f=say>hi</f> and", b"<f=add>{", b'<f=add>{"a": 2}</f>', b"<f=mul", b"no <f=say>x",
                b"k", b"<f=say>yo</f>"]


class TestReasoningContract(MaskKeyContract, CompleteKeyContract):
    def potential(self):
        return reasoning(Choice(["yes", "no"]), max_bytes=6)

    def contexts(self):
        return [b"", b"<th", b"<think>", b"<think>ab", b"<think>abcdef", b"<think>abcdefg",
                b"<think>ab</think>", b"<think>ab</think>y", b"<think>ab</think>yes",
                b"<think>abcd</think>", b"<think></think>no", b"<think>ab</thi", b"<think>abcde</thi"]


# ---------------------------------------------------------------- oracle
ALPHABET = b"abcdex"


def small_oracle(x: bytes) -> bool:
    """x = t "ab" u "e", "ab" not in t, |t| <= 2, u in c+ | d (the first "ab" ends t)."""
    k = x.find(b"ab")
    if k < 0 or k > 2:
        return False
    rest = x[k + 2:]
    return rest.endswith(b"e") and (rest[:-1] == b"d" or (len(rest) > 1 and set(rest[:-1]) == {ord("c")}))


def accepted_up_to(m: int) -> set[bytes]:
    """Every accepted string with at most m c's: t ab u e for t of at most 2 bytes."""
    ts = [bytes(t) for n in range(3) for t in itertools.product(ALPHABET, repeat=n)]
    us = [b"d"] + [b"c" * k for k in range(1, m + 1)]
    return {x for t in ts for u in us if small_oracle(x := t + b"ab" + u + b"e")}


#: the prefixes of the accepted strings of up to 6 c's: viable strings of up to 6 bytes
VIABLE = {a[:k] for a in accepted_up_to(6) for k in range(len(a) + 1)}


def test_small_agrees_with_its_oracle_on_every_short_string():
    pot = small()

    async def go():
        for n in range(6):
            for t in itertools.product(ALPHABET, repeat=n):
                x = bytes(t)
                assert (await pot.complete(x) == 0.0) == small_oracle(x), x
                assert (await pot.prefix(x) == 0.0) == (x in VIABLE), x

    asyncio.run(go())


# ---------------------------------------------------------------- exact viability
async def test_a_constraint_segment_dead_ends_the_text_at_once():
    pot = Segments([FreeText("<answer>"), JSONSchema(INT_OBJ), "</answer>"])
    assert await pot.prefix(b'think <answer>{"a"') == 0.0
    assert await pot.prefix(b'think <answer>{"b') == NEG_INF  # additionalProperties: false
    assert await pot.prefix(b"think <answer>[") == NEG_INF
    assert await pot.prefix(b'think <answer>{"a": 1}</answer> ') == NEG_INF
    # the text before the stop is free: JSON there is just text
    assert await pot.prefix(b'[{"b" <answer>') == 0.0


async def test_where_an_inner_text_could_end_or_go_on_both_are_kept():
    pot = Segments([Constrained(Regex("[0-9]+")), Literal("1x")])
    assert await pot.complete(b"1231x") == 0.0  # the number is "123", then "1x"
    assert await pot.complete(b"11x") == 0.0
    assert await pot.prefix(b"12") == 0.0 and await pot.complete(b"1x") == NEG_INF


async def test_an_unsatisfiable_segment_empties_the_language():
    pot = Segments(["go", Regex("[^\\s\\S]")])
    assert await pot.prefix(b"") == NEG_INF and await pot.prefix(b"g") == NEG_INF


async def test_free_text_bound_and_utf8():
    pot = Segments([FreeText("!", max_bytes=3)])
    assert await pot.complete("é!".encode()) == 0.0
    assert await pot.prefix(b"ab\xc3") == NEG_INF  # 4 bytes before the stop at best
    assert await pot.prefix(b"a\xc3") == 0.0
    assert await pot.prefix(b"a\xc3!") == NEG_INF  # a broken character
    assert await pot.prefix(b"abc!") == 0.0 and await pot.prefix(b"abcd") == NEG_INF
    last = Segments(["x", FreeText(max_bytes=2)])
    assert await last.complete(b"xab") == 0.0 and await last.prefix(b"xabc") == NEG_INF
    assert await last.complete(b"x\xc3") == NEG_INF


async def test_triggers_open_tags_and_the_name_selects_the_schema():
    pot = Segments([Triggered(tool_tags(), ["<f="])])
    assert await pot.complete(b"plain text") == 0.0
    assert await pot.complete(b'a <f=add>{"a": 1}</f> b <f=say>yo</f>') == 0.0
    assert await pot.prefix(b"a <f=say>{") == NEG_INF  # say's content is a choice
    assert await pot.prefix(b"a <f=mul") == NEG_INF  # a trigger must open a tag
    assert await pot.complete(b"a <f") == 0.0  # a partial trigger is free text
    once = Segments([Triggered(tool_tags(), ["<f="], at_least_one=True, stop_after_first=True)])
    assert await once.complete(b"plain") == NEG_INF
    assert await once.complete(b"x<f=say>hi</f>") == 0.0
    assert await once.prefix(b"x<f=say>hi</f> ") == NEG_INF


def test_bad_arguments():
    with pytest.raises(InvalidArgument, match="without a stop"):
        Segments([FreeText(), "x"])
    with pytest.raises(InvalidArgumentType):
        Segments([3])
    with pytest.raises(InvalidArgument):
        Segments([])
    with pytest.raises(InvalidArgument, match="starts with none"):
        Triggered([Tag("<g>", Choice(["a"]), "</g>")], ["<f"])
    with pytest.raises(InvalidArgument, match="Boolean"):
        Segments([_Weighted()])


class _Weighted(Regex):
    boolean = False

    def __init__(self):
        super().__init__("a")


# ---------------------------------------------------------------- forms and parsers
def test_parse_tool_calls():
    text = 'Sure. <tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call> then ' \
           '<tool_call>{"arguments": {}, "name": "now"}</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Sure.  then"
    assert [c["function"]["name"] for c in calls] == ["add", "now"]
    assert calls[0]["function"]["arguments"] == '{"a": 1}' and calls[0]["type"] == "function"
    assert parse_tool_calls("no calls") == ("no calls", [])
    assert parse_tool_calls("<tool_call>oops</tool_call>") == ("<tool_call>oops</tool_call>", [])


def test_split_reasoning():
    assert split_reasoning("<think>a b</think>\n{}") == ("a b", "{}")
    assert split_reasoning("{}") == (None, "{}")
    assert split_reasoning("<think>unfinished") == ("unfinished", None)


async def test_tools_constraint_modes():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
             {"type": "function", "function": {"name": "g", "strict": False}}]
    call_f = b'<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    call_g = b'<tool_call>{"name": "g", "arguments": 3}</tool_call>'
    auto = tools_constraint(tools)
    assert await auto.complete(b"hello") == 0.0 and await auto.complete(call_f + b" " + call_g) == 0.0
    required = tools_constraint(tools, "required", parallel_tool_calls=False)
    assert await required.complete(b"hello") == NEG_INF and await required.complete(call_g) == 0.0
    assert await required.prefix(call_g + b" ") == NEG_INF
    assert await required.prefix(b"Sure") == NEG_INF  # a required call opens the output
    assert await required.complete(b"\n" + call_f) == 0.0
    named = tools_constraint(tools, {"type": "function", "function": {"name": "f"}})
    assert await named.complete(call_f) == 0.0 and await named.prefix(call_g[:24]) == NEG_INF
    assert await named.complete(call_f + b" then " + call_f) == 0.0  # parallel: text, more calls
    assert await named.complete(call_f + b" then " + call_g) == NEG_INF
    assert tools_constraint(tools, "none") is None


async def test_a_strict_function_gets_no_argument_keys_its_parameters_do_not_name():
    params = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    extra = b'<tool_call>{"name": "f", "arguments": {"x": 1, "y": 2}}</tool_call>'
    named = b'<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
    for strict, closed in ((True, True), (None, False)):
        fn = {"name": "f", "parameters": params, **({} if strict is None else {"strict": strict})}
        for choice in ("auto", "required"):
            pot = tools_constraint([{"type": "function", "function": fn}], choice)
            assert await pot.complete(named) == 0.0
            assert (await pot.complete(extra) == NEG_INF) is closed, (strict, choice)


async def test_structural_tag_current_form_sequence_and_any_text():
    pot = structural_tag({"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "any_text"}, {"type": "const_string", "value": "<answer>"},
        {"type": "json_schema", "json_schema": INT_OBJ},
        {"type": "tag", "begin": "</answer><note>", "content": {"type": "any_text"}, "end": "</note>"}]}})
    assert await pot.complete(b'why <answer>{"a": 2}</answer><note>ok</note>') == 0.0
    assert await pot.prefix(b'why <answer>{"a": 2}</answer><note>ok</note>!') == NEG_INF


async def test_reasoning_then_tool_calls_compose():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}]
    pot = reasoning(tools_constraint(tools, "required"), max_bytes=10)
    call = b'<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
    assert await pot.complete(b"<think>why</think>" + call) == 0.0
    assert await pot.complete(b"<think>why</think>no call") == NEG_INF
    assert await pot.prefix(b'<think>why</think><tool_call>{"name": "f", "arguments": {"x": "') == NEG_INF
    assert split_reasoning((b"<think>why</think>" + call).decode())[1] == call.decode()


async def test_structural_tag_triggered_tags_with_free_content_and_the_older_form():
    pot = structural_tag({"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<note", "<f="],
        "tags": [{"type": "tag", "begin": "<note>", "content": {"type": "any_text"}, "end": "</note>"},
                 {"type": "tag", "begin": "<f=say>", "content": {"type": "regex", "pattern": "hi|yo"},
                  "end": "</f>"}]}})
    assert await pot.complete(b"a <note>any </f> text</note> b <f=say>yo</f>") == 0.0
    assert await pot.prefix(b"a <nota") == 0.0 and await pot.prefix(b"a <notex") == NEG_INF and await pot.prefix(b"<f=say>h") == 0.0
    old = structural_tag({"type": "structural_tag", "triggers": ["<function="], "structures": [
        {"begin": "<function=a>", "schema": {"type": "integer"}, "end": "</function>"},
        {"begin": "<function=b>", "schema": {"type": "string"}, "end": "</function>"}]})
    assert await old.complete(b'x<function=a>1</function><function=b>"s"</function>') == 0.0
    assert await old.prefix(b'x<function=a>"') == NEG_INF
