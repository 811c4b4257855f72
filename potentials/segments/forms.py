"""The JSON forms that build Segments, and the parsers that read their outputs back.

- ``structural_tag(spec)``: vLLM's ``response_format: {"type": "structural_tag", ...}`` in both
  of its documented forms, the older ``{"structures": [{"begin", "schema", "end"}], "triggers"}``
  and the current ``{"format": FORMAT}`` (xgrammar's structural tag formats);
- ``tools_constraint(tools, tool_choice, parallel_tool_calls)``: OpenAI ``tools`` as tool calls
  ``<tool_call>{"name": N, "arguments": ARGS}</tool_call>`` in free text, the name selecting the
  arguments' schema; ``parse_tool_calls(text)`` reads them back as OpenAI ``tool_calls``;
  ``tools_prompt(tools)`` is the system text that tells a model the format;
- ``reasoning(answer, max_bytes)``: ``<think>`` free text ``</think>`` then the answer;
  ``split_reasoning(text)`` gives (reasoning_content, content).

Every builder raises InvalidArgument / InvalidArgumentType naming the offending field.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from smc.backends.prompts import TOOL_CALL_BEGIN, TOOL_CALL_END, tool_functions, tools_prompt
from smc.core.errors import InvalidArgument, InvalidArgumentType
from potentials.base import BytePotential
from potentials.choice import Choice
from potentials.grammar import Grammar
from potentials.json import JSONSchema
from potentials.regex import Regex
from potentials.segments.potential import (
    FreeText,
    Literal,
    Part,
    Segments,
    Tag,
    Triggered,
)

# TOOL_CALL_BEGIN/END and tools_prompt live with the prompt rule (smc.backends.prompts), which
# states the tools to a model whose chat template has no tool section, such as SmolLM2's
THINK_BEGIN, THINK_END = "<think>", "</think>"
#: whitespace a required tool call may follow (a model often opens with a line break)
LEADING_SPACE = r"[ \t\n]{0,8}"

#: the format types of the current structural tag form that ``structural_tag`` reads
FORMAT_TYPES = ("const_string", "json_schema", "regex", "grammar", "choice", "any_text",
                "sequence", "tag", "triggered_tags")


def _field(spec: Mapping[str, Any], name: str, where: str, kind: type | tuple = str) -> Any:
    if name not in spec:
        raise InvalidArgument(f"{where} has no {name!r}")
    value = spec[name]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InvalidArgumentType(f"{where}.{name} must be {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple) -> str:
    names = {str: "a string", list: "a list", dict: "an object", bool: "true or false"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def schema_from_json(value: Any, where: str, strict: bool = False) -> JSONSchema:
    """The JSONSchema (``strict`` as given) of a schema given as an object, a boolean or its
    JSON text; InvalidArgument(Type) naming ``where`` otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise InvalidArgument(f"{where} is not valid JSON: {e}") from None
    if not isinstance(value, (Mapping, bool)):
        raise InvalidArgumentType(f"{where} must be a JSON Schema (an object or a boolean), got {value!r}")
    try:
        return JSONSchema(dict(value) if isinstance(value, Mapping) else value, strict=strict)
    except (ValueError, TypeError) as e:
        raise InvalidArgument(f"{where}: {e}") from None


# ---------------------------------------------------------------- structural tags
def structural_tag(spec: Mapping[str, Any]) -> Segments:
    """The Segments of a ``{"type": "structural_tag", ...}`` response format, in either form:

    older:   {"type": "structural_tag", "triggers": [T, ...],
              "structures": [{"begin": B, "schema": SCHEMA, "end": E}, ...]}
             free text in which a trigger opens a structure (B, a JSON document under SCHEMA,
             E); any number of structures, free text around them.
    current: {"type": "structural_tag", "format": FORMAT}, FORMAT one of
             {"type": "const_string", "value": S}        the text S
             {"type": "json_schema", "json_schema": SCHEMA}
             {"type": "regex", "pattern": R}   {"type": "grammar", "grammar": LARK}
             {"type": "choice", "choices": [S, ...]}  (an extension: one of the strings)
             {"type": "any_text"}     free text up to what follows it (the end of the
                                      enclosing tag, the next const_string or tag's begin)
                                      or to the end of the output
             {"type": "sequence", "elements": [FORMAT, ...]}
             {"type": "tag", "begin": B, "content": FORMAT, "end": E}
             {"type": "triggered_tags", "triggers": [T, ...], "tags": [TAG, ...],
              "at_least_one": false, "stop_after_first": false}
    """
    if not isinstance(spec, Mapping):
        raise InvalidArgumentType(f"a structural tag must be an object, got {type(spec).__name__}")
    if spec.get("type", "structural_tag") != "structural_tag":
        raise InvalidArgument(f"a structural tag has type 'structural_tag', got {spec.get('type')!r}")
    if "format" in spec:
        extra = [k for k in spec if k not in ("type", "format")]
        if extra:
            raise InvalidArgument(f"structural_tag with 'format' takes no {extra[0]!r}")
        return Segments(_parts(spec["format"], "format", None))
    structures = _field(spec, "structures", "structural_tag", list)
    triggers = _field(spec, "triggers", "structural_tag", list)
    tags = []
    for i, st in enumerate(structures):
        where = f"structural_tag.structures[{i}]"
        if not isinstance(st, Mapping):
            raise InvalidArgumentType(f"{where} must be an object")
        tags.append(Tag(_field(st, "begin", where), schema_from_json(st.get("schema", True), f"{where}.schema"),
                        _field(st, "end", where)))
    if not structures:
        raise InvalidArgument("structural_tag.structures is empty")
    return Segments([Triggered(tags, _strings(triggers, "structural_tag.triggers"))])


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(s, str) and s for s in value):
        raise InvalidArgument(f"{where} must be a non-empty list of non-empty strings")
    return value


def _parts(fmt: Any, where: str, follower: str | None) -> list[Part | BytePotential | str]:
    """The parts of one format; ``follower`` is the literal text that comes right after it
    (where an ``any_text`` stops), None at the end of the output."""
    if not isinstance(fmt, Mapping):
        raise InvalidArgumentType(f"{where} must be an object, got {fmt!r}")
    kind = fmt.get("type")
    if kind == "const_string":
        return [Literal(_field(fmt, "value", where))]
    if kind == "json_schema":
        return [schema_from_json(fmt.get("json_schema"), f"{where}.json_schema")]
    if kind == "regex":
        try:
            return [Regex(_field(fmt, "pattern", where))]
        except ValueError as e:
            raise InvalidArgument(f"{where}.pattern: {e}") from None
    if kind == "grammar":
        try:
            return [Grammar(_field(fmt, "grammar", where))]
        except ValueError as e:
            raise InvalidArgument(f"{where}.grammar: {e}") from None
    if kind == "choice":
        return [Choice(_field(fmt, "choices", where, list))]
    if kind == "any_text":
        return [FreeText(follower)]
    if kind == "tag":
        begin, end = _field(fmt, "begin", where), _field(fmt, "end", where)
        inner = _parts(fmt.get("content", {"type": "any_text"}), f"{where}.content", end or follower)
        if end and isinstance(inner[-1], FreeText) and inner[-1].stop == end:
            return [begin] + inner  # the free text's stop is the end
        return [begin] + inner + ([end] if end else [])
    if kind == "sequence":
        elements = _field(fmt, "elements", where, list)
        if not elements:
            raise InvalidArgument(f"{where}.elements is empty")
        out: list[Part | BytePotential | str] = []
        k = 0
        while k < len(elements):
            el = elements[k]
            nxt = elements[k + 1] if k + 1 < len(elements) else None
            if isinstance(el, Mapping) and el.get("type") == "any_text" and nxt is not None:
                stop, rest = _leading_text(nxt, f"{where}.elements[{k + 1}]")
                out.append(FreeText(stop))
                out += rest
                k += 2
                continue
            follow = follower if nxt is None else None
            out += _parts(el, f"{where}.elements[{k}]", follow)
            k += 1
        return out
    if kind == "triggered_tags":
        triggers = _strings(fmt.get("triggers"), f"{where}.triggers")
        raw = _field(fmt, "tags", where, list)
        if not raw:
            raise InvalidArgument(f"{where}.tags is empty")
        tags = []
        for i, t in enumerate(raw):
            tw = f"{where}.tags[{i}]"
            if not isinstance(t, Mapping):
                raise InvalidArgumentType(f"{tw} must be an object")
            begin, end = _field(t, "begin", tw), _field(t, "end", tw)
            inner = _parts(t.get("content", {"type": "any_text"}), f"{tw}.content", end or None)
            if end and isinstance(inner[-1], FreeText) and inner[-1].stop == end:
                end = ""
            tags.append(Tag(begin, inner, end))
        flags = {k: fmt.get(k, False) for k in ("at_least_one", "stop_after_first")}
        for k, v in flags.items():
            if not isinstance(v, bool):
                raise InvalidArgumentType(f"{where}.{k} must be true or false, got {v!r}")
        if follower is not None:
            raise InvalidArgument(f"{where}: triggered_tags must end the output")
        return [Triggered(tags, triggers, **flags)]
    raise InvalidArgument(
        f"{where}.type must be one of {', '.join(FORMAT_TYPES)}, got {kind!r}")


def _leading_text(fmt: Any, where: str) -> tuple[str, list[Part | BytePotential | str]]:
    """(the literal text a format begins with, the parts after it) for the format that follows
    an any_text: a const_string or a tag (its begin)."""
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind == "const_string":
        return _field(fmt, "value", where), []
    if kind == "tag":
        parts = _parts(fmt, where, None)
        begin = parts[0]
        if isinstance(begin, str) and begin:
            return begin, parts[1:]
    raise InvalidArgument(f"{where}: any_text must be followed by a const_string or a tag "
                          "(its text is where the free text stops), or end the output")


# ---------------------------------------------------------------- OpenAI tools
def call_schema(name: str, parameters: Any) -> dict[str, Any]:
    """The JSON Schema of one call's object: {"name": name, "arguments": <parameters>}."""
    return {"type": "object", "properties": {"name": {"const": name}, "arguments": parameters},
            "required": ["name", "arguments"], "additionalProperties": False}


def tools_constraint(tools: Any, tool_choice: Any = "auto",
                     parallel_tool_calls: bool = True) -> Segments | None:
    """The constraint of an OpenAI chat request's ``tools`` and ``tool_choice``: free text with
    tool calls ``<tool_call>{"name": N, "arguments": ARGS}</tool_call>``, ARGS valid under the
    parameters schema of the function named N (the name selects the schema while the call is
    written: each tool's call is a configuration of its own, and writing the name kills the
    others).

    A function with ``strict: true`` gets its parameters in strict mode (``JSONSchema(...,
    strict=True)``: no argument keys the schema does not name); the call that a required
    tool_choice opens the output with is strict when every function is.

    tool_choice: "auto" (zero or more calls), "required" (the output opens with a call, after
    optional whitespace), "none" (None: no constraint from the tools), or {"type": "function",
    "function": {"name": N}} (as "required", each call to N). ``parallel_tool_calls=False``: the
    output ends with the first call; otherwise free text with further calls may follow it.
    """
    functions = tool_functions(tools)
    if tool_choice is None:
        tool_choice = "auto"
    at_least_one = False
    if tool_choice == "none":
        return None
    if tool_choice == "required":
        at_least_one = True
    elif isinstance(tool_choice, Mapping):
        fn = _field(tool_choice, "function", "tool_choice", dict)
        name = _field(fn, "name", "tool_choice.function")
        functions = [f for f in functions if f[0] == name]
        if not functions:
            raise InvalidArgument(f"tool_choice names the function {name!r}, which is not among the tools")
        at_least_one = True
    elif tool_choice != "auto":
        raise InvalidArgument(f"tool_choice must be 'auto', 'required', 'none' or "
                              f"{{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}")
    if not isinstance(parallel_tool_calls, bool):
        raise InvalidArgumentType(f"parallel_tool_calls must be true or false, got {parallel_tool_calls!r}")
    schemas = [call_schema(name, params) for name, params, _ in functions]
    # a function's strict: true closes its parameters' open objects, as OpenAI's strict mode
    # requires of them (JSONSchema's strict mode; the arguments stay valid under the schema)
    strict = [fn.get("strict") is True for _, _, fn in functions]
    tags = [Tag(TOOL_CALL_BEGIN, schema_from_json(schema, f"tools[{name!r}].parameters", closed), TOOL_CALL_END)
            for schema, (name, _, _), closed in zip(schemas, functions, strict)]
    if not at_least_one:
        return Segments([Triggered(tags, [TOOL_CALL_BEGIN], stop_after_first=not parallel_tool_calls)])
    # A required call opens the output (after optional whitespace), as OpenAI's "required" answers
    # calls rather than text: free text before the first call would let a model that never writes
    # the tag (a small one) spend the whole budget before it.
    first = schema_from_json(schemas[0] if len(schemas) == 1 else {"anyOf": schemas}, "tools", all(strict))
    parts: list[Part | BytePotential | str] = [Regex(LEADING_SPACE), TOOL_CALL_BEGIN, first, TOOL_CALL_END]
    if parallel_tool_calls:
        parts.append(Triggered(tags, [TOOL_CALL_BEGIN]))
    return Segments(parts)


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) of an output: the calls ``<tool_call>{...}</tool_call>`` as OpenAI
    ``tool_calls`` ({"id": "call_<k>", "type": "function", "function": {"name", "arguments"}},
    arguments as JSON text), and the free text around them (stripped; None when empty).
    A tag whose body is not a call object is left in the content."""
    content: list[str] = []
    calls: list[dict[str, Any]] = []
    pos = 0
    while True:
        start = text.find(TOOL_CALL_BEGIN, pos)
        if start < 0:
            content.append(text[pos:])
            break
        stop = text.find(TOOL_CALL_END, start + len(TOOL_CALL_BEGIN))
        if stop < 0:
            content.append(text[pos:])
            break
        body = text[start + len(TOOL_CALL_BEGIN):stop]
        try:
            call = json.loads(body)
        except json.JSONDecodeError:
            call = None
        if isinstance(call, dict) and isinstance(call.get("name"), str) and "arguments" in call:
            content.append(text[pos:start])
            calls.append({"id": f"call_{len(calls)}", "type": "function",
                          "function": {"name": call["name"],
                                       "arguments": json.dumps(call["arguments"])}})
        else:
            content.append(text[pos:stop + len(TOOL_CALL_END)])
        pos = stop + len(TOOL_CALL_END)
    rest = "".join(content).strip()
    return (rest or None), calls


# ---------------------------------------------------------------- reasoning
def reasoning(answer: BytePotential | Part | str | None = None, max_bytes: int | None = None,
              begin: str = THINK_BEGIN, end: str = THINK_END) -> Segments:
    """``begin`` reasoning ``end`` then the answer: the reasoning is free UTF-8 text without
    ``end``, of at most ``max_bytes`` bytes (None: bounded only by the run's max_tokens), and
    the answer a text ``answer`` accepts (a byte constraint; None: free text to the end)."""
    if not isinstance(begin, str) or not isinstance(end, str) or not end:
        raise InvalidArgument("reasoning's begin must be a string and its end a non-empty string")
    parts: list[Part | BytePotential | str] = [begin] if begin else []
    parts.append(FreeText(end, max_bytes))
    if isinstance(answer, Segments):  # its parts in sequence: the same language, one level
        parts.extend(answer.parts)
    else:
        parts.append(FreeText(None) if answer is None else answer)
    return Segments(parts)


def split_reasoning(text: str, begin: str = THINK_BEGIN,
                    end: str = THINK_END) -> tuple[str | None, str | None]:
    """(reasoning_content, content) of an output ``begin R end C``: (R, C), C with its leading
    whitespace removed. Without ``begin`` at the start: (None, text); with no ``end``: (R, None)
    (the reasoning did not finish)."""
    stripped = text.lstrip()
    if not stripped.startswith(begin):
        return None, text
    rest = stripped[len(begin):]
    k = rest.find(end)
    if k < 0:
        return rest, None
    return rest[:k], rest[k + len(end):].lstrip()


#: the JSON forms ``constraint_part`` reads
PART_KINDS = ("regex", "grammar", "json_schema", "json_object", "choice", "segments",
              "structural_tag", "tools")


def constraint_part(spec: Any, where: str) -> BytePotential:
    """A byte constraint from a JSON form {KIND: V}, KIND one of ``PART_KINDS`` (the answer of
    a reasoning form, a segment of a segments form): {"json_object": true} is any JSON object,
    {"tools": {...}} is ``tools_from_json`` (a tool_choice other than "none")."""
    if not isinstance(spec, Mapping) or len(set(spec) - {"strict"}) != 1:
        raise InvalidArgument(f"{where} must be an object with one of the keys {', '.join(PART_KINDS)}; "
                              f"got {spec!r}")
    kind, value = next((k, v) for k, v in spec.items() if k != "strict")
    if "strict" in spec and kind != "json_schema":
        raise InvalidArgument(f"{where}.strict applies to a json_schema constraint, not {kind}")
    if kind == "json_schema":
        strict = spec.get("strict", False)
        if not isinstance(strict, bool):
            raise InvalidArgumentType(f"{where}.strict must be true or false, got {strict!r}")
        return schema_from_json(value, f"{where}.json_schema", strict)
    if kind == "json_object":
        if value is not True:
            raise InvalidArgument(f"{where}.json_object must be true, got {value!r}")
        return JSONSchema({"type": "object"})
    if kind == "segments":
        return segments_from_json(value)
    if kind == "structural_tag":
        return structural_tag(value)
    if kind == "tools":
        tools = tools_from_json(value)
        if tools is None:
            raise InvalidArgument(f"{where}.tools with tool_choice 'none' constrains nothing; give null")
        return tools
    if kind == "choice":
        return Choice(value)
    if kind in ("regex", "grammar"):
        if not isinstance(value, str):
            raise InvalidArgumentType(f"{where}.{kind} must be a string")
        try:
            return Regex(value) if kind == "regex" else Grammar(value)
        except ValueError as e:
            raise InvalidArgument(f"{where}.{kind}: {e}") from None
    raise InvalidArgument(f"{where} has the unknown key {kind!r}; use {', '.join(PART_KINDS)}")


def segments_from_json(items: Any) -> Segments:
    """A Segments from its JSON form, a list whose items are
    {"text": S}                                     the literal S
    {"free_text": {"stop": S, "max_bytes": B}}     free text ended by S (both optional; no
                                                    stop: to the end of the output)
    {KIND: V}                                       a constraint (``constraint_part``)."""
    if not isinstance(items, list) or not items:
        raise InvalidArgument("constraint segments must be a non-empty list")
    parts: list[Part | BytePotential | str] = []
    for i, item in enumerate(items):
        where = f"segments[{i}]"
        if isinstance(item, Mapping) and "text" in item and len(item) == 1:
            parts.append(Literal(_field(item, "text", where)))
        elif isinstance(item, Mapping) and "free_text" in item and len(item) == 1:
            opts = item["free_text"] if item["free_text"] is not None else {}
            if not isinstance(opts, Mapping) or set(opts) - {"stop", "max_bytes"}:
                raise InvalidArgument(f"{where}.free_text takes the keys stop and max_bytes")
            parts.append(FreeText(opts.get("stop"), opts.get("max_bytes")))
        else:
            parts.append(constraint_part(item, where))
    return Segments(parts)


def reasoning_from_json(spec: Any) -> Segments:
    """A reasoning constraint from {"answer": CONSTRAINT or null, "max_bytes": B, "begin": S,
    "end": S} (all optional; CONSTRAINT as in ``constraint_part``)."""
    if spec is True:
        spec = {}
    if not isinstance(spec, Mapping):
        raise InvalidArgumentType("constraint reasoning must be an object (or true)")
    extra = set(spec) - {"answer", "max_bytes", "begin", "end"}
    if extra:
        raise InvalidArgument(f"constraint reasoning has the unknown key {sorted(extra)[0]!r}")
    answer = spec.get("answer")
    part = None if answer is None else constraint_part(answer, "reasoning.answer")
    return reasoning(part, spec.get("max_bytes"), spec.get("begin", THINK_BEGIN),
                     spec.get("end", THINK_END))


def tools_from_json(spec: Any) -> Segments | None:
    """``tools_constraint`` from {"tools": [...], "tool_choice": ..., "parallel_tool_calls": ...}."""
    if not isinstance(spec, Mapping):
        raise InvalidArgumentType("constraint tools must be an object with tools, tool_choice, parallel_tool_calls")
    extra = set(spec) - {"tools", "tool_choice", "parallel_tool_calls"}
    if extra:
        raise InvalidArgument(f"constraint tools has the unknown key {sorted(extra)[0]!r}")
    return tools_constraint(spec.get("tools"), spec.get("tool_choice", "auto"),
                            spec.get("parallel_tool_calls", True))


__all__ = ["FORMAT_TYPES", "PART_KINDS", "THINK_BEGIN", "THINK_END", "TOOL_CALL_BEGIN", "TOOL_CALL_END",
           "call_schema", "constraint_part", "parse_tool_calls", "reasoning", "reasoning_from_json",
           "segments_from_json", "split_reasoning", "structural_tag", "tools_constraint",
           "tools_from_json", "tools_prompt"]
