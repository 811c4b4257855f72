"""Time byte-level potentials lifted to the embedded model's vocabulary (49,152 tokens).

For each registered potential and each prefix length L (bytes of text already generated):

    check     seconds per checked token: logw_subset(ctx, tokens) / len(tokens), the query an
              AWRS sampler makes (the context's state is already known, as in a running particle)
    extend    seconds per prefix(ctx + (t,)) call, one token at a time (includes the context
              lookup)
    vector    seconds per full next-token weight vector: logw_next(ctx), warm (a regex's
              mask for this DFA state already computed, as when particles share a state)
    cold      the same for a fresh lifted potential: the whole vocabulary-trie walk

and the ratio of the L = 2,000 cost to the L = 10 cost (the target: check <= 2x). Each
figure is the best of ``--repeats`` runs. ``prefix(ctx + (t,))`` also hashes the context tuple
(about 12 ns per token of context), which no tuple-keyed cache can avoid; samplers use
logw_subset / logw_next, which look the context up once per step.

    python benchmarks/bench_potentials.py [--only NAME ...] [--lengths 10 2000] [--json]

Other potentials join by calling ``register(name, make_potential, make_text)`` below:
``make_potential()`` returns a BytePotential, ``make_text(n)`` a text of about n bytes that the
potential accepts as a prefix.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from smc.core.logmath import NEG_INF
from potentials.base import BytePotential  # noqa: E402

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

ARITHMETIC = r"""
?start: expr
?expr: term (("+" | "-") term)*
?term: factor (("*" | "/") factor)*
?factor: NUMBER | "(" expr ")"
%import common.NUMBER
"""
JSON_GRAMMAR = r"""
?start: value
?value: object | array | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
array: "[" [value ("," value)*] "]"
object: "{" [pair ("," pair)*] "}"
pair: ESCAPED_STRING ":" value
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
"""
ARRAY_SCHEMA = {"type": "array", "items": {"type": "object", "properties": {
    "a": {"type": "integer"}, "b": {"type": "string", "pattern": "^[a-z]+$"}}}}


def _grammar(text: str) -> Callable[[], BytePotential]:
    def make() -> BytePotential:
        from potentials.grammar import Grammar

        return Grammar(text)

    return make


def _schema(schema: dict) -> Callable[[], BytePotential]:
    def make() -> BytePotential:
        from potentials.json import JSONSchema

        return JSONSchema(schema, whitespace="compact")

    return make


def _json_array(n: int) -> str:
    """About n bytes of an array of objects, always stopping inside a string value."""
    unit, tail = '{"a":1,"b":"xy"},', '{"a":1,"b":"'
    return "[" + unit * max(0, (n - 1 - len(tail)) // len(unit)) + tail


register("grammar-arith", _grammar(ARITHMETIC), _repeat("1+2*(3-4)+"))
register("grammar-json", _grammar(JSON_GRAMMAR), _json_array)
register("jsonschema-array", _schema(ARRAY_SCHEMA), _json_array)


async def _timed(coro) -> float:
    """Seconds to await ``coro``, with Python's cyclic garbage collector paused (as timeit does):
    a full collection, whose cost grows with every object alive (here mostly transition memos
    filled by earlier full-vocabulary walks), would otherwise land on whichever figure
    happens to be measured when it triggers."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        await coro
        return time.perf_counter() - t0
    finally:
        gc.enable()


async def bench_potential(lm, name: str, lengths: list[int], n_check: int,
                          repeats: int) -> list[dict]:
    """One row per prefix length; the lengths are measured in turn within every repeat, so
    that load on a shared machine hits them alike, and each figure is the fastest repeat."""
    make_potential, make_text = REGISTRY[name]
    potential = make_potential()
    lifted = potential.lift(lm)
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.choice(len(lm.vocab), size=n_check, replace=False)]
    cases = []
    for length in lengths:
        text = make_text(length)
        ids = tuple(lm.encode(text))
        if b"".join(lm.vocab[i] for i in ids) != text.encode():
            raise RuntimeError(f"{name}: the tokenizer does not round-trip the benchmark text")
        if await lifted.prefix(ids) == NEG_INF:
            raise RuntimeError(f"{name}: the benchmark text is not a viable prefix")
        live = int(np.sum(await lifted.logw_next(ids) > NEG_INF))  # also builds the trie
        cases.append({"potential": name, "prefix_bytes": len(text.encode()),
                      "prefix_tokens": len(ids), "live_tokens": live, "ids": ids})

    async def extend_each(ids: tuple[int, ...]) -> None:
        for t in tokens[:500]:
            await lifted.prefix(ids + (t,))

    async def cold_vector(ids: tuple[int, ...]) -> float:
        fresh = potential.lift(lm)  # no per-state masks yet: the full trie walk
        await fresh.prefix(ids)
        return await _timed(fresh.logw_next(ids))

    best: dict[tuple[int, str], float] = {}
    for _ in range(repeats):
        for k, case in enumerate(cases):
            ids = case["ids"]
            got = {"check_s": await _timed(lifted.logw_subset(ids, tokens)) / n_check,
                   "extend_s": await _timed(extend_each(ids)) / 500,
                   "vector_s": await _timed(lifted.logw_next(ids)),
                   "cold_vector_s": await cold_vector(ids)}
            for key, value in got.items():
                best[k, key] = min(best.get((k, key), float("inf")), value)
    rows = []
    for k, case in enumerate(cases):
        row = {key: v for key, v in case.items() if key != "ids"}
        row.update({key: best[k, key] for key in ("check_s", "extend_s", "vector_s",
                                                  "cold_vector_s")})
        rows.append(row)
    return rows


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

    from smc.backends.loading import load_lm

    lm = load_lm()
    rows = []
    for n in list(names):
        try:
            rows += asyncio.run(bench_potential(lm, n, args.lengths, args.checks, args.repeats))
        except ImportError as e:
            print(f"{n}: skipped ({e})")
            names.remove(n)
    if args.json:
        print(json.dumps(rows, indent=1))
        return rows
    print(f"{'potential':16} {'bytes':>6} {'tokens':>6} {'check/token':>12} {'prefix(x+t)':>12} "
          f"{'vector':>10} {'cold vector':>12} {'live':>6}")
    for r in rows:
        print(f"{r['potential']:16} {r['prefix_bytes']:6d} {r['prefix_tokens']:6d} "
              f"{r['check_s'] * 1e6:10.2f}us {r['extend_s'] * 1e6:10.2f}us "
              f"{r['vector_s'] * 1e3:8.2f}ms {r['cold_vector_s'] * 1e3:10.2f}ms "
              f"{r['live_tokens']:6d}")
    for n in names:
        mine = [r for r in rows if r["potential"] == n]
        a, b = mine[0], mine[-1]
        print(f"{n}: cost at {b['prefix_bytes']} / at {a['prefix_bytes']} bytes: "
              f"check {b['check_s'] / a['check_s']:.2f}x, "
              f"prefix(x+t) {b['extend_s'] / a['extend_s']:.2f}x, "
              f"vector {b['vector_s'] / a['vector_s']:.2f}x, "
              f"cold vector {b['cold_vector_s'] / a['cold_vector_s']:.2f}x")
    return rows


if __name__ == "__main__":
    main()
