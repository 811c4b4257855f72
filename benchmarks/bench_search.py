"""Beam search, exact top-k and without-replacement steering next to SMC on the embedded model.

For one constrained task, runs generate(method=...) for SMC (AWRS), beam, top_k and steer and
prints per run: wall time, LM forward passes, particles expanded (beam/top_k/steer), the best
finished text with its exact log mass log p(x, EOS | prompt) + log phi(x) (beam, top_k: the
sample's own weight; SMC and steer weights are estimates, so for them the mass is recomputed by
scoring the text's tokens), and log_ml. Ratios are to the SMC run of the same invocation.

    python benchmarks/bench_search.py [--task phone|json] [--max-tokens 16] [--methods smc,beam,top_k,steer]
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
from potentials import JSONSchema, Regex  # noqa: E402
from smc.api.generation import prompt_ids_for  # noqa: E402

TASKS = {
    "phone": ("Write a US phone number:", lambda: Regex(r"[0-9]{3}-[0-9]{3}-[0-9]{4}")),
    "json": (
        "Describe a person as JSON with a name and an age:",
        lambda: JSONSchema({
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
            "required": ["name", "age"],
            "additionalProperties": False,
        }),
    ),
}

RUNS = [
    ("smc", dict(particles=8, sampler="awrs", seed=0)),
    ("beam", dict(particles=4)),
    ("beam", dict(particles=8)),
    ("top_k", dict(particles=1)),
    ("top_k", dict(particles=4)),
    ("steer", dict(particles=8, n_beam=2, seed=0)),
]


async def log_mass(lm, ids: list[int], tokens: tuple[int, ...]) -> float:
    """log p(tokens, EOS | ids) under the LM (the constraint's weight is 0 or 1 here)."""
    ctx, total = list(ids), 0.0
    for t in list(tokens) + [None]:
        lp = (await lm.next_token_logprobs(ctx)).double()
        total += float(torch.logsumexp(lp[list(lm.eos_token_ids)], 0)) if t is None else float(lp[t])
        ctx.append(t)
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="phone", choices=sorted(TASKS))
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--jsonl")
    ap.add_argument("--methods", default="smc,beam,top_k,steer", help="comma-separated subset to run")
    args = ap.parse_args()
    prompt, make = TASKS[args.task]
    lm = smc.load_lm()
    ids = prompt_ids_for(lm, smc.Request(prompt, max_tokens=args.max_tokens))
    # build the constraint's per-LM tables once, outside the timed runs
    smc.generate(prompt, make(), lm=lm, max_tokens=1, particles=1, progress=False)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows = []
    for method, kw in [r for r in RUNS if r[0] in args.methods.split(",")]:
        t0 = time.perf_counter()
        try:
            r = smc.generate(prompt, make(), lm=lm, max_tokens=args.max_tokens, method=method,
                             progress=False, **kw)
        except ValueError as e:  # e.g. top_k's expansion budget
            rows.append(dict(method=method, **kw, error=str(e), wall_s=time.perf_counter() - t0))
            print(rows[-1], flush=True)
            continue
        wall = time.perf_counter() - t0
        fin = r.finished
        row = dict(method=method, **kw, wall_s=round(wall, 2), forward_passes=r.stats.get("lm_forward_passes"),
                   expansions=r.stats.get("expansions"), finished=len(fin), log_ml=r.log_ml)
        if fin:
            masses = [asyncio.run(log_mass(lm, ids, s.token_ids)) for s in fin]
            i = max(range(len(fin)), key=lambda j: masses[j])
            row.update(best_text=fin[i].text, best_log_mass=round(masses[i], 3))
        rows.append(row)
        print(row, flush=True)
    base = next((r["wall_s"] for r in rows if r["method"] == "smc" and "error" not in r), None)
    print(f"\n{args.task}, max_tokens={args.max_tokens}, commit {commit}, {platform.machine()} "
          f"{torch.get_num_threads()} threads")
    print("| method | args | wall s | / smc | forward passes | expansions | best text | best log p(x, EOS) | log_ml |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        a = ", ".join(f"{k}={r[k]}" for k in ("particles", "n_beam", "sampler") if k in r)
        if "error" in r:
            print(f"| {r['method']} | {a} | {r['wall_s']:.1f} | | | | {r['error'][:60]} | | |")
            continue
        ratio = f"{r['wall_s'] / base:.2f}" if base else ""
        print(f"| {r['method']} | {a} | {r['wall_s']:.1f} | {ratio} | {r['forward_passes']} | "
              f"{r['expansions'] or ''} | {r.get('best_text', '')!r} | {r.get('best_log_mass', '')} | {r['log_ml']:.3f} |")
    if args.jsonl:
        with open(args.jsonl, "a") as f:
            for r in rows:
                f.write(json.dumps(dict(r, task=args.task, commit=commit)) + "\n")


if __name__ == "__main__":
    main()
