"""Run statistics come from the objects that registered with the run (smc.core.counters), not from
walking the particles: concurrent runs keep separate accounts, objects made during a run count
from zero, an LM the run never asks is not reported, shared stats dicts count once."""

import asyncio

import pytest

import smc
from potentials import Regex
from samplers import make_sampler
from samplers.proposal import ProposalSampler
from smc.core.counters import RunCounters, current, register
from smc.engine import smc as run_smc
from smc.programs.constrained import ConstrainedGeneration
from smc.programs.context import LMContext
from smc.programs.model import Model

VOCAB = ["a", "b", "<eos>"]


def toy():
    return smc.ToyLM(VOCAB, "<eos>", lambda ids: [0.4, 0.4, 0.2])


def test_register_outside_a_run_does_nothing_and_inside_snapshots_once():
    lm = toy()
    register(lm)  # no run: nothing to register with, no error
    assert current() is None
    rc = RunCounters()
    lm.stats["requests"] = 7
    with rc.active():
        assert current() is rc
        register(lm, None)
        lm.stats["requests"] += 3
        register(lm)  # a second registration keeps the first snapshot
        lm.stats["requests"] += 2
    assert current() is None
    ((obj, d),) = rc.deltas()
    assert obj is lm and d["requests"] == 5


def test_objects_sharing_one_stats_dict_count_once_under_the_first():
    lm = toy()
    s = ProposalSampler(lm, None, (0,))
    assert s.stats is s.inner.stats
    rc = RunCounters()
    with rc.active():
        register(s, s.inner)
    assert [type(o).__name__ for o, _ in rc.deltas()] == ["ProposalSampler"]


async def test_concurrent_runs_on_different_lms_report_only_their_own_work():
    lm1, lm2 = toy(), toy()
    g1 = ConstrainedGeneration(make_sampler("awrs", lm1, None, (0,)), 3)
    g2 = ConstrainedGeneration(make_sampler("direct", lm2, None, (0,)), 5)
    r1, r2 = await asyncio.gather(run_smc(g1, 4, seed=0, progress=False), run_smc(g2, 6, seed=1, progress=False))
    assert r1.stats["lm_requests"] == lm1.stats["requests"] > 0
    assert r2.stats["lm_requests"] == lm2.stats["requests"] > 0
    assert r1.stats["lm_requests"] != r2.stats["lm_requests"]
    assert list(r1.stats["samplers"]) == ["AWRSSampler#0"] and list(r2.stats["samplers"]) == ["DirectSampler#0"]
    assert 0 < r1.stats["samplers"]["AWRSSampler#0"]["steps"] <= sum(sum(h.active) for h in r1.history)


AB = Regex("[ab]{1,3}")


class TwoContexts(Model):
    """Holds two LMs but only ever asks the first; its sampler is built lazily, during the run."""

    def __init__(self, used, unused):
        super().__init__()
        self.ctx = LMContext(used, [0], chat=False)
        self.spare = LMContext(unused, [0], chat=False)

    async def step(self):
        tok = await self.sample(self.ctx.next_token(AB, sampler="awrs"))
        if tok in self.ctx.lm.eos_token_ids or len(self.ctx.tokens) >= 4:
            self.finish()


async def test_lazy_sampler_counts_from_zero_and_an_unasked_lm_is_not_reported():
    used, unused = toy(), toy()
    r = await run_smc(TwoContexts(used, unused), 5, seed=0, progress=False)
    # the sampler did not exist before the run, so its whole stats are this run's work
    assert r.stats["lm"]["requests"] == used.stats["requests"] > 0  # one LM reported, as a dict
    assert unused.stats["requests"] == 0
    assert list(r.stats["samplers"]) == ["AWRSSampler#0", "Lifted#1"]  # the sampler, then its potential
    d = r.stats["samplers"]["AWRSSampler#0"]
    assert d["steps"] == sum(sum(h.active) for h in r.history)
    assert r.stats["constraint_checks"] == d["checks"] == r.stats["samplers"]["Lifted#1"]["tokens_checked"] > 0


async def test_a_second_run_reports_only_its_own_work():
    lm = toy()
    lifted = Regex("[ab]{1,2}").lift(lm)
    s = make_sampler("awrs", lm, lifted, (0,))
    r1 = await run_smc(ConstrainedGeneration(s, 4), 4, seed=0, progress=False)
    states = len(lifted._states)
    before, before_sampler = dict(lm.stats), dict(s.stats)
    r2 = await run_smc(ConstrainedGeneration(s, 4), 4, seed=0, progress=False)
    assert r1.stats["lm_requests"] == r2.stats["lm_requests"] == lm.stats["requests"] - before["requests"]
    # the sampler's own counts of the second run (its steps there may differ from the first's:
    # masks the first run kept make them exact)
    assert r2.stats["samplers"]["AWRSSampler#0"] == {k: v - before_sampler[k] for k, v in s.stats.items()}
    assert r1.stats["samplers"]["AWRSSampler#0"]["steps"] == r2.stats["samplers"]["AWRSSampler#0"]["steps"]
    # the potential's caches were filled by the first run: the second hits them
    first, second = r1.stats["samplers"]["Lifted#1"], r2.stats["samplers"]["Lifted#1"]
    assert first["tokens_checked"] == r1.stats["samplers"]["AWRSSampler#0"]["checks"]
    assert second["tokens_checked"] == r2.stats["samplers"]["AWRSSampler#0"]["checks"] > 0
    assert states > 0 and len(lifted._states) == states  # the first run computed them all
    assert second["state_cache_misses"] == 0  # (the first run kept them)
    assert second["state_cache_hits"] > 0


@pytest.mark.parametrize("method", ["beam", "top_k", "steer"])
def test_search_methods_report_their_lm_requests(method):
    lm = toy()
    r = smc.generate("", Regex("(a|b){1,2}"), lm=lm, particles=3, max_tokens=3, seed=0, method=method)
    assert r.stats["lm_requests"] == lm.stats["requests"] > 0
