"""The batch runner on the embedded model: throughput at 1, 4 and 16 requests in flight in one
process, one vs two Ray workers, Ray's per-request overhead, and how often a request's answer
changes with the number in flight (float rounding of batched forwards).

    .venv/bin/python benchmarks/bench_batch.py [--requests 16] [--particles 4] [--max-tokens 12]
        [--kinds regex,choice] [--concurrency 1 4 16] [--ray-workers 1 2] [--ray-concurrency 4]
        [--overhead-requests 200] [--no-ray | --only-ray]

Workload: ``--requests`` chat requests in OpenAI's batch format, with in turn the constraints
of ``--kinds`` (json: an object with a name and an age; regex: a phone number; choice: even or
odd), each with its own seed; one request of each kind runs first (warm-up, not timed). Requests per minute count answered lines; tokens per second are those the
particles generated (the LM's work), and, in brackets, those of the answers (the responses'
completion tokens). The backend's prefix cache is cleared before every in-process run. Each
Ray run starts its workers (each loads the model once: "start") before the clock of the run.

Ray's per-request overhead: ``--overhead-requests`` one-token requests on a toy LM, through one
Ray worker with one in flight, against the same in one process, per request.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from smc.api.batch import arun_job, open_job, run_batch  # noqa: E402
from smc.api.generation import run_sync  # noqa: E402
from smc.api.server import EMBEDDED_NAME  # noqa: E402
from smc.backends.loading import load_lm  # noqa: E402

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
NAMES = ["Ada", "Alan", "Grace", "Edsger", "Barbara", "Donald", "John", "Frances"]


def workload(n: int, particles: int, max_tokens: int, kinds: Sequence[str] = ("json", "regex", "choice")
             ) -> list[dict]:
    lines = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        if kind == "json":
            content = f"Describe {NAMES[i % len(NAMES)]}, a person, as JSON with name and age."
            fmt = {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}}
        elif kind == "regex":
            content = f"Give a phone number for office {i}."
            fmt = {"structured_outputs": {"regex": r"[0-9]{3}-[0-9]{4}"}}
        else:
            content = f"Is {i} even or odd? One word."
            fmt = {"structured_outputs": {"choice": ["even", "odd"]}}
        body = {"model": EMBEDDED_NAME, "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens, "particles": particles, "seed": 1000 + i, **fmt}
        lines.append({"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})
    return lines


def answers(path: Path) -> dict[str, tuple]:
    out = {}
    for text in path.read_text().splitlines():
        obj = json.loads(text)
        body = obj["response"]["body"]
        if obj["response"]["status_code"] != 200:
            out[obj["custom_id"]] = ("error", body["error"]["message"], None, None)
            continue
        choice = body["choices"][0]
        out[obj["custom_id"]] = (choice["message"]["content"], body["smc"]["log_ml"],
                                 {p["text"]: p["probability"] for p in body["smc"]["posterior"]}, body["smc"]["ess"])
    return out


def row(label: str, summary, start_s: float | None = None) -> dict:
    minutes = summary.wall_time_s / 60
    n = summary.succeeded + summary.failed
    return {"run": label, "requests": n, "failed": summary.failed, "wall_s": round(summary.wall_time_s, 1),
            "start_s": None if start_s is None else round(start_s, 1),
            "req_per_min": round(n / minutes, 1), "tok_per_s": round(summary.tokens / summary.wall_time_s, 1),
            "answer_tok_per_s": round(summary.completion_tokens / summary.wall_time_s, 1)}


def compare(a: dict, b: dict) -> dict:
    """How two runs' answers differ: chosen texts, posteriors (total variation), log Ẑ."""
    texts = sum(a[k][0] != b[k][0] for k in a)
    tv = max(0.5 * sum(abs(a[k][2].get(t, 0) - b[k][2].get(t, 0)) for t in set(a[k][2]) | set(b[k][2]))
             for k in a if a[k][2] is not None and b[k][2] is not None)
    dml = max(abs((a[k][1] or 0) - (b[k][1] or 0)) for k in a if a[k][2] is not None)
    return {"texts_differ": texts, "of": len(a), "max_posterior_tv": round(tv, 4), "max_abs_dlog_ml": dml}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--particles", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--kinds", default="regex,choice", help="constraints, in turn: json, regex, choice")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--ray-workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--ray-concurrency", type=int, default=4)
    ap.add_argument("--overhead-requests", type=int, default=200)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--only-ray", action="store_true", help="skip the in-process runs (and the comparisons)")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, {platform.node()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, python {platform.python_version()}")
    tmp = Path(tempfile.mkdtemp(prefix="bench_batch_"))
    inp = tmp / "in.jsonl"
    kinds = args.kinds.split(",")
    inp.write_text("".join(json.dumps(x) + "\n" for x in workload(args.requests, args.particles, args.max_tokens, kinds)))
    if args.only_ray:
        args.concurrency = []
    lm = load_lm()
    # one request of each kind first, so that no measured run pays the constraints' first masks
    warm = tmp / "warm.jsonl"
    warm.write_text("".join(json.dumps(x) + "\n" for x in workload(len(kinds), args.particles, args.max_tokens, kinds)))
    run_batch(warm, tmp / "warm-out.jsonl", lm, model_name=EMBEDDED_NAME, progress=False)
    rows, outs = [], {}
    for k in args.concurrency:
        lm.clear_cache()
        out = tmp / f"k{k}.jsonl"
        before, cpu = dict(lm.stats), time.process_time()
        with open_job(inp, out) as job:
            s = run_sync(lambda: arun_job(job, lm, EMBEDDED_NAME, concurrency=k, progress=False))
        rows.append(row(f"one process, {k} in flight", s))
        # forward passes: whether requests in flight shared them; CPU seconds of this process
        rows[-1].update(forward_passes=lm.stats["forward_passes"] - before["forward_passes"],
                        cpu_s=round(time.process_time() - cpu, 1), load=round(os.getloadavg()[0], 1))
        outs[k] = answers(out)
        print(json.dumps(rows[-1]), flush=True)
    base = args.concurrency[0] if args.concurrency else None
    for k in args.concurrency[1:]:
        print(json.dumps({"compare": f"{base} vs {k} in flight", **compare(outs[base], outs[k])}), flush=True)
    if args.no_ray:
        return
    import ray

    ray.init(num_cpus=max(args.ray_workers), include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}})
    try:
        from smc.api.batch_ray import run_batch_ray

        for w in args.ray_workers:
            out = tmp / f"ray{w}.jsonl"
            t0 = time.perf_counter()
            s = run_batch_ray(inp, out, load_lm, model_name=EMBEDDED_NAME, workers=w, cpus_per_worker=1,
                              in_flight=args.ray_concurrency, progress=False)
            total = time.perf_counter() - t0
            rows.append(row(f"Ray, {w} worker(s) x {args.ray_concurrency} in flight", s, total - s.wall_time_s))
            print(json.dumps(rows[-1]), flush=True)
            if base is not None:
                print(json.dumps({"compare": f"{base} in flight vs Ray {w}", **compare(outs[base], answers(out))}),
                      flush=True)
        # per-request overhead on a toy LM: one worker, one in flight, against one process
        from tests.smc.api.batch_toys import toy

        tiny = tmp / "tiny.jsonl"
        tiny.write_text("".join(json.dumps({"custom_id": f"t{i}", "method": "POST", "url": "/v1/completions",
                                            "body": {"model": "toy", "prompt": "a", "max_tokens": 1,
                                                     "particles": 1, "seed": i}}) + "\n"
                                for i in range(args.overhead_requests)))
        local = run_batch(tiny, tmp / "tiny-local.jsonl", toy(), model_name="toy", concurrency=1, progress=False)
        remote = run_batch_ray(tiny, tmp / "tiny-ray.jsonl", "tests.smc.api.batch_toys:toy", model_name="toy",
                               workers=1, in_flight=1, progress=False)
        n = args.overhead_requests
        print(json.dumps({"overhead": "toy LM, 1 in flight", "requests": n,
                          "local_ms_per_request": round(1000 * local.wall_time_s / n, 2),
                          "ray_ms_per_request": round(1000 * remote.wall_time_s / n, 2),
                          "ray_overhead_ms_per_request": round(1000 * (remote.wall_time_s - local.wall_time_s) / n, 2)}),
              flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
