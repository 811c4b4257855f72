"""The budget twist's completion search on real schemas: how often it finds a length, how many
states it expands, and what it costs.

Below 16 particles a JSON Schema run is one population with the per-byte budget twist
(docs/quality.md; ``smc.engine.critics.BudgetCritic``): every unfinished particle asks for
m(x), the length of a completion of its text, at every step. A length is remembered per
completion key; a search that expands ``max_nodes`` states without finding one gives up,
remembered too: the particle is then unrated, and its island goes untwisted at that step.
This benchmark runs that setting (N = 8, one population, AWRS,
flexible whitespace, ``per_byte`` 0.5, seed 0) with the critic made for each ``--max-nodes``
value (``off``: no twist, ``per_byte`` 0), on

    jsonschemabench  the side-by-side selection of JSONSchemaBench schemas and its prompt
                     (bench_sidebyside.py: --per-split, --max-tokens, --max-prompt-tokens)
    quality          the project's 30 JSON extraction tasks and the Ada task
                     (bench_quality.py's tasks, their prompts and budgets)

one request after another in one process (the LM's cache cleared before each), and prints per
corpus and max_nodes: the searches (cache misses), the share that found a length, the share
that gave up, the states expanded by the searches that found one (percentiles, and the share
found within K states: what a smaller max_nodes would still find), the critic's seconds and
their share of the wall time, the requests with a finished sample and the median log Ẑ, and how
many requests gave the same output (best text and log Ẑ) as under the first setting.

    python benchmarks/bench_critic.py [--corpora jsonschemabench,quality] [--max-nodes 400,100,off]
           [--per-split 3] [--max-tokens 64] [--max-prompt-tokens 2048] [--limit K] [--jsonl F]
    python benchmarks/bench_critic.py --quick     (what `make bench` runs: 2 requests per
                                                  corpus, 8 tokens; a check that it works)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_sidebyside as sbs  # noqa: E402
import quality_tasks as qt  # noqa: E402
from bench_quality import constraint_for  # noqa: E402
from smc.engine.critics import BudgetCritic  # noqa: E402

PARTICLES = 8
QUICK = {"limit": 2, "max_tokens": 8}
WITHIN = (16, 32, 64, 100, 200, 400)


class LoggedCritic(BudgetCritic):
    """BudgetCritic that logs each search (m, or None where it gave up; states expanded) and
    times every call."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.searches: list[tuple[int | None, int]] = []
        self.seconds = 0.0

    async def completion_bytes(self, potential, state) -> int | None:
        before, nodes = self.stats["searches"], self.stats["nodes"]
        m = await super().completion_bytes(potential, state)
        if self.stats["searches"] > before:
            self.searches.append((m, self.stats["nodes"] - nodes))
        return m

    async def __call__(self, particle) -> float | None:
        t0 = time.perf_counter()
        try:
            return await super().__call__(particle)
        finally:
            self.seconds += time.perf_counter() - t0


def requests(lm, corpus: str, args) -> list[dict]:
    """(name, prompt, constraint factory, max_tokens) of every request of ``corpus``."""
    from potentials import JSONSchema

    if corpus == "jsonschemabench":
        def fits(path: Path) -> bool:
            n = len(lm.encode_chat(sbs.messages_for(json.loads(path.read_text(encoding="utf-8"))["schema"])))
            return n + args.max_tokens <= lm.max_context and n <= args.max_prompt_tokens

        files = sbs.select(args.corpus, args.per_split, 0, None, fits)
        return [{"name": t["task_id"], "prompt": t["prompt_ids"], "max_tokens": t["max_tokens"],
                 "constraint": (lambda s=t["schema"]: JSONSchema(s))}
                for t in sbs.make_tasks(lm, files[: args.limit], args.max_tokens)]
    tasks = (qt.select(families="json") + qt.select(names="ada"))[: args.limit]
    return [{"name": t.name, "prompt": t.prompt, "max_tokens": args.max_tokens if args.quick else t.max_tokens,
             "constraint": (lambda t=t: constraint_for(t, "flexible"))} for t in tasks]


def run(lm, req: dict, max_nodes: int | None) -> dict:
    """One request with the twist searching up to ``max_nodes`` states (None: no twist)."""
    import smc

    critic = None if max_nodes is None else LoggedCritic(per_byte=0.5, max_nodes=max_nodes)
    lm.clear_cache()
    t0 = time.perf_counter()
    # critic=None would give the request's own budget twist: per_byte 0 turns it off
    r = smc.generate(req["prompt"], req["constraint"](), lm=lm, particles=PARTICLES, islands=1, seed=0,
                     max_tokens=req["max_tokens"], critic=critic, per_byte=0.0 if critic is None else None,
                     progress=False)
    wall = time.perf_counter() - t0
    return {"name": req["name"], "max_nodes": max_nodes, "wall_s": wall,
            "critic_s": critic.seconds if critic else 0.0, "searches": critic.searches if critic else [],
            "best": r.best if r.posterior else None, "log_z": float(r.log_ml)}


def summary(rows: list[dict], first: dict[str, dict]) -> str:
    found = [n for r in rows for m, n in r["searches"] if m is not None]
    gave = sum(1 for r in rows for m, n in r["searches"] if m is None)
    total = sum(len(r["searches"]) for r in rows)
    wall, crit = sum(r["wall_s"] for r in rows), sum(r["critic_s"] for r in rows)
    same = sum(1 for r in rows if (r["best"], r["log_z"]) == (first[r["name"]]["best"], first[r["name"]]["log_z"]))
    finished = sum(r["best"] is not None for r in rows)
    median = float(np.median([r["log_z"] for r in rows])) if rows else float("nan")
    pct = np.percentile(found, [50, 90, 99, 100]) if found else [float("nan")] * 4
    within = " ".join(f"{k}:{np.mean(np.array(found) <= k):.3f}" for k in WITHIN) if found else "-"
    return (f"requests {len(rows)}, searches {total}, found {len(found)} ({len(found) / max(total, 1):.2f}), "
            f"gave up {gave} ({gave / max(total, 1):.2f})\n"
            f"    states per found search p50/p90/p99/max {pct[0]:.0f}/{pct[1]:.0f}/{pct[2]:.0f}/{pct[3]:.0f}; "
            f"found within K states {within}\n"
            f"    wall {wall:.1f} s ({wall / len(rows):.2f} s per request), critic {crit:.1f} s "
            f"({crit / wall:.1%} of wall)\n"
            f"    finished {finished}/{len(rows)}, median log Ẑ {median:.2f}; "
            f"same output as the first setting: {same}/{len(rows)}")


def main(argv: list[str] | None = None) -> dict[str, dict[int | None, list[dict]]]:
    """Run and print (see the module docstring); the records, by corpus and max_nodes."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default="jsonschemabench,quality")
    ap.add_argument("--max-nodes", default="400,100,off")
    ap.add_argument("--corpus", type=Path, default=sbs.DEFAULT_CORPUS)
    ap.add_argument("--per-split", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-prompt-tokens", type=int, default=2048)
    ap.add_argument("--limit", type=int, help="the first K requests of each corpus")
    ap.add_argument("--jsonl", type=Path, help="append one record per request here")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if not (sys.argv[1:] if argv is None else argv):
        print("# no options (as `make bench` runs it): the quick form, --quick")
        args.quick = True
    if args.quick:
        args.limit, args.max_tokens = QUICK["limit"], QUICK["max_tokens"]
    corpora = [c.strip() for c in args.corpora.split(",") if c.strip()]
    bad = sorted(set(corpora) - {"jsonschemabench", "quality"})
    if bad:
        raise SystemExit(f"unknown corpora {bad}: jsonschemabench, quality")
    settings = [None if x.strip() == "off" else int(x) for x in args.max_nodes.split(",")]
    if "jsonschemabench" in corpora and not args.corpus.is_dir():
        if not args.quick:
            raise SystemExit(f"no corpus at {args.corpus} (MaskBench's data folder): pass --corpus DIR")
        print(f"# no corpus at {args.corpus}: the quality tasks only")
        corpora.remove("jsonschemabench")

    import torch

    import smc

    torch.set_num_threads(1)  # as bench_sidebyside runs every engine
    lm = smc.load_lm()
    print(f"# bench_critic: {sbs.machine()}; N = {PARTICLES}, one population, per_byte 0.5, "
          f"max_nodes {settings}", flush=True)
    sink = open(args.jsonl, "a", encoding="utf-8") if args.jsonl else None
    out: dict[str, dict[int | None, list[dict]]] = {}
    for corpus in corpora:
        reqs = requests(lm, corpus, args)
        by_setting: dict[int | None, list[dict]] = {}
        out[corpus] = by_setting
        for max_nodes in settings:
            rows = by_setting[max_nodes] = []
            for req in reqs:
                rec = run(lm, req, max_nodes)
                rows.append(rec)
                if sink:
                    sink.write(json.dumps({"corpus": corpus, **rec}, ensure_ascii=False) + "\n")
                    sink.flush()
        first = {r["name"]: r for r in by_setting[settings[0]]}
        for max_nodes, rows in by_setting.items():
            name = "off (no twist)" if max_nodes is None else f"max_nodes {max_nodes}"
            print(f"{corpus}, {name}: {summary(rows, first)}", flush=True)
    return out


if __name__ == "__main__":
    main()
