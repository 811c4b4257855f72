"""SMC speed and quality on the embedded model (CPU): four tasks x {AWRS, direct}.

For each run: wall time, generated tokens per second, and the overhead ratio

    ratio = SMC wall time / bare time,
    bare time = sum over the backend's batched forward passes of one plain transformers forward
                with the same number of rows (one new token per row on a KV cache; the first
                pass is the prompt prefill),

each bare forward timed right after the backend's own pass in the same run (so both see the
same machine load), and its time taken out of the SMC wall time.
For constrained tasks: the fraction of finished samples that the oracle (`regex`, lark,
`jsonschema`) accepts, and log_ml. Tables built once per LM and shared by every constraint
(the vocabulary trie, plain-token tables) are built before the runs and timed separately.

    python benchmarks/bench_smc.py [--tasks a,b,c,d] [--samplers awrs,direct] [--particles 16]
           [--jsonl FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import smc  # noqa: E402
from smc.backends.hf import cache_kwarg  # noqa: E402
from potentials import Grammar, JSONSchema, Regex  # noqa: E402

PHONE = r"[0-9]{3}-[0-9]{3}-[0-9]{4}"
ARITH = r"""
start: expr
expr: term (("+" | "-" | "*") term)*
term: NUMBER | "(" expr ")"
NUMBER: /[0-9]{1,4}/
"""
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 16},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}


def oracle(task: str):
    if task == "b":
        import regex

        return lambda t: regex.fullmatch(PHONE, t) is not None
    if task == "c":
        import jsonschema

        v = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())

        def ok(t):
            try:
                return v.is_valid(json.loads(t))
            except json.JSONDecodeError:
                return False

        return ok
    if task == "d":
        import lark

        parser = lark.Lark(ARITH, parser="earley", lexer="dynamic_complete")

        def parses(t):
            try:
                parser.parse(t)
                return True
            except lark.LarkError:
                return False

        return parses
    return None


TASKS = {
    "a": ("unconstrained, 32 tokens", "Write a short poem about the sea.", None, 32),
    "b": ("phone regex, 24 tokens", "Give me a US phone number.", lambda: Regex(PHONE), 24),
    "c": ("3-field JSON Schema, 64 tokens", "Describe a person as JSON with name, age and city.",
          lambda: JSONSchema(SCHEMA), 64),
    "d": ("arithmetic grammar, 32 tokens", "Write an arithmetic expression, like (3+4)*2.",
          lambda: Grammar(ARITH), 32),
}


class BareTimer:
    """Times, right after each batched forward of the backend, one bare forward of the plain model.

    The bare forward has the same number of rows, one new token per row on a KV cache of the
    same length (the first call is the prompt prefill, one row). Measuring it back to back with
    the backend's own pass keeps both under the same machine load.
    """

    def __init__(self, lm):
        self.lm, self.total, self.cache, self.rows = lm, 0.0, None, 0
        # benchmark-only hooks on the HF backend's two batch calls: auto-batched requests and
        # the samplers' population steps
        self._inner = lm._batcher._process
        self._inner_dists = lm._dists
        lm._batcher._process = self._wrapped(self._inner)
        lm._dists = self._wrapped(self._inner_dists)

    def close(self) -> None:
        self.lm._batcher._process = self._inner
        self.lm._dists = self._inner_dists

    def _wrapped(self, inner):
        def call(*args):
            out = inner(*args)
            requests = args[-1]  # (source, ids) pairs for the batcher; ids after the source for _dists
            first = requests[0][1] if isinstance(requests[0][-1], tuple) else requests[0]
            t0 = time.perf_counter()
            self._bare(len(requests), first)
            self.total += time.perf_counter() - t0
            return out

        return call

    @torch.no_grad()
    def _bare(self, rows: int, first: tuple[int, ...]) -> None:
        model, dev = self.lm.model, self.lm.device
        if self.cache is None:
            out = model(input_ids=torch.tensor([list(first)], device=dev), use_cache=True)
            # transformers 5.2x names the output's cache `cache` (the old name logs a warning)
            self.cache = out["cache"] if "cache" in out else out.past_key_values
            self.rows = 1
            return
        if rows != self.rows:
            self.cache.batch_select_indices(torch.arange(rows, device=dev) % self.rows)
            self.rows = rows
        tok = torch.zeros((rows, 1), dtype=torch.long, device=dev)
        model(input_ids=tok, use_cache=True, **{cache_kwarg(model): self.cache})


def run(lm, task: str, sampler: str, particles: int) -> dict:
    label, prompt, make, max_tokens = TASKS[task]
    if hasattr(lm, "clear_cache"):
        lm.clear_cache()
    timer = BareTimer(lm)
    try:
        r = smc.generate(prompt, make() if make else None, lm=lm, particles=particles,
                         max_tokens=max_tokens, seed=0, sampler=sampler, progress=False)
    finally:
        timer.close()
    wall = r.stats["wall_time_s"] - timer.total  # the bare forwards ran inside the SMC run
    bare = timer.total
    check = oracle(task)
    fin = r.finished
    return {
        "task": task, "label": label, "sampler": sampler, "particles": particles,
        "wall_s": round(wall, 3), "bare_s": round(bare, 3), "ratio": round(wall / bare, 3),
        "tokens": r.stats["tokens"], "tokens_per_s": round(r.stats["tokens"] / wall, 2),
        "steps": r.stats["steps"], "forward_passes": r.stats["lm_forward_passes"],
        "checks_per_step": round(r.stats["constraint_checks"] / max(1, r.stats["steps"]), 1),
        "full_evaluations": r.stats["full_evaluations"],
        "finished": len(fin),
        "valid_fraction": (sum(check(s.text) for s in fin) / len(fin)) if (check and fin) else None,
        "log_ml": r.log_ml, "best": r.best,
    }


def warm_vocabulary_tables(lm) -> float:
    """Build the per-LM tables that every lifted constraint shares (potentials.lift); seconds."""
    t0 = time.perf_counter()
    regex = Regex("x").lift(lm)
    if hasattr(regex, "build_tables"):  # (older engines: this regex's first mask builds them)
        regex.build_tables()
    asyncio.run(regex.logw_next(()))
    json_string = JSONSchema({"type": "string"}).lift(lm)
    asyncio.run(json_string.logw_next(tuple(lm.encode('"'))))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="a,b,c,d")
    ap.add_argument("--samplers", default="awrs,direct")
    ap.add_argument("--particles", type=int, default=16)
    ap.add_argument("--jsonl", default=None, help="append one JSON line per run here")
    args = ap.parse_args()
    lm = smc.load_lm()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"# {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}, "
          f"commit {commit}, {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"# once per LM, not counted below: vocabulary trie and plain-token tables built in "
          f"{warm_vocabulary_tables(lm):.2f} s")
    for task in args.tasks.split(","):
        for sampler in args.samplers.split(","):
            row = run(lm, task, sampler, args.particles)
            print(json.dumps(row), flush=True)
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
