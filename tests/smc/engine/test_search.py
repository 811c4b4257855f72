"""Beam search and without-replacement steering (smc.beam, smc.steer) on toy LMs, checked
against brute-force enumeration."""

import asyncio
import itertools
import math
import re

import numpy as np
import pytest
import torch

import smc
from potentials import Regex
from smc.core.logmath import NEG_INF
from samplers import make_sampler
from smc.api.generation import prompt_ids_for
from smc.programs.distributions import Categorical
from smc.programs.constrained import ConstrainedGeneration
from smc.programs.context import LMContext
from smc.programs.model import Model
from smc.engine.critics import BudgetCritic
from smc.engine.search import beam, keep_without_replacement, steer, top_k
from tests.toy_problems import FastToyLM, TokenPredicate, TokenSoft, exact_target

SE = 3.0  # tolerance in standard errors


def random_lm(vocab, eos, seed):
    """A ToyLM whose next-token law is a fixed random function of the context (no ties)."""

    def probs(ids):
        rng = np.random.default_rng([seed, len(ids), *ids])
        return rng.dirichlet(np.ones(len(vocab)))

    return FastToyLM(vocab, eos, probs)


def two_eos_lm():
    """Tokens a, b and two EOS tokens "$" and "#" (as chat models have)."""
    lm = random_lm([b"a", b"b", b"$", b"#"], b"$", 7)
    lm.eos_token_ids = [2, 3]
    return lm


ALT = FastToyLM([b"a", b"b", b"$"], b"$", lambda ids: [0.6, 0.3, 0.1] if len(ids) % 2 == 0 else [0.2, 0.3, 0.5])
DIGITS = FastToyLM([b"1", b"2", b"12", b"-", b"$"], b"$",
                   lambda ids: [0.3, 0.2, 0.15, 0.2, 0.15] if len(ids) % 2 == 0 else [0.1, 0.3, 0.2, 0.1, 0.3])
RAND3 = random_lm([b"a", b"b", b"$"], b"$", 1)
RAND4 = random_lm([b"a", b"b", b"c", b"$"], b"$", 2)
TWO_EOS = two_eos_lm()

AT_MOST_ONE_A = TokenPredicate(3, [2], lambda x: x.count(0) <= 1, lambda x: len(x) >= 1)
# over a, b, c: no "c" right after "a", and a finished sequence ends with "b" or "c"
NO_AC = TokenPredicate(4, [3], lambda x: all(not (u == 0 and v == 2) for u, v in zip(x, x[1:])),
                       lambda x: len(x) >= 1 and x[-1] != 0)
SOFT = TokenSoft(3, [2], lambda x: -0.4 * x.count(1), lambda x: -0.4 * x.count(1) + (0.3 if len(x) % 2 else 0.0))
TWO_EOS_PHI = TokenPredicate(4, [2, 3], lambda x: x.count(1) <= 2, lambda x: len(x) >= 1)
REGEX = Regex(r"1+-?2")

# name: (lm, constraint or None, max_tokens)
PROBLEMS = {
    "alt-predicate": (ALT, AT_MOST_ONE_A, 3),
    "rand3-unconstrained": (RAND3, None, 3),
    "rand3-soft": (RAND3, SOFT, 3),
    "rand4-no-ac": (RAND4, NO_AC, 3),
    "two-eos": (TWO_EOS, TWO_EOS_PHI, 3),
    "digits-regex": (DIGITS, REGEX, 3),
}


def program(name, sampler="direct"):
    lm, phi, T = PROBLEMS[name]
    pot = phi.lift(lm) if isinstance(phi, Regex) else phi
    return ConstrainedGeneration(make_sampler(sampler, lm, pot), T)


def token_potential(name):
    lm, phi, _ = PROBLEMS[name]
    return phi.lift(lm) if isinstance(phi, Regex) else phi


def log_mass(lm, pot, x, finished):
    """W(x) = log p(x) + prefix(x), or log sum_e p(x, e) + complete(x) once finished: from the
    LM's probability table and the potential's prefix/complete, not from next-token vectors."""
    logp = sum(math.log(lm.probs(x[:k])[x[k]]) if lm.probs(x[:k])[x[k]] > 0 else NEG_INF for k in range(len(x)))
    if finished:
        pe = sum(lm.probs(x)[e] for e in lm.eos_token_ids)
        logp += math.log(pe) if pe > 0 else NEG_INF
    if pot is None or logp == NEG_INF:
        return logp
    return logp + asyncio.run(pot.complete(x) if finished else pot.prefix(x))


def reference_beam(name, k):
    """The beam-search definition, by brute force: B_{t+1} = the k best of finished B_t and all
    children (next tokens, and finishing) of unfinished B_t; length max_tokens must finish."""
    lm, _, T = PROBLEMS[name]
    pot = token_potential(name)
    eos = set(lm.eos_token_ids)
    beams = [((), False)]
    beams = [b for b in beams if log_mass(lm, pot, *b) > NEG_INF]
    while any(not f for _, f in beams):
        cands = [b for b in beams if b[1]]
        for x, f in beams:
            if f:
                continue
            cands.append((x, True))
            if len(x) < T:
                cands += [(x + (a,), False) for a in range(len(lm.vocab)) if a not in eos]
        scored = [(log_mass(lm, pot, *c), c) for c in cands]
        scored = [s for s in scored if s[0] > NEG_INF]
        scored.sort(key=lambda s: (-s[0], s[1][0] + ((-1,) if s[1][1] else ())))
        beams = [c for _, c in scored[:k]]
    return [(x, log_mass(lm, pot, x, True)) for x, _ in beams]


def target(name):
    lm, _, T = PROBLEMS[name]
    pot = token_potential(name)
    if len(lm.eos_token_ids) > 1:  # exact_target knows one EOS: enumerate here
        from tests.toy_problems import strings

        out = {}
        for x in strings(len(lm.vocab), -1, T):
            if set(x) & set(lm.eos_token_ids):
                continue
            w = log_mass(lm, pot, x, True)
            if w > NEG_INF:
                out[x] = math.exp(w)
        return out
    return exact_target(lm, (lambda x: 0.0) if pot is None else (lambda x: asyncio.run(pot.complete(x))), T)


# ---------------------------------------------------------------------------- beam
@pytest.mark.parametrize("name", PROBLEMS)
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_beam_equals_brute_force_beam(name, k):
    r = asyncio.run(beam(program(name), k))
    ref = reference_beam(name, k)
    assert [s.token_ids for s in r.samples] == [x for x, _ in ref]
    assert all(s.finished for s in r.samples)
    np.testing.assert_allclose([s.log_weight for s in r.samples], [w for _, w in ref], rtol=0, atol=1e-9)
    assert r.log_ml == pytest.approx(math.log(sum(math.exp(w) for _, w in ref)), abs=1e-9)
    lengths = {len(s.token_ids) for s in r.samples}
    if k >= 3 and name in ("alt-predicate", "rand3-unconstrained"):
        assert len(lengths) > 1  # finished beams of different lengths side by side


@pytest.mark.parametrize("name", PROBLEMS)
def test_wide_beam_is_the_whole_target(name):
    """A beam wider than the number of prefixes (finished or not) enumerates the target exactly."""
    exact = target(name)
    lm, _, T = PROBLEMS[name]
    symbols = len(lm.vocab) - len(lm.eos_token_ids)
    r = asyncio.run(beam(program(name), 2 * sum(symbols**t for t in range(T + 1))))
    got = {s.token_ids: math.exp(s.log_weight) for s in r.samples}
    assert set(got) == set(exact)
    for x, w in exact.items():
        assert got[x] == pytest.approx(w, rel=1e-9)
    assert [s.log_weight for s in r.samples] == sorted((s.log_weight for s in r.samples), reverse=True)
    assert r.log_ml == pytest.approx(math.log(sum(exact.values())), rel=1e-9)


def test_beam_is_a_heuristic_not_the_top_k():
    """Greedy (k = 1) keeps "a" (mass 0.45) over stopping at once (0.1), and ends with
    "aaaa" (0.45^4 * 0.1), though the empty sequence is the most likely: beam search ranks the
    candidates of each round, it does not guarantee the best completions."""
    lm = FastToyLM([b"a", b"b", b"c", b"$"], b"$", lambda ids: [0.45, 0.3, 0.15, 0.1])
    r = asyncio.run(beam(ConstrainedGeneration(make_sampler("direct", lm), 4), 1))
    assert r.samples[0].token_ids == (0, 0, 0, 0)
    assert math.exp(r.samples[0].log_weight) == pytest.approx(0.45**4 * 0.1, rel=1e-12)


def budget_problem():
    """Tokens a, b and EOS with p = 0.6, 0.35, 0.05 in every context, under the regex a*bbb,
    4 tokens at most: the valid texts are bbb and abbb, but a, then aa, is likelier at each
    round than anything on their way."""
    lm = FastToyLM([b"a", b"b", b"$"], b"$", lambda ids: [0.6, 0.35, 0.05])
    return lm, ConstrainedGeneration(make_sampler("direct", lm, Regex("a*bbb").lift(lm)), 4)


def test_beam_ranked_by_the_budget_twist_finds_what_plain_beam_loses():
    """Greedy beam search (k = 1) takes a, then aa, from which nothing valid fits in the budget:
    no finished sequence. Ranked by W + psi, psi = BudgetCritic's -m (c + 1 / tokens left)
    (b: -1.05 - 2 (0.5 + 1/3) = -2.72 against a: -0.51 - 3 (0.5 + 1/3) = -3.01), it takes b
    and ends with bbb, whose weight is still its exact mass."""
    lm, m = budget_problem()
    plain = asyncio.run(beam(m, 1))
    assert plain.finished == [] and plain.log_ml == NEG_INF
    ranked = asyncio.run(beam(m, 1, critic=BudgetCritic(per_byte=0.5)))
    [s] = ranked.samples
    assert s.finished and s.token_ids == (1, 1, 1)
    assert s.log_weight == pytest.approx(math.log(0.35**3 * 0.05), rel=1e-12)
    assert ranked.log_ml == pytest.approx(s.log_weight, rel=1e-12)


def test_beam_ranks_by_w_alone_in_a_round_where_the_critic_rates_none():
    """A critic that cannot rate a candidate leaves that round ranked by W (as an SMC island
    is then left untwisted): with one that never rates, beam search is plain beam search."""
    for name in ("digits-regex", "rand4-no-ac"):
        for k in (1, 3):
            plain = asyncio.run(beam(program(name), k))
            unrated = asyncio.run(beam(program(name), k, critic=lambda p: None))
            assert unrated.samples == plain.samples and unrated.log_ml == plain.log_ml
    # one unrated candidate is enough. Greedy on the budget problem: b unrated in the first
    # round, so a (the likelier) is kept, then the twist ranks ab above aa: abbb. Were b's None
    # read as 0 (no cost ahead), b would lead at once and the search end with bbb.
    _, m = budget_problem()
    twist = BudgetCritic(per_byte=0.5)

    async def all_but_b(p):
        return None if tuple(p.token_ids()) == (1,) else await twist(p)

    [s] = asyncio.run(beam(m, 1, critic=all_but_b)).samples
    assert s.finished and s.token_ids == (0, 1, 1, 1)


def test_beam_with_a_critic_keeps_exact_weights_and_a_wide_beam_is_still_the_target():
    """The critic only reorders: every returned sequence keeps W = its exact log mass, and a
    beam wide enough to prune nothing is the whole target whatever the critic says."""
    lm, m = budget_problem()
    pot = Regex("a*bbb").lift(lm)
    r = asyncio.run(beam(m, 3, critic=BudgetCritic(per_byte=0.5)))
    for s in r.samples:
        assert s.log_weight == pytest.approx(log_mass(lm, pot, s.token_ids, s.finished), rel=1e-12)
    exact = target("digits-regex")
    wide = asyncio.run(beam(program("digits-regex"), 1000, critic=lambda p: -3.0 * len(p.token_ids())))
    assert {s.token_ids: math.exp(s.log_weight) for s in wide.samples} == pytest.approx(exact, rel=1e-9)


def test_beam_is_deterministic_and_ignores_the_sampler():
    a = asyncio.run(beam(program("digits-regex", "awrs"), 4))
    b = asyncio.run(beam(program("digits-regex", "awrs"), 4))
    c = asyncio.run(beam(program("digits-regex", "direct"), 4))
    assert a.samples == b.samples == c.samples
    assert a.log_ml == b.log_ml == c.log_ml


def test_beam_with_max_steps_returns_unfinished_beams():
    r = asyncio.run(beam(program("rand3-unconstrained"), 2, max_steps=1))
    assert len(r.samples) == 2 and all(len(s.token_ids) <= 1 for s in r.samples)
    assert r.stats["steps"] == 1


def test_beam_unsatisfiable_gives_no_samples():
    phi = TokenPredicate(3, [2], lambda x: False)
    r = asyncio.run(beam(ConstrainedGeneration(make_sampler("direct", ALT, phi), 3), 3))
    assert r.samples == [] and r.log_ml == NEG_INF and r.best is None


# ---------------------------------------------------------------------------- exact top k
MONOTONE = [n for n in PROBLEMS if n != "rand3-soft"]


@pytest.mark.parametrize("name", MONOTONE)
@pytest.mark.parametrize("k", [1, 2, 3, 7, 1000])
def test_top_k_equals_brute_force_top_k(name, k):
    exact = sorted(target(name).items(), key=lambda kv: -kv[1])
    r = asyncio.run(top_k(program(name), k))
    assert all(s.finished for s in r.samples)
    got = [(s.token_ids, math.exp(s.log_weight)) for s in r.samples]
    assert len(got) == min(k, len(exact))
    np.testing.assert_allclose([w for _, w in got], [w for _, w in exact[: len(got)]], rtol=1e-9)
    for x, w in got:
        assert w == pytest.approx(dict(exact)[x], rel=1e-9)
    if len(exact) > k and exact[k - 1][1] > exact[k][1] * (1 + 1e-9):  # no tie at the cut
        assert {x for x, _ in got} == {x for x, _ in exact[:k]}
    assert r.log_ml == pytest.approx(math.log(sum(w for _, w in got)), rel=1e-9)


def test_top_k_finds_what_greedy_beam_misses():
    lm = FastToyLM([b"a", b"b", b"c", b"$"], b"$", lambda ids: [0.45, 0.3, 0.15, 0.1])
    m = ConstrainedGeneration(make_sampler("direct", lm), 4)
    r = asyncio.run(top_k(m, 3))
    assert [s.token_ids for s in r.samples] == [(), (0,), (1,)]
    np.testing.assert_allclose([math.exp(s.log_weight) for s in r.samples], [0.1, 0.045, 0.03], rtol=1e-12)
    # best-first expands exactly the prefixes more probable than the third answer (0.03)
    probs = [0.45, 0.3, 0.15]
    above = sum(1 for L in range(5) for x in itertools.product(range(3), repeat=L)
                if math.prod(probs[a] for a in x) > 0.03 * (1 + 1e-9))
    assert r.stats["expansions"] == above


def test_top_k_on_a_categorical_program():
    exact = sorted(dice_outcomes().values(), reverse=True)
    r = asyncio.run(top_k(Dice(), 4))
    np.testing.assert_allclose([math.exp(s.log_weight) for s in r.samples], exact[:4], rtol=1e-9)


def test_top_k_refuses_increasing_weights_and_runaway_searches():
    bonus = TokenSoft(3, [2], lambda x: 0.0, lambda x: 3.0)  # finishing multiplies by e^3
    m = ConstrainedGeneration(make_sampler("direct", ALT, bonus), 3)
    with pytest.raises(ValueError, match="never increase"):
        asyncio.run(top_k(m, 2))
    with pytest.raises(ValueError, match="max_expansions=2"):
        asyncio.run(top_k(program("rand4-no-ac"), 50, max_expansions=2))
    with pytest.raises(ValueError, match="k must be an integer"):
        asyncio.run(top_k(program("rand4-no-ac"), 0))


# ---------------------------------------------------------------------------- generate
@pytest.mark.parametrize("method", ["beam", "steer", "top_k"])
def test_generate_method_returns_valid_samples(method):
    kw = dict(lm=DIGITS, particles=4, max_tokens=4, method=method, progress=False)
    r = smc.generate("", REGEX, seed=0, **kw)
    assert r.samples == smc.generate("", REGEX, seed=0, **kw).samples
    exact = target_for(DIGITS, REGEX, 4)
    assert r.finished == r.samples and 1 <= len(r.samples) <= 4
    for s in r.samples:
        assert re.fullmatch(r"1+-?2", s.text) and s.token_ids in exact
    assert r.stats["method"] == method and r.stats["max_tokens"] == 4
    if method != "steer":
        for s in r.samples:
            assert math.exp(s.log_weight) == pytest.approx(exact[s.token_ids], rel=1e-9)
        assert smc.generate("", REGEX, seed=5, **kw).samples == r.samples  # no seed needed
        direct = ConstrainedGeneration(make_sampler("direct", DIGITS, REGEX.lift(DIGITS)), 4)
        search = beam if method == "beam" else top_k
        assert asyncio.run(search(direct, 4)).samples == r.samples
    else:
        assert r.stats["n_beam"] == 2


def target_for(lm, constraint, T):
    pot = constraint.lift(lm)
    return exact_target(lm, lambda x: asyncio.run(pot.complete(x)), T)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(method="beam", particles=0), ValueError, "particles"),
        (dict(method="bfs"), ValueError, "method must be one of"),
        (dict(method=None), ValueError, "method must be one of"),
        (dict(method="beam", n_beam=2), ValueError, "n_beam is only used"),
        (dict(method="steer", n_beam=0), ValueError, "n_beam must be an integer"),
        (dict(method="top_k", critic=lambda p: 0.0), ValueError, "critic is only used by method='smc' or 'beam'"),
    ],
)
def test_generate_bad_method_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        smc.generate("", REGEX, lm=DIGITS, max_tokens=3, progress=False, **kwargs)


@pytest.mark.parametrize("width", [0, -1, 1.5, True, "4", None])
def test_beam_width_must_be_a_positive_integer(width):
    with pytest.raises(ValueError, match="beam_width must be an integer >= 1"):
        asyncio.run(beam(program("alt-predicate"), width))


@pytest.mark.parametrize("fn", [lambda m: beam(m, 2), lambda m: steer(m, 2, 2)])
def test_search_needs_a_model(fn):
    with pytest.raises(TypeError, match="model must be an smc.Model"):
        asyncio.run(fn("not a model"))


def test_steer_bad_arguments():
    m = program("alt-predicate")
    with pytest.raises(ValueError, match="n_particles must be an integer"):
        asyncio.run(steer(m, 0, 2))
    with pytest.raises(ValueError, match="n_beam must be an integer"):
        asyncio.run(steer(m, 2, 0))
    with pytest.raises(ValueError, match="seed"):
        asyncio.run(steer(m, 2, 2, seed=-3))


# ---------------------------------------------------------------------------- general programs
class TokenProgram(Model):
    """ConstrainedGeneration written as a user program: one token per step through an LMContext;
    at max_tokens EOS is observed (forced)."""

    def __init__(self, lm, phi, T, sampler="direct"):
        super().__init__()
        self.context = LMContext(lm)
        self.phi, self.T, self.sampler_name = phi, T, sampler

    async def start(self):
        self.score(await self.phi.prefix(()))

    async def step(self):
        dist = self.context.next_token(self.phi, self.sampler_name)
        if len(self.context.tokens) >= self.T:
            await self.observe(dist, self.context.lm.eos_token_ids[0])
        else:
            await self.sample(dist)
        if self.context.done:
            self.finish()


class Dice(Model):
    """Rolls a die with faces 1..3 (law depends on the total) until the total reaches 4 or more;
    the outcome must not be 5."""

    def __init__(self):
        super().__init__()
        self.rolls = []

    async def step(self):
        total = sum(self.rolls)
        probs = [0.5, 0.3, 0.2] if total % 2 == 0 else [0.2, 0.2, 0.6]
        self.rolls.append(await self.sample(Categorical([1, 2, 3], probs)))
        if sum(self.rolls) >= 4:
            self.condition(sum(self.rolls) != 5)
            self.finish()

    def token_ids(self):
        return tuple(self.rolls)


def dice_outcomes():
    """{rolls: probability} for every finished run of Dice with positive weight, by enumeration."""
    out = {}

    def go(rolls, p):
        total = sum(rolls)
        if total >= 4:
            if total != 5:
                out[tuple(rolls)] = p
            return
        probs = [0.5, 0.3, 0.2] if total % 2 == 0 else [0.2, 0.2, 0.6]
        for face, q in zip([1, 2, 3], probs):
            go(rolls + [face], p * q)

    go([], 1.0)
    return out


def test_beam_on_a_token_program_equals_constrained_generation():
    lm, phi, T = PROBLEMS["alt-predicate"]
    for k in (1, 2, 4):
        a = asyncio.run(beam(TokenProgram(lm, phi, T), k))
        b = asyncio.run(beam(program("alt-predicate"), k))
        assert [s.token_ids for s in a.samples] == [s.token_ids for s in b.samples]
        np.testing.assert_allclose([s.log_weight for s in a.samples], [s.log_weight for s in b.samples], atol=1e-9)


def test_beam_on_a_categorical_program_equals_brute_force():
    exact = dice_outcomes()
    wide = asyncio.run(beam(Dice(), len(exact)))
    assert {s.token_ids: math.exp(s.log_weight) for s in wide.samples} == pytest.approx(exact, rel=1e-9)
    np.testing.assert_allclose([math.exp(s.log_weight) for s in wide.samples],
                               sorted(exact.values(), reverse=True), rtol=1e-9)
    assert wide.stats["steps"] == 4  # the longest outcome is four rolls of 1


def test_programs_that_draw_uniforms_are_refused():
    class Uniform(Model):
        async def step(self):
            self.draw.uniform()
            self.finish()

    with pytest.raises(ValueError, match="uniform random number"):
        asyncio.run(beam(Uniform(), 2))


def test_too_many_paths_are_refused():
    class Wide(Model):
        async def step(self):
            await self.sample(Categorical(list(range(50)), [1.0] * 50))
            self.finish()

    with pytest.raises(ValueError, match="more than max_paths=10"):
        asyncio.run(steer(Wide(), 4, 2, max_paths=10))
    assert len(asyncio.run(beam(Wide(), 3, max_paths=50)).samples) == 3


# ---------------------------------------------------------------------------- steer
@pytest.mark.parametrize("name", PROBLEMS)
def test_steer_covering_every_child_is_exact_enumeration(name):
    exact = target(name)
    lm = PROBLEMS[name][0]
    r = asyncio.run(steer(program(name), len(exact) * len(lm.vocab) + 1, len(lm.vocab), seed=3))
    got = {s.token_ids: math.exp(s.log_weight) for s in r.samples}
    assert got == pytest.approx(exact, rel=1e-9)
    assert r.log_ml == pytest.approx(math.log(sum(exact.values())), rel=1e-9)


def test_steer_covering_every_path_of_awrs_is_exact():
    """A user program whose sampler is AWRS: its paths (not its tokens) are the children, and
    their masses add up to the exact target per sequence."""
    lm, phi, T = PROBLEMS["alt-predicate"]
    exact = target("alt-predicate")
    r = asyncio.run(steer(TokenProgram(lm, phi, T, "awrs"), 10_000, 10_000, seed=0))
    got = {}
    for s in r.samples:
        assert s.finished
        got[s.token_ids] = got.get(s.token_ids, 0.0) + math.exp(s.log_weight)
    assert got == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("name, n, n_beam", [("alt-predicate", 1, 1), ("alt-predicate", 2, 2),
                                             ("rand4-no-ac", 3, 2), ("two-eos", 2, 1),
                                             ("digits-regex", 2, 2)])
def test_steer_is_unbiased(name, n, n_beam):
    """E[Ẑ] = Z and E[sum_i w_i 1[x_i = s]] = p(s, EOS) phi(s) for every s, over seeded runs."""
    exact = target(name)
    m = program(name)
    runs = 1500

    async def go():
        zs, mass = [], {x: [] for x in exact}
        for seed in range(runs):
            r = await steer(m, n, n_beam, seed=seed)
            zs.append(math.exp(r.log_ml))
            per = {}
            for s in r.samples:
                assert s.finished and s.token_ids in exact  # only valid sequences
                per[s.token_ids] = per.get(s.token_ids, 0.0) + math.exp(s.log_weight)
            for x in exact:
                mass[x].append(per.get(x, 0.0))
        return np.array(zs), {x: np.array(v) for x, v in mass.items()}

    zs, mass = asyncio.run(go())
    Z = sum(exact.values())
    assert abs(zs.mean() - Z) <= SE * zs.std() / math.sqrt(runs)
    assert zs.std() > 0  # the cuts are random here, so the test can fail
    # events: each sequence seen often enough to estimate a standard error, each length, each
    # first token (these cover the rare sequences too)
    events = [{x} for x in exact if np.count_nonzero(mass[x]) >= 30]
    events += [{x for x in exact if len(x) == L} for L in {len(x) for x in exact}]
    events += [{x for x in exact if x[:1] == a} for a in {x[:1] for x in exact}]
    assert len(events) >= 4
    for event in events:
        v = sum(mass[x] for x in event)
        w = sum(exact[x] for x in event)
        assert abs(v.mean() - w) <= SE * v.std() / math.sqrt(runs), sorted(event)


def test_steer_same_seed_same_result():
    a = asyncio.run(steer(program("rand4-no-ac"), 3, 2, seed=11))
    b = asyncio.run(steer(program("rand4-no-ac"), 3, 2, seed=11))
    assert a.samples == b.samples and len(a.samples) <= 3


def test_steer_on_a_categorical_program_is_unbiased():
    exact = dice_outcomes()
    runs = 1500
    mass = {x: np.zeros(runs) for x in exact}
    for seed in range(runs):
        for s in asyncio.run(steer(Dice(), 2, 2, seed=seed)).samples:
            mass[s.token_ids][seed] += math.exp(s.log_weight)
    for x, w in exact.items():
        v = mass[x]
        assert np.count_nonzero(v) >= 30
        assert abs(v.mean() - w) <= SE * v.std() / math.sqrt(runs), x


# ---------------------------------------------------------------------------- the cut
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_keep_without_replacement_is_unbiased(n):
    logw = np.log(np.array([0.6, 0.05, 0.1, 0.02, 0.13, 0.1, 1.0]))
    logw[-1] = NEG_INF
    rng = np.random.default_rng(1)
    reps = 20000
    est = np.zeros((reps, len(logw)))
    for r in range(reps):
        idx, w = keep_without_replacement(logw, n, rng)
        assert len(idx) == n and len(set(idx.tolist())) == n and 6 not in idx
        assert np.exp(w).sum() == pytest.approx(1.0, rel=1e-12)  # the total is kept exactly
        est[r, idx] = np.exp(w)
    se = est.std(axis=0) / math.sqrt(reps)
    assert np.all(np.abs(est.mean(axis=0) - np.exp(logw)) <= SE * se + 1e-12)
    if n >= 2:  # 0.6 has c * v >= 1: kept every time with its own weight
        assert np.all(est[:, 0] == pytest.approx(0.6))


def test_cut_keeps_everything_when_there_is_room():
    logw = np.array([math.log(0.3), math.log(0.2), NEG_INF, math.log(0.5)])
    rng = np.random.default_rng(0)
    idx, w = keep_without_replacement(logw, 3, rng)
    assert idx.tolist() == [0, 1, 3] and np.allclose(np.exp(w), [0.3, 0.2, 0.5])


# ---------------------------------------------------------------------------- embedded model
PHONE = r"[0-9]{3}-[0-9]{3}-[0-9]{4}"


@pytest.mark.slow
async def test_search_on_the_embedded_model(embedded_lm):
    """top_k's best phone number has exactly the LM's log p(x, EOS | prompt) as its weight, and
    beam's beams are valid and no more probable than it (top_k is exact)."""
    prompt = "Write a US phone number:"
    kw = dict(lm=embedded_lm, max_tokens=16, progress=False)
    best = await smc.agenerate(prompt, Regex(PHONE), method="top_k", particles=1, **kw)
    wide = await smc.agenerate(prompt, Regex(PHONE), method="beam", particles=2, **kw)
    for s in best.samples + wide.samples:
        assert s.finished and re.fullmatch(PHONE, s.text)
    (top,) = best.samples
    assert all(s.log_weight <= top.log_weight + 1e-9 for s in wide.samples)
    ids = prompt_ids_for(embedded_lm, smc.Request(prompt, max_tokens=16))
    logp = 0.0
    for t in list(top.token_ids) + [None]:
        lp = (await embedded_lm.next_token_logprobs(ids)).double()
        logp += float(torch.logsumexp(lp[list(embedded_lm.eos_token_ids)], 0)) if t is None else float(lp[t])
        ids.append(t)
    assert top.log_weight == pytest.approx(logp, abs=1e-6)
