"""Grammar potential: cost of advancing a particle's state by one token, by prefix length.

For each grammar and prefix length L, with s the state after an accepted prefix of ~L bytes:

    advance   microseconds per Grammar.advance(s, token bytes), transition memo cleared before
              every token (the cost a particle pays for a token never checked at s before)
    memo      the same with the memo warm (a sibling particle checking the same token)
    build     seconds to construct the Grammar (lark + terminal automata)

and the ratio of the L = 2,000 cost to the L = 10 cost: a persistent Earley state makes it
independent of L. No LM is involved; bench_potentials.py times the lifted, whole-vocabulary
queries on the embedded model.

    python benchmarks/bench_grammar.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from potentials.grammar import Grammar  # noqa: E402

ARITH = r"""
?start: sum
?sum: product | sum "+" product | sum "-" product
?product: atom | product "*" atom | product "/" atom
?atom: NUMBER | "(" sum ")" | "-" atom
%import common.NUMBER
%import common.WS_INLINE
%ignore WS_INLINE
"""

JSON = r"""
?start: value
?value: object | array | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
array: "[" [value ("," value)*] "]"
object: "{" [pair ("," pair)*] "}"
pair: ESCAPED_STRING ":" value
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
"""


def _arith_text(n: int) -> str:
    unit = "12 + 3*(4 - 5) + "
    return (unit * (n // len(unit) + 1))[:n]


def _json_text(n: int) -> str:
    """About n bytes of an array of objects, stopping inside a string value."""
    unit, tail = '{"a": 1, "b": "xy"}, ', '{"a": 1, "b": "'
    return "[" + unit * max(0, (n - 1 - len(tail)) // len(unit)) + tail


CASES = {
    "arith": (ARITH, _arith_text, [b"12", b"3", b" +", b"*(", b"7)", b" ", b"x", b"+-"]),
    "json": (JSON, _json_text, [b"abc", b'"}', b'"},', b' {"', b'":', b"\\n", b"1", b" "]),
}


def bench(name: str, length: int, repeats: int) -> dict:
    text, make_text, tokens = CASES[name]
    t0 = time.perf_counter()
    pot = Grammar(text)
    build = time.perf_counter() - t0
    prefix = make_text(length).encode()
    state = pot.advance(pot.initial(), prefix)
    if state is None:
        raise RuntimeError(f"{name}: the benchmark text is not a viable prefix")
    cache = pot.earley._cache

    def cold() -> float:
        t = time.perf_counter()
        for tok in tokens:
            cache.clear()
            pot.advance(state, tok)
        return (time.perf_counter() - t) / len(tokens)

    def warm() -> float:
        t = time.perf_counter()
        for tok in tokens:
            pot.advance(state, tok)
        return (time.perf_counter() - t) / len(tokens)

    advance = statistics.median(cold() for _ in range(repeats))
    warm()
    memo = statistics.median(warm() for _ in range(repeats))
    return {"grammar": name, "bytes": len(prefix), "advance_us": advance * 1e6,
            "memo_us": memo * 1e6, "build_s": build}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args(argv)
    print(f"{'grammar':8} {'bytes':>6} {'advance/token':>14} {'memo/token':>11} {'build':>7}")
    for name in CASES:
        rows = [bench(name, n, args.repeats) for n in (10, 2000)]
        for r in rows:
            print(f"{r['grammar']:8} {r['bytes']:6d} {r['advance_us']:12.1f}us "
                  f"{r['memo_us']:9.2f}us {r['build_s']:6.2f}s")
        print(f"{name}: advance at {rows[1]['bytes']} / at {rows[0]['bytes']} bytes: "
              f"{rows[1]['advance_us'] / rows[0]['advance_us']:.2f}x")


if __name__ == "__main__":
    main()
