"""The HTTP server under concurrent clients, on the embedded model over real HTTP.

Starts ``smc.api.server`` (uvicorn, a thread of this process, 127.0.0.1 on a free port) and:

1. ``concurrency``: R chat requests (default 16; 4 particles, max_tokens 24, a regex each, a
   different prompt and seed each), first sent one after another, then all at once. Reports
   the wall time of each way, their ratio (goal: concurrent <= 0.5 x sequential), and p50/p99
   latency per request. The answers of both ways are checked (same seeds: the same texts).
2. ``load``: L mixed requests (default 200; about 60% good: tiny runs, 2 particles, max_tokens
   6, choice/regex/json constraints; 40% bad: invalid regex, unknown model, unsupported field,
   too many particles, $ref to a URL, invalid JSON body) from C concurrent clients (default 32),
   each client bounded by a timeout. Checks that every request got an answer (none lost, no
   5xx), the good ones 200 with valid content, the bad ones 4xx.

    python benchmarks/bench_server.py [--requests 16] [--load 200] [--clients 32] [--skip-load]
        [--json OUT.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from smc.api.server import EMBEDDED_NAME, create_app
from smc.backends.loading import load_lm

PROMPTS = [f"Give me the phone number of shop number {i}." for i in range(64)]
PHONE = "[0-9]{3}-[0-9]{3}-[0-9]{4}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(lm) -> tuple[str, uvicorn.Server, threading.Thread]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(lm, EMBEDDED_NAME), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server, thread


def chat_body(i: int, max_tokens: int = 24, particles: int = 4) -> dict:
    return {"model": EMBEDDED_NAME, "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
            "max_tokens": max_tokens, "particles": particles, "seed": i, "structured_outputs": {"regex": PHONE}}


async def timed(client: httpx.AsyncClient, body: dict) -> tuple[float, httpx.Response]:
    t = time.perf_counter()
    r = await client.post("/v1/chat/completions", json=body)
    return time.perf_counter() - t, r


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


async def concurrency(url: str, n: int) -> dict:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await timed(client, chat_body(1000, max_tokens=4))  # warm-up: tables, caches of the vocabulary
        t0 = time.perf_counter()
        seq = [await timed(client, chat_body(i)) for i in range(n)]
        seq_wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        conc = await asyncio.gather(*(timed(client, chat_body(i)) for i in range(n)))
        conc_wall = time.perf_counter() - t0
    texts = []
    for runs in (seq, conc):
        for _, r in runs:
            assert r.status_code in (200, 422), r.text
        texts.append([r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else None for _, r in runs])
    for t in texts[0]:
        assert t is None or re.fullmatch(PHONE, t), t
    out = {"requests": n, "particles": 4, "max_tokens": 24,
           "sequential_wall_s": seq_wall, "concurrent_wall_s": conc_wall, "ratio": conc_wall / seq_wall,
           "sequential_p50_s": pct([t for t, _ in seq], 0.5), "sequential_p99_s": pct([t for t, _ in seq], 0.99),
           "concurrent_p50_s": pct([t for t, _ in conc], 0.5), "concurrent_p99_s": pct([t for t, _ in conc], 0.99),
           "answered_200": [sum(r.status_code == 200 for _, r in runs) for runs in (seq, conc)],
           "same_answers": texts[0] == texts[1]}
    return out


def load_requests(n: int) -> list[tuple[str, object, str]]:
    """(kind, body, expectation) for n mixed requests: "good" ones and each class of bad one."""
    out = []
    for i in range(n):
        k = i % 10
        small = {"model": EMBEDDED_NAME, "max_tokens": 6, "particles": 2, "seed": i,
                 "messages": [{"role": "user", "content": f"Pick one, number {i % 7}."}]}
        if k in (0, 1):
            out.append(("choice", {**small, "structured_outputs": {"choice": ["yes", "no", "maybe"]}}, "good"))
        elif k in (2, 3):
            out.append(("regex", {**small, "structured_outputs": {"regex": "[0-9]{1,3}"}}, "good"))
        elif k == 4:
            out.append(("json", {**small, "max_tokens": 8, "response_format": {"type": "json_schema", "json_schema": {
                "name": "b", "schema": {"type": "boolean"}}}}, "good"))
        elif k == 5:
            out.append(("top1", {**small, "temperature": 0, "particles": None,
                                 "structured_outputs": {"choice": ["yes", "no"]}}, "good"))
        elif k == 6:
            out.append(("bad-regex", {**small, "structured_outputs": {"regex": "(("}}, "bad"))
        elif k == 7:
            out.append(("bad-model", {**small, "model": "gpt-4o"}, "bad"))
        elif k == 8:
            out.append(("bad-field", {**small, "logit_bias": {"5": 3}}, "bad"))
        else:
            variants = [("bad-ref", {**small, "structured_outputs": {"json": {"$ref": "http://127.0.0.1:1/x"}}}),
                        ("bad-particles", {**small, "particles": 10_000}),
                        ("bad-json", b"{not json")]
            name, body = variants[(i // 10) % 3]
            out.append((name, body, "bad"))
    return out


def valid(kind: str, body: dict, text: str) -> bool:
    if kind == "choice":
        return text in ("yes", "no", "maybe")
    if kind == "top1":
        return text in ("yes", "no")
    if kind == "regex":
        return re.fullmatch("[0-9]{1,3}", text) is not None
    return json.loads(text) in (True, False)


async def load(url: str, n: int, clients: int, timeout_s: float) -> dict:
    requests = load_requests(n)
    queue: asyncio.Queue = asyncio.Queue()
    for item in enumerate(requests):
        queue.put_nowait(item)
    results: dict[int, tuple[int, str]] = {}

    async def client_loop() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=timeout_s) as client:
            while not queue.empty():
                i, (kind, body, expect) = queue.get_nowait()
                try:
                    if isinstance(body, bytes):
                        r = await client.post("/v1/chat/completions", content=body,
                                              headers={"content-type": "application/json"})
                    else:
                        r = await client.post("/v1/chat/completions", json=body)
                except httpx.HTTPError as e:
                    results[i] = (-1, f"{type(e).__name__}")
                    continue
                if r.status_code == 200:
                    ok = expect == "good" and valid(kind, body, r.json()["choices"][0]["message"]["content"])
                    results[i] = (200, "valid" if ok else "INVALID")
                else:
                    err = r.json().get("error", {})
                    ok = set(err) == {"message", "type", "param", "code"}
                    results[i] = (r.status_code, "error object" if ok else "BAD ERROR BODY")

    t0 = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(clients)))
    wall = time.perf_counter() - t0
    by_status: dict[str, int] = {}
    for status, _ in results.values():
        by_status[str(status)] = by_status.get(str(status), 0) + 1
    good = [i for i, (_, _, e) in enumerate(requests) if e == "good"]
    bad = [i for i, (_, _, e) in enumerate(requests) if e == "bad"]
    return {
        "requests": n, "clients": clients, "wall_s": wall, "answered": len(results),
        "by_status": by_status,
        "good_200_valid": sum(results[i] == (200, "valid") for i in good),
        "good_422": sum(results[i][0] == 422 for i in good), "good": len(good),
        "bad_4xx_error_object": sum(400 <= results[i][0] < 500 and results[i][1] == "error object" for i in bad),
        "bad": len(bad),
        "5xx_or_lost": sum(results.get(i, (-1, ""))[0] >= 500 or results.get(i, (-1, ""))[0] < 0 for i in range(n)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--load", type=int, default=200)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--skip-concurrency", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"machine: {platform.processor() or platform.machine()}, {len(__import__('os').sched_getaffinity(0))} "
          f"cores; load average {__import__('os').getloadavg()}; commit {commit}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    lm = load_lm()
    url, server, thread = start(lm)
    out: dict = {"commit": commit}
    try:
        if not args.skip_concurrency:
            out["concurrency"] = asyncio.run(concurrency(url, args.requests))
            print(json.dumps(out["concurrency"], indent=1))
        if not args.skip_load:
            out["load"] = asyncio.run(load(url, args.load, args.clients, args.timeout))
            print(json.dumps(out["load"], indent=1))
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    out["backend_stats"] = dict(lm.stats)
    print(json.dumps({"backend_stats": out["backend_stats"]}))
    out["load_average_after"] = __import__("os").getloadavg()
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
