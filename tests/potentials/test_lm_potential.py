"""LMPotential on a toy LM: the contract and exact values, with prompts and temperature."""

from __future__ import annotations

import math

import numpy as np
import pytest
from potentials.testing import PotentialContract

from smc.core.logmath import NEG_INF
from potentials.lm import LMPotential
from smc.backends.toy import ToyLM

VOCAB = ["a", "b", "c", "<e>"]


def probs(ids: tuple[int, ...]) -> list[float]:
    """A context-dependent law (it depends on the last token and the length)."""
    if len(ids) >= 6:
        return [0.0, 0.0, 0.0, 1.0]
    last = ids[-1] if ids else 3
    table = {0: [0.1, 0.5, 0.2, 0.2], 1: [0.6, 0.1, 0.0, 0.3], 2: [0.25, 0.25, 0.25, 0.25],
             3: [0.4, 0.3, 0.2, 0.1]}
    return table[last]


def lm() -> ToyLM:
    return ToyLM(VOCAB, "<e>", probs)


CONTEXTS = [(), (0,), (0, 1), (1, 2), (1, 2, 0), (2, 2, 2), (3,), (0, 3, 1)]


class TestLMPotentialContract(PotentialContract):
    def potential(self):
        return LMPotential(lm(), prompt="c", temperature=0.7)

    def contexts(self):
        return CONTEXTS


def tempered(p: list[float], t: float) -> list[float]:
    q = [x ** (1 / t) for x in p]
    return [x / sum(q) for x in q]


def logp(x: float) -> float:
    return math.log(x) if x > 0 else NEG_INF


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
@pytest.mark.parametrize("prompt", ["", "ca", [2, 0]])
async def test_exact_values(prompt, temperature):
    model = lm()
    pot = LMPotential(model, prompt=prompt, temperature=temperature)
    u = tuple(model.encode(prompt)) if isinstance(prompt, str) else tuple(prompt)
    for x in [(), (0,), (0, 1), (1, 0, 2), (1, 2)]:
        want = sum(logp(tempered(probs(u + x[:t]), temperature)[x[t]]) for t in range(len(x)))
        assert await pot.prefix(x) == pytest.approx(want, abs=1e-9)
        eos = logp(tempered(probs(u + x), temperature)[3])
        assert await pot.complete(x) == pytest.approx(want + eos, abs=1e-9)
        nxt = [logp(q) if want > NEG_INF else NEG_INF for q in tempered(probs(u + x), temperature)]
        np.testing.assert_allclose(await pot.logw_next(x), nxt, atol=1e-9)


async def test_zero_probability_and_eos_inside_are_dead():
    pot = LMPotential(lm())
    assert await pot.prefix((1, 2)) == NEG_INF          # p(c | b) = 0
    assert await pot.complete((1, 2, 0)) == NEG_INF
    assert await pot.prefix((3, 0)) == NEG_INF          # EOS ends the sequence
    assert np.all(await pot.logw_next((1, 2)) == NEG_INF)


async def test_prefix_values_are_memoized():
    model = lm()
    pot = LMPotential(model)
    await pot.prefix((0, 1, 0))
    calls = model.stats["requests"]
    await pot.prefix((0, 1, 0, 1))
    assert model.stats["requests"] == calls + 1


async def test_batch_logw_next_uses_one_batch():
    pot = LMPotential(lm(), temperature=0.5)
    rows = await pot.batch_logw_next(CONTEXTS)
    for ctx, row in zip(CONTEXTS, rows):
        np.testing.assert_allclose(row, await pot.logw_next(ctx))


def test_bad_arguments():
    with pytest.raises(ValueError, match="temperature"):
        LMPotential(lm(), temperature=0)
    with pytest.raises(ValueError, match="temperature"):
        LMPotential(lm(), temperature=float("inf"))
    with pytest.raises(ValueError, match="outside"):
        LMPotential(lm(), prompt=[7])
    with pytest.raises(TypeError, match="prompt"):
        LMPotential(lm(), prompt=["a"])
