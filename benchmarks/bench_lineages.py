"""Which particles win resampling, and why: per step and particle, on a JSON task.

For one ``smc.generate`` run (N particles, one population unless ``--islands``), the history
gives per step t and particle i the log weight after the step, lw_t[i], and the ancestors of
any resampling. The weight particle i carried into step t is

    lw_{t-1}[a]            no resampling after step t-1 (a = i),
    log mean_j w_{t-1, j}  resampled (the island's mean; one population here),

so the incremental log weight of step t is inc_t[i] = lw_t[i] - (that). We follow every
particle's text through the ancestors and classify its step as *inside a JSON string* (the text
before the step has an odd number of unescaped quotes) or *outside*. Per run we print:

    the sum of inc inside and outside strings along each final particle's lineage,
    the resampling events and the share of children the lineage of the final best text got,
    the final texts with their weights, log Ẑ, and the ESS trace.

    python benchmarks/bench_lineages.py [--task ada] [--particles 10] [--seeds 0,1,2]
        [--critic none|budget[=RATE[:PER_BYTE]]] [--islands 1] [--jsonl FILE] [--verbose]
    python benchmarks/bench_lineages.py --summarize FILE... [--selection age=36]   (saved records;
        benchmarks/data/; --selection: does resampling favour a wrong value, ``value_selection``)

``--summarize`` also reads AWRS's own noise off the records (``sibling_noise``): particles that
step from one context in one step have equal exact local masses, so their weights differ only by
the sampler's randomness.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import quality_tasks as qt  # noqa: E402


def where(text: str) -> str:
    """Where ``text`` (JSON being written) ends: "value" inside a string value, "key" inside an
    object key, "outside" elsewhere (structure, numbers, literals)."""
    stack: list[str] = []
    inside, esc, key = False, False, False
    expect_key = False
    for ch in text:
        if inside:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                inside = False
            continue
        if ch == '"':
            inside, key = True, bool(stack) and stack[-1] == "{" and expect_key
        elif ch in "{[":
            stack.append(ch)
            expect_key = ch == "{"
        elif ch in "}]":
            if stack:
                stack.pop()
            expect_key = False
        elif ch == ",":
            expect_key = bool(stack) and stack[-1] == "{"
        elif ch == ":":
            expect_key = False
    if not inside:
        return "outside"
    return "key" if key else "value"


def in_string(text: str) -> bool:
    """Whether ``text`` ends inside a string value (not a key)."""
    return where(text) == "value"


def lineages(result, lm) -> dict:
    """Per step and particle: (incremental log weight, inside a string before the step, text
    after the step, finished, the particle's root at step 1); the resampling events."""
    from smc.backends.vocab import decode
    from smc.core.logmath import logsumexp

    hist = result.history
    n = len(hist[0].log_weights)
    texts = [[] for _ in range(n)]  # token ids so far, per particle of the current population
    start = [0.0] * n  # weight carried into the step (initial weights: phi.prefix(()) = 0 here)
    roots = list(range(n))
    steps = []
    for rec in hist:
        lw = np.array(rec.log_weights, dtype=float)
        rows = []
        for i in range(n):
            before = decode(lm, texts[i])
            inc = float(lw[i] - start[i]) if rec.active[i] and math.isfinite(start[i]) else 0.0
            texts[i] = texts[i] + list(rec.tokens[i])
            rows.append(dict(inc=inc, inside=in_string(before), place=where(before), active=bool(rec.active[i]),
                             finished=bool(rec.finished[i]), root=roots[i],
                             new=decode(lm, list(rec.tokens[i]))))
        event = None
        if rec.ancestors is not None:
            anc = rec.ancestors
            mean = float(logsumexp(lw) - math.log(n))
            w = np.exp(lw - lw.max())
            w = w / w.sum()
            top = int(np.argmax(lw))
            event = dict(step=rec.step, ess=rec.ess, top=top, top_share=float(w[top]),
                         top_inside=rows[top]["inside"], top_text=decode(lm, texts[top])[-60:],
                         children=[anc.count(i) for i in range(n)])
            texts = [list(texts[a]) for a in anc]
            roots = [roots[a] for a in anc]
            start = [mean] * n
        else:
            start = [float(x) for x in lw]
        steps.append(dict(step=rec.step, ess=rec.ess, rows=rows, event=event))
    return dict(steps=steps, roots=roots)


def summarize_run(result, lm, info: dict) -> dict:
    """Per final particle the lineage sums inside/outside strings (lineage followed backwards
    through the ancestors), and per resampling event whether the heaviest particle was inside a
    string."""
    hist = result.history
    n = len(hist[0].log_weights)
    parents = []  # parents[t][i]: index at step t of the ancestor of particle i of step t+1
    for rec in hist:
        parents.append(rec.ancestors if rec.ancestors is not None else list(range(n)))
    lin_inside = np.zeros(n)
    lin_outside = np.zeros(n)
    cur = list(parents[-1])  # the final population comes after the last record's resampling
    for t in range(len(hist) - 1, -1, -1):
        rows = info["steps"][t]["rows"]
        for k in range(n):
            r = rows[cur[k]]
            if r["active"]:
                if r["inside"]:
                    lin_inside[k] += r["inc"]
                else:
                    lin_outside[k] += r["inc"]
        if t > 0:
            cur = [parents[t - 1][c] for c in cur]
    # the per-step incremental weights over all particles, by place (EOS: the finishing step)
    by_place: dict[str, list[float]] = {"key": [], "value": [], "outside": [], "eos": []}
    for st in info["steps"]:
        for r in st["rows"]:
            if r["active"] and math.isfinite(r["inc"]):
                by_place["eos" if r["finished"] else r["place"]].append(r["inc"])
    places = {k: dict(n=len(v), mean=float(np.mean(v)) if v else None,
                      q05=float(np.quantile(v, 0.05)) if v else None,
                      zero_share=float(np.mean(np.array(v) == 0.0)) if v else None)
              for k, v in by_place.items()}
    events = [s["event"] for s in info["steps"] if s["event"] is not None]
    return dict(
        lineage_inside=lin_inside.tolist(), lineage_outside=lin_outside.tolist(),
        places=places,
        events=len(events),
        events_top_inside=sum(e["top_inside"] for e in events),
        events_top_share=[round(e["top_share"], 2) for e in events],
        event_tops=[(e["step"], e["top_inside"], round(e["top_share"], 2), e["top_text"]) for e in events],
        roots_final=info["roots"],
    )


def value_selection(records: list[dict], decode_ids, field: str, gold: int) -> dict:
    """Does resampling favour particles with a wrong value of an integer field? At every
    resampling event where every particle has written ``field`` and some have ``gold`` and some
    not, the share of the (recorded, twisted) weight on the wrong ones against their share of
    the particles, and the share of the children they got; summed over the events. Equal
    sums: the wrong values win only as often as they are there (drift, not selection)."""
    pattern = re.compile(r'"%s"\s*:\s*(-?\d+)\D' % re.escape(field))
    events, count, weight, children = 0, 0.0, 0.0, 0.0
    for rec in records:
        n = rec["N"]
        toks: list[list[int]] = [[] for _ in range(n)]
        for h in rec["raw"]:
            toks = [t + list(new) for t, new in zip(toks, h["tokens"])]
            if h["ancestors"] is None:
                continue
            found = [pattern.search(decode_ids(t)) for t in toks]
            if all(found):
                wrong = np.array([int(m.group(1)) != gold for m in found])
                if 0 < wrong.sum() < n:
                    lw = np.array(h["lw"], dtype=float)
                    w = np.exp(lw - np.logaddexp.reduce(lw))
                    events += 1
                    count += wrong.mean()
                    weight += float(w[wrong].sum())
                    children += float(np.mean([wrong[a] for a in h["ancestors"]]))
            toks = [list(toks[a]) for a in h["ancestors"]]
    return dict(events=events, wrong_share_of_particles=round(float(count), 2), wrong_share_of_weight=round(weight, 2),
                wrong_share_of_children=round(children, 2))


def sibling_noise(records: list[dict]) -> dict:
    """AWRS's own noise, read off the runs: where two or more particles step from the same context
    in the same step (siblings after a resampling, or the first step), their exact local masses
    are equal, so any difference between their incremental log weights is the sampler's. Returns
    the number of such groups, how many differ, the mean sd among those, the largest spread."""
    groups = noisy = 0
    sds, spreads = [], [0.0]
    for rec in records:
        n = rec["N"]
        toks: list[tuple[int, ...]] = [() for _ in range(n)]
        start = [0.0] * n
        for h in rec["raw"]:
            lw = np.array(h["lw"], dtype=float)
            by_ctx: dict[tuple[int, ...], list[float]] = {}
            for i in range(n):
                if h["active"][i] and math.isfinite(start[i]) and math.isfinite(lw[i]):
                    by_ctx.setdefault(toks[i], []).append(float(lw[i] - start[i]))
                toks[i] = toks[i] + tuple(h["tokens"][i])
            for incs in by_ctx.values():
                if len(incs) >= 2:
                    groups += 1
                    spreads.append(max(incs) - min(incs))
                    if spreads[-1] > 1e-9:
                        noisy += 1
                        sds.append(float(np.std(incs)))
            if h["ancestors"] is not None:
                mean = float(np.logaddexp.reduce(lw) - math.log(n))
                toks, start = [toks[a] for a in h["ancestors"]], [mean] * n
            else:
                start = [float(x) for x in lw]
    return dict(groups=groups, differing=noisy, mean_sd=float(np.mean(sds)) if sds else 0.0,
                max_spread=max(spreads))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="ada")
    ap.add_argument("--particles", type=int, default=10)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--islands", type=int, default=1)
    ap.add_argument("--ess-threshold", type=float, default=0.5)
    ap.add_argument("--resampling", default="multinomial")
    ap.add_argument("--critic", default="none")
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--jsonl", help="append one record per run")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--summarize", nargs="+", metavar="FILE",
                    help="only print log Ẑ per run and the sibling noise of saved records")
    ap.add_argument("--selection", metavar="FIELD=VALUE",
                    help="with --summarize: how resampling treats particles whose integer FIELD is not "
                         "VALUE (value_selection; e.g. age=36 on the Ada task)")
    args = ap.parse_args(argv)
    if args.summarize:
        for path in args.summarize:
            path = path if Path(path).exists() else str(ROOT / "benchmarks" / "data" / path)
            recs = [json.loads(line) for line in open(path)]
            print(path)
            for r in recs:
                print(f"  N={r['N']} seed {r['seed']} critic {r['critic']}: log Ẑ {r['log_ml']:.1f}  "
                      f"accuracy {r['accuracy']:.2f}  best {r['best'][:70]!r}")
            print("  sibling noise:", sibling_noise(recs))
            if args.selection:
                import smc
                from smc.backends.vocab import decode

                lm = smc.load_lm()
                field, _, value = args.selection.partition("=")
                print(f"  selection of {field} != {value}:",
                      value_selection(recs, lambda ids: decode(lm, ids), field, int(value)))
        return

    import smc
    from potentials import JSONSchema

    task = qt.select(args.task)[0]
    lm = smc.load_lm()
    for seed in [int(s) for s in args.seeds.split(",")]:
        critic = make_critic(args.critic)
        t0 = time.perf_counter()
        r = smc.generate(task.prompt, JSONSchema(task.schema, whitespace="flexible"), lm=lm,
                         particles=args.particles, max_tokens=args.max_tokens or task.max_tokens, seed=seed,
                         sampler="awrs", ess_threshold=args.ess_threshold, resampling=args.resampling,
                         islands=args.islands, critic=critic, progress=False)
        wall = time.perf_counter() - t0
        info = lineages(r, lm)
        summ = summarize_run(r, lm, info)
        post = r.posterior
        acc = sum(p * qt.score(task, qt.parse_answer(task, t, constrained=True)[0]) for t, p in post.items())
        rec = dict(task=task.name, N=args.particles, seed=seed, islands=args.islands, critic=args.critic,
                   ess_threshold=args.ess_threshold, resampling=args.resampling,
                   log_ml=float(r.log_ml), empty=not post, accuracy=acc, wall_s=wall,
                   best=(r.best or "")[:200], finished=sum(s.finished for s in r.samples),
                   resampling_events=r.stats["resampling_events"],
                   final=[(round(s.log_weight, 2), s.finished, s.text[-80:]) for s in r.samples], **summ,
                   raw=[dict(tokens=[list(t) for t in h.tokens], lw=h.log_weights, active=h.active,
                             finished=h.finished, ancestors=h.ancestors, ess=h.ess) for h in r.history])
        print(f"seed {seed}: log Ẑ {rec['log_ml']:.1f}  empty={rec['empty']}  acc={acc:.2f}  "
              f"finished {rec['finished']}/{args.particles}  events {rec['events']} "
              f"(heaviest inside a string: {rec['events_top_inside']})  {wall:.0f} s", flush=True)
        print("   inc/step " + "; ".join(
            f"{k} {v['mean']:.3f} (q05 {v['q05']:.2f}, zero {v['zero_share']:.2f}, n={v['n']})"
            for k, v in rec["places"].items() if v["n"]), flush=True)
        print(f"   best: {rec['best']!r}", flush=True)
        if args.verbose:
            for e in rec["event_tops"]:
                print("   event", e, flush=True)
            for k, (w, f, t) in enumerate(rec["final"]):
                print(f"   final {k}: {w:8.2f} {f} in={rec['lineage_inside'][k]:.1f} out={rec['lineage_outside'][k]:.1f} {t!r}")
        if args.jsonl:
            with open(args.jsonl, "a") as fh:
                fh.write(json.dumps(rec) + "\n")


def make_critic(spec: str):
    if spec == "none":
        return None
    from smc.engine.critics import BudgetCritic

    name, _, rates = spec.partition("=")
    if name == "budget":  # budget[=RATE[:PER_BYTE]]
        rate, _, per_byte = rates.partition(":")
        return BudgetCritic(rate=float(rate or 1.0), per_byte=float(per_byte or 0.0))
    raise ValueError(f"unknown critic {spec!r}")


if __name__ == "__main__":
    main()
