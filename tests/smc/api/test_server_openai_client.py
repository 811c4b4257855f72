"""The server on the embedded model, through the official ``openai`` client: each structured-output
form, ``chat.completions.parse`` with a pydantic model, streaming, and errors as the SDK's
exceptions. Few and small (particles <= 4, max_tokens <= 24): the logic is tested on a toy LM in
test_server.py."""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import httpx
import openai
import pytest
import uvicorn
from pydantic import BaseModel

from smc.api.server import EMBEDDED_NAME, create_app

pytestmark = pytest.mark.slow
KEY = "test-key"


class Point(BaseModel):
    x: int


#: a prompt the small model answers within the budget
ASK = [{"role": "user", "content": 'Reply with a JSON object like {"x": 1}.'}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server_url(embedded_lm):
    port = free_port()
    config = uvicorn.Config(create_app(embedded_lm, EMBEDDED_NAME, api_key=KEY), host="127.0.0.1",
                            port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        assert time.time() < deadline, "the server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="session")
def client(server_url):
    return openai.OpenAI(base_url=server_url, api_key=KEY, max_retries=0, timeout=120)


SMALL = {"particles": 4}


def test_json_schema_and_parse(client):
    r = client.chat.completions.create(
        model=EMBEDDED_NAME, max_tokens=24, seed=0, extra_body=SMALL,
        messages=ASK,
        response_format={"type": "json_schema", "json_schema": {"name": "point", "schema": Point.model_json_schema(), "strict": True}},
    )
    Point.model_validate_json(r.choices[0].message.content)
    assert r.usage.prompt_tokens > 0 and r.model_extra["smc"]["method"] == "smc"
    parsed = client.chat.completions.parse(
        model=EMBEDDED_NAME, max_tokens=24, seed=0, extra_body=SMALL, response_format=Point, messages=ASK,
    )
    assert isinstance(parsed.choices[0].message.parsed, Point)
    r = client.chat.completions.create(model=EMBEDDED_NAME, max_tokens=24, seed=0, extra_body=SMALL,
                                       messages=ASK, response_format={"type": "json_object"})
    assert isinstance(json.loads(r.choices[0].message.content), dict)


@pytest.mark.parametrize("extra,check", [
    ({"structured_outputs": {"regex": "[0-9]{3}-[0-9]{4}"}}, lambda t: re.fullmatch("[0-9]{3}-[0-9]{4}", t)),
    ({"structured_outputs": {"choice": ["red", "green", "blue"]}}, lambda t: t in ("red", "green", "blue")),
])
def test_structured_outputs(client, extra, check):
    fmt = extra.pop("response_format", None)
    kwargs = {"response_format": fmt} if fmt else {}
    r = client.chat.completions.create(
        model=EMBEDDED_NAME, max_tokens=16, seed=1, extra_body={**SMALL, **extra},
        messages=[{"role": "user", "content": "Pick a color, or give a phone number."}], **kwargs)
    assert check(r.choices[0].message.content), r.choices[0].message.content


def test_streaming_equals_the_answer(client):
    kwargs = dict(model=EMBEDDED_NAME, max_tokens=16, seed=2, extra_body={**SMALL, "structured_outputs": {"regex": "The answer is [0-9]+"}},
                  messages=[{"role": "user", "content": "What is 2+2?"}])
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kwargs) if c.choices)
    assert streamed == whole and whole.startswith("The answer is ")


def test_completions_and_temperature_zero(client):
    r = client.completions.create(model=EMBEDDED_NAME, prompt="The capital of France is", max_tokens=8,
                                  temperature=0, extra_body={"structured_outputs": {"choice": [" Paris", " Rome"]}})
    assert r.choices[0].text in (" Paris", " Rome") and r.model_extra["smc"]["method"] in ("top_k", "beam")


def test_errors_are_sdk_exceptions(client, server_url):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=EMBEDDED_NAME, messages=[{"role": "user", "content": "x"}],
                                       presence_penalty=1.0)
    assert "presence_penalty" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=EMBEDDED_NAME, messages=[{"role": "user", "content": "x"}],
                                       extra_body={"structured_outputs": {"regex": "("}})
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server_url, api_key="wrong", max_retries=0).models.list()
    assert [m.id for m in client.models.list()] == [EMBEDDED_NAME]


def test_a_client_that_leaves_mid_stream_does_not_break_the_server(client, server_url):
    body = {"model": EMBEDDED_NAME, "max_tokens": 24, "particles": 4, "stream": True,
            "messages": [{"role": "user", "content": "Count to ten."}],
            "structured_outputs": {"regex": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10"}}
    with httpx.stream("POST", f"{server_url}/chat/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {KEY}"}) as r:
        first = next(r.iter_lines())
        assert first.startswith("data: ")
    r = client.completions.create(model=EMBEDDED_NAME, prompt="Yes or no:", max_tokens=4,
                                  extra_body={"particles": 2, "structured_outputs": {"choice": [" yes", " no"]}})
    assert r.choices[0].text in (" yes", " no")


WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                           "required": ["city"], "additionalProperties": False}}}]


def test_tools_auto_on_real_tokens(client):
    """The tools go into SmolLM2's system message (its template has no tool section) and the
    answer under tool_choice auto is text or well-formed calls."""
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    plain = client.chat.completions.create(model=EMBEDDED_NAME, messages=ask, max_tokens=8, seed=0, extra_body=SMALL)
    r = client.chat.completions.create(model=EMBEDDED_NAME, messages=ask, tools=WEATHER, max_tokens=40, seed=0,
                                       extra_body=SMALL)
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens + 50  # the tools and the call format
    choice = r.choices[0]
    if choice.message.tool_calls:
        assert choice.finish_reason == "tool_calls"
        for call in choice.message.tool_calls:
            assert call.function.name == "get_weather" and isinstance(json.loads(call.function.arguments)["city"], str)
    else:
        assert choice.finish_reason in ("stop", "length") and "<tool_call>" not in (choice.message.content or "")


def test_tools_required_on_real_tokens(client):
    """SmolLM2 never writes the call tag by itself; under tool_choice required the answer opens
    with the call, so it is a call with the city from the question (free text may follow it:
    parallel_tool_calls is true by default, and the text is the content, without the tag)."""
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=EMBEDDED_NAME, messages=ask, tools=WEATHER, tool_choice="required",
                                       max_tokens=40, seed=0, extra_body=SMALL)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and "<tool_call>" not in (choice.message.content or "")
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
