"""SMC speed and quality on the embedded model (CPU): four tasks x {AWRS, direct}.

For each run: wall time, generated tokens per second, and the overhead ratio

    ratio = SMC wall time / bare time,
    bare time = prompt prefill + sum over SMC steps of one batched forward pass (one new token
                per row, KV cache, plain transformers) with as many rows as particles were
                live at that step,

measured right after the SMC run on the same model object. Rows of the bare loop can only
shrink (a step with more live particles than the previous one reuses the smaller batch), so
the bare time is if anything an underestimate and the ratio a conservative (higher) figure.
For constrained tasks: the fraction of finished samples that the oracle (`regex`, lark,
`jsonschema`) accepts, and log_ml.

    python benchmarks/bench_smc.py [--tasks a,b,c,d] [--samplers awrs,direct] [--particles 16]
           [--jsonl FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import smc  # noqa: E402
from potentials import Grammar, JSONSchema, Regex  # noqa: E402
from smc.generation import prompt_ids_for  # noqa: E402

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


@torch.no_grad()
def bare_time(lm, prompt_ids: list[int], live_per_step: list[int]) -> float:
    """Prefill plus one batched single-token forward per step with ``live_per_step[t]`` rows."""
    model = lm.model
    ids = torch.tensor([prompt_ids], device=lm.device)
    t0 = time.perf_counter()
    out = model(input_ids=ids, use_cache=True)
    total = time.perf_counter() - t0
    cache = out.past_key_values
    rows = max(1, live_per_step[0]) if live_per_step else 1
    cache.batch_repeat_interleave(rows)
    tok = out.logits[:, -1:].argmax(-1).repeat(rows, 1)
    for live in live_per_step:
        if live < rows:
            cache.batch_select_indices(torch.arange(max(live, 1), device=lm.device))
            rows, tok = max(live, 1), tok[: max(live, 1)]
        t0 = time.perf_counter()
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
        total += time.perf_counter() - t0
        tok = out.logits[:, -1:].argmax(-1)
    return total


def run(lm, task: str, sampler: str, particles: int) -> dict:
    label, prompt, make, max_tokens = TASKS[task]
    if hasattr(lm, "clear_cache"):
        lm.clear_cache()
    r = smc.generate(prompt, make() if make else None, lm=lm, particles=particles,
                     max_tokens=max_tokens, seed=0, sampler=sampler, progress=False)
    wall = r.stats["wall_time_s"]
    live = [sum(rec.active) for rec in r.history]
    bare = bare_time(lm, prompt_ids_for(lm, prompt, None, max_tokens), live)
    check = oracle(task)
    fin = r.finished
    row = {
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
    return row


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
    for task in args.tasks.split(","):
        for sampler in args.samplers.split(","):
            row = run(lm, task, sampler, args.particles)
            print(json.dumps(row), flush=True)
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
