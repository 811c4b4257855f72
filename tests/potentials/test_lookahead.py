"""The lookahead twist (potentials.lookahead): a potential like any other, one g at every step,
and a steer that finds copies the model would not write by itself."""

import asyncio
import math

import numpy as np
import pytest

import smc
from potentials import JSONSchema, Regex
from smc.core.logmath import NEG_INF
from potentials.last_step import last_step
from potentials.lookahead import Lookahead
from potentials.testing import PotentialContract
from smc.programs.constrained import target_potential
from tests.toy_problems import FastToyLM


def letters(ids):
    return [0.33, 0.33, 0.33, 0.01]  # "a", "b", "c", EOS: the model rarely stops


LM = FastToyLM(["a", "b", "c", "ab", "$"], "$", lambda ids: [0.3, 0.3, 0.3, 0.09, 0.01])
SQUARE = Regex(r"^(.+)\1$")  # a text written twice: every prefix is live


def square(rate=0.8):
    return Lookahead(SQUARE.lift(LM), rate)


class TestLookaheadContract(PotentialContract):
    def potential(self):
        return square()

    def contexts(self):
        return [(), (0,), (0, 1), (3,), (3, 3), (0, 1, 0), (0, 1, 0, 1), (2, 0, 3), (0, 0, 0)]


def run(coro):
    return asyncio.run(coro)


def test_one_g_at_every_step_and_at_the_last():
    """logw_next and logw_subset agree, for the potential and its last-step twin, and the twin
    twists the ending tokens exactly as the potential does."""
    pot = square()
    twin = last_step(pot)
    for ctx in [(), (0,), (0, 1), (3, 0), (0, 1, 0)]:
        for p in (pot, twin):
            full = run(p.logw_next(ctx))
            assert np.array_equal(full, run(p.logw_subset(ctx, list(range(LM_SIZE))))), (p, ctx)
        full, last = run(pot.logw_next(ctx)), run(twin.logw_next(ctx))
        plain, plain_last = run(pot.inner.logw_next(ctx)), run(twin.inner.logw_next(ctx))
        keep = plain_last > NEG_INF
        assert np.allclose(last[keep] - plain_last[keep], full[keep] - plain[keep])


LM_SIZE = len(LM.vocab)


def test_g_follows_the_completion_and_charges_detours():
    pot = square(0.8)
    # "ab": y = "ab"; token "a" and "ab" are on it, "b" and "c" leave it at once
    row = run(pot.logw_next((3,)))
    assert row[0] == 0.0 and row[3] == 0.0
    assert row[1] < 0 and row[2] < 0
    # at the complete "abab" every token pays for its bytes and more; EOS pays nothing
    done = run(pot.logw_next((3, 3)))
    assert done[4] == run(pot.inner.logw_next((3, 3)))[4] == 0.0
    assert all(done[a] <= -0.8 for a in range(4))
    assert all(v <= 0 for v in row if v > NEG_INF)
    # G is the sum of the step weights along the text
    first = run(pot.logw_next(()))[3]
    assert pot.twist((3,)) == pytest.approx(float(first))
    assert pot.twist((3, 1)) == pytest.approx(float(first + row[1]))
    assert pot.twist((3, 1, 0)) == pytest.approx(float(first + row[1] + run(pot.logw_next((3, 1)))[0]))


def test_prefix_and_complete_carry_the_twist():
    pot = square()
    ctx = (0, 2, 0, 2)  # "acac": complete
    g = pot.twist(ctx)
    assert g < 0
    assert run(pot.prefix(ctx)) == pytest.approx(run(pot.inner.prefix(ctx)) + g)
    assert run(pot.complete(ctx)) == pytest.approx(run(pot.inner.complete(ctx)) + g)


def test_a_constraint_without_completions_gets_no_twist():
    lifted = Regex(r"[ab]+").lift(LM)  # on the automaton: no completion declared
    pot = Lookahead(lifted, 1.0)
    assert not pot.active
    assert np.array_equal(run(pot.logw_next((0,))), run(lifted.logw_next((0,))))
    assert target_potential(Regex(r"[ab]+"), LM, 1.0).__class__.__name__ == "Lifted"
    assert isinstance(target_potential(SQUARE, LM, 1.0), Lookahead)
    assert target_potential(SQUARE, LM, 0.0).__class__.__name__ == "Lifted"
    assert smc.Request("", SQUARE).lookahead == 1.0  # None: the default rate, resolved by the Request


@pytest.mark.parametrize("rate", [0, -1.0, math.inf, math.nan, True])
def test_a_bad_rate_is_refused(rate):
    with pytest.raises(ValueError, match="lookahead rate"):
        Lookahead(SQUARE.lift(LM), rate)


def test_lookahead_needs_a_lifted_constraint():
    with pytest.raises(TypeError, match="lifted byte-level constraint"):
        Lookahead(SQUARE, 1.0)


# ------------------------------------------------------------------------------ through generate
COPY_LM = FastToyLM(["a", "b", "c", "$"], "$", letters)


def test_lookahead_finds_the_copies_the_model_does_not_write():
    """Under ^(.+)\\1$ with a model that writes letters at random and rarely stops, 4 particles
    and 10 tokens: without the twist a finished square is rare; with it nearly every run has
    one (the same target: the twist is divided out at every finish)."""
    found = {0.0: 0, 1.0: 0}
    for rate in found:
        for seed in range(20):
            r = smc.generate("", SQUARE, lm=COPY_LM, particles=4, max_tokens=10, seed=seed,
                             progress=False, lookahead=rate)
            found[rate] += bool(r.finished)
            assert all(len(s.text) % 2 == 0 and s.text[: len(s.text) // 2] * 2 == s.text
                       for s in r.finished)
    assert found[0.0] <= 2 and found[1.0] >= 18, found


def test_lookahead_without_completions_is_the_plain_run():
    kw = dict(lm=COPY_LM, particles=4, max_tokens=6, seed=2, progress=False)
    a = smc.generate("", Regex(r"[ab]+c"), **kw)
    b = smc.generate("", Regex(r"[ab]+c"), lookahead=1.0, **kw)
    assert a.samples == b.samples and a.log_ml == b.log_ml


@pytest.mark.parametrize("kwargs,error,match", [
    ({"lookahead": -0.5}, ValueError, "lookahead must be a finite number >= 0"),
    ({"lookahead": math.nan}, ValueError, "lookahead must be a finite number >= 0"),
    ({"lookahead": "1"}, TypeError, "lookahead must be a number"),
    ({"lookahead": 1.0, "method": "beam"}, ValueError, "lookahead is for method='smc'"),
])
def test_bad_lookahead_arguments_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        smc.generate("", SQUARE, lm=COPY_LM, progress=False, **kwargs)


def test_lookahead_needs_a_byte_level_constraint():
    with pytest.raises(ValueError, match="lookahead needs a byte-level constraint"):
        smc.generate("", None, lm=COPY_LM, lookahead=1.0, progress=False)
    with pytest.raises(ValueError, match="lookahead needs a byte-level constraint"):
        smc.generate("", SQUARE.lift(COPY_LM), lm=COPY_LM, lookahead=1.0, progress=False)


def test_json_schema_gets_the_lookahead_only_when_asked():
    """JSONSchema knows completions, so a lookahead asked for twists its run; by default a JSON
    run has none (its completions steer the budget twist), and is the run with lookahead=0."""
    schema = JSONSchema({"type": "boolean"})
    lm = FastToyLM(["t", "rue", "f", "alse", "$"], "$", lambda ids: [0.3, 0.2, 0.3, 0.1, 0.1])
    kw = dict(lm=lm, particles=4, max_tokens=4, seed=1, progress=False)
    plain = smc.generate("", schema, **kw)
    assert smc.Request("", schema).lookahead == 0.0
    assert plain.samples == smc.generate("", schema, lookahead=0, **kw).samples
    assert Lookahead(schema.lift(lm), 2.0).active
    assert plain.samples != smc.generate("", schema, lookahead=2.0, **kw).samples


def test_the_default_is_on_for_byte_level_smc_runs_and_off_elsewhere():
    from smc.core.defaults import LOOKAHEAD as DEFAULT_LOOKAHEAD

    def check_lookahead(rate, constraint, method="smc"):
        return smc.Request("", constraint, lookahead=rate, method=method).lookahead

    kw = dict(lm=COPY_LM, particles=4, max_tokens=8, seed=5, progress=False)
    a = smc.generate("", SQUARE, **kw)
    b = smc.generate("", SQUARE, lookahead=DEFAULT_LOOKAHEAD, **kw)
    assert a.samples == b.samples and a.log_ml == b.log_ml
    assert check_lookahead(None, SQUARE) == DEFAULT_LOOKAHEAD == 1.0
    assert check_lookahead(None, SQUARE, "beam") == 0.0  # search methods take no twist
    assert check_lookahead(None, SQUARE.lift(COPY_LM)) == 0.0  # a token-level constraint
    assert check_lookahead(None, None) == 0.0
    beam = smc.generate("", SQUARE, lm=COPY_LM, particles=2, max_tokens=4, method="beam", progress=False)
    assert all(s.text[: len(s.text) // 2] * 2 == s.text for s in beam.finished)
