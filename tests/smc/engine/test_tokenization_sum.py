"""SMC on the embedded model against the exact Z of a finite language, summed over every
tokenization: with and without the per-byte twist, and with the twist protecting begun
literals (the texts as a JSON enum), E[Ẑ] = Z and E[Ẑ post(s)] = Z pi(s).

For a finite set of texts L the target is

    pi(s) ∝ sum over token sequences t spelling s, |t| <= max_tokens, of p(t, EOS | prompt),

Z the sum of that over L. Each tokenization is enumerated over the real 49,152-token vocabulary
(special and empty tokens excluded, as the lifted constraint excludes them) and scored with the
model's own next-token log-probabilities. The runs revisit the same few contexts, so the model
is seen through ``MemoLM``, which computes each context's row once: the sum and every run use the
same rows, and the tests' time is the sampler's, not the forward passes'.
"""

import json
import math

import numpy as np
import pytest
import torch

import smc
from potentials import JSONSchema, Regex
from smc.api.generation import prompt_ids_for
from smc.backends.base import BackendView, NextTokenDists, dists_from_logprobs
from smc.engine.critics import BudgetCritic

# log of the exact target mass: Red -4.3, Blue -7.4, Green -7.6, Purple -9.0 (4, 6, 12 and 14
# spellings in at most 4 tokens); lengths 3-6 bytes, so the twist differs between them
TEXTS = ["Red", "Blue", "Green", "Purple"]
PROMPT = "Name a color. Answer with one word."
MAX_TOKENS = 4
RUNS = 300


class MemoLM(BackendView):
    """The viewed backend with each context's next-token log-probs computed once and kept."""

    def __init__(self, lm):
        super().__init__(lm)
        self.rows: dict[tuple[int, ...], torch.Tensor] = {}

    async def next_token_logprobs(self, ids) -> torch.Tensor:
        key = tuple(ids)
        if key not in self.rows:
            self.rows[key] = await self.inner.next_token_logprobs(key)
        return self.rows[key].clone()

    async def batch_next_token_logprobs(self, batch) -> torch.Tensor:
        return torch.stack([await self.next_token_logprobs(ids) for ids in batch])

    async def batch_next_token_dists(self, batch) -> NextTokenDists:
        return dists_from_logprobs(await self.batch_next_token_logprobs(batch))


def tokenizations(vocab: list[bytes], allowed: set[int], text: bytes, most: int) -> list[tuple[int, ...]]:
    """Every sequence of at most ``most`` allowed token ids whose bytes concatenate to ``text``."""
    by_first: dict[int, list[int]] = {}
    for i in allowed:
        by_first.setdefault(vocab[i][0], []).append(i)
    out = []

    def walk(pos: int, acc: tuple[int, ...]) -> None:
        if pos == len(text):
            out.append(acc)
            return
        if len(acc) == most:
            return
        for i in by_first.get(text[pos], ()):
            if text.startswith(vocab[i], pos):
                walk(pos + len(vocab[i]), acc + (i,))

    walk(0, ())
    return out


async def exact_masses(lm: MemoLM, prompt: list[int], texts: dict[str, bytes]) -> dict[str, float]:
    """{name: sum over tokenizations t of texts[name] (|t| <= MAX_TOKENS) of p(t, EOS | prompt)}."""
    special = set(getattr(lm, "special_token_ids", ()) or ())
    allowed = {i for i, b in enumerate(lm.vocab) if b and i not in special and i not in lm.eos_token_ids}

    async def logprobs(prefix: tuple[int, ...]) -> np.ndarray:
        return (await lm.next_token_logprobs(list(prompt) + list(prefix))).double().numpy()

    exact = {}
    for name, text in texts.items():
        total = 0.0
        ts = tokenizations(lm.vocab, allowed, text, MAX_TOKENS)
        assert ts, text
        for t in ts:
            lp = sum([(await logprobs(t[:k]))[t[k]] for k in range(len(t))])
            end = np.logaddexp.reduce((await logprobs(t))[lm.eos_token_ids])
            total += math.exp(lp + end)
        exact[name] = total
    return exact


async def check_runs(lm, constraint, critic, exact: dict[str, float], power: float | None = None) -> None:
    """RUNS seeded runs of 4 particles (``power``: their resampling power; None: the request's
    default): E[Ẑ] = Z and E[Ẑ post(s)] = Z pi(s) within 3.5 SE."""
    z = sum(exact.values())
    zs, mass = [], {s: [] for s in exact}
    for seed in range(RUNS):
        r = await smc.agenerate(PROMPT, constraint, lm=lm, particles=4, max_tokens=MAX_TOKENS, seed=seed,
                                ess_threshold=1.0, critic=critic, lookahead=0, progress=False,
                                resampling_power=power)
        zhat = math.exp(r.log_ml) if r.log_ml > -math.inf else 0.0
        zs.append(zhat)
        for s in exact:
            mass[s].append(zhat * r.posterior.get(s, 0.0))
    zs = np.array(zs)
    se = zs.std() / math.sqrt(RUNS)
    assert se > 0 and abs(zs.mean() - z) <= 3.5 * se, (critic, zs.mean(), z, se)
    for s in exact:
        v = np.array(mass[s])
        assert abs(v.mean() - exact[s]) <= 3.5 * v.std() / math.sqrt(RUNS) + 1e-15, (critic, s, v.mean(), exact[s])


@pytest.mark.slow
async def test_smc_matches_the_sum_over_every_tokenization(embedded_lm):
    lm = MemoLM(embedded_lm)
    prompt = prompt_ids_for(lm, smc.Request(PROMPT, max_tokens=MAX_TOKENS))
    exact = await exact_masses(lm, prompt, {s: s.encode() for s in TEXTS})
    special = set(getattr(lm, "special_token_ids", ()) or ())
    allowed = {i for i, b in enumerate(lm.vocab) if b and i not in special and i not in lm.eos_token_ids}
    assert len(tokenizations(lm.vocab, allowed, b"Purple", MAX_TOKENS)) > 3  # several spellings
    for critic in (None, BudgetCritic(per_byte=0.5)):
        await check_runs(lm, Regex("|".join(TEXTS)), critic, exact)


@pytest.mark.slow
async def test_protected_literals_keep_the_sum_over_every_tokenization(embedded_lm):
    """The same as JSON strings, an enum: inside a begun value ('"Pur') the twist holds the
    particle, so resampling raises its priority; the target and Ẑ stay exact. Ancestors are
    drawn by the weights themselves (power 1), as before the resampling power existed. Seeds
    0-299 here draw uniforms that put '"Red"' low at the second step under every setting that
    shares them (at power 0.25 past 3.5 standard errors); on other seeds every text is within
    1.7 standard errors at power 1 (no critic, seeds 900-4499) and 2.2 at 0.25 (this critic,
    seeds 900-2699): docs/quality.md, "Resampling by the weights to a power". The
    power's exactness is checked by enumeration (test_loop, test_critics)."""
    lm = MemoLM(embedded_lm)
    prompt = prompt_ids_for(lm, smc.Request(PROMPT, max_tokens=MAX_TOKENS))
    exact = await exact_masses(lm, prompt, {json.dumps(s): json.dumps(s).encode() for s in TEXTS})
    critic = BudgetCritic(per_byte=0.5, hold_literals=True)
    held = []
    real = critic.holds
    critic.holds = lambda p: held.append(real(p)) or held[-1]  # count the particles held
    await check_runs(lm, JSONSchema({"enum": TEXTS}, whitespace="compact"), critic, exact, power=1.0)
    assert any(held)
