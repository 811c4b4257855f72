"""The built-in program's population route (``ConstrainedGeneration.step_population`` through
``TokenSampler.sample_many``) gives exactly the run that one task per particle gives."""

import asyncio

import numpy as np
import pytest

from potentials import Regex
from samplers import AWRSSampler, make_sampler
from samplers.base import BlockDraw
from smc.engine import smc
from smc.programs.constrained import ConstrainedGeneration
from smc.programs.model import Model
from tests.toy_problems import FastToyLM

VOCAB = [b"a", b"b", b"ab", b"ba", b"c", b"cc", b"x", b"<eos>"]


def make_lm():
    def probs(ids):
        p = np.array([0.05, 0.1, 0.05, 0.1, 0.2, 0.2, 0.25, 0.05])
        return np.roll(p[:-1], len(ids)).tolist() + [p[-1]]

    return FastToyLM(VOCAB, b"<eos>", probs)


class OneTaskEach(ConstrainedGeneration):
    """The same program without the population route: one task per particle (Model's default)."""

    step_population = Model.step_population


def run(program_type, sampler_name, constraint, n=24, seed=3):
    lm = make_lm()
    pot = None if constraint is None else Regex(constraint).lift(lm)
    sampler = make_sampler(sampler_name, lm, pot, (0,))
    return asyncio.run(smc(program_type(sampler, 6), n, seed=seed, ess_threshold=0.9, progress=False)), sampler


@pytest.mark.parametrize("sampler_name", ["awrs", "direct", "masking"])
@pytest.mark.parametrize("constraint", [None, "((ab|ba)*c?){1,3}"])
def test_population_route_equals_one_task_per_particle(sampler_name, constraint):
    fast, s_fast = run(ConstrainedGeneration, sampler_name, constraint)
    slow, s_slow = run(OneTaskEach, sampler_name, constraint)
    assert [s.token_ids for s in fast.samples] == [s.token_ids for s in slow.samples]
    assert [s.log_weight for s in fast.samples] == [s.log_weight for s in slow.samples]
    assert fast.log_ml == slow.log_ml
    assert [h.ancestors for h in fast.history] == [h.ancestors for h in slow.history]
    assert any(h.ancestors is not None for h in fast.history)  # resampling happened
    assert s_fast.stats == s_slow.stats
    assert fast.stats["samplers"] == slow.stats["samplers"]


def test_sample_many_equals_concurrent_samples_and_keeps_order():
    rng = np.random.default_rng(5)
    ctxs = [(), (2,), (3, 4), (6,), (2, 3), ()] * 3
    blocks = [(rng.random(8), int(rng.integers(2**32)), rng.random(16)) for _ in ctxs]

    def fresh(max_population=4096):  # a new potential each time: its mask caches start empty
        lm = make_lm()
        sampler = AWRSSampler(lm, Regex("(ab|ba)*c?").lift(lm), (0,), max_checks=2)
        sampler.max_population = max_population
        return sampler

    async def together(sampler):
        return await sampler.sample_many([(c, BlockDraw(*b)) for c, b in zip(ctxs, blocks)])

    async def apart(sampler):
        return await asyncio.gather(*(sampler.sample(c, BlockDraw(*b)) for c, b in zip(ctxs, blocks)))

    s1, s2 = fresh(), fresh()
    a, b = asyncio.run(together(s1)), asyncio.run(apart(s2))
    assert a == b and s1.stats == s2.stats
    assert s1.stats["fallbacks"] > 0 and s1.stats["exact_steps"] > 0  # both kinds of step were taken
    # chunks of 4, in order: the batches the batcher forms with max_population = 4
    s3, s4 = fresh(4), fresh(4)
    assert asyncio.run(together(s3)) == asyncio.run(apart(s4))


def test_sample_many_with_plain_draws_takes_each_sample():
    lm = make_lm()
    sampler = make_sampler("awrs", lm, None, (0,))
    got = asyncio.run(sampler.sample_many([((), np.random.default_rng(k)) for k in range(4)]))
    want = [asyncio.run(sampler.sample((), np.random.default_rng(k))) for k in range(4)]
    assert got == want and sampler.stats["steps"] == 8
