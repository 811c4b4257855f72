"""Segments under SMC on a toy LM whose answer is known by enumeration (design.md tests 2 and
4): Ẑ is unbiased, the output law converges to the target as N grows, and masking, whose free
text walks into a segment that cannot be completed well, stays far from it."""

import asyncio
import math

import numpy as np

from potentials.choice import Choice
from potentials.segments import FreeText, Segments
from samplers import make_sampler
from smc.engine import smc
from smc.programs.constrained import ConstrainedGeneration
from tests.toy_problems import FastToyLM, exact_target

VOCAB = [b"a", b"b", b"!", b"x", b"$"]


def probs(ids):
    text = b"".join(VOCAB[i] for i in ids)
    if text == b"":
        return [0.8, 0.1, 0.08, 0.01, 0.01]
    if text == b"a":  # the LM wants more free text after "a"; the stop is unlikely
        return [0.5, 0.4, 0.02, 0.04, 0.04]
    if text == b"b":
        return [0.1, 0.1, 0.6, 0.1, 0.1]
    if text.endswith(b"!"):
        return [0.2, 0.2, 0.1, 0.4, 0.1]
    return [0.1, 0.1, 0.1, 0.3, 0.4]


LM = FastToyLM(VOCAB, b"$", probs)
# at most one byte of free text, then "!", then "x" or "xx"
PHI = Segments([FreeText("!", max_bytes=1), Choice(["x", "xx"])]).lift(LM)
T = 4


def target():
    w = exact_target(LM, lambda x: asyncio.run(PHI.complete(x)), T)
    z = sum(w.values())
    return {k: v / z for k, v in w.items()}, z


def runs(sampler, n, reps, seed0=0):
    model = ConstrainedGeneration(make_sampler(sampler, LM, PHI), T)

    async def go():
        law, zs = {}, []
        for seed in range(reps):
            r = await smc(model, n, ess_threshold=0.5, seed=seed0 + seed, progress=False)
            zs.append(math.exp(r.log_ml))
            for s, w in zip(r.samples, r.weights):
                law[s.token_ids] = law.get(s.token_ids, 0.0) + w / reps
        return law, np.array(zs)

    return asyncio.run(go())


def tv(p, q):
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def test_z_hat_is_unbiased():
    _, z = target()
    for sampler, n in (("direct", 4), ("awrs", 4)):
        _, zs = runs(sampler, n, 600, 50_000)
        se = zs.std() / math.sqrt(len(zs))
        assert abs(zs.mean() - z) <= 3 * se, (sampler, zs.mean(), z, se)


def test_output_law_converges_and_beats_masking():
    pi, _ = target()
    masking = tv(runs("masking", 16, 128)[0], pi)
    assert masking >= 0.2, masking
    tvs = {n: tv(runs("direct", n, 2048 // n, 10_000)[0], pi) for n in (1, 4, 16, 64)}
    assert tvs[1] > tvs[16] and tvs[64] <= tvs[16] + 0.03, tvs
    assert tvs[64] < 0.1 and tvs[16] < masking / 2, (tvs, masking)
