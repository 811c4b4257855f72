"""The OpenAI-compatible server on a toy LM (no model loaded): routes, every structured-output
form, SMC settings, temperature 0, streaming, and every class of bad request answered with
OpenAI's error object and a 4xx status."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import jsonschema
import pytest
from fastapi.testclient import TestClient

import smc.api.generation
from smc.api.cli import build_parser, main
from smc.api.openai import Limits, grammar_imports, parse_call
from smc.api.server import ClientGone, until_disconnect
from smc.core import defaults
from tests.smc.api.toy_server import MODEL, toy_app, toy_lm

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def client():
    return TestClient(toy_app())


def chat(client, **body):
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 10, "particles": 4, **body}
    return client.post("/v1/chat/completions", json=body)


def completion(client, **body):
    body = {"model": MODEL, "prompt": "x", "max_tokens": 8, "particles": 4, **body}
    return client.post("/v1/completions", json=body)


def error_of(r, status):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


# ---------------------------------------------------------------------------- routes
def test_health_and_models(client):
    assert client.get("/health").json() == {"status": "ok"}
    data = client.get("/v1/models").json()
    assert data["object"] == "list" and [m["id"] for m in data["data"]] == [MODEL]
    assert client.get(f"/v1/models/{MODEL}").json()["id"] == MODEL
    error_of(client.get("/v1/models/other"), 404)
    error_of(client.get("/v1/nothing"), 404)


def test_api_key():
    c = TestClient(toy_app(api_key="sekrit"))
    assert c.get("/health").status_code == 200
    assert error_of(c.get("/v1/models"), 401)["code"] == "invalid_api_key"
    assert error_of(chat(c), 401)["type"] == "authentication_error"
    assert error_of(c.get("/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
    assert c.get("/v1/models", headers={"Authorization": "Bearer sekrit"}).status_code == 200


def test_chat_response_shape(client):
    r = chat(client, response_format={"type": "json_schema", "json_schema": {"name": "b", "schema": {"type": "boolean"}}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion" and body["model"] == MODEL
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant" and json.loads(choice["message"]["content"]) in (True, False)
    assert choice["finish_reason"] in ("stop", "length") and 0 < choice["posterior_probability"] <= 1
    u = body["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and u["prompt_tokens"] > 0
    s = body["smc"]
    assert s["method"] == "smc" and s["particles"] == 4 and s["log_ml"] < 0 and 0 < s["ess"] <= 4
    assert abs(sum(p["probability"] for p in s["posterior"]) - 1) < 1e-9
    assert choice["message"]["content"] in {p["text"] for p in s["posterior"]}


def test_completion_response_shape(client):
    r = completion(client, structured_outputs={"regex": "[0-9]{3}"})
    body = r.json()
    assert r.status_code == 200 and body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert re.fullmatch("[0-9]{3}", body["choices"][0]["text"])


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}


@pytest.mark.parametrize("body,check", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": SCHEMA, "strict": True}}},
     lambda t: jsonschema.validate(json.loads(t), SCHEMA)),
    ({"response_format": {"type": "json_object"}}, lambda t: isinstance(json.loads(t), dict) or 1 / 0),
    ({"structured_outputs": {"json": SCHEMA}}, lambda t: jsonschema.validate(json.loads(t), SCHEMA)),
    ({"structured_outputs": {"json": json.dumps(SCHEMA)}}, lambda t: jsonschema.validate(json.loads(t), SCHEMA)),
    ({"structured_outputs": {"regex": "a[12]+"}}, lambda t: re.fullmatch("a[12]+", t) or 1 / 0),
    ({"structured_outputs": {"choice": ["yes", "no"]}}, lambda t: t in ("yes", "no") or 1 / 0),
    ({"structured_outputs": {"grammar": 'start: "a" NUM\n%import common.DIGIT\nNUM: DIGIT+'}},
     lambda t: re.fullmatch("a[0-9]+", t) or 1 / 0),
    ({"guided_regex": "[12]{2}"}, lambda t: re.fullmatch("[12]{2}", t) or 1 / 0),
    ({"response_format": {"type": "text"}, "structured_outputs": {"choice": ["ab", "ba"]}}, lambda t: t in ("ab", "ba") or 1 / 0),
])
def test_every_structured_output_form(client, body, check):
    r = chat(client, particles=8, max_tokens=16, **body)
    assert r.status_code == 200, r.text
    check(r.json()["choices"][0]["message"]["content"])


def test_structural_tag_in_both_of_vllms_forms(client):
    """response_format structural_tag: the older structures + triggers form and the current
    format form constrain the whole output the same way."""
    older = {"type": "structural_tag", "structures": [{"begin": "a", "schema": {"type": "boolean"}, "end": "1"}],
             "triggers": ["a"]}
    current = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "const_string", "value": "a"}, {"type": "regex", "pattern": "[12]{2}"}]}}
    r = chat(client, particles=8, max_tokens=16, response_format=current)
    assert r.status_code == 200, r.text
    assert re.fullmatch("a[12]{2}", r.json()["choices"][0]["message"]["content"])
    r = chat(client, particles=8, max_tokens=16, response_format=older)
    assert r.status_code in (200, 422), r.text  # 422: no finished sample within the budget
    if r.status_code == 200:
        assert re.fullmatch(r"(.*a(true|false)1)*.*", r.json()["choices"][0]["message"]["content"], re.S)


def test_a_structural_tag_reads_no_file(client):
    """The grammar and schema checks apply inside a structural tag too."""
    imports = {"type": "structural_tag", "format": {"type": "grammar", "grammar": 'start: X\n%import mylib.X'}}
    assert "%import mylib.X" in error_of(chat(client, response_format=imports), 400)["message"]
    ref = {"type": "structural_tag", "format": {"type": "json_schema",
                                                "json_schema": {"$ref": "https://example.com/s.json"}}}
    assert "points outside the schema" in error_of(chat(client, response_format=ref), 400)["message"]


def test_text_response_format_is_unconstrained(client):
    r = chat(client, response_format={"type": "text"})
    assert r.status_code == 200 and isinstance(r.json()["choices"][0]["message"]["content"], str)


def test_smc_settings_seed_and_n(client):
    body = dict(structured_outputs={"regex": "[0-9]{2}"}, particles=8, sampler="direct", ess_threshold=0.9,
                resampling="systematic", resampling_power=0.5, seed=3, n=5)
    a, b = chat(client, **body).json(), chat(client, **body).json()
    assert a["choices"] == b["choices"] and a["smc"]["log_ml"] == b["smc"]["log_ml"]
    assert len(a["choices"]) == 5 and [c["index"] for c in a["choices"]] == list(range(5))
    post = {p["text"]: p["probability"] for p in a["smc"]["posterior"]}
    for c in a["choices"]:
        assert c["posterior_probability"] == post[c["message"]["content"]]
    other = chat(client, **dict(body, seed=4)).json()
    assert other["smc"]["seed"] == 4 and a["smc"]["particles"] == 8


def test_temperature_and_top_p_reach_the_request(client):
    r = chat(client, structured_outputs={"regex": "[0-9]{2}"}, temperature=0.7, top_p=0.9).json()
    assert r["smc"]["temperature"] == 0.7 and r["smc"]["top_p"] == 0.9


def test_temperature_zero_is_the_exact_top1(client, monkeypatch):
    r = completion(client, temperature=0, particles=None, structured_outputs={"choice": ["yes", "no", "maybe"]})
    body = {k: v for k, v in r.json().items()}
    assert r.status_code == 200, r.text
    assert body["smc"]["method"] == "top_k" and body["choices"][0]["text"] == "no"  # the toy LM's best
    monkeypatch.setattr(defaults, "TOP1_MAX_EXPANSIONS", 1)
    r = completion(client, temperature=0, particles=None, structured_outputs={"choice": ["yes", "no", "maybe"]})
    assert r.json()["smc"]["method"] == "beam" and r.json()["choices"][0]["text"] in ("yes", "no", "maybe")
    err = error_of(completion(client, temperature=0, particles=4), 400)
    assert err["param"] == "particles"
    assert error_of(completion(client, temperature=0, particles=None, top_p=0.5), 400)["param"] == "top_p"


def test_no_finished_sample_is_a_422(client):
    err = error_of(completion(client, max_tokens=2, structured_outputs={"regex": "[0-9]{5}"}), 422)
    assert err["code"] == "no_finished_sample" and "max_tokens=2" in err["message"]


# ---------------------------------------------------------------------------- streaming
def events(r) -> list:
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    lines = [line[len("data: "):] for line in r.text.split("\n\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_stream_equals_the_answer(client, kind):
    body = dict(structured_outputs={"regex": "abc[0-9]{2}"}, particles=4, seed=5, max_tokens=10, n=2)
    call = chat if kind == "chat" else completion
    whole = call(client, **body).json()
    chunks = events(call(client, stream=True, stream_options={"include_usage": True}, **body))
    texts = ["", ""]
    for c in chunks:
        for ch in c["choices"]:
            texts[ch["index"]] += ch["delta"].get("content", "") if kind == "chat" else ch["text"]
    answers = [c["message"]["content"] if kind == "chat" else c["text"] for c in whole["choices"]]
    assert texts == answers
    settled = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is None]
    assert len(settled) >= 3, "the shared prefix 'abc' streams before the run ends"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    final = [c for c in chunks if c.get("smc")]
    assert final[0]["smc"]["posterior"] == whole["smc"]["posterior"]


def test_stream_error_before_and_after_the_start(client):
    error_of(completion(client, stream=True, particles=0), 400)
    chunks = events(completion(client, stream=True, max_tokens=2, structured_outputs={"regex": "[0-9]{5}"}))
    assert chunks[-1]["error"]["code"] == "no_finished_sample"


# ---------------------------------------------------------------------------- bad requests
@pytest.mark.parametrize("body,param", [
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"frequency_penalty": 1}, "frequency_penalty"),
    ({"logit_bias": {"1": 5}}, "logit_bias"),
    ({"logprobs": True}, "logprobs"),
    ({"stop": ["\n"]}, "stop"),
    ({"checkpoint": "/tmp/x"}, "checkpoint"),
    ({"critic": "x"}, "critic"),
    ({"chat": True}, "chat"),
    ({"bogus": 1}, "bogus"),
    ({"adapter": "other-lora"}, "adapter"),
    ({"tokenizer": "gpt2"}, "tokenizer"),
    ({"lora_request": {"lora_name": "x", "lora_path": "/tmp/x"}}, "lora_request"),
    ({"particles": 33}, "particles"),
    ({"particles": 0}, "particles"),
    ({"resampling_power": 0}, "resampling_power"),
    ({"resampling_power": 1.5}, "resampling_power"),
    ({"n": 0}, "n"),
    ({"n": 17}, "n"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 2}, "top_p"),
    ({"sampler": "nope"}, None),
    ({"response_format": {"type": "structural_tag"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "extra": 1}}}, "response_format"),
    ({"structured_outputs": {"whitespace_pattern": " "}}, "structured_outputs"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs.choice"),
    ({"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}}, "structured_outputs.regex"),
    ({"structured_outputs": {"json": {"type": "nonsense"}}}, "structured_outputs.json"),
    ({"structured_outputs": {"regex": "(unclosed"}}, "structured_outputs.regex"),
    ({"structured_outputs": {"grammar": "start: undefined_rule"}}, "structured_outputs.grammar"),
    ({"structured_outputs": {"json": {"$ref": "https://example.com/s.json"}}}, "structured_outputs.json"),
    ({"structured_outputs": {"json": {"properties": {"a": {"$ref": "file:///etc/passwd"}}}}}, "structured_outputs.json"),
    ({"structured_outputs": {"json": {"$ref": "other.json#/a"}}}, "structured_outputs.json"),
    ({"structured_outputs": {"grammar": "%import mygrammar.rule\nstart: rule"}}, "structured_outputs.grammar"),
    ({"structured_outputs": {"grammar": "%import .local (a)\nstart: a"}}, "structured_outputs.grammar"),
    ({"structured_outputs": {"regex": "a" * 70_000}}, "structured_outputs"),
    ({"messages": [{"role": "user", "content": "hi", "name": "x"}]}, "messages"),
    ({"messages": [{"role": "usr", "content": "hi"}]}, None),
    ({"messages": []}, "messages"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
])
def test_bad_requests_get_a_400_naming_the_problem(client, body, param):
    err = error_of(chat(client, **body), 400)
    if param is not None:
        assert err["param"] == param or param.split(".")[0] in (err["param"] or ""), err
    assert "Traceback" not in err["message"]


def test_unknown_model_is_404(client):
    err = error_of(chat(client, model="gpt-4o"), 404)
    assert err["code"] == "model_not_found" and "gpt-4o" in err["message"]


def test_body_problems(client):
    err = error_of(client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}), 400)
    assert err["code"] == "invalid_json"
    error_of(client.post("/v1/chat/completions", json=[1, 2]), 400)
    error_of(client.post("/v1/completions", json={"model": MODEL}), 400)
    big = {"model": MODEL, "prompt": "x" * (Limits().max_body_bytes + 10)}
    assert error_of(client.post("/v1/completions", json=big), 413)["code"] == "body_too_large"


def test_prompt_longer_than_the_context():
    c = TestClient(toy_app(toy_lm(max_context=32)))
    err = error_of(completion(c, prompt="x" * 30, max_tokens=8), 400)
    assert "context" in err["message"]
    err = error_of(completion(c, prompt="x" * 40), 400)
    assert "context" in err["message"]


def test_first_step_too_big_for_memory(client, monkeypatch):
    monkeypatch.setattr(smc.api.generation, "available_memory_bytes", lambda: 1000)
    assert "memory" in error_of(chat(client), 400)["message"]


def test_grammar_imports():
    assert grammar_imports('%import common.NUMBER\n%import common (WS, LETTER)\nstart: NUMBER') == []
    assert grammar_imports("%import foo.bar\n%import .x\n%import common_x.y") == ["foo.bar", ".x", "common_x.y"]


# ---------------------------------------------------------------------------- concurrency
def test_a_disconnected_client_cancels_its_run():
    class Gone:
        async def receive(self):
            return {"type": "http.disconnect"}

    cancelled = []

    async def forever():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main():
        with pytest.raises(ClientGone):
            await until_disconnect(Gone(), forever())
        await asyncio.sleep(0)

    asyncio.run(main())
    assert cancelled == [True]


def test_runs_wait_for_a_slot():
    """With one slot, concurrent requests run one at a time and all are answered."""
    app = toy_app(limits=Limits(max_particles=32, max_running=1))
    body = {"model": MODEL, "prompt": "x", "max_tokens": 6, "particles": 4, "structured_outputs": {"regex": "[0-9]{2}"}}

    async def main():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            return await asyncio.gather(*(c.post("/v1/completions", json=dict(body, seed=i)) for i in range(4)))

    assert [r.status_code for r in asyncio.run(main())] == [200] * 4


def test_small_load_every_request_answered():
    """Three dozen mixed requests, good and bad, at once: each gets an answer; the good ones
    are valid."""
    app = toy_app()
    good = [{"model": MODEL, "prompt": "x", "max_tokens": 6, "particles": 4, "seed": i,
             "structured_outputs": {"regex": "[0-9]{2}"}} for i in range(18)]
    bad = [{"model": MODEL, "prompt": "x", "particles": 4, "structured_outputs": {"regex": "("}},
           {"model": "other", "prompt": "x"}, {"model": MODEL, "prompt": "x", "logprobs": True}] * 6

    async def main():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            return await asyncio.gather(*(c.post("/v1/completions", json=b) for b in good + bad))

    rs = asyncio.run(main())
    assert len(rs) == 36
    for r in rs[:18]:
        assert r.status_code == 200 and re.fullmatch("[0-9]{2}", r.json()["choices"][0]["text"])
    assert sorted({r.status_code for r in rs[18:]}) == [400, 404]


def test_deep_nesting_is_a_400(client):
    deep = "[" * 100_000 + "]" * 100_000
    error_of(client.post("/v1/completions", content=deep.encode(), headers={"content-type": "application/json"}), 400)
    schema: dict = {"type": "object"}
    for _ in range(300):
        schema = {"type": "object", "properties": {"a": schema}}
    r = completion(client, structured_outputs={"json": schema}, max_tokens=2)
    assert r.status_code in (200, 400, 422), r.text


def test_cli_serve_flags(capsys):
    args = build_parser().parse_args(["serve", "--port", "9001", "--api-key", "k", "--max-particles", "8"])
    assert (args.command, args.host, args.port, args.api_key, args.max_particles) == ("serve", "127.0.0.1", 9001, "k", 8)
    assert main(["serve", "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err


def test_an_internal_failure_is_a_500_object_and_the_server_goes_on():
    lm = toy_lm()
    real = lm._next_token_logprobs

    async def flaky(ids):
        if ids and lm.vocab[ids[0]] == b"!":
            raise RuntimeError("device lost")
        return await real(ids)

    lm._next_token_logprobs = flaky
    c = TestClient(toy_app(lm), raise_server_exceptions=False)
    err = error_of(completion(c, prompt="!"), 500)
    assert err["type"] == "internal_server_error" and "Traceback" not in err["message"]
    chunks = events(completion(c, prompt="!", stream=True))
    assert chunks[-1]["error"]["type"] == "internal_server_error"
    assert completion(c, structured_outputs={"regex": "[0-9]"}).status_code == 200


def test_response_format_strict_closes_the_schema():
    """json_schema.strict true: the schema's open objects are closed (OpenAI's strict mode);
    false or absent: the schema as JSON Schema reads it."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    for strict, closed in ((True, True), (False, False), (None, False)):
        for given in (schema, json.dumps(schema)):  # an object, or its JSON text
            js = {"name": "o", "schema": given, **({} if strict is None else {"strict": strict})}
            call = parse_call({"model": MODEL, "messages": MESSAGES,
                               "response_format": {"type": "json_schema", "json_schema": js}}, "chat", MODEL)
            assert call.request.constraint.strict is closed
            assert call.request.constraint.schema == schema
