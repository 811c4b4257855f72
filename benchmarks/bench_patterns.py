"""Regexes from the wild: genlm-eval's pattern-matching corpus (227 patterns) on the embedded model.

For every pattern P of ``patterns.csv`` (github.com/genlm/genlm-eval, Apache-2.0; not copied into
this repository, read from ``--corpus``):

    compile   Regex(P): automaton, regex-package fallback (with the reason), or an error
    generate  smc.generate(prompt(P), Regex(P), particles=N, max_tokens=T, chat=False), under a
              per-pattern wall-clock limit (``--timeout``)
    constraint_s  seconds spent compiling the Regex and in its ``advance``, ``state_complete`` and
              ``complete_after`` (the rest is the LM and the engine), reported because a loaded
              machine's LM time swamps the total
    score     sum of posterior mass over distinct texts x with regex.fullmatch(P, x), the
              genlm-eval metric (0 when no sample finished or the run timed out)

and prints: compile errors, fallback count, patterns with no finished sample, timeouts, the
weighted accuracy (mean score), median and max seconds per pattern, and the failures per class
(the first feature that sends a pattern to the fallback). The prompt is genlm-eval's
``default_prompt_formatter`` as its pattern-matching example calls it (plain text, no chat
template): the system prompt, a line break, the three few-shot pairs as ``Pattern: P`` /
``Output: A`` lines, a line break and the pattern, read into token ids by the tokenizer alone
(``encode_prompt(lm, text, chat=False)``); every engine is given those ids.

With ``--engines smc-steer,genlm-control`` genlm-control 0.4.1 runs the same patterns on the
same prompt ids, EOS ids, model, particles, ESS threshold, seed, token budget and time limit,
in its own virtual environment (``.venv-peers/genlm-control``: benchmarks/peers/genlm_control.py
says how it is built), by subprocess, with the potential genlm-eval's pattern-matching task
gives it (``PatternPotential``: the `regex` package's partial match of the text written so far,
over printable ASCII characters) and its AWRS sampler, as genlm-eval's example runs it. Both
engines' posteriors are scored here by the same ``score``. The summary then compares them:
weighted accuracy, runs with no finished sample, time-outs, median and max seconds, and the
failure classes: every pattern where smc-steer fails (compile error, no finished sample,
time-out) while genlm-control finds a matching sample, with smc-steer's reason.

With ``--newline-eos`` every token containing a newline also ends the text
(``smc.with_eos(lm, ["\n"])``), as genlm-eval's pattern-matching model adaptor does: a different
target (the answer ends at the line break the few-shot format puts after it), reported as a
separate column, never mixed with the default runs.

With ``--finish-share S`` the runs bank, at every step where the text could end, a finished
copy carrying S of the target's EOS mass there (``smc.generate(..., finish_share=S)``): the same
target and the same unbiased Ẑ, so the same score, but a complete text the particles pass is a
sample even where the model would not stop.

The runs use ``smc.generate``'s lookahead twist (potentials.lookahead; default rate 1.0, it
acts on the patterns with backreferences, whose shortest completion the fallback can search):
the same target and Ẑ, the twist divided out at every finish, but the particles write the
copies a copy language needs. ``--lookahead 0`` turns it off (the runs before it existed),
``--lookahead R`` sets another rate.

With ``--followup-seeds K`` every pattern whose run ended with no finished sample is run again
at seeds seed+1 .. seed+K (same N) and once with ``--followup-particles M`` particles at the
same seed: a finished sample there shows the pattern satisfiable within T tokens and within the
sampler's reach, and the count of seeds says how often N particles find one (``followup`` in the
JSON record; the headline counts stay those of the first run).

    python benchmarks/bench_patterns.py [--corpus ../shared/corpora/patterns.csv] [--limit K]
        [--stride S] [--sample K] [--engines smc-steer,genlm-control]
        [--particles 5] [--max-tokens 32] [--timeout 60] [--seed 0]
        [--ess-threshold 0.5] [--jsonl out.jsonl] [--newline-eos] [--finish-share 0.5]
        [--lookahead R] [--pattern P ...] [--followup-seeds 10] [--followup-particles 100]
    python benchmarks/bench_patterns.py --summarize RECORDS.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

import regex

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from peers import venvs  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "patterns.csv"
SYSTEM = ("You are a helpful assistant that generates strings matching regular expressions. "
          "Only output the exact string that matches the regex pattern, nothing more.")
SHOTS = [("(ab)+", "ab"), ("(ab|cd)+", "cd"), ("[a-z]+", "hello")]
ENGINES = ("smc-steer", "genlm-control")
PEER_PYTHON = venvs.python_of("genlm-control")
PEER_SCRIPT = ROOT / "benchmarks" / "peers" / "genlm_control.py"


def prompt_for(pattern: str) -> str:
    """genlm-eval's plain-text prompt for ``pattern`` (its ``default_prompt_formatter`` with
    ``use_chat_format=False``): the system prompt, the few-shot pairs, then the pattern itself."""
    shots = "\n".join(f"Pattern: {pat}\nOutput: {answer}" for pat, answer in SHOTS)
    return f"{SYSTEM}\n{shots}\n{pattern}"


def prompt_ids(lm, pattern: str) -> list[int]:
    """The token ids every engine is conditioned on for ``pattern``: ``prompt_for`` read by the
    tokenizer alone (no chat template), as genlm-eval's ``tokenizer.encode`` reads it."""
    from smc.backends.prompts import encode_prompt

    return encode_prompt(lm, prompt_for(pattern), chat=False)


def load_patterns(path: Path) -> list[str]:
    if not path.exists():
        sys.exit(f"bench_patterns: corpus not found at {path} (pass --corpus PATH; it is "
                 "genlm-eval's assets/pattern_matching/patterns.csv)")
    with open(path, newline="") as f:
        return [row["regex"] for row in csv.DictReader(f)]


def score(pattern: str, posterior: dict[str, float]) -> float:
    """Posterior mass on texts regex.fullmatch accepts (genlm-eval's weighted accuracy)."""
    total = 0.0
    for text, p in posterior.items():
        try:
            if regex.fullmatch(pattern, text, timeout=5) is not None:
                total += p
        except TimeoutError:
            pass
    return total


async def run_one(pattern: str, lm, args, seed: int | None = None,
                  particles: int | None = None) -> dict:
    """One run of the module docstring (at ``seed`` and ``particles`` when given, else args')."""
    import smc
    from potentials import Regex

    rec: dict = {"engine": "smc-steer", "pattern": pattern}
    t0 = time.perf_counter()
    try:
        pot = Regex(pattern)
    except Exception as e:  # the benchmark reports every compile error, of any kind
        rec.update(status="compile_error", error=f"{type(e).__name__}: {e}",
                   seconds=time.perf_counter() - t0, score=0.0)
        return rec
    rec["compile_s"] = time.perf_counter() - t0
    spent = [0.0]

    def timed(fn):
        def run(*a):
            t = time.perf_counter()
            try:
                return fn(*a)
            finally:
                spent[0] += time.perf_counter() - t
        return run

    def timed_async(fn):
        async def run(*a):
            t = time.perf_counter()
            try:
                return await fn(*a)
            finally:
                spent[0] += time.perf_counter() - t
        return run

    # time inside the constraint (what this project's regex code costs), apart from the LM:
    # prefix steps, completion checks, and the last step's completion checks (complete_after)
    pot.advance = timed(pot.advance)
    pot.state_complete = timed_async(pot.state_complete)
    pot.complete_after = timed_async(pot.complete_after)
    rec["mode"] = "automaton" if pot.exact else "fallback"
    if not pot.exact:
        rec["reason"] = pot.fallback_reason
    try:
        res = await asyncio.wait_for(
            smc.agenerate(prompt_ids(lm, pattern), pot, lm=lm, particles=particles or args.particles,
                          max_tokens=args.max_tokens, seed=args.seed if seed is None else seed,
                          chat=False, progress=False, ess_threshold=args.ess_threshold,
                          finish_share=args.finish_share, lookahead=args.lookahead),
            args.timeout)
    except asyncio.TimeoutError:
        rec.update(status="timeout", seconds=time.perf_counter() - t0, score=0.0,
                   constraint_s=spent[0] + rec["compile_s"])
        return rec
    except Exception as e:  # a failure class of its own, reported with the rest
        rec.update(status="crash", error=f"{type(e).__name__}: {e}", score=0.0,
                   seconds=time.perf_counter() - t0, constraint_s=spent[0] + rec["compile_s"])
        return rec
    rec["seconds"] = time.perf_counter() - t0
    rec["constraint_s"] = spent[0] + rec["compile_s"]
    finished = [s for s in res.samples if s.finished]
    rec["log_ml"] = res.log_ml
    rec["texts"] = sorted({s.text for s in res.samples})
    rec["posterior"] = res.posterior
    rec["score"] = score(pattern, res.posterior)
    rec["budget_exceeded"] = getattr(pot, "budget_exceeded", 0)
    rec["status"] = "ok" if finished else "no_sample"
    return rec


def best_text(rec: dict) -> str | None:
    """The matching text of most posterior mass in a run's record, or None."""
    hits = [(p, t) for t, p in rec.get("posterior", {}).items()
            if p > 0 and score(rec["pattern"], {t: 1.0})]
    return max(hits)[1] if hits else None


async def follow_up(rec: dict, lm, args) -> dict:
    """For a run with no finished sample: the other seeds' and the larger population's runs
    (module docstring), as {"seeds": K, "found_at": [seed, ...], "texts": [text per seed],
    "particles": M, "large": text or None, "large_status": status}."""
    found: dict[int, str] = {}
    for seed in range(args.seed + 1, args.seed + 1 + args.followup_seeds):
        text = best_text(await run_one(rec["pattern"], lm, args, seed=seed))
        if text is not None:
            found[seed] = text
    big = await run_one(rec["pattern"], lm, args, particles=args.followup_particles)
    return {"seeds": args.followup_seeds, "found_at": sorted(found),
            "texts": [found[s] for s in sorted(found)],
            "particles": args.followup_particles, "large": best_text(big),
            "large_status": big["status"]}


def feature_class(rec: dict) -> str:
    if rec.get("status") == "compile_error":
        return "compile error"
    if rec.get("mode") == "automaton":
        return "automaton"
    reason = rec.get("reason", "")
    for key in ("syntax of the `regex` package", "backreference", "lookbehind", "lookahead",
                "conditional group", "atomic group", "possessive repeat", "automaton states"):
        if key in reason:
            return key.replace("syntax of the `regex` package", "regex-package syntax")
    return "other fallback"


def peer_tasks(lm, patterns: list[tuple[int, str]], args) -> list[dict]:
    """The patterns as genlm-control's runner reads them (benchmarks/peers/genlm_control.py,
    ``--mode patterns``): this run's prompt ids, EOS ids, model and settings."""
    from smc.backends.loading import embedded_model_dir

    model_dir = str(embedded_model_dir())
    eos = list(lm.eos_token_ids)
    return [{"task_id": index, "pattern": pattern, "prompt_ids": prompt_ids(lm, pattern),
             "eos_token_ids": eos, "model_dir": model_dir, "max_tokens": args.max_tokens,
             "particles": args.particles, "ess_threshold": args.ess_threshold, "seed": args.seed,
             "timeout": args.timeout} for index, pattern in patterns]


def run_peer(tasks: list[dict], timeout: float, on_record, grace: float = 120.0) -> list[dict]:
    """genlm-control's records for ``tasks``, from its runner in its own venv (one thread,
    OMP_NUM_THREADS=1), ``on_record(rec)`` called as each arrives.

    The runner stops a run at ``timeout`` seconds itself; a runner that writes nothing for
    ``timeout`` + ``grace`` seconds (stuck in one uninterruptible `regex` call; the grace
    covers loading the model) is killed, the pattern it was on gets a time-out record, and a
    new runner takes the remaining patterns. A runner that exits early gives the pattern it was
    on a crash record, and a new runner takes the rest too.
    """
    if not PEER_PYTHON.is_file():
        sys.exit(f"bench_patterns: no genlm-control venv at {PEER_PYTHON.parents[1]} "
                 f"(build it as {PEER_SCRIPT.relative_to(ROOT)} says)")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPATH", None)
    got: list[dict] = []
    todo = list(tasks)
    with tempfile.TemporaryDirectory() as tmp:
        while todo:
            tfile, out, log = (Path(tmp) / "tasks.jsonl", Path(tmp) / f"out{len(got)}.jsonl",
                               Path(tmp) / "log.txt")
            tfile.write_text("".join(json.dumps(t) + "\n" for t in todo))
            with open(log, "w") as logf:
                proc = subprocess.Popen(
                    [str(PEER_PYTHON), str(PEER_SCRIPT), "--mode", "patterns", "--tasks-file",
                     str(tfile), "--out", str(out)], env=env, stdout=logf, stderr=subprocess.STDOUT)
                seen, last, why = 0, time.monotonic(), None
                while True:
                    rc = proc.poll()
                    rows = [json.loads(ln) for ln in out.read_text().splitlines()] if out.exists() else []
                    for rec in rows[seen:]:
                        rec["load1"] = os.getloadavg()[0]
                        on_record(rec)
                        got.append(rec)
                    if len(rows) > seen:
                        seen, last = len(rows), time.monotonic()
                    if rc is not None:
                        why = None if rc == 0 else f"runner exited with {rc}"
                        break
                    if time.monotonic() - last > timeout + grace:
                        proc.kill()
                        proc.wait()
                        why = "killed: no record within the time limit"
                        break
                    time.sleep(0.2)
            done = {r["task_id"] for r in got}
            todo = [t for t in todo if t["task_id"] not in done]
            if todo:
                tail = log.read_text()[-800:].strip()
                print(f"# genlm-control on {todo[0]['pattern']!r}: {why or 'no record'}\n{tail}",
                      file=sys.stderr)
                t = todo.pop(0)
                rec = {"engine": "genlm-control", "task_id": t["task_id"], "pattern": t["pattern"],
                       "status": "timeout" if why and why.startswith("killed") else "crash",
                       "error": why or "the runner ended without a record for it",
                       "seconds": float(timeout), "score": 0.0}
                on_record(rec)
                got.append(rec)
    return got


def summarize_engine(recs: list[dict], timeout: float, classes: dict[str, str]) -> None:
    """Print one engine's counts, accuracy, times, failures per class (``classes``: pattern ->
    its class in smc-steer's compile, where smc-steer ran it) and its failing patterns."""
    status = Counter(r["status"] for r in recs)
    secs = [r["seconds"] for r in recs]
    modes = (f", automaton {sum(r.get('mode') == 'automaton' for r in recs)}, "
             f"fallback {sum(r.get('mode') == 'fallback' for r in recs)}"
             if any("mode" in r for r in recs) else "")
    print(f"patterns {len(recs)}: compile errors {status['compile_error']}{modes}")
    print(f"no finished sample {status['no_sample']}, timeouts (> {timeout:.0f} s) "
          f"{status['timeout']}, crashes {status['crash']}, weighted accuracy "
          f"{statistics.mean(r['score'] for r in recs):.3f}, "
          f"median {statistics.median(secs):.2f} s, max {max(secs):.2f} s")
    if any("constraint_s" in r for r in recs):
        csecs = [r.get("constraint_s", r["seconds"]) for r in recs]
        print(f"time inside the constraint (compile, prefix and completion checks): "
              f"median {statistics.median(csecs):.2f} s, max {max(csecs):.2f} s")
    print("per class: patterns / no sample / timeout / compile error / mean score")

    def class_of(r: dict) -> str:
        return classes.get(r["pattern"]) or feature_class(r)

    for c in sorted({class_of(r) for r in recs}):
        rs = [r for r in recs if class_of(r) == c]
        print(f"  {c:24s} {len(rs):4d} {sum(r['status'] == 'no_sample' for r in rs):4d} "
              f"{sum(r['status'] == 'timeout' for r in rs):4d} "
              f"{sum(r['status'] == 'compile_error' for r in rs):4d} "
              f"{statistics.mean(r['score'] for r in rs):.3f}")
    for r in recs:
        if r["status"] != "ok":
            print(f"  {r['status']:13s} {r['pattern']!r} {r.get('error', r.get('texts', ''))!r:.160}")
    followed = [r for r in recs if "followup" in r]
    if followed:
        reached = sum(bool(r["followup"]["found_at"]) or r["followup"]["large"] is not None
                      for r in followed)
        print(f"follow-up of the {len(followed)} runs with no finished sample: {reached} reach a "
              f"matching sample at another seed or with more particles")
        for r in followed:
            f = r["followup"]
            print(f"  {r['pattern']!r}: a sample at {len(f['found_at'])} of {f['seeds']} other "
                  f"seeds {f['texts'][:3]!r:.80}; "
                  f"N={f['particles']}: {f['large']!r}")


def failure_classes(ours: dict[str, dict], peer: dict[str, dict]) -> list[dict]:
    """The patterns where smc-steer fails (compile error, no finished sample, time-out, crash)
    and the peer has a finished sample that matches, with smc-steer's reason for each:
    [{"pattern", "status", "reason", "peer_text"}]."""
    found = []
    for pattern, r in ours.items():
        p = peer.get(pattern)
        if r["status"] == "ok" or p is None or p["status"] != "ok":
            continue
        text = best_text(p)
        if text is None:
            continue
        if r["status"] == "compile_error":
            reason = r.get("error", "")
        elif r["status"] == "no_sample":
            reason = (f"no finished sample ({feature_class(r)}"
                      f"{': ' + r['reason'] if r.get('reason') else ''}); particles ended as "
                      f"{r.get('texts', [])[:3]!r:.100}")
        else:
            reason = f"{r['status']} ({feature_class(r)})"
        found.append({"pattern": pattern, "status": r["status"], "reason": reason,
                      "peer_text": text})
    return found


def summarize(recs: list[dict], timeout: float) -> None:
    """Per engine (records without an engine are smc-steer's), then, with two engines, the
    comparison on the patterns both ran: the headline table and the failure classes."""
    by_engine: dict[str, list[dict]] = {}
    for r in recs:
        by_engine.setdefault(r.get("engine", "smc-steer"), []).append(r)
    classes = {r["pattern"]: feature_class(r) for r in by_engine.get("smc-steer", [])}
    for engine, rs in by_engine.items():
        print(f"\n== {engine}")
        summarize_engine(rs, timeout, classes)
    if len(by_engine) < 2 or "smc-steer" not in by_engine:
        return
    ours = {r["pattern"]: r for r in by_engine["smc-steer"]}
    for engine, rs in by_engine.items():
        if engine == "smc-steer":
            continue
        peer = {r["pattern"]: r for r in rs}
        both = [p for p in ours if p in peer]
        print(f"\n== smc-steer against {engine} on the {len(both)} patterns both ran")
        print("| engine | weighted accuracy | no finished sample | time-outs | compile errors "
              "| crashes | median s | max s |")
        print("|---|---|---|---|---|---|---|---|")
        for name, table in (("smc-steer", ours), (engine, peer)):
            rows = [table[p] for p in both]
            st = Counter(r["status"] for r in rows)
            secs = [r["seconds"] for r in rows]
            print(f"| {name} | {statistics.mean(r['score'] for r in rows):.3f} | "
                  f"{st['no_sample']} | {st['timeout']} | {st['compile_error']} | {st['crash']} | "
                  f"{statistics.median(secs):.2f} | {max(secs):.2f} |")
        wins = sum(ours[p]["score"] > peer[p]["score"] + 1e-9 for p in both)
        losses = sum(ours[p]["score"] < peer[p]["score"] - 1e-9 for p in both)
        print(f"score per pattern: smc-steer higher on {wins}, {engine} higher on {losses}, "
              f"equal on {len(both) - wins - losses}")
        fails = failure_classes({p: ours[p] for p in both}, peer)
        print(f"smc-steer fails where {engine} finds a match: {len(fails)}")
        for c, n in sorted(Counter(f["status"] for f in fails).items()):
            print(f"  class {c}: {n}")
        for f in fails:
            print(f"  {f['status']:13s} {f['pattern']!r}: {f['reason']!r:.200} "
                  f"({engine}: {f['peer_text']!r:.40})")
        theirs = failure_classes({p: peer[p] for p in both}, {p: ours[p] for p in both})
        print(f"{engine} fails where smc-steer finds a match: {len(theirs)}")
        for f in theirs:
            print(f"  {f['status']:13s} {f['pattern']!r} (smc-steer: {f['peer_text']!r:.40})")


def select(patterns: list[str], args) -> list[tuple[int, str]]:
    """(corpus index, pattern) for the run: the corpus thinned by --stride and --limit, then
    with --sample K a seeded random subset of K of them, drawn by ``random.Random(--sample-seed)``
    and run in the order drawn, so that the first k patterns of an interrupted run are
    themselves a seeded random sample (``--sample`` = the corpus size runs all, in that order)."""
    chosen = list(enumerate(patterns))[:: args.stride][: args.limit]
    if args.sample is not None:
        chosen = random.Random(args.sample_seed).sample(chosen, min(args.sample, len(chosen)))
    return chosen


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--stride", type=int, default=1, help="every STRIDE-th pattern only")
    ap.add_argument("--sample", type=int, default=None,
                    help="a seeded random subset of this many patterns (after stride and limit), "
                         "run in the order drawn")
    ap.add_argument("--sample-seed", type=int, default=0)
    ap.add_argument("--engines", default="smc-steer",
                    help=f"comma-separated, of {', '.join(ENGINES)} (genlm-control needs its venv)")
    ap.add_argument("--block", type=int, default=25,
                    help="the engines take turns every BLOCK patterns (so a machine whose load "
                         "changes weighs on both alike, and an interrupted run has both)")
    ap.add_argument("--particles", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ess-threshold", type=float, default=0.5,
                    help="resample when ESS < this * N (0: never)")
    ap.add_argument("--jsonl", type=Path, default=None)
    ap.add_argument("--newline-eos", action="store_true",
                    help="tokens containing a newline end the text too (genlm-eval's setup)")
    ap.add_argument("--finish-share", type=float, default=0.0,
                    help="bank this share of the EOS mass wherever the text could end")
    ap.add_argument("--lookahead", type=float, default=None,
                    help="smc.generate's lookahead rate (default: generate's, 1.0; 0: off)")
    ap.add_argument("--pattern", action="append", default=None,
                    help="run these patterns instead of the corpus (repeatable)")
    ap.add_argument("--followup-seeds", type=int, default=0,
                    help="rerun each run left without a finished sample at this many other seeds")
    ap.add_argument("--followup-particles", type=int, default=100,
                    help="and once with this many particles (with --followup-seeds)")
    ap.add_argument("--summarize", type=Path, default=None,
                    help="only print the summary of a --jsonl file (e.g. of an interrupted run)")
    args = ap.parse_args()
    if args.summarize:
        with open(args.summarize) as f:
            summarize([json.loads(line) for line in f if line.strip()], args.timeout)
        return
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        ap.error(f"--engines: unknown {unknown} (choose from {', '.join(ENGINES)})")
    if "genlm-control" in engines and not PEER_PYTHON.is_file():
        sys.exit(f"bench_patterns: no genlm-control venv at {PEER_PYTHON.parents[1]} "
                 f"(build it as {PEER_SCRIPT.relative_to(ROOT)} says)")
    warnings.simplefilter("ignore", FutureWarning)  # regex's V0 "possible set difference"

    import smc
    import torch

    torch.set_num_threads(1)
    chosen = ([(i, p) for i, p in enumerate(args.pattern)] if args.pattern
              else select(load_patterns(args.corpus), args))
    t_load = time.perf_counter()
    lm = smc.load_lm()
    if args.newline_eos:
        lm = smc.with_eos(lm, ["\n"])
    print(f"corpus {args.corpus} ({len(chosen)} patterns); engines {', '.join(engines)}; model "
          f"loaded in {time.perf_counter() - t_load:.1f} s; N={args.particles}, T={args.max_tokens}, "
          f"timeout {args.timeout:.0f} s; EOS: {'EOS or a newline token' if args.newline_eos else 'EOS'}; "
          f"finish share {args.finish_share}; lookahead "
          f"{'default' if args.lookahead is None else args.lookahead}; ESS threshold {args.ess_threshold}",
          flush=True)
    out = open(args.jsonl, "w") if args.jsonl else None
    recs = []

    def scored(rec: dict) -> None:
        """A peer's record, scored here as smc-steer's are."""
        rec["index"] = rec["task_id"]
        rec["score"] = score(rec["pattern"], rec.get("posterior", {}))
        keep(rec)

    def keep(rec: dict) -> None:
        recs.append(rec)
        print(f"[{rec['index']:3d}] {rec['engine']:13s} {rec['status']:13s} {rec['seconds']:6.2f}s "
              f"score {rec['score']:.2f} {rec['pattern']!r} "
              f"{rec.get('texts', rec.get('error', ''))!r:.100}", flush=True)
        if out:
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
            out.flush()

    for start in range(0, len(chosen), args.block):
        block = chosen[start:start + args.block]
        for engine in engines:
            print(f"# {engine}, patterns {start + 1}-{start + len(block)}: load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
            if engine == "smc-steer":
                for index, pattern in block:
                    rec = await run_one(pattern, lm, args)
                    if rec["status"] == "no_sample" and args.followup_seeds > 0:
                        rec["followup"] = await follow_up(rec, lm, args)
                    rec.update(index=index, load1=os.getloadavg()[0])
                    keep(rec)
            else:
                run_peer(peer_tasks(lm, block, args), args.timeout, scored)
    if out:
        out.close()

    summarize(recs, args.timeout)


if __name__ == "__main__":
    asyncio.run(main())
