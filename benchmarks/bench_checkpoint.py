"""Cost of cloning particles under the sharing rule, and of writing a checkpoint every step.

Clone (µs per clone, median of 7 rounds of 2,000 clones):
  - ConstrainedGeneration with 32 tokens: ``Model.clone`` (``smc.programs.sharing.clone_state``) against the
    override it replaced (``copy.copy`` plus a copy of the token list, re-implemented here);
  - an LMContext program (tests/checkpoint_programs.Words, 32 tokens): ``clone_state`` against the
    mechanism it replaced (a memo of the shared objects ``reachable`` finds, then copy.deepcopy).

Checkpoint: ``smc.generate(..., checkpoint=path)`` on a ToyLM (V = 1,024, AWRS, no constraint
and a Regex, 32 tokens, seed 0). Every write is timed inside the run: ms per write (median over
the run's writes), ms per step without the writes ((wall - write time) / steps), their ratio
(the relative cost of checkpointing every step) and the file's size; the best of ``--rounds``.

    python benchmarks/bench_checkpoint.py [--particles 16,64,256] [--rounds 3]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests")]

import smc  # noqa: E402
import smc.engine.checkpoint as ck  # noqa: E402
from checkpoint_programs import CONSTRAINT, Words, make_lm  # noqa: E402
from potentials import Regex  # noqa: E402
from samplers import make_sampler  # noqa: E402
from smc.programs.constrained import ConstrainedGeneration
from smc.programs.sharing import clone_state
from smc.backends.base import is_lm  # noqa: E402
from potentials.base import Potential  # noqa: E402
from samplers.base import TokenSampler  # noqa: E402


def per_clone_us(fn) -> float:
    return statistics.median(timeit.repeat(fn, number=2000, repeat=7)) / 2000 * 1e6


def old_generation_clone(m: ConstrainedGeneration) -> ConstrainedGeneration:
    new = copy.copy(m)
    new.tokens = list(m.tokens)
    return new


def reachable(obj, max_depth=8):
    """The old graph walk: objects reachable from ``obj`` through attributes and containers, not
    inside LMs/potentials."""
    seen: set[int] = set()
    stack = [(obj, 0)]
    while stack:
        x, depth = stack.pop()
        if id(x) in seen or depth > max_depth or isinstance(x, (str, bytes, int, float, bool)):
            continue
        seen.add(id(x))
        yield x
        if is_lm(x) or isinstance(x, Potential):
            continue
        if isinstance(x, TokenSampler):  # its private members are machinery (batchers), not state
            children = [v for k, v in vars(x).items() if not k.startswith("_")]
        elif isinstance(x, dict):
            children = list(x.values())
        elif isinstance(x, (list, tuple, set, frozenset)):
            children = list(x)
        else:
            children = list(getattr(x, "__dict__", {}).values())
        stack.extend((c, depth + 1) for c in children)


def old_generic_clone(m):
    shared = (Potential, TokenSampler, np.random.Generator)
    memo = {id(x): x for x in reachable(m) if isinstance(x, shared) or is_lm(x)}
    return copy.deepcopy(m, memo)


def bench_clone() -> None:
    lm = make_lm()
    g = ConstrainedGeneration(make_sampler("awrs", lm, None, ()), 64)
    g.tokens = list(range(32))
    w = Words(lm, CONSTRAINT, 64)
    w.context.tokens = [0, 1, 3] * 10 + [0, 1]
    w.context.next_token(CONSTRAINT, sampler="awrs")
    rows = [
        ("ConstrainedGeneration", per_clone_us(lambda: old_generation_clone(g)), per_clone_us(lambda: clone_state(g))),
        ("LMContext program", per_clone_us(lambda: old_generic_clone(w)), per_clone_us(lambda: clone_state(w))),
    ]
    print("| particle | before (µs/clone) | clone_state (µs/clone) | ratio |")
    print("|---|---|---|---|")
    for name, old, new in rows:
        print(f"| {name} | {old:.1f} | {new:.1f} | {new / old:.2f} |")


def toy_lm(vocab_size: int = 1024) -> smc.ToyLM:
    rng = np.random.default_rng(0)
    vocab = [f"{chr(97 + i % 26)}{i // 26}" if i % 9 else " " + chr(97 + i % 26) for i in range(vocab_size - 1)]
    logits = rng.normal(size=(8, vocab_size))
    logits[:, -1] -= 3.0  # EOS
    table = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    rows = [list(r) for r in table]
    return smc.ToyLM(vocab + ["<eos>"], "<eos>", lambda ids: rows[len(ids) % 8])


def bench_checkpoint(particles: list[int], rounds: int) -> None:
    """Each run writes a checkpoint after every step; the writes are timed inside the run, so
    the write/step ratio compares two figures taken under the same load."""
    lm = toy_lm()
    real = ck.CheckpointWriter.write
    spent: list[float] = []

    def timed(self, run, elapsed):
        t = time.perf_counter()
        real(self, run, elapsed)
        spent.append(time.perf_counter() - t)

    ck.CheckpointWriter.write = timed
    print("\n| constraint | N | steps | ms per step (without writes) | ms per write | write / step | file (KiB) |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "run.ckpt"
        for cname, constraint in (("none", None), ("regex", Regex(r"[a-z0-9 ]{1,200}"))):
            for n in particles:
                best = None
                for _ in range(rounds):
                    spent.clear()
                    t = time.perf_counter()
                    r = smc.generate("", constraint, lm=lm, particles=n, max_tokens=32, seed=0,
                                     progress=False, checkpoint=path)
                    wall = time.perf_counter() - t
                    step_ms = (wall - sum(spent)) / len(r.history) * 1e3
                    write_ms = statistics.median(spent) * 1e3
                    if best is None or step_ms + write_ms < best[0] + best[1]:
                        best = (step_ms, write_ms, len(r.history))
                step_ms, write_ms, steps = best
                print(f"| {cname} | {n} | {steps} | {step_ms:.1f} | {write_ms:.2f} | {write_ms / step_ms:.2f} "
                      f"| {path.stat().st_size / 1024:.0f} |")
    ck.CheckpointWriter.write = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--particles", default="16,64,256")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    bench_clone()
    bench_checkpoint([int(x) for x in args.particles.split(",")], args.rounds)


if __name__ == "__main__":
    main()
