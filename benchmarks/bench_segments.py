"""Think-then-JSON and tool calls on the embedded model: SMC at the defaults against masking.

Two task families with gold answers:

    think_json   "What is A + B?": <think> reasoning (at most 60 bytes) </think>, then a JSON
                 object {"answer": <integer>} (potentials.segments.forms.reasoning); correct
                 iff the answer equals A + B.
    tool_call    a request that one of four tools answers (add, multiply, get_weather,
                 convert_currency), tools stated in the system message (forms.tools_prompt),
                 constraint tools_constraint(tools, "required", parallel_tool_calls=False);
                 correct iff the first parsed call (forms.parse_tool_calls) has the gold name
                 and arguments; name_ok iff the name is right.

For each task and method one run (smc.generate, seed s) gives a posterior over finished texts
(masking: uniform over its finished particles, its weights being improper); we record

    accuracy = sum_x post(x) * correct(x)   (0 for a run with no finished output)
    empty    = [no finished output]

and summarize the mean over tasks with a 95% bootstrap interval (scipy.stats.bootstrap).

    python benchmarks/bench_segments.py [--tasks think_json,tool_call] [--limit K]
        [--particles N] [--max-tokens T] [--methods awrs,masking] [--jsonl FILE]
    python benchmarks/bench_segments.py --summarize benchmarks/data/segments_runs.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import bootstrap

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import smc  # noqa: E402
from smc.core.defaults import PARTICLES  # noqa: E402
from potentials import JSONSchema  # noqa: E402
from potentials.segments.forms import (  # noqa: E402
    parse_tool_calls,
    reasoning,
    split_reasoning,
    tools_constraint,
    tools_prompt,
)

ANSWER = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
          "additionalProperties": False}
PAIRS = [(2, 3), (4, 5), (1, 7), (6, 2), (3, 3), (8, 1), (5, 5), (2, 9), (7, 4), (10, 6),
         (12, 3), (9, 9), (11, 2), (4, 14), (20, 5), (6, 7), (13, 13), (3, 8), (15, 4), (7, 7),
         (30, 12), (25, 25), (16, 8), (40, 2)]

TOOLS = [
    {"type": "function", "function": {"name": "add", "description": "Add two integers",
     "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "multiply", "description": "Multiply two integers",
     "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                    "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "convert_currency", "description": "Convert an amount",
     "parameters": {"type": "object", "properties": {
         "amount": {"type": "number"}, "from": {"enum": ["USD", "EUR", "GBP", "JPY"]},
         "to": {"enum": ["USD", "EUR", "GBP", "JPY"]}},
         "required": ["amount", "from", "to"], "additionalProperties": False}}},
]
CALLS = [  # (user request, gold name, gold arguments)
    ("Add 3 and 5.", "add", {"a": 3, "b": 5}),
    ("What is 12 plus 30?", "add", {"a": 12, "b": 30}),
    ("Please add 7 to 8.", "add", {"a": 7, "b": 8}),
    ("Sum 100 and 23.", "add", {"a": 100, "b": 23}),
    ("Multiply 6 by 7.", "multiply", {"a": 6, "b": 7}),
    ("What is 9 times 4?", "multiply", {"a": 9, "b": 4}),
    ("Compute the product of 11 and 3.", "multiply", {"a": 11, "b": 3}),
    ("Multiply 25 and 2.", "multiply", {"a": 25, "b": 2}),
    ("What's the weather in Paris?", "get_weather", {"city": "Paris"}),
    ("Is it raining in London right now?", "get_weather", {"city": "London"}),
    ("Tell me the weather in Tokyo.", "get_weather", {"city": "Tokyo"}),
    ("How hot is it in Madrid today?", "get_weather", {"city": "Madrid"}),
    ("Convert 10 USD to EUR.", "convert_currency", {"amount": 10, "from": "USD", "to": "EUR"}),
    ("How many yen is 50 dollars? (USD to JPY)", "convert_currency", {"amount": 50, "from": "USD", "to": "JPY"}),
    ("Change 20 EUR into GBP.", "convert_currency", {"amount": 20, "from": "EUR", "to": "GBP"}),
    ("Convert 5 GBP to USD.", "convert_currency", {"amount": 5, "from": "GBP", "to": "USD"}),
    ("Add 41 and 1.", "add", {"a": 41, "b": 1}),
    ("Multiply 8 by 8.", "multiply", {"a": 8, "b": 8}),
    ("What's the weather like in Berlin?", "get_weather", {"city": "Berlin"}),
    ("Convert 100 JPY to USD.", "convert_currency", {"amount": 100, "from": "JPY", "to": "USD"}),
    ("Add 2 and 2.", "add", {"a": 2, "b": 2}),
    ("What is 5 times 3?", "multiply", {"a": 5, "b": 3}),
    ("Weather in Rome, please.", "get_weather", {"city": "Rome"}),
    ("Convert 7 EUR to USD.", "convert_currency", {"amount": 7, "from": "EUR", "to": "USD"}),
]


def think_tasks():
    constraint = reasoning(JSONSchema(ANSWER, whitespace="compact"), max_bytes=60)
    for a, b in PAIRS:
        messages = [{"role": "system", "content": "Think briefly inside <think></think>, then "
                     'answer with JSON {"answer": <integer>}.'},
                    {"role": "user", "content": f"What is {a} + {b}?"}]

        def correct(text, gold=a + b):
            _, content = split_reasoning(text)
            try:
                return float(json.loads(content)["answer"] == gold)
            except (TypeError, ValueError, KeyError):
                return 0.0

        yield f"think_json:{a}+{b}", messages, constraint, correct, correct


def tool_tasks():
    constraint = tools_constraint(TOOLS, "required", parallel_tool_calls=False)
    system = tools_prompt(TOOLS)
    for request, name, args in CALLS:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": request}]

        def first(text):
            calls = parse_tool_calls(text)[1]
            return calls[0]["function"] if calls else None

        def correct(text, name=name, args=args):
            f = first(text)
            return float(f is not None and f["name"] == name and json.loads(f["arguments"]) == args)

        def name_ok(text, name=name):
            f = first(text)
            return float(f is not None and f["name"] == name)

        yield f"tool_call:{request}", messages, constraint, correct, name_ok


FAMILIES = {"think_json": think_tasks, "tool_call": tool_tasks}


def run_one(lm, messages, constraint, method, n, max_tokens, seed):
    t0 = time.perf_counter()
    r = smc.generate(messages, constraint, lm=lm, particles=n, max_tokens=max_tokens, seed=seed,
                     sampler=method, progress=False)
    return r, time.perf_counter() - t0


def interval(values):
    values = np.asarray(values, dtype=float)
    if len(values) < 2 or np.all(values == values[0]):
        return float(values.mean()), float(values.mean()), float(values.mean())
    ci = bootstrap((values,), np.mean, n_resamples=2000, confidence_level=0.95,
                   random_state=np.random.default_rng(0)).confidence_interval
    return float(values.mean()), float(ci.low), float(ci.high)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="think_json,tool_call")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--particles", type=int, default=PARTICLES)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--methods", default="awrs,masking")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jsonl", type=Path, default=None)
    ap.add_argument("--summarize", type=Path, default=None, help="print the table of saved records")
    args = ap.parse_args(argv)
    if args.summarize is not None:
        summarize([json.loads(line) for line in args.summarize.read_text().splitlines() if line.strip()])
        return
    lm = smc.load_lm()
    records = []
    out = args.jsonl.open("a") if args.jsonl else None
    for fam in args.tasks.split(","):
        for k, (tid, messages, constraint, correct, name_ok) in enumerate(FAMILIES[fam]()):
            if args.limit is not None and k >= args.limit:
                break
            for method in args.methods.split(","):
                r, secs = run_one(lm, messages, constraint, method, args.particles, args.max_tokens, args.seed)
                post = r.posterior
                rec = {"family": fam, "task": tid, "method": method, "particles": args.particles,
                       "max_tokens": args.max_tokens, "seed": args.seed,
                       "accuracy": sum(p * correct(x) for x, p in post.items()),
                       "name_ok": sum(p * name_ok(x) for x, p in post.items()),
                       "empty": float(not post), "log_ml": r.log_ml, "seconds": secs,
                       "best": r.best}
                records.append(rec)
                print(json.dumps(rec), flush=True)
                if out:
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
    summarize(records)


def summarize(records):
    groups = {}
    for r in records:
        groups.setdefault((r["family"], r["method"]), []).append(r)
    print("| family | method | N | tasks | accuracy (95% CI) | name right | no finished output | s/run |")
    print("|---|---|---|---|---|---|---|---|")
    for (fam, method), rs in sorted(groups.items()):
        acc = interval([r["accuracy"] for r in rs])
        name = interval([r["name_ok"] for r in rs])
        print(f"| {fam} | {method} | {rs[0]['particles']} | {len(rs)} | {acc[0]:.3f} [{acc[1]:.3f}, {acc[2]:.3f}] "
              f"| {name[0]:.3f} | {sum(r['empty'] for r in rs):.0f} | {np.mean([r['seconds'] for r in rs]):.1f} |")


if __name__ == "__main__":
    main()
