"""The official ``openai`` client against the server on a toy LM (no model loaded, real HTTP):
tool calls come back as the SDK's tool_calls, an agent loop sends them back with the tool's
result, reasoning_content reads as the SDK's attribute; n draws; errors as SDK exceptions."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from typing import Iterator

import openai
import pytest
import uvicorn

from tests.smc.api.toy_server import MODEL, scripted_lm, toy_app


@contextlib.contextmanager
def serving(app) -> Iterator[openai.OpenAI]:
    """An SDK client of ``app`` served over real HTTP on a free port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        assert time.time() < deadline
        time.sleep(0.05)
    try:
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=60)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def client():
    with serving(toy_app()) as sdk:
        yield sdk


def test_required_tool_call_through_the_sdk(client):
    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}}}]
    with serving(toy_app(scripted_lm('<tool_call>{"name": "add", "arguments": {"a": 3}}</tool_call>'))) as sdk:
        r = sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "add"}], tools=tools,
                                        tool_choice="required", max_tokens=80, extra_body={"particles": 8})
    (call,) = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "add"
    assert json.loads(call.function.arguments) == {"a": 3}
    with pytest.raises(openai.BadRequestError, match="tool_choice needs tools"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "add"}],
                                       tool_choice="required")


def test_an_agent_loop_through_the_sdk():
    """Call, run the tool, send its result back, get the answer: as an agent framework does,
    with the SDK's own message objects in the history."""
    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}]
    script = '<think>use add</think><tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    with serving(toy_app(scripted_lm(script))) as sdk:
        messages = [{"role": "user", "content": "add one to 1"}]
        r = sdk.chat.completions.create(model=MODEL, messages=messages, tools=tools, max_tokens=120, seed=0,
                                        extra_body={"particles": 8, "reasoning": {"enabled": True}})
        message = r.choices[0].message
        assert message.reasoning_content == "use add" and message.content is None
        (call,) = message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls" and json.loads(call.function.arguments) == {"a": 1}
        messages += [message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "2"}]
        r = sdk.chat.completions.create(model=MODEL, messages=messages, tools=tools, max_tokens=120, seed=0,
                                        extra_body={"particles": 8})
        assert r.choices[0].finish_reason in ("stop", "tool_calls")


def test_n_draws_and_posterior(client):
    r = client.completions.create(model=MODEL, prompt="x", max_tokens=6, n=4,
                                  extra_body={"particles": 8, "structured_outputs": {"choice": ["yes", "no", "maybe"]}})
    assert len(r.choices) == 4 and all(c.text in ("yes", "no", "maybe") for c in r.choices)
    post = {p["text"]: p["probability"] for p in r.model_extra["smc"]["posterior"]}
    assert all(c.model_extra["posterior_probability"] == post[c.text] for c in r.choices)
