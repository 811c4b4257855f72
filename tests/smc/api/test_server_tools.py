"""Tool calls and reasoning through the server, on toy LMs (no model loaded): tool_choice auto
(with and without a call), required, a named function, none, parallel calls, arguments valid
under their schema, an agent loop's history, reasoning on and off (per request and by the
server's default), reasoning with a JSON schema and with tools, streaming, and the 400s."""

from __future__ import annotations

import json

import jsonschema
import pytest
from fastapi.testclient import TestClient

from smc.api.cli import build_parser, main
from smc.api.openai import Limits, Reasoning
from smc.backends.prompts import tools_prompt
from tests.smc.api.toy_server import MODEL, scripted_lm, toy_app

ADD = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "add", "description": "add one", "parameters": ADD}},
         {"type": "function", "function": {"name": "yes"}}]
MESSAGES = [{"role": "user", "content": "hi"}]


def call(name: str, arguments: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>'


ADD_1 = call("add", '{"a": 1}')


def app_for(script: str, rendered: list | None = None, **kwargs) -> TestClient:
    return TestClient(toy_app(scripted_lm(script, rendered), limits=Limits(max_particles=32), **kwargs))


def chat(client: TestClient, **body):
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 90, "particles": 8, "seed": 0, **body}
    return client.post("/v1/chat/completions", json=body)


def choices(r) -> list[dict]:
    assert r.status_code == 200, r.text
    return r.json()["choices"]


def error_param(r) -> str | None:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["message"] and "Traceback" not in err["message"]
    return err["param"]


# ---------------------------------------------------------------------------- tool_choice
def test_auto_is_the_default_and_answers_a_call():
    for c in choices(chat(app_for(ADD_1), tools=TOOLS, n=3)):
        assert c["finish_reason"] == "tool_calls"
        message = c["message"]
        assert message["content"] is None and "reasoning_content" not in message
        (tc,) = message["tool_calls"]
        assert tc["type"] == "function" and tc["id"].startswith("call_") and len(tc["id"]) > len("call_")
        assert tc["function"] == {"name": "add", "arguments": '{"a": 1}'}


def test_auto_answers_text_when_the_model_does_not_call():
    (c,) = choices(chat(app_for("Hello there"), tools=TOOLS, tool_choice="auto"))
    assert c["finish_reason"] == "stop" and c["message"]["content"] == "Hello there"
    assert "tool_calls" not in c["message"]


def test_text_around_a_call_is_the_content():
    (c,) = choices(chat(app_for("Sure. " + ADD_1), tools=TOOLS))
    assert c["message"]["content"] == "Sure." and len(c["message"]["tool_calls"]) == 1


def test_required_and_named_calls_have_arguments_valid_under_the_schema():
    # the model means {"a": "x"}, which the schema refuses: every answer still calls add
    # with an integer
    bad = call("add", '{"a": "x"}')
    for choice in ("required", {"type": "function", "function": {"name": "add"}}):
        for c in choices(chat(app_for(bad), tools=TOOLS, tool_choice=choice, n=4, particles=16)):
            assert c["finish_reason"] == "tool_calls"
            for tc in c["message"]["tool_calls"]:
                assert tc["function"]["name"] == "add"
                jsonschema.validate(json.loads(tc["function"]["arguments"]), ADD)


def test_none_answers_text_with_the_tools_still_in_the_prompt():
    rendered: list = []
    (c,) = choices(chat(app_for("7", rendered), tools=TOOLS, tool_choice="none",
                        structured_outputs={"regex": "[0-9]"}))
    assert c["finish_reason"] == "stop" and c["message"]["content"] == "7" and "tool_calls" not in c["message"]
    assert rendered[-1][0] == {"role": "system", "content": tools_prompt(TOOLS)}


def test_parallel_calls_and_parallel_tool_calls_false():
    two = ADD_1 + call("add", '{"a": 2}')
    (c,) = choices(chat(app_for(two), tools=TOOLS, max_tokens=150))
    assert [json.loads(tc["function"]["arguments"]) for tc in c["message"]["tool_calls"]] == [{"a": 1}, {"a": 2}]
    ids = [tc["id"] for tc in c["message"]["tool_calls"]]
    assert len(set(ids)) == 2
    for c in choices(chat(app_for(two), tools=TOOLS, max_tokens=150, parallel_tool_calls=False, n=3)):
        assert len(c["message"]["tool_calls"]) == 1  # the output ends with its first call


def test_tools_reach_the_prompt_in_the_system_message():
    rendered: list = []
    system = {"role": "system", "content": "Be brief."}
    choices(chat(app_for("ok", rendered), tools=TOOLS, messages=[system, *MESSAGES]))
    assert rendered[-1][0] == {"role": "system", "content": "Be brief.\n\n" + tools_prompt(TOOLS)}
    assert rendered[-1][1:] == MESSAGES


def test_an_agent_loop_history_is_accepted_and_rendered():
    rendered: list = []
    history = [*MESSAGES,
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
                   {"id": "call_2", "type": "function", "function": {"name": "yes", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "2"},
               {"role": "tool", "tool_call_id": "call_2", "name": "yes", "content": "yes"}]
    (c,) = choices(chat(app_for("It is 2.", rendered), tools=TOOLS, messages=history))
    assert c["message"]["content"] == "It is 2."
    assert rendered[-1][1:] == [
        MESSAGES[0],
        {"role": "assistant", "content": ADD_1 + "\n" + call("yes", "{}")},
        {"role": "user", "content": "<tool_response>\n2\n</tool_response>\n<tool_response>\nyes\n</tool_response>"}]


@pytest.mark.parametrize("body,param", [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"tools": [{"type": "retrieval"}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}]}, "tools"),
    ({"tools": [TOOLS[0], TOOLS[0]]}, "tools"),
    ({"tools": {"add": TOOLS[0]}}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"$ref": "http://x/y"}}}]}, "tools"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"tools": TOOLS, "stream": True}, "stream"),
    ({"tools": TOOLS, "tool_choice": "required", "stream": True}, "stream"),
    ({"tools": TOOLS, "structured_outputs": {"regex": "a"}}, "structured_outputs.regex"),
    ({"messages": [{"role": "assistant", "content": None}]}, "messages"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": "add", "arguments": "{not json"}}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": "hi", "tool_calls": []}]}, "messages"),
    ({"messages": [{"role": "tool", "content": "2", "tool_calls_id": "x"}]}, "messages"),
])
def test_bad_tool_requests_are_400s_naming_the_field(body, param):
    assert error_param(chat(app_for("ok"), **body)) == param


# ---------------------------------------------------------------------------- reasoning
THOUGHT = "<think>add one</think>"


@pytest.mark.parametrize("switch", [{"reasoning": True}, {"reasoning": {"enabled": True}},
                                    {"chat_template_kwargs": {"enable_thinking": True}},
                                    {"chat_template_kwargs": {"thinking": True}}])
def test_reasoning_on_separates_reasoning_content(switch):
    (c,) = choices(chat(app_for(THOUGHT + "42"), **switch))
    message = c["message"]
    assert message["reasoning_content"] == message["reasoning"] == "add one" and message["content"] == "42"


def test_reasoning_off_is_plain_content():
    for switch in ({}, {"reasoning": False}, {"chat_template_kwargs": {"enable_thinking": False}}):
        (c,) = choices(chat(app_for(THOUGHT + "42"), **switch))
        assert c["message"]["content"] == THOUGHT + "42" and "reasoning_content" not in c["message"]


def test_reasoning_default_is_the_servers():
    client = app_for(THOUGHT + "42", reasoning=Reasoning(enabled=True))
    (c,) = choices(chat(client))
    assert (c["message"]["reasoning_content"], c["message"]["content"]) == ("add one", "42")
    (c,) = choices(chat(client, chat_template_kwargs={"enable_thinking": False}))
    assert c["message"]["content"] == THOUGHT + "42"
    # completions never reason: the default is for chat
    r = client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 40, "particles": 4})
    assert r.status_code == 200 and "<think>" in r.json()["choices"][0]["text"]


def test_reasoning_bound_from_the_request_and_the_server():
    for client, body in ((app_for(THOUGHT + "42"), {"reasoning": {"max_bytes": 3}}),
                         (app_for(THOUGHT + "42", reasoning=Reasoning(True, 3)), {})):
        for c in choices(chat(client, n=3, **body)):
            assert len(c["message"]["reasoning_content"].encode()) <= 3 and c["message"]["content"] == "42"


def test_reasoning_then_a_json_schema_answer():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    for c in choices(chat(app_for(THOUGHT + '{"a": 5}'), reasoning=True, response_format=fmt, n=3)):
        assert c["message"]["reasoning_content"] == "add one"
        jsonschema.validate(json.loads(c["message"]["content"]), schema)


def test_reasoning_then_tool_calls():
    (c,) = choices(chat(app_for(THOUGHT + ADD_1), reasoning=True, tools=TOOLS, max_tokens=120))
    assert c["finish_reason"] == "tool_calls" and c["message"]["reasoning_content"] == "add one"
    assert c["message"]["content"] is None and c["message"]["tool_calls"][0]["function"]["name"] == "add"


def test_reasoning_streams_as_reasoning_then_content_deltas():
    r = chat(app_for(THOUGHT + "forty-two"), reasoning=True, stream=True)
    assert r.status_code == 200
    lines = [x[len("data: "):] for x in r.text.split("\n\n") if x.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    deltas = [json.loads(x)["choices"][0]["delta"] for x in lines[:-1] if json.loads(x)["choices"]]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    assert (reasoning, content) == ("add one", "forty-two")
    assert all("<" not in d.get("reasoning_content", "") for d in deltas)
    # no content before the reasoning is done
    first_content = next(k for k, d in enumerate(deltas) if d.get("content"))
    assert all(not d.get("reasoning_content") for d in deltas[first_content:])


@pytest.mark.parametrize("body,param", [
    ({"reasoning": "yes"}, "reasoning"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
    ({"reasoning": {"enabled": 1}}, "reasoning"),
    ({"reasoning": {"max_bytes": 0}}, "reasoning"),
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs"),
    ({"chat_template_kwargs": {"enable_thinking": "on"}}, "chat_template_kwargs"),
    ({"reasoning": False, "chat_template_kwargs": {"enable_thinking": True}}, "chat_template_kwargs"),
])
def test_bad_reasoning_requests_are_400s(body, param):
    assert error_param(chat(app_for("ok"), **body)) == param


def test_completions_take_no_reasoning_or_tools():
    client = app_for("ok")
    for key, value in (("reasoning", True), ("tools", TOOLS)):
        r = client.post("/v1/completions", json={"model": MODEL, "prompt": "x", key: value})
        assert error_param(r) == key



def test_cli_reasoning_flags(capsys):
    args = build_parser().parse_args(["serve", "--reasoning", "--reasoning-max-bytes", "200"])
    assert (args.reasoning, args.reasoning_max_bytes) == (True, 200)
    assert build_parser().parse_args(["serve"]).reasoning is False
    assert main(["serve", "--reasoning-max-bytes", "0"]) == 2
    assert "--reasoning-max-bytes" in capsys.readouterr().err
