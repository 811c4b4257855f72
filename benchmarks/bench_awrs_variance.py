"""AWRS's weight against the exact local mass, at contexts a run visited (bench_lineages.py).

For a context x (prompt + generated tokens) the direct sampler's log weight is the exact local
log mass log Z(x) = log sum_a p(a | x) exp(logw_next(x)[a]); AWRS returns an unbiased estimate
of Z(x) (E[w] = Z(x)) whose log varies from draw to draw. Per context we draw AWRS ``--reps``
times and report log Z(x), the mean and sd of log w, the share of draws with log w = 0, and
log mean w (which should be near log Z(x)), grouped by where the context ends (inside a key,
inside a string value, outside strings: bench_lineages.where).

Read the result with its caveat: the direct sampler's full evaluation caches the state's mask,
and AWRS takes its exact known-support step wherever a small mask is cached, so these draws
measure AWRS at states already visited (as every later particle of a run meets them). AWRS's
noise at a state's first visit is read off the runs instead (``bench_lineages.py --summarize``:
sibling particles stepping from one context in one step).

    python benchmarks/bench_awrs_variance.py RECORDS.jsonl [--seed 0] [--contexts 8] [--reps 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import quality_tasks as qt  # noqa: E402
from bench_lineages import where  # noqa: E402


def contexts_of(rec: dict) -> list[tuple[int, ...]]:
    """Every (distinct) context the run's particles stepped from, in order of first visit."""
    n = rec["N"]
    texts = [() for _ in range(n)]
    seen: dict[tuple[int, ...], None] = {}
    for h in rec["raw"]:
        for i in range(n):
            if h["active"][i] and not h["finished"][i]:
                seen.setdefault(texts[i], None)
            texts[i] = texts[i] + tuple(h["tokens"][i])
        if h["ancestors"] is not None:
            texts = [texts[a] for a in h["ancestors"]]
    return list(seen)


async def main_async(args) -> None:
    import smc
    from potentials import JSONSchema
    from smc.api.generation import build_program, prompt_ids_for
    from smc.api.request import Request
    from smc.backends.vocab import decode
    from samplers import make_sampler

    rec = next(r for r in map(json.loads, open(args.records)) if r["seed"] == args.seed)
    task = qt.select(rec["task"])[0]
    lm = smc.load_lm()
    req = Request(task.prompt, JSONSchema(task.schema, whitespace="flexible"), particles=rec["N"],
                  max_tokens=task.max_tokens, lookahead=0)
    ids = prompt_ids_for(lm, req)
    awrs = build_program(req, lm, ids).sampler
    direct = make_sampler("direct", lm, awrs.potential, ids)
    ctxs = contexts_of(rec)
    by_place: dict[str, list] = {"key": [], "value": [], "outside": []}
    for c in ctxs:
        by_place[where(decode(lm, list(c)))].append(c)
    rng = np.random.default_rng(args.seed)
    rows = []
    for place, cs in by_place.items():
        pick = [cs[k] for k in sorted(rng.choice(len(cs), size=min(args.contexts, len(cs)), replace=False))]
        for c in pick:
            _, exact = await direct.sample(c, np.random.default_rng(0))
            ws = np.array([(await awrs.sample(c, np.random.default_rng(1000 + k)))[1] for k in range(args.reps)])
            fin = ws[np.isfinite(ws)]
            row = dict(place=place, text=decode(lm, list(c))[-30:], exact=float(exact),
                       mean=float(fin.mean()) if len(fin) else None, sd=float(fin.std()) if len(fin) else None,
                       zero=float(np.mean(ws == 0.0)), log_mean=float(np.log(np.mean(np.exp(ws)))))
            rows.append(row)
            print(f"{place:7s} exact {row['exact']:7.3f}  awrs mean {row['mean']:7.3f} sd {row['sd']:5.2f} "
                  f"zero {row['zero']:.2f}  log mean w {row['log_mean']:7.3f}  {row['text']!r}", flush=True)
    for place in by_place:
        rs = [r for r in rows if r["place"] == place]
        if rs:
            print(f"{place}: contexts {len(rs)}, mean exact {np.mean([r['exact'] for r in rs]):.3f}, "
                  f"mean sd of AWRS log w {np.mean([r['sd'] for r in rs]):.3f}, "
                  f"mean |log mean w - exact| {np.mean([abs(r['log_mean'] - r['exact']) for r in rs]):.3f}")
    if args.jsonl:
        with open(args.jsonl, "a") as fh:
            for r in rows:
                fh.write(json.dumps(dict(r, seed=args.seed, task=rec["task"])) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--contexts", type=int, default=8)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--jsonl")
    asyncio.run(main_async(ap.parse_args(argv)))


if __name__ == "__main__":
    main()
