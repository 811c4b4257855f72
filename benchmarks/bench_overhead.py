"""The engine's own cost per particle-step, with an LM that costs nothing.

A zero-cost LM returns precomputed rows: one fixed normalized log-prob row for every context,
and its CDF, both computed once (its normalization is not the engine's work; on a GPU a backend
computes them inside its forward). What is left is everything the engine, the program, the
sampler and the constraint do per step:

    ms per particle-step = SMC wall time / sum over steps of the particles stepped.

Vocabularies: the embedded tokenizer's 49,152 tokens, and 128,256 = those plus 79,104 synthetic
lowercase tokens (" " + base-26 letters), the size of Llama 3's vocabulary. The fixed row is an
LM that writes lowercase text: 70% of the mass on tokens made only of [a-z ], 10% on tokens made
only of JSON punctuation and spaces, 1% on EOS, the rest Zipf-distributed over all tokens in a
seeded random order (so AWRS rejects ~30% of its draws under the regex, and the JSON Schema
needs its keys and quotes from the rarer tokens).

Runs: V in {49152, 128256} x N in {16, 64, 256} x constraint (none, Regex("[a-z ]{1,200}"), a
one-field JSON Schema) x sampler: ``awrs`` (the population step: one batched draw for all
particles, only candidate ids cross to the CPU), ``awrs-ref`` (the same sampler forced onto the
one-particle reference path, i.e. the pre-population engine: each particle copies its row to
float64 numpy), and ``direct`` (whole-vocabulary masks per particle); a sampler named with
options, ``awrs:OPTION=K[:OPTION=K]``, runs with those sampler options (``awrs:early_fallback_permille=0``
beside ``awrs`` compares an option's cost in one run). 32 tokens, seed 0; with
``--seeds K`` seeds 0..K-1, the figure summed over them (the JSON documents' lengths, and so the
share of costly structural steps, vary with the seed); with ``--repeat R`` each seed's run is
repeated R times and its fastest wall kept (the runs are identical: seeded; this machine's
timings vary by ~25% between runs). Target: <= 0.05 ms per particle-step for
awrs at V = 128,256, N = 64.

With ``--per-byte 0,0.5`` every run is made without and with the budget twist that a JSON
Schema run in one population gets by default (``smc.api.generation.budget_twist``; the
``per_byte`` column): its cost is a cached completion-length lookup per particle-step.

    python benchmarks/bench_overhead.py [--vocab 49152,128256] [--particles 16,64,256]
           [--constraints none,regex,json] [--samplers awrs,awrs-ref,direct] [--tokens 32] [--seeds 1] [--repeat 1]
           [--per-byte 0] [--jsonl F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import string
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from potentials import JSONSchema, Regex  # noqa: E402
from samplers import make_sampler  # noqa: E402
from smc.backends.base import AsyncLM  # noqa: E402

try:  # absent before the population step: the script then times that engine (the "before" figures)
    from smc.backends.base import NextTokenDists, dists_from_logprobs
except ImportError:
    NextTokenDists = dists_from_logprobs = None
from smc.api.generation import budget_twist  # noqa: E402
from smc.engine import smc  # noqa: E402
from smc.programs.constrained import ConstrainedGeneration
from potentials.lift import as_token_potential as lift  # noqa: E402

TARGET_MS = 0.05
SCHEMA = {
    "type": "object",
    "properties": {"note": {"type": "string", "maxLength": 200}},
    "required": ["note"],
    "additionalProperties": False,
}
CONSTRAINTS = {"none": lambda: None, "regex": lambda: Regex("[a-z ]{1,200}"), "json": lambda: JSONSchema(SCHEMA)}


class ZeroCostLM(AsyncLM):
    """Every context gets the same precomputed row; batches get slices of precomputed
    [max_rows, V] tensors (no per-call work beyond validating the contexts)."""

    def __init__(self, vocab: list[bytes], eos: int, logp: torch.Tensor, max_rows: int):
        self.vocab, self.eos_token_ids = vocab, [eos]
        self._row = logp
        if dists_from_logprobs is not None:
            self._dists = dists_from_logprobs(logp[None].expand(max_rows, -1).contiguous())
        self.stats = {"requests": 0, "forward_passes": 0, "batch_rows": 0}

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError("the zero-cost LM takes token ids only")

    async def _next_token_logprobs(self, ids: tuple[int, ...]) -> torch.Tensor:
        self.stats["requests"] += 1
        return self._row

    async def batch_next_token_dists(self, batch: Sequence[Sequence[int]]) -> "NextTokenDists":
        for ids in batch:
            self.check_ids(ids)
        b = len(batch)
        self.stats["requests"] += b
        self.stats["forward_passes"] += 1
        self.stats["batch_rows"] += b
        return NextTokenDists(self._dists.logp[:b], self._dists.cdf[:b])


def embedded_vocab() -> tuple[list[bytes], int]:
    from transformers import AutoTokenizer

    from smc.backends.vocab import build_vocab
    from smc.backends.loading import embedded_model_dir

    tok = AutoTokenizer.from_pretrained(embedded_model_dir())
    vocab, _ = build_vocab(tok, len(tok))
    return vocab, int(tok.eos_token_id)


def synthetic_tokens(n: int) -> list[bytes]:
    """n distinct tokens " " + base-26 letters (never equal to an embedded token: 'q' first)."""
    out = []
    for k in range(n):
        s, x = "", k
        while True:
            s = string.ascii_lowercase[x % 26] + s
            x //= 26
            if not x:
                break
        out.append((" q" + s).encode())
    return out


def text_row(vocab: list[bytes], eos: int, seed: int = 0) -> torch.Tensor:
    """The fixed row of the module docstring (float32 log-probs, normalized in float64)."""
    rng = np.random.default_rng(seed)
    V = len(vocab)
    lower = set(b"abcdefghijklmnopqrstuvwxyz ")
    punct = set(b'{}[]":, ')
    is_lower = np.array([bool(t) and set(t) <= lower for t in vocab])
    is_punct = np.array([bool(t) and set(t) <= punct for t in vocab]) & ~is_lower
    zipf = np.empty(V)
    zipf[rng.permutation(V)] = 1.0 / (np.arange(V) + 10.0) ** 1.1
    p = 0.19 * zipf / zipf.sum()
    for mask, mass in ((is_lower, 0.70), (is_punct, 0.10)):
        p[mask] += mass * zipf[mask] / zipf[mask].sum()
    p[eos] += 0.01
    return torch.log_softmax(torch.from_numpy(np.log(p)), dim=-1).float()


def build_lm(V: int, max_rows: int) -> ZeroCostLM:
    vocab, eos = embedded_vocab()
    if V > len(vocab):
        vocab = vocab + synthetic_tokens(V - len(vocab))
    vocab = vocab[:V]
    return ZeroCostLM(vocab, eos, text_row(vocab, eos), max_rows)


async def one_run(lm: ZeroCostLM, constraint: str, sampler: str, n: int, tokens: int, warm: bool = False,
                  seed: int = 0, per_byte: float = 0.0) -> dict:
    pot = lift(CONSTRAINTS[constraint](), lm)
    if warm and pot is not None:  # the per-LM vocabulary tables (one-time, not timed)
        if hasattr(pot, "build_tables"):  # (older engines: the first mask builds them)
            pot.build_tables()
        await pot.logw_next(())
    name, *opts = sampler.split(":")
    options = {k: int(v) for k, _, v in (o.partition("=") for o in opts)}
    s = make_sampler("awrs" if name == "awrs-ref" else name, lm, pot, [lm.eos_token_ids[0]], **options)
    if name == "awrs-ref":
        s.population = False  # the one-particle reference path (the engine before the population step)
    t0 = time.perf_counter()
    r = await smc(ConstrainedGeneration(s, tokens), n, seed=seed, progress=False, critic=budget_twist(per_byte, n))
    wall = time.perf_counter() - t0
    particle_steps = sum(sum(h.active) for h in r.history)
    return dict(
        wall_s=round(wall, 4),
        particle_steps=particle_steps,
        ms_per_particle_step=round(1000 * wall / particle_steps, 4),
        checks_per_particle_step=round(r.stats["constraint_checks"] / particle_steps, 2),
        full_evals=r.stats["full_evaluations"],
        finished=len(r.finished),
    )


def pooled(runs: list[dict]) -> dict:
    """One row for several seeds' runs: wall and particle-steps summed, per-step figures of the sums."""
    if len(runs) == 1:
        return runs[0]
    wall = sum(r["wall_s"] for r in runs)
    steps = sum(r["particle_steps"] for r in runs)
    checks = sum(r["checks_per_particle_step"] * r["particle_steps"] for r in runs)
    return dict(wall_s=round(wall, 4), particle_steps=steps, ms_per_particle_step=round(1000 * wall / steps, 4),
                checks_per_particle_step=round(checks / steps, 2), full_evals=sum(r["full_evals"] for r in runs),
                finished=sum(r["finished"] for r in runs), seeds=len(runs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", default="49152,128256")
    ap.add_argument("--particles", default="16,64,256")
    ap.add_argument("--constraints", default="none,regex,json")
    ap.add_argument("--samplers", default="awrs,awrs-ref,direct")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--seeds", type=int, default=1, help="run seeds 0..K-1 and sum (default 1: seed 0)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per seed, the fastest kept")
    ap.add_argument("--per-byte", default="0", help="comma-separated budget-twist rates (0: none)")
    ap.add_argument("--jsonl", default=None)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    ns = [int(x) for x in args.particles.split(",")]
    rates = [float(x) for x in args.per_byte.split(",")]
    print("| V | N | constraint | sampler | per_byte | ms/particle-step | x target | checks/p-step | full evals | finished |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    out = open(args.jsonl, "a") if args.jsonl else None
    for V in (int(x) for x in args.vocab.split(",")):
        lm = build_lm(V, max(ns))
        for constraint in args.constraints.split(","):
            for sampler in args.samplers.split(","):
                # warm-up: the vocabulary tables every lifted constraint shares, mask caches
                asyncio.run(one_run(lm, constraint, sampler, 4, 4, warm=True))
                for n, rate in ((n, r) for n in ns for r in rates):
                    runs = [min((asyncio.run(one_run(lm, constraint, sampler, n, args.tokens, seed=k, per_byte=rate))
                                 for _ in range(args.repeat)), key=lambda r: r["wall_s"])
                            for k in range(args.seeds)]
                    row = pooled(runs)
                    row.update(V=V, N=n, constraint=constraint, sampler=sampler, per_byte=rate)
                    ratio = row["ms_per_particle_step"] / TARGET_MS
                    print(f"| {V} | {n} | {constraint} | {sampler} | {rate:g} | {row['ms_per_particle_step']:.3f} | "
                          f"{ratio:.1f} | {row['checks_per_particle_step']} | {row['full_evals']} | "
                          f"{row['finished']} |", flush=True)
                    if out:
                        out.write(json.dumps(row) + "\n")
                        out.flush()


if __name__ == "__main__":
    main()
