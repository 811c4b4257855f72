"""The probabilistic-program API: LMContext, distributions, sample/observe/condition/twist/finish."""

import asyncio
import math

import numpy as np
import pytest

from smc.engine import smc
from smc.programs.distributions import Bernoulli, Categorical
from smc.programs.context import LMContext
from smc.programs.model import Model
from tests.smc.engine.test_loop import LMS, PREDICATE, phi_complete
from tests.toy_problems import exact_target

EOS = 2
T = 2


class Mixture(Model):
    """Pick an LM per particle (30% / 70%), then generate under PREDICATE with at most T tokens.

    Z = 0.3 Z(alt) + 0.7 Z(rare_eos), each Z the constrained mass with EOS forced at T.
    """

    def __init__(self, sampler="awrs", twist=False):
        super().__init__()
        self.context = None
        self.sampler, self.use_twist = sampler, twist

    async def step(self):
        if self.context is None:
            name = await self.sample(Categorical(["alt", "rare_eos"], [0.3, 0.7]))
            self.context = LMContext(LMS[name], ())
            return
        if len(self.context.tokens) == T:
            await self.observe(self.context.next_token(PREDICATE), EOS)
            self.finish()
            return
        await self.sample(self.context.next_token(PREDICATE, sampler=self.sampler))
        if self.context.done:
            self.finish()
        elif self.use_twist:
            self.twist(0.5 * len(self.context.tokens))


def exact_z(name):
    return sum(exact_target(LMS[name], phi_complete(PREDICATE), T).values())


def mean_z(model, runs, n):
    async def go():
        return [math.exp((await smc(model, n, seed=s, ess_threshold=1.0, progress=False)).log_ml)
                for s in range(runs)]

    z = np.array(asyncio.run(go()))
    return z.mean(), z.std() / math.sqrt(len(z))


@pytest.mark.parametrize("sampler,twist", [("awrs", False), ("direct", True)])
def test_program_z_hat_is_unbiased(sampler, twist):
    want = 0.3 * exact_z("alt") + 0.7 * exact_z("rare_eos")
    got, se = mean_z(Mixture(sampler, twist), 1000, 4)
    assert abs(got - want) <= 3 * se, (got, want, se)


class WithProposal(Model):
    """Unconstrained generation from LMS["alt"], proposing from LMS["rare_eos"] (p/q corrected)."""

    def __init__(self):
        super().__init__()
        self.context = LMContext(LMS["alt"], ())
        self.proposal = LMContext(LMS["rare_eos"], ())

    async def step(self):
        if len(self.context.tokens) == T:
            await self.observe(self.context.next_token(), EOS)
            self.finish()
            return
        await self.sample(self.context.next_token(), proposal=self.proposal.next_token())
        assert self.proposal.tokens == self.context.tokens  # both contexts got the token
        if self.context.done:
            self.finish()


def test_proposal_is_importance_corrected():
    want = sum(exact_target(LMS["alt"], lambda x: 0.0, T).values())
    got, se = mean_z(WithProposal(), 1000, 2)
    assert abs(got - want) <= 3 * se, (got, want, se)


class Coin(Model):
    """Observe three coin flips of an unknown bias in {0.2, 0.9}: Z = sum_b P(b) P(flips | b)."""

    async def step(self):
        self.bias = await self.sample(Categorical([0.2, 0.9], [0.5, 0.5]))
        for flip in (True, True, False):
            await self.observe(Bernoulli(self.bias), flip)
        self.condition(self.bias > 0.1)
        self.finish()


async def test_observe_condition_exact_and_posterior():
    r = await smc(Coin(), 64, seed=0, progress=False)
    z = 0.5 * 0.2 * 0.2 * 0.8 + 0.5 * 0.9 * 0.9 * 0.1
    # every particle's weight is P(flips | its bias), so Ẑ is close to z (not exact: random mix)
    assert abs(math.exp(r.log_ml) - z) < 0.02
    assert r.stats["steps"] == 1


def test_clone_shares_lms_and_samplers_but_copies_state():
    m = Mixture()
    m.context = LMContext(LMS["alt"], ())
    m.context.tokens.append(1)
    dist = m.context.next_token(PREDICATE, sampler="awrs")
    c = m.clone()
    assert c.context.lm is m.context.lm
    assert c.context.next_token(PREDICATE, sampler="awrs").sampler is dist.sampler
    c.context.tokens.append(0)
    assert m.context.tokens == [1]


def test_primitives_guard_misuse():
    m = Coin()
    with pytest.raises(RuntimeError, match="inside a step"):
        m.draw
    with pytest.raises(ValueError, match="finite"):
        m.score(float("nan"))
    with pytest.raises(ValueError, match="bank's log weight"):
        m.bank(math.inf)
    with pytest.raises(ValueError, match="Categorical"):
        Categorical([1, 2], [0.5])
    with pytest.raises(ValueError, match="unknown sampler"):
        LMContext(LMS["alt"], ()).next_token(PREDICATE, sampler="nope")


class Halves(Model):
    """Each step banks half of its mass as a finished copy and keeps the other half: after
    k steps the banked copies carry 1/2, 1/4, ..., the particle 1/2^k (total 1)."""

    def __init__(self):
        super().__init__()
        self.k = 0

    async def step(self):
        self.k += 1
        self.bank(math.log(0.5))
        self.bank(-math.inf)  # weight 0: nothing is set aside
        self.score(math.log(0.5))
        if self.k == 3:
            self.finish()

    def text(self):
        return str(self.k)


async def test_a_program_banks_finished_copies():
    r = await smc(Halves(), 2, seed=0, progress=False)
    assert r.stats["banked"] == 6 and len(r.samples) == 8
    assert [s.text for s in r.samples[2:]] == ["1", "1", "2", "2", "3", "3"]  # as it was when banked
    assert [math.exp(s.log_weight) for s in r.samples[2:]] == pytest.approx([0.5, 0.5, 0.25, 0.25, 0.125, 0.125])
    assert math.exp(r.log_ml) == pytest.approx(1.0)
