"""LM factories and input files for the batch runner's tests: importable by path
(``tests.smc.api.batch_toys:toy``), so a subprocess or a Ray worker builds the same toy LM."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.smc.api.toy_server import MODEL, toy_lm
from tests.toy_problems import FastToyLM


def toy() -> FastToyLM:
    """The server tests' toy LM (printable ASCII, a chat template)."""
    return toy_lm()


class SlowToyLM(FastToyLM):
    """The toy LM with a pause per scored context, so that a run lasts long enough to be
    killed or to pass a time limit."""

    delay = 0.002

    async def _next_token_logprobs(self, ids):
        await asyncio.sleep(self.delay)
        return await super()._next_token_logprobs(ids)


def slow_toy(delay: float = 0.002) -> SlowToyLM:
    base = toy_lm()
    lm = SlowToyLM(base.vocab, "<eos>", base.probs, chat_template=base.chat_template)
    lm.delay = delay
    return lm


def line(custom_id: str, body: dict[str, Any] | None = None, url: str = "/v1/chat/completions",
         **extra: Any) -> dict[str, Any]:
    """An input line; the default body asks for a short JSON-Schema-constrained answer."""
    if body is None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": f"q {custom_id}"}],
                "max_tokens": 8, "particles": 4,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "b", "schema": {"type": "boolean"}}}}
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body, **extra}


def mixed_lines(n: int) -> list[dict[str, Any]]:
    """n good requests of several kinds (chat, completion, regex, choice, own seeds)."""
    out = []
    for i in range(n):
        k = i % 4
        if k == 0:
            out.append(line(f"r{i}"))
        elif k == 1:
            out.append(line(f"r{i}", {"model": MODEL, "prompt": f"p{i}", "max_tokens": 6, "particles": 3,
                                      "seed": i, "structured_outputs": {"regex": "[12]{2}"}},
                            url="/v1/completions"))
        elif k == 2:
            out.append(line(f"r{i}", {"messages": [{"role": "user", "content": "pick"}], "n": 3,
                                      "max_tokens": 6, "particles": 5, "seed": 100 + i,
                                      "structured_outputs": {"choice": ["aa", "ab", "b"]}}))
        else:
            out.append(line(f"r{i}", {"model": MODEL, "messages": [{"role": "user", "content": "j"}],
                                      "max_tokens": 10, "particles": 4, "temperature": 0.7,
                                      "response_format": {"type": "json_object"}}))
    return out


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def answers(path: Path) -> dict[str, Any]:
    """custom_id -> what a run determines of its line (status, and the choices and the smc
    field, without ids, times and wall clocks)."""
    out = {}
    for obj in read_lines(path):
        body = obj["response"]["body"]
        if obj["response"]["status_code"] == 200:
            smc = {k: v for k, v in body["smc"].items() if k != "wall_time_s"}
            body = {"choices": body["choices"], "usage": body["usage"], "smc": smc}
        out[obj["custom_id"]] = (obj["response"]["status_code"], body)
    return out


def broken() -> FastToyLM:
    """A factory that fails, as loading a missing model does."""
    raise RuntimeError("no such model: nowhere/nothing")
