"""The in-process batch runner on a toy LM: OpenAI's batch formats, error lines, per-request
seeds (results independent of concurrency and of resumes), crash-safe resume, and
``generate_many``."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

import smc
from smc.api.batch import (BatchFileError, ResultWriter, arun_batch, generate_many, read_input,
                           run_batch)
from smc.core.errors import InvalidArgument, RequestTimeout
from smc.api.request import Request
from tests.smc.api.batch_toys import (answers, line, mixed_lines, read_lines, slow_toy, toy,
                                      write_lines)
from tests.smc.api.toy_server import MODEL


def run(inp, out, lm=None, **kw):
    kw.setdefault("progress", False)
    return run_batch(inp, out, lm if lm is not None else toy(), model_name=MODEL, **kw)


@pytest.fixture
def mixed(tmp_path):
    return write_lines(tmp_path / "in.jsonl", mixed_lines(12))


# ---------------------------------------------------------------------------- formats
def test_output_lines_have_openai_batch_form(mixed, tmp_path):
    out = tmp_path / "out.jsonl"
    summary = run(mixed, out)
    assert summary.complete and summary.succeeded == 12 and summary.failed == 0
    lines = read_lines(out)
    assert sorted(x["custom_id"] for x in lines) == sorted(f"r{i}" for i in range(12))
    for obj in lines:
        assert set(obj) == {"id", "custom_id", "response", "error"} and obj["error"] is None
        assert obj["id"].startswith("batch_req_")
        response = obj["response"]
        assert set(response) == {"status_code", "request_id", "body"} and response["status_code"] == 200
        body = response["body"]
        chat = body["object"] == "chat.completion"
        assert body["model"] == MODEL and body["object"] in ("chat.completion", "text_completion")
        texts = [c["message"]["content"] if chat else c["text"] for c in body["choices"]]
        k = int(obj["custom_id"][1:]) % 4
        if k == 0:
            assert json.loads(texts[0]) in (True, False)
        elif k == 1:
            assert not chat and texts[0] in ("11", "12", "21", "22")
        elif k == 2:
            assert len(texts) == 3 and set(texts) <= {"aa", "ab", "b"}
        else:
            assert isinstance(json.loads(texts[0]), dict)
        assert body["smc"]["seed"] == {1: int(obj["custom_id"][1:]), 2: 100 + int(obj["custom_id"][1:])}.get(k, 0)


def test_bad_requests_are_error_lines_and_the_others_go_on(tmp_path):
    bad = [
        line("no-messages", {"model": MODEL, "max_tokens": 4}),
        line("other-model", dict(line("x")["body"], model="gpt-4o")),
        line("bad-regex", {"prompt": "a", "structured_outputs": {"regex": "(["}}, url="/v1/completions"),
        line("get", method="GET"),
        line("url", url="/v1/embeddings"),
        line("stream", dict(line("x")["body"], stream=True)),
        line("body", "not an object"),
        line("unknown-field", dict(line("x")["body"], checkpoint="/tmp/x")),
        line("too-long", dict(line("x")["body"], max_tokens=10**6)),
        {**line("extra-key"), "headers": {}},
    ]
    inp = write_lines(tmp_path / "in.jsonl", [line("ok1"), *bad, line("ok2")])
    out = tmp_path / "out.jsonl"
    from tests.smc.api.toy_server import toy_lm

    summary = run(inp, out, lm=toy_lm(max_context=64))
    assert summary.complete and summary.succeeded == 2 and summary.failed == len(bad)
    by_id = {x["custom_id"]: x for x in read_lines(out)}
    status = {cid: x["response"]["status_code"] for cid, x in by_id.items()}
    assert status["ok1"] == status["ok2"] == 200
    assert status["other-model"] == 404 and status["url"] == 404 and status["get"] == 405
    for cid in ("no-messages", "bad-regex", "stream", "body", "unknown-field", "extra-key"):
        assert status[cid] == 400, cid
    assert 400 <= status["too-long"] < 500
    for cid, obj in by_id.items():
        if status[cid] != 200:
            err = obj["response"]["body"]["error"]
            assert set(err) == {"message", "type", "param", "code"} and err["message"], cid
            assert obj["error"] is None
    assert by_id["other-model"]["response"]["body"]["error"]["code"] == "model_not_found"


def test_a_body_the_server_takes_is_the_same_run_here(tmp_path):
    """One body, one run: the batch line's answer equals the server's response for the body."""
    from fastapi.testclient import TestClient

    from tests.smc.api.toy_server import toy_app

    body = mixed_lines(3)[2]["body"]
    server = TestClient(toy_app()).post("/v1/chat/completions", json=body).json()
    inp = write_lines(tmp_path / "in.jsonl", [line("a", body)])
    run(inp, tmp_path / "out.jsonl")
    mine = read_lines(tmp_path / "out.jsonl")[0]["response"]["body"]
    assert mine["choices"] == server["choices"] and mine["usage"] == server["usage"]
    assert mine["smc"]["posterior"] == server["smc"]["posterior"]
    assert mine["smc"]["log_ml"] == server["smc"]["log_ml"]


@pytest.mark.parametrize("text, problem", [
    ('{"custom_id": "a"}\n{"custom_id": "a"}\n', "repeats the custom_id 'a' of line 1"),
    ('{"custom_id": "a"}\nnot json\n', "line 2 is not valid JSON"),
    ('{"custom_id": ""}\n', "line 1 has no custom_id"),
    ('[1]\n', "line 1 is not a JSON object"),
])
def test_a_bad_input_file_is_refused_before_any_work(tmp_path, text, problem):
    inp = tmp_path / "in.jsonl"
    inp.write_text(text)
    with pytest.raises(BatchFileError, match="nothing was run") as e:
        run(inp, tmp_path / "out.jsonl")
    assert problem in str(e.value)
    assert not (tmp_path / "out.jsonl").exists()


def test_blank_lines_are_skipped(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text("\n" + json.dumps(line("a")) + "\n\n")
    assert [x.custom_id for x in read_input(inp)] == ["a"]


# ---------------------------------------------------------------------------- seeds
def test_results_do_not_depend_on_concurrency_or_neighbours(mixed, tmp_path):
    """Each request's seed is its own: one at a time, all at once, or alone, the same answer."""
    run(mixed, tmp_path / "one.jsonl", concurrency=1)
    run(mixed, tmp_path / "many.jsonl", concurrency=12)
    ref = answers(tmp_path / "one.jsonl")
    assert answers(tmp_path / "many.jsonl") == ref
    alone = write_lines(tmp_path / "alone.jsonl", [mixed_lines(12)[7]])
    run(alone, tmp_path / "alone-out.jsonl")
    assert answers(tmp_path / "alone-out.jsonl") == {"r7": ref["r7"]}


# ---------------------------------------------------------------------------- resume
def test_resume_after_a_kill_completes_the_job_with_each_id_once(mixed, tmp_path):
    ref_out = tmp_path / "ref.jsonl"
    run(mixed, ref_out, concurrency=3)
    ref = answers(ref_out)
    out = tmp_path / "out.jsonl"

    async def killed():
        task = asyncio.ensure_future(arun_batch(mixed, out, slow_toy(0.003), model_name=MODEL,
                                                concurrency=3, progress=False))
        while not out.exists() or len(out.read_text().splitlines()) < 4:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(killed())
    written = read_lines(out)
    assert 4 <= len(written) < 12
    # a crash in the middle of a write leaves the start of a line
    with open(out, "ab") as f:
        f.write(b'{"id": "batch_req_0", "custom_id": "r1', )
    summary = run(mixed, out, concurrency=5)
    assert summary.dropped_partial > 0 and summary.already == len(written)
    assert summary.succeeded == 12 - len(written) and summary.complete
    ids = [x["custom_id"] for x in read_lines(out)]
    assert sorted(ids) == sorted(f"r{i}" for i in range(12))  # each exactly once
    assert answers(out) == ref
    # a finished job: nothing to do
    again = run(mixed, out)
    assert again.already == 12 and again.succeeded == again.failed == 0


def test_error_lines_are_kept_on_resume_unless_retried(tmp_path):
    inp = write_lines(tmp_path / "in.jsonl", [line(f"r{i}") for i in range(4)])
    out = tmp_path / "out.jsonl"
    first = run(inp, out, lm=slow_toy(0.05), timeout=0.05)
    assert first.failed == 4
    for obj in read_lines(out):
        assert obj["response"]["status_code"] == 408
        assert obj["response"]["body"]["error"]["code"] == "request_timeout"
    kept = run(inp, out)
    assert kept.already == 4 and kept.kept_errors == 4 and kept.succeeded == 0
    retried = run(inp, out, retry_errors=True)
    assert retried.retried == 4 and retried.succeeded == 4 and retried.complete
    lines = read_lines(out)
    assert len(lines) == 4 and all(x["response"]["status_code"] == 200 for x in lines)


def test_a_time_limit_fails_only_the_slow_request(tmp_path):
    # 28 letters: no text shorter than 28 tokens finishes, so this run lasts past the limit
    body = {k: v for k, v in line("x")["body"].items() if k != "response_format"}
    slow = line("slow", dict(body, max_tokens=30, particles=8, structured_outputs={"regex": "a{28}"}))
    fast = [line(f"f{i}", {"prompt": "a", "max_tokens": 2, "particles": 1}, url="/v1/completions")
            for i in range(3)]
    inp = write_lines(tmp_path / "in.jsonl", [slow, *fast])
    out = tmp_path / "out.jsonl"
    summary = run(inp, out, lm=slow_toy(0.02), timeout=0.5, concurrency=4)
    status = {x["custom_id"]: x["response"]["status_code"] for x in read_lines(out)}
    assert status == {"slow": 408, "f0": 200, "f1": 200, "f2": 200}
    assert summary.failed == 1


def test_an_output_of_another_job_is_refused(mixed, tmp_path):
    other = write_lines(tmp_path / "other.jsonl", [line("zzz")])
    out = tmp_path / "out.jsonl"
    run(other, out)
    before = out.read_bytes()
    with pytest.raises(BatchFileError, match="another job's output"):
        run(mixed, out)
    assert out.read_bytes() == before


def test_a_file_that_is_not_an_output_is_left_alone(mixed, tmp_path):
    out = tmp_path / "notes.txt"
    out.write_text("my notes\nno newline at the end")
    with pytest.raises(BatchFileError, match="not a batch output"):
        run(mixed, out)
    assert out.read_text() == "my notes\nno newline at the end"
    with pytest.raises(BatchFileError, match="same file"):
        run(mixed, mixed)


def test_two_runners_never_write_one_output(mixed, tmp_path):
    out = tmp_path / "out.jsonl"
    with ResultWriter(out):
        with pytest.raises(BatchFileError, match="another batch run is writing"):
            run(mixed, out)
    assert run(mixed, out).complete


def test_an_internal_failure_is_a_500_line(tmp_path):
    class Broken(type(toy())):
        async def _next_token_logprobs(self, ids):
            if len(ids) > 12:
                raise RuntimeError("boom")
            return await super()._next_token_logprobs(ids)

    base = toy()
    lm = Broken(base.vocab, "<eos>", base.probs, chat_template=base.chat_template)
    inp = write_lines(tmp_path / "in.jsonl", [line("long"), line("short", {"prompt": "", "max_tokens": 1,
                                                                          "particles": 1}, url="/v1/completions")])
    run(inp, tmp_path / "out.jsonl", lm=lm)
    status = {x["custom_id"]: x["response"] for x in read_lines(tmp_path / "out.jsonl")}
    assert status["long"]["status_code"] == 500 and "boom" in status["long"]["body"]["error"]["message"]
    assert status["short"]["status_code"] == 200


# ---------------------------------------------------------------------------- generate_many
def test_generate_many_equals_generate_in_order():
    lm = toy()
    reqs = [Request("a", {"regex": "[12]{2}"}, particles=4, max_tokens=4, seed=s, chat=False) for s in range(5)]
    many = generate_many(reqs, lm=lm, concurrency=3, progress=False)
    for r, got in zip(reqs, many):
        want = smc.generate(r, lm=lm, progress=False)
        assert got.posterior == want.posterior and got.log_ml == want.log_ml


def test_generate_many_takes_prompts_and_mappings_with_shared_settings():
    lm = toy()
    items = ["a", {"prompt": "b", "particles": 2}, {"prompt": "c", "constraint": {"regex": "1"}}]
    got = smc.generate_many(items, {"regex": "[12]{2}"}, lm=lm, particles=3, max_tokens=3, chat=False,
                            progress=False)
    assert [len(r.samples) for r in got] == [3, 2, 3]
    assert set(got[0].posterior) <= {"11", "12", "21", "22"} and list(got[2].posterior) == ["1"]
    # the backend given only here is kept alive by the call (its gathered view is weak)
    again = smc.generate_many(items, {"regex": "[12]{2}"}, lm=toy(), particles=3, max_tokens=3,
                              chat=False, progress=False, concurrency=3)
    assert [r.posterior for r in again] == [r.posterior for r in got]
    with pytest.raises(InvalidArgument, match=r"requests\[1\]: particles"):
        generate_many(["a", {"prompt": "b", "particles": 0}], lm=lm)
    with pytest.raises(InvalidArgument, match=r"requests\[0\]: give either a Request or its fields"):
        generate_many([Request("a")], lm=lm, particles=3)


def test_generate_many_failures_raise_or_come_back_in_place():
    lm = slow_toy(0.01)
    reqs = [{"prompt": "a", "max_tokens": 2, "particles": 1},
            {"prompt": "b", "max_tokens": 30, "particles": 8,
             "constraint": {"regex": "a{28}"}}]  # at least 28 steps: past the time limit
    with pytest.raises(RequestTimeout, match=r"requests\[1\]"):
        generate_many(reqs, lm=lm, timeout=0.3, chat=False, progress=False)
    got = generate_many(reqs, lm=lm, timeout=0.3, chat=False, progress=False, return_exceptions=True)
    assert isinstance(got[0], smc.Result) and isinstance(got[1], RequestTimeout)


def test_import_resolves_to_this_worktree():
    assert os.path.dirname(smc.__file__).startswith(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.dirname(__file__)))))


def test_runs_in_flight_share_forward_passes(mixed, tmp_path):
    """Population steps of concurrent runs go to the backend in one call (GatheredLM): fewer
    calls at 12 in flight than at 1, and the same answers (exactly, on a toy LM)."""
    base = toy()
    calls = []

    class Counting(type(base)):
        async def batch_next_token_dists(self, batch):
            calls.append(len(batch))
            return await super().batch_next_token_dists(batch)

    lm = Counting(base.vocab, "<eos>", base.probs, chat_template=base.chat_template)
    run(mixed, tmp_path / "one.jsonl", lm=lm, concurrency=1)
    alone, rows = len(calls), sum(calls)
    calls.clear()
    run(mixed, tmp_path / "many.jsonl", lm=lm, concurrency=12)
    assert sum(calls) == rows and len(calls) < alone / 2
    assert answers(tmp_path / "many.jsonl") == answers(tmp_path / "one.jsonl")


def test_the_gathered_view_is_one_per_backend_and_does_not_keep_it_alive():
    import gc
    import weakref

    from smc.api.batch import shared_forwards

    lm = toy()
    view = shared_forwards(lm, 4)
    assert view is shared_forwards(lm, 4) and view.inner is lm and view.stats is lm.stats
    assert shared_forwards(lm, 1) is lm
    ref = weakref.ref(lm)
    del lm, view
    gc.collect()
    assert ref() is None
