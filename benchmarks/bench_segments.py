"""Think-then-JSON and tool calls on the embedded model: SMC at the defaults against masking.

Two task families with exact gold answers, 30 tasks each, built from a fixed seed (TASK_SEED)
and written out below; the task set was fixed before any per-method result was looked at (benchmarks/RESULTS.md).

    think_json   a question whose answer is a small integer (10 copied from the question,
                 10 single-digit sums "What is A + B?", 10 common facts such as the days in a
                 week); output <think> reasoning (at most REASONING_BYTES bytes) </think> then
                 {"answer": <integer>} (potentials.segments.forms.reasoning); the format is
                 stated, with one example, in the system message (the model is not a reasoning
                 model); correct iff the answer is the gold integer.
    tool_call    a request one of four tools answers (add, multiply, get_weather,
                 convert_currency) whose arguments appear literally in the request; tools stated
                 in the system message (forms.tools_prompt); correct iff the first parsed call
                 (forms.parse_tool_calls) has the gold name and arguments; name_ok iff the name
                 is right. Constraint: tools_constraint(tools, "required",
                 parallel_tool_calls=False), the output one call <tool_call> JSON </tool_call>
                 (after at most 8 bytes of whitespace), the JSON one of the tools' call objects.

For each task and method one run (smc.generate, seed s) gives a posterior over finished texts
(masking: uniform over its finished particles, its weights being improper); we record

    accuracy = sum_x post(x) * correct(x)   (0 for a run with no finished output)
    empty    = [no finished output]

and summarize, per family, each method's mean accuracy over tasks and the paired difference
d_i = accuracy_i(awrs) - accuracy_i(masking), each with a 95% bootstrap interval over tasks
(scipy.stats.bootstrap, percentile; resampling tasks keeps each task's pair together).

    python benchmarks/bench_segments.py [--tasks think_json,tool_call] [--limit K]
        [--particles N] [--max-tokens T] [--methods awrs,masking]
        [--jsonl FILE]       # with an existing FILE, the (task, method) pairs in it are skipped
    python benchmarks/bench_segments.py --summarize benchmarks/data/segments_30.jsonl
    python benchmarks/bench_segments.py --lengths      # gold outputs' token counts
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

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

#: the seed that draws every task's numbers, names and phrasings
TASK_SEED = 0
TASKS_PER_FAMILY = 30
#: bytes of reasoning allowed between <think> and </think>
REASONING_BYTES = 60

ANSWER = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
          "additionalProperties": False}
THINK_SYSTEM = ('Think briefly inside <think></think>, then answer with JSON {"answer": <integer>}. '
                'Example: <think>1 apple and 2 apples make 3 apples.</think>{"answer": 3}')
NAMES = ["Tom", "Anna", "Sam", "Lily", "Ben", "Mia", "Max", "Zoe", "Leo", "Emma"]
ITEMS = ["apples", "books", "cats", "pencils", "coins", "balls", "cards", "shells"]
FACTS = [  # (question, answer)
    ("How many days are in a week?", 7),
    ("How many legs does a spider have?", 8),
    ("How many months are in a year?", 12),
    ("How many sides does a triangle have?", 3),
    ("How many legs does a dog have?", 4),
    ("How many hours are in a day?", 24),
    ("How many wheels does a bicycle have?", 2),
    ("How many minutes are in an hour?", 60),
    ("How many fingers are on one hand?", 5),
    ("How many sides does a square have?", 4),
]

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
TOOL_SYSTEM = tools_prompt(TOOLS) + "\nReply with the function call only."
CITIES = ["Paris", "London", "Tokyo", "Madrid", "Berlin", "Rome", "Cairo", "Oslo", "Lima", "Sydney"]
CURRENCIES = ["USD", "EUR", "GBP", "JPY"]
PHRASES = {  # tool -> request templates; every argument appears literally
    "add": ["Add {a} and {b}.", "What is {a} plus {b}?"],
    "multiply": ["Multiply {a} by {b}.", "What is {a} times {b}?"],
    "get_weather": ["What's the weather in {city}?", "Tell me the weather in {city}."],
    "convert_currency": ["Convert {amount} {from} to {to}.", "How much is {amount} {from} in {to}?"],
}


class Task(NamedTuple):
    """One task: its id, chat messages, constraint, the scorers of an output, and a gold
    output (a text the constraint accepts and ``correct`` scores 1)."""

    id: str
    messages: list[dict[str, str]]
    constraint: Any
    correct: Callable[[str], float]
    name_ok: Callable[[str], float]
    gold: str


def think_questions(seed: int = TASK_SEED) -> list[tuple[str, int]]:
    """(question, integer answer): 10 copied from the question, 10 single-digit sums, 10 facts,
    in turn."""
    rng = random.Random(seed)

    def copied() -> tuple[str, int]:
        name, item, k = rng.choice(NAMES), rng.choice(ITEMS), rng.randint(2, 9)
        return f"{name} has {k} {item}. How many {item} does {name} have?", k

    sums = rng.sample([(a, b) for a in range(1, 10) for b in range(1, 10) if a + b <= 9], 10)
    kinds = (distinct(copied, 10), [(f"What is {a} + {b}?", a + b) for a, b in sums],
             rng.sample(FACTS, len(FACTS)))
    return [q for three in zip(*kinds) for q in three]  # interleaved: --limit K takes all kinds


def distinct(draw: Callable[[], tuple], k: int) -> list[tuple]:
    """k draws whose first items (the task texts) differ: a repeat is drawn again."""
    out: dict[Any, tuple] = {}
    while len(out) < k:
        item = draw()
        out.setdefault(item[0], item)
    return list(out.values())


def think_tasks(seed: int = TASK_SEED) -> Iterator[Task]:
    constraint = reasoning(JSONSchema(ANSWER, whitespace="compact"), max_bytes=REASONING_BYTES)
    for question, gold in think_questions(seed):
        messages = [{"role": "system", "content": THINK_SYSTEM}, {"role": "user", "content": question}]

        def correct(text: str, gold: int = gold) -> float:
            _, content = split_reasoning(text)
            try:
                return float(json.loads(content)["answer"] == gold)
            except (TypeError, ValueError, KeyError):
                return 0.0

        yield Task(f"think_json:{question}", messages, constraint, correct, correct,
                   f'<think></think>{{"answer":{gold}}}')


def tool_calls(seed: int = TASK_SEED) -> list[tuple[str, str, dict[str, Any]]]:
    """(request, gold tool name, gold arguments): the four tools in turn, numbers, cities,
    currencies and phrasings drawn from ``seed``."""
    rng = random.Random(seed)
    names = list(PHRASES)
    turn = iter(range(10 * TASKS_PER_FAMILY))

    def call() -> tuple[str, str, dict[str, Any]]:
        name = names[next(turn) % len(names)]
        if name in ("add", "multiply"):
            args: dict[str, Any] = {"a": rng.randint(2, 20), "b": rng.randint(2, 20)}
        elif name == "get_weather":
            args = {"city": rng.choice(CITIES)}
        else:
            src, dst = rng.sample(CURRENCIES, 2)
            args = {"amount": rng.choice([5, 10, 20, 50, 100]), "from": src, "to": dst}
        return rng.choice(PHRASES[name]).format(**args), name, args

    return distinct(call, TASKS_PER_FAMILY)


def tool_tasks(seed: int = TASK_SEED) -> Iterator[Task]:
    constraint = tools_constraint(TOOLS, "required", parallel_tool_calls=False)
    for request, name, args in tool_calls(seed):
        messages = [{"role": "system", "content": TOOL_SYSTEM}, {"role": "user", "content": request}]

        def first(text: str) -> dict[str, Any] | None:
            calls = parse_tool_calls(text)[1]
            return calls[0]["function"] if calls else None

        def correct(text: str, name: str = name, args: dict[str, Any] = args) -> float:
            f = first(text)
            return float(f is not None and f["name"] == name and json.loads(f["arguments"]) == args)

        def name_ok(text: str, name: str = name) -> float:
            f = first(text)
            return float(f is not None and f["name"] == name)

        gold = f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'
        yield Task(f"tool_call:{request}", messages, constraint, correct, name_ok, gold)


FAMILIES = {"think_json": think_tasks, "tool_call": tool_tasks}


def run_one(lm: Any, task: Task, method: str, n: int, max_tokens: int, seed: int) -> dict[str, Any]:
    """One generation of ``task`` and its record."""
    t0 = time.perf_counter()
    r = smc.generate(task.messages, task.constraint, lm=lm, particles=n, max_tokens=max_tokens,
                     seed=seed, sampler=method, progress=False)
    secs = time.perf_counter() - t0
    post = r.posterior
    lengths = [len(s.token_ids) for s in r.finished]
    return {"family": task.id.split(":", 1)[0], "task": task.id, "method": method, "particles": n,
            "max_tokens": max_tokens, "seed": seed,
            "accuracy": sum(p * task.correct(x) for x, p in post.items()),
            "name_ok": sum(p * task.name_ok(x) for x, p in post.items()),
            "empty": float(not post), "finished": len(lengths),
            "tokens_max": max(lengths, default=None), "log_ml": r.log_ml, "seconds": secs,
            "best": r.best}


def interval(values: Any) -> tuple[float, float, float]:
    """(mean, low, high): the mean of ``values`` and its 95% percentile bootstrap interval
    (2,000 resamples, seeded); a constant or single value gives the degenerate interval."""
    values = np.asarray(values, dtype=float)
    m = float(values.mean())
    if len(values) < 2 or np.all(values == values[0]):
        return m, m, m
    ci = bootstrap((values,), np.mean, n_resamples=2000, confidence_level=0.95, method="percentile",
                   random_state=np.random.default_rng(0)).confidence_interval
    return m, float(ci.low), float(ci.high)


def paired(records: list[dict[str, Any]], a: str, b: str, key: str = "accuracy") -> np.ndarray:
    """Per task that both methods ran, record[a][key] - record[b][key]."""
    by = {(r["task"], r["method"]): r[key] for r in records}
    tasks = [t for t in dict.fromkeys(r["task"] for r in records) if (t, a) in by and (t, b) in by]
    return np.array([by[(t, a)] - by[(t, b)] for t in tasks], dtype=float)


def summarize(records: list[dict[str, Any]]) -> str:
    """Markdown: per family, each method's accuracy, name accuracy, empty runs and wall time,
    then the paired difference of the first method against masking."""
    def fmt(v: tuple[float, float, float]) -> str:
        return f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"

    out = ["| family | method | N | tasks | accuracy (95% CI) | name right | no finished output "
           "| median s/run | median max tokens |", "|---|---|---|---|---|---|---|---|---|"]
    diffs = ["", "| family | paired tasks | accuracy awrs - masking (95% CI) | name right awrs - masking |",
             "|---|---|---|---|"]
    for fam in dict.fromkeys(r["family"] for r in records):
        rows = [r for r in records if r["family"] == fam]
        for method in dict.fromkeys(r["method"] for r in rows):
            rs = [r for r in rows if r["method"] == method]
            toks = [r["tokens_max"] for r in rs if r.get("tokens_max") is not None]
            out.append(f"| {fam} | {method} | {rs[0]['particles']} | {len(rs)} "
                       f"| {fmt(interval([r['accuracy'] for r in rs]))} "
                       f"| {np.mean([r['name_ok'] for r in rs]):.3f} | {sum(r['empty'] for r in rs):.0f} "
                       f"| {np.median([r['seconds'] for r in rs]):.1f} "
                       f"| {np.median(toks) if toks else '-'} |")
        d = paired(rows, "awrs", "masking")
        if len(d):
            dn = paired(rows, "awrs", "masking", "name_ok")
            diffs.append(f"| {fam} | {len(d)} | {fmt(interval(d))} | {fmt(interval(dn))} |")
    return "\n".join(out + (diffs if len(diffs) > 3 else []))


def lengths(lm: Any) -> str:
    """Token counts of the gold outputs per family (the think_json gold has empty reasoning,
    to which up to REASONING_BYTES bytes of reasoning add)."""
    lines = []
    for fam, tasks in FAMILIES.items():
        ns = [len(lm.encode(t.gold)) for t in tasks()]
        lines.append(f"{fam}: gold output {min(ns)}-{max(ns)} tokens (median {np.median(ns):.0f})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="think_json,tool_call")
    ap.add_argument("--limit", type=int, default=None, help="the first K tasks of each family")
    ap.add_argument("--particles", type=int, default=PARTICLES)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--methods", default="awrs,masking")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jsonl", type=Path, default=None)
    ap.add_argument("--summarize", type=Path, default=None, help="print the table of saved records")
    ap.add_argument("--lengths", action="store_true", help="print the gold outputs' token counts")
    args = ap.parse_args(argv)
    if args.summarize is not None:
        print(summarize([json.loads(line) for line in args.summarize.read_text().splitlines() if line.strip()]))
        return
    lm = smc.load_lm()
    if args.lengths:
        print(lengths(lm))
        return
    records = []
    if args.jsonl is not None and args.jsonl.exists():  # a rerun goes on where the file ends
        records = [json.loads(line) for line in args.jsonl.read_text().splitlines() if line.strip()]
    done = {(r["task"], r["method"]) for r in records}
    out = args.jsonl.open("a") if args.jsonl else None
    makers = {"think_json": think_tasks, "tool_call": tool_tasks}
    families = [makers[fam]() for fam in args.tasks.split(",")]
    # the families in turn, so a run cut short holds the first tasks of each
    for k, row in enumerate(zip(*families)):
        if args.limit is not None and k >= args.limit:
            break
        for task in row:
            for method in args.methods.split(","):
                if (task.id, method) in done:
                    continue
                rec = run_one(lm, task, method, args.particles, args.max_tokens, args.seed)
                records.append(rec)
                print(json.dumps(rec), flush=True)
                if out:
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
    print(summarize(records))


if __name__ == "__main__":
    main()
