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
(the first feature that sends a pattern to the fallback). The prompt is genlm-eval's system
prompt and three few-shot pairs as plain text (chat=False, as genlm-eval's own runs give it).

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
        [--stride S] [--particles 5] [--max-tokens 32] [--timeout 60] [--seed 0]
        [--ess-threshold 0.5] [--jsonl out.jsonl] [--newline-eos] [--finish-share 0.5]
        [--lookahead R] [--pattern P ...] [--followup-seeds 10] [--followup-particles 100]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import statistics
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import regex

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "patterns.csv"
SYSTEM = ("You are a helpful assistant that generates strings matching regular expressions. "
          "Only output the exact string that matches the regex pattern, nothing more.")
SHOTS = [("(ab)+", "ab"), ("(ab|cd)+", "cd"), ("[a-z]+", "hello")]


def prompt_for(pattern: str) -> str:
    """genlm-eval's system prompt and few-shot pairs as one plain-text prompt."""
    parts = [SYSTEM, ""]
    for pat, answer in SHOTS:
        parts += [f"Pattern: {pat}", f"Answer: {answer}", ""]
    parts += [f"Pattern: {pattern}", "Answer: "]
    return "\n".join(parts)


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

    rec: dict = {"pattern": pattern}
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
            smc.agenerate(prompt_for(pattern), pot, lm=lm, particles=particles or args.particles,
                          max_tokens=args.max_tokens, seed=args.seed if seed is None else seed,
                          chat=False, progress=False, ess_threshold=args.ess_threshold,
                          finish_share=args.finish_share, lookahead=args.lookahead),
            args.timeout)
    except asyncio.TimeoutError:
        rec.update(status="timeout", seconds=time.perf_counter() - t0, score=0.0,
                   constraint_s=spent[0] + rec["compile_s"])
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


def summarize(recs: list[dict], timeout: float) -> None:
    """Print the counts, accuracy, times, per-class failures and every failing pattern."""
    status = Counter(r["status"] for r in recs)
    secs = [r["seconds"] for r in recs]
    print()
    print(f"patterns {len(recs)}: compile errors {status['compile_error']}, "
          f"automaton {sum(r.get('mode') == 'automaton' for r in recs)}, "
          f"fallback {sum(r.get('mode') == 'fallback' for r in recs)}")
    print(f"no finished sample {status['no_sample']}, timeouts (> {timeout:.0f} s) "
          f"{status['timeout']}, weighted accuracy {statistics.mean(r['score'] for r in recs):.3f}, "
          f"median {statistics.median(secs):.2f} s, max {max(secs):.2f} s")
    csecs = [r.get("constraint_s", r["seconds"]) for r in recs]
    print(f"time inside the constraint (compile, prefix and completion checks): median {statistics.median(csecs):.2f} s,"
          f" max {max(csecs):.2f} s")
    print("per class: patterns / no sample / timeout / compile error / mean score")
    classes = sorted({feature_class(r) for r in recs})
    for c in classes:
        rs = [r for r in recs if feature_class(r) == c]
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


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--stride", type=int, default=1, help="every STRIDE-th pattern only")
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
    warnings.simplefilter("ignore", FutureWarning)  # regex's V0 "possible set difference"

    import smc

    patterns = args.pattern or load_patterns(args.corpus)[:: args.stride][: args.limit]
    t_load = time.perf_counter()
    lm = smc.load_lm()
    if args.newline_eos:
        lm = smc.with_eos(lm, ["\n"])
    print(f"corpus {args.corpus} ({len(patterns)} patterns); model loaded in "
          f"{time.perf_counter() - t_load:.1f} s; N={args.particles}, T={args.max_tokens}, "
          f"timeout {args.timeout:.0f} s; EOS: {'EOS or a newline token' if args.newline_eos else 'EOS'}; "
          f"finish share {args.finish_share}; lookahead "
          f"{'default' if args.lookahead is None else args.lookahead}; ESS threshold {args.ess_threshold}",
          flush=True)
    out = open(args.jsonl, "w") if args.jsonl else None
    recs = []
    for i, pattern in enumerate(patterns):
        rec = await run_one(pattern, lm, args)
        if rec["status"] == "no_sample" and args.followup_seeds > 0:
            rec["followup"] = await follow_up(rec, lm, args)
        recs.append(rec)
        print(f"[{i + 1:3d}] {rec['status']:13s} {rec['seconds']:6.2f}s "
              f"(constraint {rec.get('constraint_s', 0):5.2f}s) score "
              f"{rec['score']:.2f} {feature_class(rec):22s} {pattern!r} "
              f"{rec.get('texts', rec.get('error', ''))!r:.120}", flush=True)
        if out:
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
            out.flush()
    if out:
        out.close()

    summarize(recs, args.timeout)


if __name__ == "__main__":
    asyncio.run(main())
