"""smc.engine.critics.BudgetCritic: completion lengths are right, the twist is shaped as documented, and
(as a critic removed before the final weights) it leaves Ẑ unbiased and the target unchanged."""

import asyncio
import math

import numpy as np
import pytest

from potentials import JSONSchema, Regex
from samplers import make_sampler
from smc.engine import smc
from smc.programs.constrained import ConstrainedGeneration
from smc.engine.critics import BudgetCritic
from tests.toy_problems import FastToyLM, exact_target


def completion(potential, text: bytes, **kw) -> int:
    tw = BudgetCritic(**kw)
    state = potential.advance(potential.initial(), text) if text else potential.initial()
    return asyncio.run(tw.completion_bytes(potential, state))


def test_completion_bytes_regex():
    date = Regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
    assert completion(date, b"2023-0") == 4          # "1-01"
    assert completion(date, b"2023-01-01") == 0
    assert completion(date, b"") == 10


def test_completion_bytes_json_close_to_the_end():
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "array"}}}
    js = JSONSchema(schema, whitespace="compact")
    assert completion(js, b'{"a":[1,2') == 2          # "]}"
    assert completion(js, b'{"a":["x') == 3           # '"]}'
    assert completion(js, b'{"a":[]}') == 0


def test_completion_bytes_json_far_from_the_end_and_remembered_by_structure():
    """Inside a free string breadth-first search cannot reach the end; the depth-first search
    closes the string and writes the missing key, and the length is remembered for any other
    text in that string (the completion key is the recognizer's configurations)."""
    schema = {"type": "object", "required": ["a", "b"], "additionalProperties": False,
              "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
    js = JSONSchema(schema, whitespace="compact")
    tw = BudgetCritic()
    long_text = js.advance(js.initial(), b'{"a":"a long text that goes on')
    assert asyncio.run(tw.completion_bytes(js, long_text)) == len(b'","b":""}')
    other = js.advance(js.initial(), b'{"a":"something else')
    hits = tw.stats["cache_hits"]
    assert asyncio.run(tw.completion_bytes(js, other)) == 9
    assert tw.stats["cache_hits"] == hits + 1


def test_completion_bytes_gives_no_twist_past_max_nodes():
    """An object open to any further key: the search writes ever more keys before the
    required one, and gives up."""
    schema = {"type": "object", "required": ["a", "b"],
              "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
    js = JSONSchema(schema, whitespace="compact")
    assert completion(js, b'{"a":"text', max_nodes=3) == 0
    assert completion(js, b'{"a":"text') == 0


def test_arguments_checked():
    with pytest.raises(ValueError, match="rate"):
        BudgetCritic(rate=-1)
    with pytest.raises(ValueError, match="max_nodes"):
        BudgetCritic(max_nodes=0)


# the "digits" toy problem of test_engine: tokens "1", "2", "12", "-", EOS "$"
def digits(ids):
    return [0.3, 0.2, 0.15, 0.2, 0.15] if len(ids) % 2 == 0 else [0.1, 0.3, 0.2, 0.1, 0.3]


LM = FastToyLM([b"1", b"2", b"12", b"-", b"$"], b"$", digits)
PHI = Regex(r"1+-?2").lift(LM)
T = 4


def test_twist_values_on_particles():
    model = ConstrainedGeneration(make_sampler("direct", LM, PHI), T)
    tw = BudgetCritic(rate=2.0)
    model.tokens = [0]                       # "1": needs one more byte ("2"), 3 tokens left
    assert asyncio.run(tw(model)) == pytest.approx(-2.0 * 1 / 3)
    model.tokens = [0, 1]                    # "12": complete
    assert asyncio.run(tw(model)) == 0.0
    model.tokens = [0, 0, 0, 3]              # "111-": one byte left, budget exhausted -> r = 1
    assert asyncio.run(tw(model)) == pytest.approx(-2.0)


def test_z_hat_unbiased_and_target_unchanged_with_twist():
    """E[Ẑ] = Z and E[Ẑ * sum_i wbar_i 1[x_i = s]] = p(s, EOS) phi(s) with the twist as critic."""
    target = exact_target(LM, lambda x: asyncio.run(PHI.complete(x)), T)
    z = sum(target.values())
    model = ConstrainedGeneration(make_sampler("awrs", LM, PHI), T)
    critic = BudgetCritic(rate=3.0)

    async def go():
        zs, mass = [], []
        for seed in range(1000):
            r = await smc(model, 4, ess_threshold=1.0, seed=seed, critic=critic, progress=False)
            zs.append(math.exp(r.log_ml))
            m = {}
            for s in r.samples:
                if s.finished:
                    m[s.token_ids] = m.get(s.token_ids, 0.0) + math.exp(s.log_weight) / 4
            mass.append(m)
        return np.array(zs), mass

    zs, mass = asyncio.run(go())
    se = zs.std() / math.sqrt(len(zs))
    assert se > 0 and abs(zs.mean() - z) <= 3 * se, (zs.mean(), z, se)
    assert set().union(*mass) <= set(target)
    for s, want in target.items():
        vals = np.array([m.get(s, 0.0) for m in mass])
        assert abs(vals.mean() - want) <= 3 * vals.std() / math.sqrt(len(vals)) + 1e-12, (s, want)
    assert critic.stats["searches"] > 0
