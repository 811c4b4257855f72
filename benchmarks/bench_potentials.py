"""Time byte-level potentials lifted to the embedded model's vocabulary (49,152 tokens).

For each registered potential and each prefix length L (bytes of text already generated):

    check     seconds per checked token: logw_subset(ctx, tokens) / len(tokens), the query an
              AWRS sampler makes (the context's state is already known, as in a running particle)
    extend    seconds per prefix(ctx + (t,)) call, one token at a time (includes the context
              lookup)
    vector    seconds per full next-token weight vector: logw_next(ctx), warm (a regex's
              mask for this DFA state already computed, as when particles share a state)
    cold      the same for a fresh lifted potential: the whole vocabulary-trie walk

and the ratio of the L = 2,000 cost to the L = 10 cost (the issue asks for check <= 2x).

    python benchmarks/bench_potentials.py [--only NAME ...] [--lengths 10 2000] [--json]

Other potentials join by calling ``register(name, make_potential, make_text)`` below:
``make_potential()`` returns a BytePotential, ``make_text(n)`` a text of about n bytes that the
potential accepts as a prefix.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from potentials.base import NEG_INF, BytePotential  # noqa: E402

REGISTRY: dict[str, tuple[Callable[[], BytePotential], Callable[[int], str]]] = {}


def register(name: str, make_potential: Callable[[], BytePotential],
             make_text: Callable[[int], str]) -> None:
    """Add a potential to the benchmark (``make_text(n)``: an accepted prefix of ~n bytes)."""
    REGISTRY[name] = (make_potential, make_text)


def _repeat(unit: str) -> Callable[[int], str]:
    return lambda n: (unit * (n // len(unit) + 1))[:n]


def _regex(pattern: str) -> Callable[[], BytePotential]:
    def make() -> BytePotential:
        from potentials.regex import Regex

        return Regex(pattern)

    return make


register("regex-words", _regex(r"[a-z ,.]+"), _repeat("the quick brown fox jumps over it, "))
register("regex-phones", _regex(r"(\d{3}-\d{4}, )*\d{3}-\d{4}"), _repeat("555-1234, "))


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_one(lm, name: str, length: int, n_check: int, repeats: int) -> dict:
    make_potential, make_text = REGISTRY[name]
    text = make_text(length)
    ids = tuple(lm.encode(text))
    if b"".join(lm.vocab[i] for i in ids) != text.encode():
        raise RuntimeError(f"{name}: the tokenizer does not round-trip the benchmark text")
    potential = make_potential()
    lifted = potential.lift(lm)
    run = asyncio.run
    if run(lifted.prefix(ids)) == NEG_INF:
        raise RuntimeError(f"{name}: the benchmark text is not a viable prefix")
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.choice(len(lm.vocab), size=n_check, replace=False)]
    run(lifted.logw_next(ids))  # builds the vocabulary trie once per LM
    check = _median_time(lambda: run(lifted.logw_subset(ids, tokens)), repeats) / n_check

    async def extend_each() -> None:
        for t in tokens[:500]:
            await lifted.prefix(ids + (t,))

    extend = _median_time(lambda: run(extend_each()), repeats) / 500
    vector = _median_time(lambda: run(lifted.logw_next(ids)), repeats)

    def cold_vector() -> float:
        fresh = potential.lift(lm)  # no per-state masks yet: the full trie walk
        run(fresh.prefix(ids))
        t0 = time.perf_counter()
        run(fresh.logw_next(ids))
        return time.perf_counter() - t0

    cold = statistics.median(cold_vector() for _ in range(repeats))
    live = int(np.sum(run(lifted.logw_next(ids)) > NEG_INF))
    return {"potential": name, "prefix_bytes": len(text.encode()), "prefix_tokens": len(ids),
            "check_s": check, "extend_s": extend, "vector_s": vector, "cold_vector_s": cold,
            "live_tokens": live}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="potential names to run")
    parser.add_argument("--lengths", nargs="*", type=int, default=[10, 2000])
    parser.add_argument("--checks", type=int, default=4000, help="tokens per check timing")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    names = args.only or list(REGISTRY)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        parser.error(f"unknown potentials {unknown}; known: {sorted(REGISTRY)}")

    from smc.loading import load_lm

    lm = load_lm()
    rows = [bench_one(lm, n, L, args.checks, args.repeats) for n in names for L in args.lengths]
    if args.json:
        print(json.dumps(rows, indent=1))
        return rows
    print(f"{'potential':16} {'bytes':>6} {'tokens':>6} {'check/token':>12} {'prefix(x+t)':>12} "
          f"{'vector':>10} {'cold vector':>12} {'live':>6}")
    for r in rows:
        print(f"{r['potential']:16} {r['prefix_bytes']:6d} {r['prefix_tokens']:6d} "
              f"{r['check_s'] * 1e6:10.2f}us {r['extend_s'] * 1e6:10.2f}us "
              f"{r['vector_s'] * 1e3:8.1f}ms {r['cold_vector_s'] * 1e3:10.1f}ms "
              f"{r['live_tokens']:6d}")
    lo, hi = min(args.lengths), max(args.lengths)
    for n in names:
        a = next(r for r in rows if r["potential"] == n and r["prefix_bytes"] == lo)
        b = next(r for r in rows if r["potential"] == n and r["prefix_bytes"] == hi)
        print(f"{n}: cost at {hi} / at {lo} bytes: check {b['check_s'] / a['check_s']:.2f}x, "
              f"prefix(x+t) {b['extend_s'] / a['extend_s']:.2f}x, "
              f"vector {b['vector_s'] / a['vector_s']:.2f}x, "
              f"cold vector {b['cold_vector_s'] / a['cold_vector_s']:.2f}x")
    return rows


if __name__ == "__main__":
    main()
