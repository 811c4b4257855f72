"""smc.generate / agenerate on ToyLMs: validation, constraints, errors, concurrency."""

import asyncio
import math
import re

import numpy as np
import pytest

import smc
from potentials import Predicate, Regex
from smc import ToyLM
from tests.toy_problems import FastToyLM

VOCAB = ["1", "2", "12", "-", "a", "$"]


def probs(ids):
    base = np.array([0.25, 0.2, 0.15, 0.15, 0.1, 0.15])
    return np.roll(base[:5], len(ids)).tolist() + [0.15]


def toy():
    return FastToyLM(VOCAB, "$", probs)


PHONE = r"[12]{2}-[12]"


@pytest.fixture(autouse=True)
def no_model_loading(monkeypatch):
    """These tests never load the embedded model: a call to load_lm is a bug."""
    import smc.api.generation

    def refuse(*a, **k):
        raise AssertionError("load_lm called")

    monkeypatch.setattr(smc.api.generation, "load_lm", refuse)


@pytest.mark.parametrize("sampler", ["awrs", "direct"])
def test_regex_generation_returns_only_valid_finished_samples(sampler):
    r = smc.generate("", constraint=Regex(PHONE), lm=toy(), particles=8, max_tokens=5, seed=1,
                     sampler=sampler, progress=False)
    assert r.finished and math.isfinite(r.log_ml)
    for s in r.finished:
        assert re.fullmatch(PHONE, s.text), s.text
        assert toy().decode(s.token_ids).decode() == s.text
    assert sum(r.posterior.values()) == pytest.approx(1.0)
    assert r.best in r.posterior
    assert r.stats["particles"] == 8 and r.stats["steps"] >= 3 and r.stats["wall_time_s"] > 0


async def test_agenerate_predicate_and_token_level_constraint():
    lm = toy()
    r = await smc.agenerate("", constraint=Predicate(lambda t: t.count("1") == 2), lm=lm,
                            particles=6, max_tokens=4, seed=0, progress=False)
    assert all(s.text.count("1") == 2 for s in r.finished) and r.finished
    lifted = Regex(PHONE).lift(lm)  # token-level potentials are used as they are
    r2 = await smc.agenerate("", constraint=lifted, lm=lm, particles=6, max_tokens=5, seed=0,
                             progress=False)
    assert all(re.fullmatch(PHONE, s.text) for s in r2.finished) and r2.finished


def test_empty_prompt_unconstrained_and_prompt_conditioning():
    r = smc.generate("", lm=toy(), particles=4, max_tokens=3, seed=0, ess_threshold=0, progress=False)
    assert len(r.samples) == 4 and all(s.finished for s in r.samples)
    for s in r.samples:  # no constraint: weight 1, or p(EOS | x) when EOS was forced at 3 tokens
        want = math.log(0.15) if len(s.token_ids) == 3 else 0.0
        assert s.log_weight == pytest.approx(want, abs=1e-12)
    r2 = smc.generate("12-", lm=toy(), particles=4, max_tokens=2, seed=0, progress=False)
    assert r2.stats["prompt_tokens"] == 2


def test_same_seed_same_result_different_seed_differs():
    kw = dict(constraint=Regex(PHONE), lm=toy(), particles=8, max_tokens=5, progress=False)
    a, b, c = (smc.generate("", seed=s, **kw) for s in (3, 3, 4))
    assert [(s.text, s.log_weight) for s in a.samples] == [(s.text, s.log_weight) for s in b.samples]
    assert a.log_ml == b.log_ml and a.log_ml != c.log_ml


def test_unsatisfiable_constraint_gives_empty_result_without_error():
    r = smc.generate("", constraint=Regex("zz"), lm=toy(), particles=4, max_tokens=3, progress=False)
    assert r.finished == [] and r.log_ml == -math.inf and r.posterior == {} and r.best is None
    assert r.to_dict()["log_ml"] is None


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"particles": 0}, "particles"),
        ({"particles": 2.5}, "particles"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"ess_threshold": -0.1}, "ess_threshold"),
        ({"ess_threshold": 1.01}, "ess_threshold"),
        ({"sampler": "gibbs"}, "unknown sampler"),
        ({"resampling": "fancy"}, "unknown resampling"),
        ({"islands": 3}, "islands"),
        ({"islands": 0}, "islands"),
        ({"finish_share": 1.0}, "finish_share"),
        ({"finish_share": -0.1}, "finish_share"),
        ({"finish_share": 0.5, "method": "beam"}, "finish_share is for method='smc'"),
    ],
)
def test_bad_arguments_fail_before_any_work(kw, msg):
    with pytest.raises(ValueError, match=msg):
        smc.generate("hi", constraint=Regex("a"), **kw)  # lm=None: loading would be an error


def test_prompt_longer_than_context_and_bad_constraint():
    lm = toy()
    lm.max_context = 4
    with pytest.raises(ValueError, match="longer than the model's context"):
        smc.generate("1212-12-", lm=lm, progress=False)
    with pytest.raises(ValueError, match="lower max_tokens"):
        smc.generate("12", lm=lm, max_tokens=8, progress=False)
    with pytest.raises(TypeError, match="Potential"):
        smc.generate("", constraint="[0-9]+", lm=toy(), progress=False)
    with pytest.raises(ValueError, match="chat template"):
        smc.generate("", lm=toy(), chat=True, progress=False)


def test_potential_exception_surfaces_and_lm_stays_usable():
    def broken(text):
        raise ZeroDivisionError("user check failed")

    lm = toy()
    with pytest.raises(ZeroDivisionError, match="user check failed"):
        smc.generate("", constraint=Predicate(broken, prefix=broken), lm=lm, particles=4,
                     max_tokens=3, progress=False)
    r = smc.generate("", constraint=Regex(PHONE), lm=lm, particles=4, max_tokens=5, progress=False)
    assert r.finished


async def test_sync_generate_inside_running_loop():
    r = smc.generate("", constraint=Regex(PHONE), lm=toy(), particles=4, max_tokens=5, progress=False)
    assert r.finished


async def test_concurrent_runs_match_sequential_and_survive_cancellation():
    lm = toy()
    kw = dict(lm=lm, particles=8, max_tokens=5, progress=False)
    seq = [await smc.agenerate("", constraint=Regex(PHONE), seed=s, **kw) for s in (0, 1, 2)]
    conc = await asyncio.gather(*(smc.agenerate("", constraint=Regex(PHONE), seed=s, **kw)
                                  for s in (0, 1, 2)))
    for a, b in zip(seq, conc):
        assert [(s.text, s.log_weight) for s in a.samples] == [(s.text, s.log_weight) for s in b.samples]

    slow_lm = ToyLM(VOCAB, "$", probs)
    original = slow_lm._next_token_logprobs

    async def slow(ids):
        await asyncio.sleep(0.001)
        return await original(ids)

    slow_lm._next_token_logprobs = slow
    kw = dict(lm=slow_lm, particles=8, max_tokens=5, progress=False)
    victim = asyncio.create_task(smc.agenerate("", constraint=Regex(PHONE), seed=0, **kw))
    other = asyncio.create_task(smc.agenerate("", constraint=Regex(PHONE), seed=1, **kw))
    await asyncio.sleep(0.003)
    victim.cancel()
    with pytest.raises(asyncio.CancelledError):
        await victim
    got = await other
    assert [(s.text, s.log_weight) for s in got.samples] == [(s.text, s.log_weight) for s in seq[1].samples]
    again = await smc.agenerate("", constraint=Regex(PHONE), seed=2, **kw)
    assert again.log_ml == seq[2].log_ml


def test_default_islands_and_their_use():
    """generate's default: islands of at least 8 particles, at most 4 of them, plain SMC below
    16; the run keeps every resampled lineage inside its island; islands=1 is plain SMC."""
    from smc.core.defaults import islands_for

    assert [islands_for(n) for n in (1, 4, 8, 12, 15, 16, 17, 18, 24, 32, 64)] == [1, 1, 1, 1, 1, 2, 1, 2, 3, 4, 4]
    kw = dict(lm=toy(), particles=16, max_tokens=6, ess_threshold=1.0, seed=5)
    r = smc.generate("", Regex(r"[12a-]*"), **kw)
    assert r.stats["particles"] == 16
    events = [h.ancestors for h in r.history if h.ancestors is not None]
    assert events and all(a // 8 == k // 8 for anc in events for k, a in enumerate(anc))
    explicit = smc.generate("", Regex(r"[12a-]*"), islands=2, **kw)
    assert [s.token_ids for s in explicit.samples] == [s.token_ids for s in r.samples]
    plain = smc.generate("", Regex(r"[12a-]*"), islands=1, **kw)
    assert any(a // 8 != k // 8 for h in plain.history if h.ancestors is not None
               for k, a in enumerate(h.ancestors))


def test_finish_share_must_be_a_number():
    with pytest.raises(TypeError, match="finish_share"):
        smc.generate("hi", constraint=Regex("a"), finish_share="half")


def rare_stop(ids):
    return [0.5, 0.5 - 1e-6, 1e-6]  # "a", "b", EOS


def test_finish_share_finds_a_text_the_model_rarely_ends_on():
    """Only "a" and "b" are complete and EOS has probability 1e-6: particles almost never draw
    it, and past one token nothing can finish, so without banking no sample finishes; with a
    share s every particle banks its first token, with s of the mass 1e-6 (the drawn EOS would
    carry the rest: Ẑ's expectation is 1e-6)."""
    lm = FastToyLM(["a", "b", "$"], "$", rare_stop)
    one_token = Predicate(lambda text: len(text) == 1)
    kw = dict(lm=lm, particles=4, max_tokens=4, seed=3, progress=False)
    plain = smc.generate("", one_token, **kw)
    assert plain.finished == [] and plain.log_ml == -math.inf and plain.stats["banked"] == 0
    banked = smc.generate("", one_token, finish_share=0.5, **kw)
    assert banked.stats["banked"] == 4 and len(banked.samples) == 8
    assert {s.text for s in banked.finished} <= {"a", "b"} and len(banked.finished) == 4
    assert banked.log_ml == pytest.approx(math.log(0.5 * 1e-6), rel=1e-5)
    # the LM is asked for EOS only where the text can end: once per particle, at its first token
    assert banked.stats["lm_requests"] == plain.stats["lm_requests"] + 4


def test_finish_share_zero_is_the_plain_run():
    kw = dict(lm=toy(), particles=6, max_tokens=6, seed=5, progress=False)
    a = smc.generate("", Regex(PHONE), **kw)
    b = smc.generate("", Regex(PHONE), finish_share=0.0, **kw)
    assert a.samples == b.samples and a.log_ml == b.log_ml and b.stats["banked"] == 0
