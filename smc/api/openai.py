"""OpenAI-style request and response bodies <-> smc-steer's ``Request`` and ``Result``.

The HTTP server (``smc.api.server``) and the batch runner share this translation, so one body
means one run wherever it is sent. A body of ``POST /v1/chat/completions`` (``kind="chat"``) or
``POST /v1/completions`` (``kind="completion"``) becomes a ``Call``: the ``smc.Request`` it
describes (validated once, by the Request itself) and what the response needs (n, stream).
Nothing in a body is ignored: a field is translated, checked to be neutral (e.g.
``presence_penalty: 0``), or refused with an ``ApiError`` naming it.

What a run answers. With finished samples x_i of normalized weights w̄_i the run's posterior is
π̂(s) = Σ_{i: x_i = s} w̄_i over distinct texts s; the response's ``n`` choices are n draws from
π̂ with replacement (seeded by the request's seed), each carrying π̂ of its text, and the extra
field ``"smc"`` carries log Ẑ (``log_ml``), the ESS and π̂ itself. A run with no finished
sample (Ẑ = 0) is ``NoFinishedSample`` (status 422), never an empty or invalid answer.

A chat body's ``tools``/``tool_choice``/``parallel_tool_calls`` and its reasoning switch
(``reasoning``, or vLLM's ``chat_template_kwargs.enable_thinking``; the server's ``Reasoning``
default otherwise) become one constraint of ``potentials.segments.forms`` (``{"tools": ...}``,
inside ``{"reasoning": {"answer": ...}}`` when the call reasons) and the tools go into the
prompt (``Request.tools``); the answer's message is read back by ``smc.api.assistant_message``.

``temperature: 0`` asks for argmax_x p(x) φ(x): the exact best-first search (method "top_k",
one answer) within ``defaults.TOP1_MAX_EXPANSIONS`` expansions, else beam search of width
``defaults.TOP1_BEAM_WIDTH`` (a heuristic); ``smc.method`` says which answered.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import numpy as np

from smc.api.generation import arun, arun_most_probable, check_memory, most_probable_settings, prompt_ids_for
from potentials.segments.forms import tools_from_json
from smc.api.assistant_message import REASONING_NAMES, assistant_message, final_fields, stream_fields
from smc.api.request import Request, constraint_from_json
from smc.backends.base import LMBackend
from smc.backends.prompts import check_messages, tool_functions
from smc.core import defaults
from smc.core.errors import SmcSteerError
from smc.core.logmath import NEG_INF, json_number
from smc.engine.checkpoint import Run
from smc.engine.result import Result


class ApiError(SmcSteerError):
    """A request the server answers with OpenAI's error object and a 4xx (or 5xx) status:
    ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, message: str, status: int = 400, *, param: str | None = None,
                 code: str | None = None, type: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.status, self.param, self.code, self.type = message, status, param, code, type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class NoFinishedSample(ApiError):
    """The run ended with no finished sample: Ẑ = 0 within max_tokens (status 422)."""


@dataclass(frozen=True)
class Limits:
    """What one request may ask of the server (stated in docs/serving.md).

    Attributes:
        max_particles: most particles per run.
        max_n: most choices per response.
        max_body_bytes: largest request body.
        max_constraint_bytes: largest schema, regex, grammar or choice list (as JSON text).
        max_running: most runs at once; later requests wait for a slot (their particles would
            otherwise all hold next-token distributions in memory at the same time).
    """

    max_particles: int = 64
    max_n: int = 16
    max_body_bytes: int = 1 << 20
    max_constraint_bytes: int = 64 << 10
    max_running: int = 64


#: the Request's settings a body may set by name (its JSON-valued SMC settings; files and
#: Python objects such as checkpoint and critic are not among them)
SMC_FIELDS = ("particles", "sampler", "sampler_options", "ess_threshold", "resampling", "resampling_power",
              "islands", "finish_share", "lookahead", "per_byte", "method", "n_beam")

#: fields of OpenAI's or vLLM's sampling that change nothing at the value given here (their
#: default) and are refused at any other: field -> (allowed values, what the server does instead)
NEUTRAL = {
    "presence_penalty": ((0, 0.0, None), "penalties are not part of the target"),
    "frequency_penalty": ((0, 0.0, None), "penalties are not part of the target"),
    "repetition_penalty": ((1, 1.0, None), "penalties are not part of the target"),
    "logit_bias": ((None, {}), "logit_bias is not supported"),
    "logprobs": ((False, None), "logprobs are not returned"),
    "top_logprobs": ((0, None), "logprobs are not returned"),
    "stop": ((None, []), "stop sequences are not supported; use a regex or grammar constraint"),
    "best_of": ((1, None), "best_of is not supported; use n (draws from the posterior)"),
    "echo": ((False, None), "echo is not supported"),
    "suffix": ((None, ""), "suffix is not supported"),
    "functions": ((None, []), "functions are not supported"),
    "function_call": ((None, "none"), "functions are not supported"),
    "top_k": ((None, -1, 0), "top_k truncation is not supported; use top_p"),
    "min_p": ((None, 0, 0.0), "min_p is not supported; use top_p"),
    "min_tokens": ((None, 0), "min_tokens is not supported"),
    "ignore_eos": ((None, False), "ignore_eos is not supported"),
    "skip_special_tokens": ((None, True), "special tokens are part of the text"),
    "user": (None, ""),  # any string: a label for the caller's own logs
    "store": ((None, False), "requests are not stored"),
    "metadata": ((None, {}), "requests are not stored"),
}

#: vLLM's structured_outputs keys that name a constraint -> the constraint's JSON kind
STRUCTURED = {"json": "json_schema", "regex": "regex", "choice": "choice", "grammar": "grammar",
              "json_object": "json_object"}
#: legacy vLLM top-level fields -> structured_outputs key
GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice",
          "guided_grammar": "grammar"}

COMMON = ("model", "max_tokens", "n", "seed", "temperature", "top_p", "stream", "stream_options",
          "response_format", "structured_outputs", *GUIDED, *SMC_FIELDS, *NEUTRAL)
FIELDS = {"chat": ("messages", "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls",
                   "reasoning", "chat_template_kwargs", *COMMON),
          "completion": ("prompt", *COMMON)}


@dataclass(frozen=True)
class Call:
    """One OpenAI-style call: its Request, and how to answer.

    Attributes:
        kind: "chat" or "completion".
        request: the run (for temperature 0: method "top_k" with one particle).
        n: choices to draw from the posterior.
        stream: answer with server-sent events.
        include_usage: with stream, a last chunk carries usage (``stream_options``).
        most_probable: temperature 0 (top-1 search, beam search past its budget).
        tools: the output is free text with ``<tool_call>`` calls (tool_choice other than
            "none"), answered as ``message.tool_calls`` and the text around them.
        reasoning: the output is ``<think>`` reasoning ``</think>`` then the answer, answered
            as ``message.reasoning_content`` and the rest.
    """

    kind: str
    request: Request
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    most_probable: bool = False
    tools: bool = False
    reasoning: bool = False


@dataclass(frozen=True)
class Reasoning:
    """The server's default for a chat request that does not say whether to reason first
    (``python -m smc serve --reasoning [--reasoning-max-bytes B]``).

    Attributes:
        enabled: think-then-answer by default.
        max_bytes: the default bound on the reasoning's UTF-8 bytes (None: only max_tokens).
    """

    enabled: bool = False
    max_bytes: int | None = None


# ---------------------------------------------------------------------------- request bodies
def parse_body(data: bytes, limits: Limits = Limits()) -> dict[str, Any]:
    """The JSON object of a request body; ApiError (400, 413) for an oversized body, bytes
    that are not JSON, or JSON that is not an object."""
    if len(data) > limits.max_body_bytes:
        raise ApiError(f"the request body is {len(data):,} bytes, more than the limit of "
                       f"{limits.max_body_bytes:,}", 413, code="body_too_large")
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(f"the request body is not valid JSON: {e}", code="invalid_json") from None
    except RecursionError:
        raise ApiError("the request body is nested too deeply", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(f"the request body must be a JSON object, got {type(body).__name__}", code="invalid_json")
    return body


def parse_call(body: Mapping[str, Any], kind: str, model_name: str, limits: Limits = Limits(),
               reasoning: Reasoning = Reasoning()) -> Call:
    """The Call a chat or completion body describes (``reasoning``: the server's default for a
    chat body that does not say); ApiError naming the first problem (404 for a model other than
    ``model_name``, else 400)."""
    allowed = FIELDS[kind]
    for key in body:
        if key not in allowed:
            hint = " (it names a server-side file or Python object)" if key in ("checkpoint", "critic") else ""
            raise ApiError(f"unknown or unsupported field {key!r}{hint}", param=key, code="unknown_field")
    model = body.get("model", model_name)
    if model != model_name:
        raise ApiError(f"the model {model!r} does not exist; this server serves {model_name!r}", 404,
                       param="model", code="model_not_found")
    for key, (allowed_values, why) in NEUTRAL.items():
        if key not in body:
            continue
        value = body[key]
        if allowed_values is None:
            if value is not None and not isinstance(value, str):
                raise ApiError(f"{key} must be a string", param=key)
        elif not any(value == a and type(value) is type(a) for a in allowed_values if a is not None) and value is not None:
            raise ApiError(f"{key}={value!r} cannot be honoured: {why}", param=key, code="unsupported_parameter")
    # null is "the default", as for OpenAI's own fields
    settings: dict[str, Any] = {k: body[k] for k in SMC_FIELDS if body.get(k) is not None}
    if "particles" in settings and _is_int(settings["particles"]) and settings["particles"] > limits.max_particles:
        raise ApiError(f"particles={settings['particles']} is above this server's limit of "
                       f"{limits.max_particles}", param="particles", code="too_many_particles")
    prompt, chat = _prompt(body, kind)
    max_tokens = _max_tokens(body, kind)
    if max_tokens is not None:
        settings["max_tokens"] = max_tokens
    if "seed" in body:
        settings["seed"] = body["seed"]
    n = body.get("n", 1)
    if n is None:
        n = 1
    if not _is_int(n) or not 1 <= n <= limits.max_n:
        raise ApiError(f"n must be an integer in [1, {limits.max_n}], got {n!r}", param="n")
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise ApiError("stream_options is only allowed with stream: true", param="stream_options")
        if not isinstance(options, dict) or set(options) - {"include_usage", "continuous_usage_stats"}:
            raise ApiError("stream_options may hold include_usage only", param="stream_options")
        if options.get("continuous_usage_stats"):
            raise ApiError("continuous_usage_stats is not supported", param="stream_options")
        include_usage = _flag(options, "include_usage")
    most_probable = False
    temperature = body.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise ApiError(f"temperature must be a number, got {temperature!r}", param="temperature")
        if temperature == 0:
            most_probable = True
        else:
            settings["temperature"] = temperature
    if body.get("top_p") is not None:
        settings["top_p"] = body["top_p"]
    if most_probable:
        given = [k for k in SMC_FIELDS if k in settings]
        if given:
            raise ApiError(f"temperature 0 runs the exact top-1 search; {given[0]} does not apply to it",
                           param=given[0])
        # the search answers argmax p(y) phi(y) of the model itself: a nucleus would change
        # that objective, so only the neutral top_p is accepted beside temperature 0
        if settings.pop("top_p", 1) != 1:
            raise ApiError("temperature 0 answers the most probable output of the model itself; "
                           "top_p must then be 1 (or absent)", param="top_p")
        settings.update(most_probable_settings())
    field, spec = _constraint(body, limits)
    tools, tool_spec = _tools(body, limits) if kind == "chat" else (None, None)
    if tool_spec is not None:
        if field is not None:
            raise ApiError(f"two constraints in one request: tools (tool_choice "
                           f"{body.get('tool_choice', 'auto')!r}) and {field}; give one, or send "
                           "tool_choice \"none\"", param=field, code="conflicting_constraints")
        if stream:
            raise ApiError("tool calls are not streamed; send stream: false (or tool_choice \"none\")",
                           param="stream", code="unsupported_parameter")
        field, spec = "tools", tool_spec
    think, max_bytes = _reasoning(body, reasoning) if kind == "chat" else (False, None)
    if think:
        spec = {"reasoning": {"answer": spec, "max_bytes": max_bytes}}
        field = "reasoning" if field is None else field
    try:
        constraint = constraint_from_json(spec)
    except (SmcSteerError, ValueError, TypeError) as e:
        raise ApiError(f"invalid {field}: {_one_line(e)}", param=field, code="invalid_constraint") from None
    except RecursionError:
        raise ApiError(f"invalid {field}: nested too deeply", param=field, code="invalid_constraint") from None
    try:
        request = Request(prompt, constraint, model=model_name, chat=chat, constraint_json=spec,
                          tools=tools, **settings)
    except (SmcSteerError, ValueError, TypeError) as e:
        raise ApiError(_one_line(e), param=_param_of(e, settings)) from None
    return Call(kind, request, n, stream, include_usage, most_probable, tool_spec is not None, think)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _flag(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(f"{key} must be true or false, got {value!r}", param=key)
    return value


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _param_of(e: BaseException, settings: Mapping[str, Any]) -> str | None:
    """The field an error message begins by naming, when it is one of the request's."""
    head = str(e).split(" ", 1)[0].strip("'\"").split("=", 1)[0]
    return head if head in settings or head in ("prompt", "messages") else None


def _prompt(body: Mapping[str, Any], kind: str) -> tuple[Any, bool | None]:
    """(prompt, chat) by the one prompt rule: chat messages go through the model's chat
    template; a completion's text prompt is used as plain text (chat=False), token ids as given."""
    if kind == "chat":
        if "messages" not in body:
            raise ApiError("messages is required", param="messages")
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            raise ApiError("messages must be a non-empty list of {role, content} objects", param="messages")
        try:
            return check_messages([_message(m, k) for k, m in enumerate(messages)], "messages"), None
        except (SmcSteerError, ValueError, TypeError) as e:
            raise ApiError(_one_line(e), param="messages") from None
    if "prompt" not in body:
        raise ApiError("prompt is required", param="prompt")
    prompt = body["prompt"]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        if len(prompt) != 1:
            raise ApiError("one prompt per request (send several requests, or use n)", param="prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt, False
    if isinstance(prompt, list) and all(_is_int(i) for i in prompt):
        return prompt, None
    raise ApiError("prompt must be a string, a list of one string, or a list of token ids", param="prompt")


def _message(m: Any, k: int) -> dict[str, Any]:
    """A chat message with its content parts of type "text" joined; any other part is refused
    (the keys are checked with the prompt rule's ``check_messages``). An assistant message's
    reasoning (an earlier answer sent back as it came) is not part of the prompt, as reasoning
    models' own templates leave past reasoning out."""
    where = f"messages[{k}]"
    if not isinstance(m, dict):
        raise ApiError(f"{where} must be an object with role and content", param="messages")
    if m.get("role") == "assistant":
        m = {key: value for key, value in m.items() if key not in REASONING_NAMES}
    content = m.get("content")
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or set(part) != {"type", "text"} \
                    or not isinstance(part["text"], str):
                raise ApiError(f"{where}: only text content parts are supported", param="messages")
            texts.append(part["text"])
        m = {**m, "content": "".join(texts)}
    return m


def _max_tokens(body: Mapping[str, Any], kind: str) -> int | None:
    value = body.get("max_tokens")
    other = body.get("max_completion_tokens") if kind == "chat" else None
    if value is not None and other is not None and value != other:
        raise ApiError("give max_tokens or max_completion_tokens, not both", param="max_completion_tokens")
    return value if value is not None else other


def _constraint(body: Mapping[str, Any], limits: Limits) -> tuple[str | None, dict[str, Any] | None]:
    """(the field that sets it, the constraint's JSON form) of the body's one constraint, or
    (None, None); ApiError for two constraints, an unknown kind or key, or an unsafe one."""
    found: list[tuple[str, dict[str, Any]]] = []
    fmt = body.get("response_format")
    if fmt is not None:
        spec = _response_format(fmt)
        if spec is not None:
            found.append(("response_format", spec))
    so = body.get("structured_outputs")
    if so is not None:
        found.extend(_structured(so, "structured_outputs"))
    for key, sub in GUIDED.items():
        if body.get(key) is not None:
            found.extend(_structured({sub: body[key]}, key))
    if len(found) > 1:
        raise ApiError(f"two constraints in one request: {found[0][0]} and {found[1][0]}; give one",
                       param=found[1][0], code="conflicting_constraints")
    if not found:
        return None, None
    return found[0][0], safe_constraint(*found[0], limits)


def safe_constraint(field: str, spec: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """``spec`` (a constraint's JSON form, a JSON text schema decoded) once it is within the
    size limit and reads nothing outside itself: local ``$ref``s only, no ``%import`` but Lark's
    ``common``; ApiError naming ``field`` otherwise."""
    size = len(json.dumps(spec))
    if size > limits.max_constraint_bytes:
        raise ApiError(f"{field} is {size:,} bytes of JSON, more than the limit of "
                       f"{limits.max_constraint_bytes:,}", param=field, code="constraint_too_large")
    kind, value = next(iter(spec.items()))
    if kind == "json_schema" and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ApiError(f"invalid {field}: the schema is not valid JSON: {e}", param=field,
                           code="invalid_constraint") from None
        spec = {**spec, kind: value}
    # anywhere in the spec: a structural tag or segments hold schemas and grammars of their own
    for ref in external_refs(spec):
        raise ApiError(f"invalid {field}: $ref {ref!r} points outside the schema; only local "
                       "references ('#...') are allowed", param=field, code="invalid_constraint")
    for grammar in grammars_in(spec):
        for target in grammar_imports(grammar):
            raise ApiError(f"invalid {field}: %import {target} would read a grammar file; only "
                           "Lark's own 'common' grammar may be imported", param=field,
                           code="invalid_constraint")
    return spec


def _tools(body: Mapping[str, Any], limits: Limits) -> tuple[list[Any] | None, dict[str, Any] | None]:
    """(the tools the prompt states, the constraint's JSON form) of a chat body's ``tools``,
    ``tool_choice`` and ``parallel_tool_calls``; ApiError naming the field at fault.

    The prompt states the tools whatever the choice (as OpenAI and vLLM do). The constraint is
    ``potentials.segments.forms.tools_constraint``: free text with ``<tool_call>`` calls, each
    call's arguments valid under its function's parameters; "auto" (the default) allows zero or
    more calls, "required" or a named function at least one, "none" none (no constraint from
    the tools); ``parallel_tool_calls: false`` ends the output with the first call."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise ApiError(f"parallel_tool_calls must be true or false, got {parallel!r}", param="parallel_tool_calls")
    if not tools:
        if choice not in (None, "none"):
            raise ApiError("tool_choice needs tools", param="tool_choice")
        return None, None
    if not isinstance(tools, list):
        raise ApiError("tools must be a list of function tools", param="tools")
    for k, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or set(tool) - {"type", "function"} \
                or set(fn) - {"name", "description", "parameters", "strict"}:
            raise ApiError(f"tools[{k}] must be {{\"type\": \"function\", \"function\": {{\"name\", "
                           "\"description\"?, \"parameters\"?, \"strict\"?}}}}", param="tools")
    spec = {"tools": {"tools": tools, "tool_choice": "auto" if choice is None else choice,
                      "parallel_tool_calls": True if parallel is None else parallel}}
    safe_constraint("tools", spec, limits)
    try:
        tool_functions(tools)
    except (SmcSteerError, ValueError, TypeError) as e:
        raise ApiError(f"invalid tools: {_one_line(e)}", param="tools") from None
    try:
        constraint = tools_from_json(spec["tools"])
    except (SmcSteerError, ValueError, TypeError) as e:
        param = "tools" if str(e).startswith("tools") else "tool_choice"
        raise ApiError(f"invalid {param}: {_one_line(e)}", param=param, code="invalid_constraint") from None
    return tools, (None if constraint is None else spec)


def _reasoning(body: Mapping[str, Any], default: Reasoning) -> tuple[bool, int | None]:
    """(think first, the bound on the reasoning's bytes) of a chat body, ``default`` where it
    does not say. Two spellings of the switch: ``reasoning: {"enabled", "max_bytes"}`` (true
    or false stand for {"enabled": ...}) and vLLM's ``chat_template_kwargs: {"enable_thinking"}``
    (or ``"thinking"``); given both, they must agree."""
    enabled, max_bytes = None, default.max_bytes
    given = body.get("reasoning")
    if isinstance(given, bool):
        given = {"enabled": given}
    if given is not None:
        if not isinstance(given, dict) or set(given) - {"enabled", "max_bytes"}:
            raise ApiError("reasoning must be true, false or {\"enabled\": bool, \"max_bytes\": int}",
                           param="reasoning")
        enabled = given.get("enabled", True)
        if not isinstance(enabled, bool):
            raise ApiError(f"reasoning.enabled must be true or false, got {enabled!r}", param="reasoning")
        if given.get("max_bytes") is not None:
            max_bytes = given["max_bytes"]
            if not _is_int(max_bytes) or max_bytes < 1:
                raise ApiError(f"reasoning.max_bytes must be an integer >= 1, got {max_bytes!r}",
                               param="reasoning")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict) or set(kwargs) - {"enable_thinking", "thinking"}:
            raise ApiError("chat_template_kwargs may hold enable_thinking (or thinking) only: the "
                           "template takes no other arguments here", param="chat_template_kwargs")
        for key, value in kwargs.items():
            if not isinstance(value, bool):
                raise ApiError(f"chat_template_kwargs.{key} must be true or false", param="chat_template_kwargs")
            if enabled is not None and value != enabled:
                raise ApiError(f"chat_template_kwargs.{key}={value} contradicts reasoning "
                               f"(enabled={enabled})", param="chat_template_kwargs")
            enabled = value
    return (default.enabled if enabled is None else enabled), max_bytes


def _response_format(fmt: Any) -> dict[str, Any] | None:
    if not isinstance(fmt, dict) or "type" not in fmt:
        raise ApiError("response_format must be an object with a type", param="response_format")
    kind = fmt["type"]
    if kind == "structural_tag":  # both of vLLM's forms; potentials.segments.forms checks the keys
        return {"structural_tag": fmt}
    keys = {"text": {"type"}, "json_object": {"type"}, "json_schema": {"type", "json_schema"}}
    if kind not in keys:
        raise ApiError(f"response_format type {kind!r} is not supported; use json_schema, "
                       "json_object, structural_tag or text (or structured_outputs: json, regex, "
                       "choice, grammar)", param="response_format", code="unsupported_response_format")
    extra = sorted(set(fmt) - keys[kind])
    if extra:
        raise ApiError(f"response_format has unknown key {extra[0]!r}", param="response_format")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json_object": True}
    js = fmt.get("json_schema")
    if not isinstance(js, dict):
        raise ApiError("response_format.json_schema must be an object with name and schema",
                       param="response_format")
    extra = sorted(set(js) - {"name", "schema", "strict", "description"})
    if extra:
        raise ApiError(f"response_format.json_schema has unknown key {extra[0]!r}", param="response_format")
    if not isinstance(js.get("name"), str):
        raise ApiError("response_format.json_schema.name must be a string", param="response_format")
    if js.get("strict") not in (None, True, False):
        raise ApiError("response_format.json_schema.strict must be true or false", param="response_format")
    if "schema" not in js:
        raise ApiError("response_format.json_schema.schema is required", param="response_format")
    # OpenAI's strict: every object closed; here the schema's open objects are closed where that
    # only narrows it (potentials.json.strict), and every answer is valid under the schema as sent
    return {"json_schema": js["schema"], "strict": True} if js.get("strict") else {"json_schema": js["schema"]}


def _structured(so: Any, field: str) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(so, dict):
        raise ApiError(f"{field} must be an object", param=field)
    out = []
    for key, value in so.items():
        if key not in STRUCTURED:
            raise ApiError(f"{field} has unsupported key {key!r}; the constraints are "
                           f"{', '.join(STRUCTURED)}", param=field, code="unsupported_constraint")
        if key == "json_object":
            if value is None or value is False:
                continue
            value = True
        if value is None:
            continue
        out.append((f"{field}.{key}" if field == "structured_outputs" else field, {STRUCTURED[key]: value}))
    return out


_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")


def external_refs(schema: Any) -> Iterator[str]:
    """Every reference of ``schema`` that is not local to it (does not start with '#'): a URL
    or a file name, which a client may not make the server read."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in _REF_KEYS and (not isinstance(value, str) or not value.startswith("#")):
                    yield str(value)
                elif isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)


def grammars_in(spec: Any) -> Iterator[str]:
    """Every Lark grammar text of a constraint's JSON form: the string value of any "grammar"
    key, at any depth (a grammar constraint, or one inside a structural tag or segments)."""
    stack = [spec]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "grammar" and isinstance(value, str):
                    yield value
                elif isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)


_IMPORT = re.compile(r"%import\s+([^\s(]*)")


def grammar_imports(grammar: str) -> list[str]:
    """The ``%import`` targets of a Lark grammar other than Lark's own ``common`` grammar
    (any other one names a grammar file to read)."""
    return [t for t in _IMPORT.findall(grammar) if t.split(".")[0] != "common" or t.startswith(".")]


# ---------------------------------------------------------------------------- runs
def preflight(call: Call, lm: LMBackend) -> None:
    """The checks a run makes before any work (memory for one step, prompt plus max_tokens
    within the context), made early, so a streamed answer can still fail with a 4xx."""
    check_memory(call.request.particles, len(lm.vocab))
    prompt_ids_for(lm, call.request)


@dataclass(frozen=True)
class Outcome:
    """A finished run and the answer drawn from it.

    Attributes:
        result: the run's Result.
        method: "smc", or for temperature 0 "top_k" (exact) or "beam" (past the budget).
        texts: the n chosen texts.
        probabilities: π̂ of each chosen text.
        finish_reasons: "stop" (EOS) or "length" (EOS forced at max_tokens), per choice.
        completion_tokens: generated tokens of each choice.
    """

    result: Result
    method: str
    texts: list[str]
    probabilities: list[float]
    finish_reasons: list[str]
    completion_tokens: list[int]


async def run_call(call: Call, lm: LMBackend, on_step: Any = None) -> Outcome:
    """Run ``call`` on ``lm`` and draw its answer; NoFinishedSample when no sample finished."""
    if call.most_probable:
        result, method = await arun_most_probable(call.request, lm)
    else:
        result, method = await arun(call.request, lm, False, on_step=on_step), call.request.method
    return choose(call, result, method)


def choose(call: Call, result: Result, method: str) -> Outcome:
    """The n choices: draws from the posterior with replacement (the request's seed), or the
    best text n times for temperature 0; NoFinishedSample when there is none."""
    posterior = result.posterior
    if not posterior:
        raise NoFinishedSample(
            f"no sample finished within max_tokens={call.request.max_tokens} (log Ẑ = -inf: every "
            "particle was cut off or ruled out by the constraint); raise max_tokens or particles, "
            "or loosen the constraint", 422, code="no_finished_sample")
    texts = list(posterior)
    if call.most_probable:
        picks = [0] * call.n
    else:
        rng = np.random.default_rng(call.request.seed)
        probs = np.array([posterior[t] for t in texts])
        picks = rng.choice(len(texts), size=call.n, p=probs / probs.sum()).tolist()
    chosen = [texts[i] for i in picks]
    lengths = {}
    for s in result.samples:
        if s.finished and s.log_weight > NEG_INF:
            lengths.setdefault(s.text, len(s.token_ids))
    tokens = [lengths[t] for t in chosen]
    reasons = ["length" if k >= call.request.max_tokens else "stop" for k in tokens]
    return Outcome(result, method, chosen, [posterior[t] for t in chosen], reasons, tokens)


# ---------------------------------------------------------------------------- response bodies
def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex


def smc_field(call: Call, outcome: Outcome, limit: int = 64) -> dict[str, Any]:
    """The response's extra field: log Ẑ, ESS, the posterior over distinct texts (the ``limit``
    most probable) and how the run went."""
    r = outcome.result
    posterior = r.posterior
    return {
        "method": outcome.method,
        "log_ml": json_number(r.log_ml),
        "ess": float(r.ess),
        "particles": call.request.particles if outcome.method == "smc" else len(r.samples),
        "seed": call.request.seed,
        "temperature": 0.0 if call.most_probable else call.request.temperature,
        "top_p": call.request.top_p,
        "finished_samples": len(r.finished),
        "distinct_texts": len(posterior),
        "posterior": [{"text": t, "probability": p} for t, p in list(posterior.items())[:limit]],
        "steps": int(r.stats.get("steps", 0)),
        "wall_time_s": float(r.stats.get("wall_time_s", 0.0)),
    }


def usage(outcome: Outcome) -> dict[str, int]:
    prompt = int(outcome.result.stats.get("prompt_tokens", 0))
    completion = sum(outcome.completion_tokens)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def response_body(call: Call, outcome: Outcome, model: str, id_: str | None = None,
                  created: int | None = None) -> dict[str, Any]:
    """The chat.completion or text_completion object of a finished call."""
    choices = []
    for i, (text, prob, reason) in enumerate(zip(outcome.texts, outcome.probabilities, outcome.finish_reasons)):
        choice: dict[str, Any] = {"index": i}
        if call.kind == "chat":
            choice["message"] = assistant_message(text, tools=call.tools, reasoning=call.reasoning)
            if "tool_calls" in choice["message"]:
                reason = "tool_calls"
        else:
            choice["text"] = text
        choice.update(finish_reason=reason, logprobs=None, posterior_probability=prob)
        choices.append(choice)
    return {
        "id": id_ or new_id(call.kind),
        "object": "chat.completion" if call.kind == "chat" else "text_completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": choices,
        "usage": usage(outcome),
        "smc": smc_field(call, outcome),
    }


def chunk(call: Call, id_: str, created: int, model: str, choices: list[dict[str, Any]],
          **extra: Any) -> dict[str, Any]:
    """One streamed chunk (chat.completion.chunk or text_completion)."""
    return {"id": id_, "object": "chat.completion.chunk" if call.kind == "chat" else "text_completion",
            "created": created, "model": model, "choices": choices, **extra}


def delta_choice(call: Call, index: int, sent: str, text: str, finish_reason: str | None = None,
                 first: bool = False, final: bool = False, **extra: Any) -> dict[str, Any]:
    """One streamed choice: what the output ``text`` (a settled prefix, or with ``final`` the
    whole output) adds to the ``sent`` prefix, as a chat delta of message fields (reasoning
    and content: ``smc.api.assistant_message``) or a completion's text."""
    if call.kind != "chat":
        return {"index": index, "text": text[len(sent):], "logprobs": None, "finish_reason": finish_reason, **extra}
    before = stream_fields(sent, reasoning=call.reasoning)
    after = (final_fields if final else stream_fields)(text, reasoning=call.reasoning)
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
    for key, value in after.items():
        added = value[len(before[key]):]
        if added:
            names = REASONING_NAMES if key == "reasoning_content" else (key,)
            delta.update(dict.fromkeys(names, added))
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason, **extra}


def settled_text(run: Run) -> str:
    """The text every candidate answer of ``run`` starts with: the longest common prefix of the
    texts of its particles of positive weight (live or finished) and of its banked samples. A
    finished answer descends from one of them, and a text only grows, so this prefix is final;
    a trailing U+FFFD (a character whose bytes are still arriving) is left out."""
    texts = [p.text() for p in run.pop if p.weight > NEG_INF]
    texts += [s.text for s in run.banked if s.log_weight > NEG_INF]
    if not texts:
        return ""
    lo, hi = min(texts), max(texts)
    k = 0
    while k < len(lo) and lo[k] == hi[k]:
        k += 1
    return lo[:k].rstrip("\ufffd")


def dumps(obj: Any) -> str:
    """JSON text of a response (no NaN or infinities: those are nulls already)."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)

