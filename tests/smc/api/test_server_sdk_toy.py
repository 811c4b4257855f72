"""The official ``openai`` client against the server on a toy LM (no model loaded, real HTTP):
forced tool calls come back as the SDK's tool_calls; n draws; errors as SDK exceptions."""

from __future__ import annotations

import json
import socket
import threading
import time

import openai
import pytest
import uvicorn

from tests.smc.api.toy_server import MODEL, toy_app


@pytest.fixture(scope="module")
def client():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(toy_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        assert time.time() < deadline
        time.sleep(0.05)
    yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=60)
    server.should_exit = True
    thread.join(timeout=10)


def test_tool_call_through_the_sdk(client):
    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}}}]
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "add"}], tools=tools,
                                       tool_choice="required", max_tokens=48, extra_body={"particles": 8})
    (call,) = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "add"
    assert isinstance(json.loads(call.function.arguments)["a"], int)
    with pytest.raises(openai.BadRequestError, match="auto"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "add"}], tools=tools)


def test_n_draws_and_posterior(client):
    r = client.completions.create(model=MODEL, prompt="x", max_tokens=6, n=4,
                                  extra_body={"particles": 8, "structured_outputs": {"choice": ["yes", "no", "maybe"]}})
    assert len(r.choices) == 4 and all(c.text in ("yes", "no", "maybe") for c in r.choices)
    post = {p["text"]: p["probability"] for p in r.model_extra["smc"]["posterior"]}
    assert all(c.model_extra["posterior_probability"] == post[c.text] for c in r.choices)
