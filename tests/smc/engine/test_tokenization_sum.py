"""SMC on the embedded model against the exact Z of a finite language, summed over every
tokenization: with and without the per-byte twist, E[Ẑ] = Z and E[Ẑ post(s)] = Z pi(s).

For a finite set of texts L the target is

    pi(s) ∝ sum over token sequences t spelling s, |t| <= max_tokens, of p(t, EOS | prompt),

Z the sum of that over L. Each tokenization is enumerated over the real 49,152-token vocabulary
(special and empty tokens excluded, as the lifted constraint excludes them) and scored with the
model's own next-token log-probabilities; the runs share those prefixes, so after the first few
they cost no model calls.
"""

import math

import numpy as np
import pytest

import smc
from potentials import Regex
from smc.api.generation import prompt_ids_for
from smc.engine.critics import BudgetCritic

# log of the exact target mass: Red -4.3, Blue -7.4, Green -7.6, Purple -9.0 (4, 6, 12 and 14
# spellings in at most 4 tokens); lengths 3-6 bytes, so the twist differs between them
TEXTS = ["Red", "Blue", "Green", "Purple"]
PROMPT = "Name a color. Answer with one word."
MAX_TOKENS = 4
RUNS = 300


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


@pytest.mark.slow
async def test_smc_matches_the_sum_over_every_tokenization(embedded_lm):
    lm = embedded_lm
    special = set(getattr(lm, "special_token_ids", ()) or ())
    allowed = {i for i, b in enumerate(lm.vocab) if b and i not in special and i not in lm.eos_token_ids}
    prompt = prompt_ids_for(lm, smc.Request(PROMPT, max_tokens=MAX_TOKENS))
    eos = lm.eos_token_ids
    exact: dict[str, float] = {}
    rows: dict[tuple[int, ...], np.ndarray] = {}

    async def logprobs(prefix: tuple[int, ...]) -> np.ndarray:
        if prefix not in rows:
            rows[prefix] = (await lm.next_token_logprobs(list(prompt) + list(prefix))).double().numpy()
        return rows[prefix]

    for s in TEXTS:
        total = 0.0
        ts = tokenizations(lm.vocab, allowed, s.encode(), MAX_TOKENS)
        assert ts, s
        for t in ts:
            lp = sum([(await logprobs(t[:k]))[t[k]] for k in range(len(t))])
            end = np.logaddexp.reduce((await logprobs(t))[eos])
            total += math.exp(lp + end)
        exact[s] = total
    z = sum(exact.values())
    assert len(tokenizations(lm.vocab, allowed, b"Purple", MAX_TOKENS)) > 3  # several spellings

    constraint = Regex("|".join(TEXTS))
    for critic in (None, BudgetCritic(per_byte=0.5)):
        zs, mass = [], {s: [] for s in TEXTS}
        for seed in range(RUNS):
            r = await smc.agenerate(PROMPT, constraint, lm=lm, particles=4, max_tokens=MAX_TOKENS, seed=seed,
                                    ess_threshold=1.0, critic=critic, lookahead=0, progress=False)
            zhat = math.exp(r.log_ml) if r.log_ml > -math.inf else 0.0
            zs.append(zhat)
            for s in TEXTS:
                mass[s].append(zhat * r.posterior.get(s, 0.0))
        zs = np.array(zs)
        se = zs.std() / math.sqrt(RUNS)
        assert se > 0 and abs(zs.mean() - z) <= 3.5 * se, (critic, zs.mean(), z, se)
        for s in TEXTS:
            v = np.array(mass[s])
            assert abs(v.mean() - exact[s]) <= 3.5 * v.std() / math.sqrt(RUNS) + 1e-15, (critic, s, v.mean(), exact[s])
