"""Answer quality on gold-answer tasks (benchmarks/quality_tasks.py), embedded model, CPU.

For every task t, method m, particle count N and seed s, one run of the method gives a weighted
set of answers; we record

    accuracy  = sum_x post(x) * score_t(x)     (posterior-weighted; 0 for a run with no answer)
    validity  = sum_x post(x) * [x satisfies the constraint]
    empty     = [no finished sample]            (no answer at all)
    log_ml    = log Ẑ (SMC methods), wall time

where post is the run's posterior over finished texts (uniform over finished particles for
masking, whose weights are improper; a point mass for one unconstrained sample). Methods:

    unconstrained        one sample with no constraint (budget max_tokens + 32: the model may
                         chat before answering), read as a user would (quality_tasks.parse_answer:
                         outermost {...}, first regex match, first grammar line)
    SAMPLER[:WS][:budget[=RATE]][:per_byte=C][:hold=0|1][:islands=K][:resampling=NAME][:power=A][:OPTION=K]
                         SMC with smc.generate(sampler=SAMPLER) (awrs, direct or masking), the JSON
                         whitespace WS (compact, flexible or an int run length; ignored by regex and
                         grammar tasks), and with ``budget`` the smc.engine.critics.BudgetCritic critic
                         (rate RATE, default 1); ``per_byte=C``: BudgetCritic(rate=RATE,
                         per_byte=C) (RATE 1 unless ``budget=RATE`` is given too); ``hold=0``
                         or ``1``: that critic's hold_literals (default: generate's,
                         defaults.hold_literals_for(N); alone: the default twist, per_byte =
                         defaults.PER_BYTE, with hold_literals set);
                         ``islands=K``: smc.generate(islands=K) (default: generate's own default;
                         ``islands=1`` is plain SMC); ``resampling=NAME``:
                         smc.generate(resampling=NAME) (default: generate's own); ``power=A``:
                         smc.generate(resampling_power=A) (default: generate's own);
                         ``OPTION=K``: the sampler's option OPTION set to the integer K
                         (smc.generate(sampler_options=...); e.g. awrs's early_fallback_permille)

Summary: per method and N, the mean of each quantity over runs with a 95% bootstrap interval
(runs resampled with replacement, 2000 times); "finished where masking finished": among the
(task, seed) pairs where masking at the same N returned a sample, the fraction where the method
did; "collapsed": runs with no finished sample or a log Ẑ more than 10 nats below the median of
the same task, method and N; "vs masking": the mean over (task, seed) pairs of the accuracy
minus masking's at the same N, with its paired 95% bootstrap interval. A last table sets each
method's log Ẑ beside the baseline's on the same runs: the difference of their medians (the
statistic of "median log Ẑ at least the peer's") with a paired interval, the spread of log Ẑ
over seeds per task, the log of the mean Ẑ per task, which tells a different target from a
wider spread, the per-task difference of medians (mean over tasks, tasks at or above), and the
difference of medians over every pair, a run with no answer counting log Ẑ = -inf.

    python benchmarks/bench_quality.py [--tasks NAMES] [--families json,regex,grammar]
        [--limit K (default 3 when no tasks/families are named)] [--methods unconstrained,masking:flexible,awrs:compact,awrs:flexible]
        [--particles 4,16] [--seeds 0] [--ess-threshold 0.5] [--jsonl FILE] [--summary FILE]
        [--workers K] [--by-run] [--time-limit S] [--device cuda] [--dtype float32]

``--workers K`` runs the grid in K processes (each loads the model; run i takes every K-th run)
and merges their records into --jsonl; ``--by-run`` loops over (seed, task) outermost, so a grid
cut short by ``--time-limit S`` (no new run starts after S seconds) has every setting for the
runs it reached: the order to use for paired comparisons.

A run's records go to --jsonl as they finish (one JSON object per run); runs already in that
file are not repeated (resume), and ``--summarize FILE...`` prints the tables of saved records
without running anything (a FILE that does not exist as given is looked up in benchmarks/data/,
where the recorded runs cited in benchmarks/RESULTS.md are kept: ``--summarize
quality_runs_json_n16.jsonl``). ``--export FILE`` writes the selected JSON tasks for
``benchmarks/peers/genlm_control.py --mode quality`` (genlm-control on the same prompt ids, in
its own venv), whose records ``--summarize`` reads beside these.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import bootstrap

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"  # the recorded runs that benchmarks/RESULTS.md cites
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import quality_tasks as qt  # noqa: E402
from smc.core import defaults  # noqa: E402
from smc.core.defaults import islands_for  # noqa: E402
from samplers import SAMPLERS  # noqa: E402

SAMPLER_NAMES = ("awrs", "direct", "masking")
#: a run "collapsed" when its log Ẑ is this many nats below its setting's median (or it is empty)
COLLAPSE_NATS = 10.0
DEFAULT_METHODS = "unconstrained,masking:flexible,awrs:compact,awrs:flexible"


def parse_method(spec: str) -> dict:
    """'unconstrained' or
    'SAMPLER[:WS][:budget[=RATE]][:per_byte=C][:hold=0|1][:islands=K][:resampling=NAME][:power=A][:OPTION=K]'
    -> {sampler, whitespace, critic: (rate, per_byte, hold_literals or None: N's default) or None,
    islands, resampling, power, options: the sampler options set, as sorted (name, K) pairs}."""
    if spec == "unconstrained":
        return {"sampler": None, "whitespace": None, "critic": None, "islands": None, "resampling": None,
                "power": None, "options": ()}
    parts = spec.split(":")
    if parts[0] not in SAMPLER_NAMES:
        raise ValueError(f"unknown method {spec!r}: start with unconstrained, {', '.join(SAMPLER_NAMES)}")
    ws: str | int = "compact"
    rate, per_byte, hold, islands, resampling, power = None, None, None, None, None, None
    options: dict[str, int] = {}
    for p in parts[1:]:
        if p in ("compact", "flexible"):
            ws = p
        elif p.isdigit():
            ws = int(p)
        elif p == "budget" or p.startswith("budget="):
            rate = float(p.partition("=")[2] or 1.0)
        elif p.startswith("per_byte="):
            per_byte = float(p[9:])
        elif p in ("hold=0", "hold=1"):
            hold = p == "hold=1"
        elif p.startswith("islands=") and p[8:].isdigit():
            islands = int(p[8:])
        elif p.startswith("resampling="):
            resampling = p[11:]
        elif p.startswith("power="):
            power = float(p[6:])
        elif (opt := p.partition("="))[0] in SAMPLERS[parts[0]].OPTIONS and opt[2].isdigit():
            options[opt[0]] = int(opt[2])
        else:
            raise ValueError(f"unknown part {p!r} in method {spec!r}")
    critic = None
    if hold is not None and rate is None and per_byte is None:  # the default twist, hold set
        rate, per_byte = 1.0, defaults.PER_BYTE
    if rate is not None or per_byte is not None:
        critic = (1.0 if rate is None else rate, per_byte or 0.0, hold)
    return {"sampler": parts[0], "whitespace": ws, "critic": critic, "islands": islands,
            "resampling": resampling, "power": power, "options": tuple(sorted(options.items()))}


def run_key(method: str, n: int, task: qt.Task, seed: int) -> tuple:
    """What makes two cells of the grid the same run: every setting of the method that reaches
    ``smc.generate`` (whitespace only for JSON tasks; islands=None resolved to generate's
    default for N, the sampler's options to its defaults), the task, N and the seed."""
    m = parse_method(method)
    islands = m["islands"] or (islands_for(n) if m["sampler"] else None)
    options = tuple(sorted(SAMPLERS[m["sampler"]].check_options(dict(m["options"])).items())) if m["sampler"] else ()
    return (task.name, m["sampler"], m["whitespace"] if task.family == "json" else None,
            m["critic"], islands, m["resampling"], m["power"], options, n, seed)


def constraint_for(task: qt.Task, whitespace):
    from potentials import Grammar, JSONSchema, Regex

    if task.family == "json":
        return JSONSchema(task.schema, whitespace=whitespace)
    if task.family == "regex":
        return Regex(task.pattern)
    return Grammar(task.grammar)


def run_one(lm, task: qt.Task, spec: str, n: int, seed: int, ess_threshold: float) -> dict:
    """One run of method ``spec`` on ``task``: the record described in the module docstring."""
    import smc

    m = parse_method(spec)
    rec = {"task": task.name, "family": task.family, "method": spec, "N": n, "seed": seed,
           "ess_threshold": ess_threshold}
    t0 = time.perf_counter()
    if m["sampler"] is None:
        r = smc.generate(task.prompt, None, lm=lm, particles=1, max_tokens=task.max_tokens + 32,
                         seed=seed, progress=False)
        wall = time.perf_counter() - t0
        text = r.samples[0].text
        answer, valid = qt.parse_answer(task, text, constrained=False)
        rec.update(accuracy=qt.score(task, answer), validity=float(valid), empty=answer is None,
                   log_ml=None, wall_s=wall, best=text[:300], tokens=len(r.samples[0].token_ids))
        return rec
    critic = None
    if m["critic"] is not None:
        from smc.engine.critics import BudgetCritic

        rate, per_byte, hold = m["critic"]
        hold = defaults.hold_literals_for(n) if hold is None else hold
        critic = BudgetCritic(rate=rate, per_byte=per_byte, hold_literals=hold)
    r = smc.generate(task.prompt, constraint_for(task, m["whitespace"]), lm=lm, particles=n,
                     max_tokens=task.max_tokens, seed=seed, sampler=m["sampler"],
                     ess_threshold=ess_threshold, progress=False, critic=critic, islands=m["islands"],
                     **({} if m["resampling"] is None else {"resampling": m["resampling"]}),
                     **({} if m["power"] is None else {"resampling_power": m["power"]}),
                     sampler_options=dict(m["options"]))
    wall = time.perf_counter() - t0
    post = r.posterior
    acc = val = 0.0
    for text, prob in post.items():
        answer, valid = qt.parse_answer(task, text, constrained=True)
        acc += prob * qt.score(task, answer)
        val += prob * valid
    # the share of posterior weight on texts whose tokens are the tokenizer's own encoding of
    # the text (canonical); the rest of the weight sits on other spellings of the same text
    # The same run read under the target restricted to canonical spellings, p(x) phi(x) 1[x
    # canonical] (the indicator applied at the end is a valid potential): its posterior is the
    # canonical samples reweighted, and its Ẑ is Ẑ times the canonical share.
    canonical, acc_canonical, log_ml_canonical = 0.0, None, None
    if post:
        fin = [s for s in r.samples if s.finished]
        top = max(s.log_weight for s in fin)
        w = [math.exp(s.log_weight - top) for s in fin]
        canon = [list(s.token_ids) == list(lm.encode(s.text)) for s in fin]
        wc = sum(wi for wi, c in zip(w, canon) if c)
        canonical = wc / sum(w)
        if wc > 0:
            acc_canonical = sum(wi * qt.score(task, qt.parse_answer(task, s.text, constrained=True)[0])
                                for wi, s, c in zip(w, fin, canon) if c) / wc
            if m["sampler"] != "masking":
                log_ml_canonical = float(r.log_ml) + math.log(canonical)
    finished = [s for s in r.samples if s.finished]
    unfinished = [s for s in r.samples if not s.finished]
    rec.update(accuracy=acc, validity=val, empty=not post,
               log_ml=None if m["sampler"] == "masking" else float(r.log_ml), wall_s=wall,
               best=(r.best or "")[:300] if post else (unfinished[0].text[:300] if unfinished else ""),
               finished=len(finished), canonical=canonical, accuracy_canonical=acc_canonical,
               log_ml_canonical=log_ml_canonical, resampling_events=r.stats.get("resampling_events"),
               tokens=r.stats.get("tokens"))
    return rec


def export_tasks(lm, tasks: list[qt.Task], path: str) -> None:
    """One line per JSON task: its prompt read by the one prompt rule (the ids a peer library
    must be given, so both condition on the same tokens), schema, max_tokens, and the embedded
    model's converted directory (which a peer loads with transformers)."""
    from smc.backends.prompts import encode_prompt
    from smc.backends.loading import embedded_model_dir

    with open(path, "w") as f:
        for task in tasks:
            if task.family != "json":
                continue
            f.write(json.dumps({"task": task.name, "prompt_ids": encode_prompt(lm, task.prompt),
                                "schema": task.schema, "max_tokens": task.max_tokens,
                                "eos_token_ids": list(lm.eos_token_ids),
                                "model_dir": str(embedded_model_dir())}) + "\n")
    print(f"# wrote {path}")


# ---------------------------------------------------------------------------- summary
def bootstrap_ci(*samples: np.ndarray, statistic=np.mean, reps: int = 2000,
                 seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of statistic(*samples) (``scipy.stats.bootstrap``; by
    default the mean of one sample x).

    ``reps`` resamples of the runs with replacement, drawn from ``np.random.default_rng(seed)``,
    so the same records give the same interval; several samples are paired (resampled together;
    ``statistic`` takes them and an ``axis``). Empty samples give (nan, nan); a single run, which
    scipy refuses to resample, gives the degenerate interval that resampling it would give.
    """
    if len(samples[0]) == 0:
        return (float("nan"), float("nan"))
    if len(samples[0]) == 1:
        v = float(statistic(*samples, axis=-1))
        return (v, v)
    res = bootstrap(samples, statistic, paired=len(samples) > 1, n_resamples=reps, confidence_level=0.95,
                    method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def fmt(x: np.ndarray, digits: int = 2, signed: bool = False) -> str:
    """The mean of x and its 95% bootstrap interval, e.g. ``0.70 [0.64, 0.75]`` ("-" when empty;
    ``signed``: ``+0.05 [-0.01, +0.10]``)."""
    if len(x) == 0:
        return "-"
    lo, hi = bootstrap_ci(x)
    f = f"+.{digits}f" if signed else f".{digits}f"
    return f"{x.mean():{f}} [{lo:{f}}, {hi:{f}}]"


def summarize(records: list[dict], baseline: str = "masking") -> str:
    """Markdown tables: per family (and all), per method and N; the paired columns compare each
    method with the baseline on the same (N, task, seed): the method named ``baseline``, or where
    no method has that name, the one whose name starts with ``baseline:`` ("masking" is
    "masking:flexible"). Paired log Ẑ: the mean of log Ẑ minus the baseline's over the pairs
    where both are finite."""
    out = []
    exact = any(r["method"] == baseline for r in records)

    def is_base(method: str) -> bool:
        return method == baseline if exact else method.startswith(baseline + ":")

    masking_done: dict[tuple, set] = defaultdict(set)  # (N) -> {(task, seed)} where masking answered
    base: dict[tuple, dict] = {}  # (N, task, seed) -> the baseline's record
    for r in records:
        if is_base(r["method"]):
            base.setdefault((r["N"], r["task"], r["seed"]), r)
        if r["method"].startswith("masking"):
            if not r["empty"]:
                masking_done[r["N"]].add((r["task"], r["seed"]))
    medians: dict[tuple, float] = {}  # (task, method, N) -> median finite log Ẑ
    by_setting: dict[tuple, list] = defaultdict(list)
    for r in records:
        if r.get("log_ml") is not None and np.isfinite(r["log_ml"]) and not r["empty"]:
            by_setting[(r["task"], r["method"], r["N"])].append(r["log_ml"])
    for k, v in by_setting.items():
        medians[k] = float(np.median(v))

    def collapsed(r: dict) -> bool:
        if r["empty"]:
            return True
        med = medians.get((r["task"], r["method"], r["N"]))
        return r.get("log_ml") is not None and med is not None and r["log_ml"] < med - COLLAPSE_NATS
    def group(r: dict) -> str:  # the Ada persona task is reported on its own
        return "ada" if r["task"] == "ada" else r["family"]

    families = sorted({group(r) for r in records})
    for fam in families + (["all"] if len(families) > 1 else []):
        rows = [r for r in records if fam == "all" or group(r) == fam]
        groups: dict[tuple, list] = defaultdict(list)
        for r in rows:
            groups[(r["method"], r["N"] if r["method"] != "unconstrained" else 1)].append(r)
        out.append(f"\n{fam} ({len({r['task'] for r in rows})} tasks)\n")
        out.append(f"| method | N | runs | accuracy [95% CI] | vs {baseline} (paired) | validity | no answer "
                   f"| finished where masking did | collapsed | log_ml (median) | log_ml vs {baseline} (paired) "
                   "| wall s (mean) |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for (method, n), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            acc = np.array([r["accuracy"] for r in rs])
            val = np.array([r["validity"] for r in rs])
            emp = np.array([float(r["empty"]) for r in rs])
            ref = masking_done.get(n, set())
            both = [r for r in rs if (r["task"], r["seed"]) in ref]
            fin = (f"{sum(not r['empty'] for r in both)}/{len(both)}" if both and not method.startswith("masking")
                   else "-")
            lml = [r["log_ml"] for r in rs if r.get("log_ml") is not None and np.isfinite(r["log_ml"])]
            lml_s = f"{np.median(lml):.1f}" if lml else "-"
            wall = np.mean([r["wall_s"] for r in rs])
            paired = [(r, base[(n, r["task"], r["seed"])]) for r in rs if (n, r["task"], r["seed"]) in base]
            diffs = np.array([r["accuracy"] - b["accuracy"] for r, b in paired])
            vs = fmt(diffs, signed=True) if len(diffs) and not is_base(method) else "-"
            dz = np.array([r["log_ml"] - b["log_ml"] for r, b in paired
                           if all(x.get("log_ml") is not None and np.isfinite(x["log_ml"]) for x in (r, b))])
            vs_z = fmt(dz, signed=True) if len(dz) and not is_base(method) else "-"
            coll = sum(collapsed(r) for r in rs) if any(r.get("log_ml") is not None for r in rs) else "-"
            out.append(f"| {method} | {n} | {len(rs)} | {fmt(acc)} | {vs} | {fmt(val)} | {fmt(emp)} | {fin} "
                       f"| {coll} | {lml_s} | {vs_z} | {wall:.1f} |")
        canon_rows = [(k, rs) for k, rs in sorted(groups.items()) if any("accuracy_canonical" in r for r in rs)]
        if canon_rows:
            out.append("\nThe same runs under the target restricted to canonical tokenizations (runs with a "
                       "canonical sample; accuracy paired with the unrestricted posterior of the same runs):\n")
            out.append("| method | N | runs | canonical share | accuracy, canonical only | accuracy, all | "
                       "log_ml canonical - log_ml (median) |")
            out.append("|---|---|---|---|---|---|---|")
            for (method, n), rs in canon_rows:
                got = [r for r in rs if r.get("accuracy_canonical") is not None]
                share = np.array([r["canonical"] for r in rs if not r["empty"]])
                d = [r["log_ml_canonical"] - r["log_ml"] for r in got if r.get("log_ml_canonical") is not None]
                out.append(f"| {method} | {n} | {len(got)} | {fmt(share)} "
                           f"| {fmt(np.array([r['accuracy_canonical'] for r in got]))} "
                           f"| {fmt(np.array([r['accuracy'] for r in got]))} | {f'{np.median(d):.2f}' if d else '-'} |")
        spread = [row for (method, n), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0]))
                  if not is_base(method) and (row := log_z_against(method, n, rs, base))]
        if spread:
            out.append(f"\nlog Ẑ against {baseline} on the same runs (median: over the pairs where both "
                       "finished; spread: the median over tasks of each task's standard deviation of log Ẑ; "
                       "log mean Ẑ: per task over the seeds both ran, a run with no answer counting Ẑ = 0, "
                       "then the mean over tasks of the difference; per task: each task's median minus "
                       f"{baseline}'s over its pairs where both finished, the mean over tasks and the tasks "
                       "at or above; all runs: the difference of medians over every pair, a run with no "
                       "answer counting log Ẑ = -inf):\n")
            out.append(f"| method | N | pairs | median log Ẑ | {baseline}'s | difference of medians [95% CI] "
                       f"| spread | {baseline}'s spread | log mean Ẑ minus {baseline}'s "
                       "| per task: difference of medians (at or above) | all runs: difference of medians (pairs) |")
            out.append("|---|---|---|---|---|---|---|---|---|---|---|")
            out.extend(spread)
    return "\n".join(out)


def log_z_against(method: str, n: int, rs: list[dict], base: dict[tuple, dict]) -> str | None:
    """One row of the log-Ẑ table: the method's runs rs against the baseline's runs ``base[(N,
    task, seed)]``, or None where no pair has two finite log Ẑ.

    median(log Ẑ_m) - median(log Ẑ_b) over the pairs where both are finite, with a 95% paired
    bootstrap interval (pairs resampled together); spread = median over tasks of sd_seeds(log Ẑ)
    (tasks with 3 or more such pairs); and mean over tasks of log mean_s Ẑ_m - log mean_s Ẑ_b over
    the seeds both ran, Ẑ = 0 for a run with no answer: for two unbiased estimators of the same
    Z it goes to 0 as seeds are added, so it tells a different target from a wider spread. Per
    task: mean over the same tasks of median_s(log Ẑ_m) - median_s(log Ẑ_b), and how many are
    >= 0, since the pooled median is decided by the tasks whose Ẑ lies near it. All runs: the
    difference of medians and its paired interval over every pair, log Ẑ = -inf for a run with no
    answer (an unbiased Ẑ of 0), the median of each method's runs as the issue's target reads.
    """
    def z(r: dict) -> float:
        v = r.get("log_ml")
        return -math.inf if v is None or r["empty"] else float(v)

    per_task: dict[str, list] = defaultdict(list)  # task -> [(log Ẑ_m, log Ẑ_b)] over its seeds
    for r in rs:
        b = base.get((n, r["task"], r["seed"]))
        if b is not None:
            per_task[r["task"]].append((z(r), z(b)))
    both = {t: [p for p in v if math.isfinite(p[0]) and math.isfinite(p[1])] for t, v in per_task.items()}
    fin = np.array([p for v in both.values() for p in v])
    if len(fin) == 0:
        return None
    ma, mb = np.median(fin[:, 0]), np.median(fin[:, 1])
    lo, hi = bootstrap_ci(fin[:, 0], fin[:, 1], statistic=median_gap)
    # every pair, a run with no answer below every finite log Ẑ (medians are order statistics, and
    # a finite stand-in keeps the bootstrap's percentiles finite); a median below every finite
    # value met the stand-in, so it is -inf
    every = np.array([p for v in per_task.values() for p in v])
    # a run whose partner had no answer can lie outside fin's range: bound by every finite run
    finite = every[np.isfinite(every)]
    reach = finite.max() - finite.min()
    floor = finite.min() - 4 * (reach + 1)  # far enough that a median halfway to it lands past reach
    every = np.where(np.isfinite(every), every, floor)
    med_all = [m if m >= finite.min() else -math.inf for m in np.median(every, axis=0)]
    lo_all, hi_all = bootstrap_ci(every[:, 0], every[:, 1], statistic=median_gap)

    def bound(x: float) -> str:
        """A difference past any two finite medians' came from a median with no answer."""
        return "-inf" if x < -reach else "+inf" if x > reach else f"{x:+.2f}"

    all_cell = (f"no answer in half the runs of either ({len(every)})" if med_all == [-math.inf] * 2
                else f"{bound(med_all[0] - med_all[1])} [{bound(lo_all)}, {bound(hi_all)}] ({len(every)})")
    sds, gaps, task_meds = [], [], []
    for t, v in per_task.items():
        if len(both[t]) >= 3:
            sds.append(tuple(np.std(both[t], axis=0, ddof=1)))
            med_m, med_b = np.median(both[t], axis=0)
            task_meds.append(med_m - med_b)
        mean_z = [np.logaddexp.reduce(np.array(col)) - math.log(len(col)) for col in zip(*v)]
        if all(math.isfinite(x) for x in mean_z):
            gaps.append(mean_z[0] - mean_z[1])
    sd_m, sd_b = (f"{np.median([s[0] for s in sds]):.2f}", f"{np.median([s[1] for s in sds]):.2f}") if sds else ("-", "-")
    gap = f"{np.mean(gaps):+.2f}" if gaps else "-"
    per_task_cell = (f"{np.mean(task_meds):+.2f} ({sum(d >= 0 for d in task_meds)}/{len(task_meds)})"
                     if task_meds else "-")
    return (f"| {method} | {n} | {len(fin)} | {ma:.2f} | {mb:.2f} | {ma - mb:+.2f} [{lo:+.2f}, {hi:+.2f}] "
            f"| {sd_m} | {sd_b} | {gap} | {per_task_cell} | {all_cell} |")


def median_gap(a: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
    """median(a) - median(b) along ``axis`` (the bootstrap's vectorized statistic)."""
    return np.median(a, axis) - np.median(b, axis)


def machine() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = "?"
    return f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}"


def parse_shard(spec: str) -> tuple[int, int]:
    """'I/K' -> (I, K) with 0 <= I < K."""
    i, _, k = spec.partition("/")
    if not (i.isdigit() and k.isdigit() and 0 <= int(i) < int(k)):
        raise argparse.ArgumentTypeError(f"--shard must be I/K with 0 <= I < K, got {spec!r}")
    return int(i), int(k)


def run_workers(argv: list[str], workers: int, jsonl: str) -> list[dict]:
    """Run this script's grid in ``workers`` processes (shard i of K each, its own records file),
    then append their records to ``jsonl`` and return every record of it."""
    base, skip = [], False
    for a in argv:  # the same arguments, less the ones each worker gets its own value of
        if skip:
            skip = False
        elif a in ("--workers", "--jsonl", "--shard"):
            skip = True
        elif not a.startswith(("--workers=", "--jsonl=", "--shard=")):
            base.append(a)
    parts = [f"{jsonl}.part{i}" for i in range(workers)]
    if Path(jsonl).exists() and not any(Path(part).exists() for part in parts):
        raise SystemExit(f"{jsonl} exists and holds no workers' records: give a new file")
    procs = [subprocess.Popen([sys.executable, __file__, *base, "--shard", f"{i}/{workers}", "--jsonl", part],
                              stdout=open(f"{part}.log", "w"), stderr=subprocess.STDOUT)
             for i, part in enumerate(parts)]
    codes = [p.wait() for p in procs]
    with open(jsonl, "w") as out:  # the parts are the records (each worker resumes its own)
        for part in parts:
            if Path(part).exists():
                out.write(Path(part).read_text())
    if any(codes):
        print(f"# workers' exit codes {codes}: see {jsonl}.part*.log")
    return [json.loads(ln) for ln in Path(jsonl).read_text().splitlines() if ln.strip()]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", help="comma-separated task names (e.g. json-00,ada)")
    ap.add_argument("--families", help="comma-separated families: json, regex, grammar")
    ap.add_argument("--limit", type=int, help="first K tasks of each family")
    ap.add_argument("--methods", default=DEFAULT_METHODS)
    ap.add_argument("--particles", default="4")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--ess-threshold", type=float, default=0.5)
    ap.add_argument("--jsonl", help="append one record per run to this file")
    ap.add_argument("--summarize", nargs="+", metavar="FILE[@TAG]",
                    help="only summarize saved records (@TAG appends :TAG to that file's method names)")
    ap.add_argument("--baseline", default="masking",
                    help="the method (a name prefix) the paired column compares with (default masking)")
    ap.add_argument("--export", metavar="FILE",
                    help="only write the selected JSON tasks' prompt ids, schemas and the model "
                         "directory, for benchmarks/peers/genlm_control.py --mode quality")
    ap.add_argument("--workers", type=int, default=1, help="run the grid in K processes")
    ap.add_argument("--shard", type=parse_shard, default=(0, 1), metavar="I/K",
                    help="only every K-th run, from the I-th (what --workers gives each process)")
    ap.add_argument("--by-run", action="store_true", help="loop over (seed, task) outermost")
    ap.add_argument("--time-limit", type=float, help="start no run after this many seconds")
    ap.add_argument("--device", help="the model's device (default: CUDA when available)")
    ap.add_argument("--dtype", help="the model's dtype (default: float32 on CPU, bfloat16 on CUDA)")
    args = ap.parse_args(argv)
    if args.workers > 1 and not args.jsonl:
        ap.error("--workers needs --jsonl (the merged records)")

    if args.summarize:
        records = []
        for spec in args.summarize:  # FILE or FILE@TAG: TAG tells that file's methods apart
            name, _, tag = spec.partition("@")
            path = Path(name) if Path(name).exists() else DATA / name
            for ln in path.read_text().splitlines():
                if ln.strip():
                    r = json.loads(ln)
                    records.append({**r, "method": f"{r['method']}:{tag}"} if tag else r)
        print(summarize(records, args.baseline))
        return
    # with no task selection at all (as `make bench` runs it): the first 3 tasks of each family
    limit = args.limit or (None if args.tasks or args.families else 3)
    tasks = qt.select(args.tasks, args.families, limit)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        parse_method(m)
    ns = [int(x) for x in args.particles.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    print(f"# bench_quality: {machine()}")
    print(f"# tasks: {','.join(t.name for t in tasks)}")
    print(f"# methods: {','.join(methods)}; N: {ns}; seeds: {seeds}; ess_threshold: {args.ess_threshold}")
    sys.stdout.flush()

    if args.workers > 1:
        records = run_workers(argv if argv is not None else sys.argv[1:], args.workers, args.jsonl)
        print(summarize(records))
        return

    import smc

    lm = smc.load_lm(device=args.device, dtype=args.dtype)
    if args.export:
        export_tasks(lm, tasks, args.export)
        return
    # every run of the grid, in the order asked, one per distinct setting (whitespace only
    # matters for JSON, and islands=None is generate's default for N), with the other method
    # names that give the identical run; a shard takes every K-th
    cells = [(method, n, task, seed) for method in methods
             for n in ([1] if method == "unconstrained" else ns) for task in tasks for seed in seeds]
    if args.by_run:
        order = {(t.name, s): k for k, (s, t) in enumerate((s, t) for s in seeds for t in tasks)}
        cells.sort(key=lambda c: order[(c[2].name, c[3])])
    runs: dict[tuple, list] = {}
    for method, n, task, seed in cells:
        runs.setdefault(run_key(method, n, task, seed), []).append((method, n, task, seed))
    shard, shards = args.shard
    todo = list(runs.values())[shard::shards]
    records = []
    # resume: runs already in --jsonl (same task, method, N, seed, threshold) are not repeated
    saved = {}
    if args.jsonl and Path(args.jsonl).exists():
        for ln in Path(args.jsonl).read_text().splitlines():
            if ln.strip():
                r = json.loads(ln)
                saved[(r["task"], r["method"], r["N"], r["seed"], r["ess_threshold"])] = r
    sink = open(args.jsonl, "a") if args.jsonl else None
    t_start = time.perf_counter()
    try:
        for same in todo:
            if args.time_limit and time.perf_counter() - t_start > args.time_limit:
                print(f"# time limit: stopped before run {todo.index(same) + 1} of {len(todo)}")
                break
            method, n, task, seed = same[0]
            old = [saved.get((task.name, m, n, seed, args.ess_threshold)) for m, *_ in same]
            rec = next((r for r in old if r is not None), None)
            if rec is None:
                rec = run_one(lm, task, method, n, seed, args.ess_threshold)
                lml = "" if rec["log_ml"] is None else f" log_ml={rec['log_ml']:.1f}"
                print(f"{task.name} {method} N={n} s={seed}: acc={rec['accuracy']:.2f} "
                      f"empty={rec['empty']}{lml} {rec['wall_s']:.1f}s | {rec['best'][:70]!r}")
                sys.stdout.flush()
            for (m, *_), had in zip(same, old):
                records.append({**rec, "method": m})
                if sink and had is None:
                    sink.write(json.dumps({**rec, "method": m}) + "\n")
                    sink.flush()
    finally:
        if sink:
            sink.close()
    print(summarize(records))


if __name__ == "__main__":
    main()
