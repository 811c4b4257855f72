"""The budget twist's completion search on real schemas: how often it finds a length, how many
states it expands, and what it costs.

Below 16 particles a JSON Schema run is one population with the per-byte budget twist
(docs/quality.md; ``smc.engine.critics.BudgetCritic``): every unfinished particle asks for
m(x), the length of a completion of its text, at every step. A length is remembered per
completion key; a search that expands ``max_nodes`` states without finding one gives up,
remembered too: the particle is then unrated, and its island goes untwisted at that step.
This benchmark runs that setting (N = 8, one population, AWRS,
flexible whitespace, ``per_byte`` 0.5, each of ``--seeds``, 0 by default) with the critic made for each ``--settings``
value: K (the default critic with ``max_nodes`` K: breadth-first search, then the
constraint's own completion, then the depth-first byte search), ``bytes:K`` (the byte searches
only, ``completions=False``), ``off`` (no twist, ``per_byte`` 0), on

    jsonschemabench  the side-by-side selection of JSONSchemaBench schemas and its prompt
                     (bench_sidebyside.py: --per-split, --max-tokens, --max-prompt-tokens)
    quality          the project's 30 JSON extraction tasks and the Ada task
                     (bench_quality.py's tasks, their prompts and budgets)

one request after another in one process (the LM's cache cleared before each), and prints per
corpus and setting: the searches (cache misses), the share that found a length (and how many
by the constraint's completion), the share that gave up, the states expanded by the byte
searches that found one (percentiles, and the share found within K states: what a smaller
max_nodes would still find), the critic's seconds and their share of the wall time, the runs
with a finished sample (and, paired by request and seed, how many finished where the first
setting's run did not, and the reverse, with a sign test), the median log Ẑ, and how many runs
gave the same output (best text and log Ẑ) as under the first setting. ``--summarize F``
prints the same from the records of a ``--jsonl`` file, without running anything.

    python benchmarks/bench_critic.py [--corpora jsonschemabench,quality] [--settings 100,bytes:100,off]
           [--seeds 0,1,2] [--per-split 3] [--max-tokens 64] [--max-prompt-tokens 2048] [--limit K] [--jsonl F]
    python benchmarks/bench_critic.py --summarize F
    python benchmarks/bench_critic.py --quick     (what `make bench` runs: 2 requests per
                                                  corpus, 8 tokens; a check that it works)
"""

from __future__ import annotations

import argparse
import json
import math
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
    """BudgetCritic that logs each search (m, or None where it gave up; states expanded by the
    byte searches; whether the constraint's completion gave m; byte advances the byte searches
    made) and times every call."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.searches: list[tuple[int | None, int, bool, int]] = []
        self.seconds = 0.0

    async def completion_bytes(self, potential, state) -> int | None:
        stats = self.stats
        before, nodes, known, advances = stats["searches"], stats["nodes"], stats["completions"], stats["advances"]
        m = await super().completion_bytes(potential, state)
        if stats["searches"] > before:
            self.searches.append((m, stats["nodes"] - nodes, stats["completions"] > known, stats["advances"] - advances))
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


def critic_for(setting: str) -> LoggedCritic | None:
    """The critic of a ``--settings`` value: "K", "bytes:K" or "off" (None)."""
    if setting == "off":
        return None
    bytes_only = setting.startswith("bytes:")
    try:
        max_nodes = int(setting.removeprefix("bytes:"))
    except ValueError:
        raise SystemExit(f"a setting is K, bytes:K or off, not {setting!r}") from None
    return LoggedCritic(per_byte=0.5, max_nodes=max_nodes, completions=not bytes_only)


def run(lm, req: dict, setting: str, seed: int) -> dict:
    """One request with the critic of ``setting`` (``critic_for``)."""
    import smc

    critic = critic_for(setting)
    lm.clear_cache()
    t0 = time.perf_counter()
    # critic=None would give the request's own budget twist: per_byte 0 turns it off
    r = smc.generate(req["prompt"], req["constraint"](), lm=lm, particles=PARTICLES, islands=1, seed=seed,
                     max_tokens=req["max_tokens"], critic=critic, per_byte=0.0 if critic is None else None,
                     progress=False)
    wall = time.perf_counter() - t0
    return {"name": req["name"], "seed": seed, "setting": setting, "wall_s": wall,
            "critic_s": critic.seconds if critic else 0.0, "searches": critic.searches if critic else [],
            "best": r.best if r.posterior else None, "log_z": float(r.log_ml)}


def sign_test(a: int, b: int) -> float:
    """Two-sided exact sign test of a against b discordant pairs (1.0 when there are none)."""
    n, k = a + b, min(a, b)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0


def summary(rows: list[dict], first: dict[str, dict]) -> str:
    found = [n for r in rows for m, n, *_ in r["searches"] if m is not None]
    known = sum(1 for r in rows for m, _, by_constraint, *_ in r["searches"] if by_constraint)
    gave = sum(1 for r in rows for m, *_ in r["searches"] if m is None)
    # records before the advances were logged have three fields per search
    logged = [s for r in rows for s in r["searches"] if len(s) > 3]
    advances = {"found": [s[3] for s in logged if s[0] is not None], "gave up": [s[3] for s in logged if s[0] is None]}
    total = sum(len(r["searches"]) for r in rows)
    wall, crit = sum(r["wall_s"] for r in rows), sum(r["critic_s"] for r in rows)
    same = sum(1 for r in rows
               if (r["best"], r["log_z"]) == (first[r["name"], r["seed"]]["best"], first[r["name"], r["seed"]]["log_z"]))
    finished = sum(r["best"] is not None for r in rows)
    # paired with the first setting's run of the same request and seed
    gained = sum(1 for r in rows if r["best"] is not None and first[r["name"], r["seed"]]["best"] is None)
    lost = sum(1 for r in rows if r["best"] is None and first[r["name"], r["seed"]]["best"] is not None)
    median = float(np.median([r["log_z"] for r in rows])) if rows else float("nan")
    pct = np.percentile(found, [50, 90, 99, 100]) if found else [float("nan")] * 4
    within = " ".join(f"{k}:{np.mean(np.array(found) <= k):.3f}" for k in WITHIN) if found else "-"
    return (f"requests {len(rows)}, searches {total}, found {len(found)} ({len(found) / max(total, 1):.2f}; "
            f"{known} by the constraint's completion), gave up {gave} ({gave / max(total, 1):.2f})\n"
            f"    byte states per found search p50/p90/p99/max {pct[0]:.0f}/{pct[1]:.0f}/{pct[2]:.0f}/{pct[3]:.0f}; "
            f"found within K states {within}\n"
            + "".join(f"    byte advances per {outcome} search p50/p90/p99/max "
                      + "/".join(f"{v:.0f}" for v in np.percentile(a, [50, 90, 99, 100])) + f" (sum {sum(a)})\n"
                      for outcome, a in advances.items() if a) +
            f"    wall {wall:.1f} s ({wall / len(rows):.2f} s per request), critic {crit:.1f} s "
            f"({crit / wall:.1%} of wall)\n"
            f"    finished {finished}/{len(rows)} (against the first setting: +{gained} -{lost}, "
            f"sign test p = {sign_test(gained, lost):.3f}), "
            f"median log Ẑ {median:.2f}; "
            f"same output as the first setting: {same}/{len(rows)}")


def print_summaries(out: dict[str, dict[str, list[dict]]]) -> None:
    """One summary per corpus and setting, each run paired with the first setting's."""
    for corpus, by_setting in out.items():
        first_rows = next(iter(by_setting.values()))
        first = {(r["name"], r["seed"]): r for r in first_rows}
        for setting, rows in by_setting.items():
            print(f"{corpus}, {setting}: {summary(rows, first)}", flush=True)


def summarize(path: Path) -> dict[str, dict[str, list[dict]]]:
    """The records of a ``--jsonl`` file by corpus and setting (in file order), summaries
    printed."""
    out: dict[str, dict[str, list[dict]]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            out.setdefault(rec.pop("corpus"), {}).setdefault(rec["setting"], []).append(rec)
    print_summaries(out)
    return out


def main(argv: list[str] | None = None) -> dict[str, dict[str, list[dict]]]:
    """Run and print (see the module docstring); the records, by corpus and setting."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default="jsonschemabench,quality")
    ap.add_argument("--settings", default="100,bytes:100,off")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--corpus", type=Path, default=sbs.DEFAULT_CORPUS)
    ap.add_argument("--per-split", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-prompt-tokens", type=int, default=2048)
    ap.add_argument("--limit", type=int, help="the first K requests of each corpus")
    ap.add_argument("--jsonl", type=Path, help="append one record per request here")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--summarize", type=Path, help="print the summaries of these records and stop")
    args = ap.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize)
    if not (sys.argv[1:] if argv is None else argv):
        print("# no options (as `make bench` runs it): the quick form, --quick")
        args.quick = True
    if args.quick:
        args.limit, args.max_tokens = QUICK["limit"], QUICK["max_tokens"]
    corpora = [c.strip() for c in args.corpora.split(",") if c.strip()]
    bad = sorted(set(corpora) - {"jsonschemabench", "quality"})
    if bad:
        raise SystemExit(f"unknown corpora {bad}: jsonschemabench, quality")
    settings = [x.strip() for x in args.settings.split(",") if x.strip()]
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    for setting in settings:
        critic_for(setting)  # a bad value is named before the model loads
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
          f"settings {settings}, seeds {seeds}", flush=True)
    sink = open(args.jsonl, "a", encoding="utf-8") if args.jsonl else None
    out: dict[str, dict[str, list[dict]]] = {}
    for corpus in corpora:
        reqs = requests(lm, corpus, args)
        by_setting: dict[str, list[dict]] = {}
        out[corpus] = by_setting
        for setting in settings:
            rows = by_setting[setting] = []
            for req in reqs:
                for seed in seeds:
                    rec = run(lm, req, setting, seed)
                    rows.append(rec)
                    if sink:
                        sink.write(json.dumps({"corpus": corpus, **rec}, ensure_ascii=False) + "\n")
                        sink.flush()
        print_summaries({corpus: by_setting})
    return out


if __name__ == "__main__":
    main()
