"""Sampling from another LM q with an importance correction.

An inner sampler, properly weighted for q's constrained target t_q(a) = q(a) exp(logw_next[a]),
draws a with weight w_q; then

    log_weight = log w_q + log p(a | prompt + ctx) - log q(a | proposal_prompt + ctx)

is properly weighted for t(a) = p(a) exp(logw_next[a]), because
E[w_q p(a)/q(a) f(a)] = sum_a t_q(a) p(a)/q(a) f(a) = sum_a t(a) f(a). This needs q(a) > 0
wherever t(a) > 0 (q's support must cover the target's), which a full-support LM guarantees.
"""

from __future__ import annotations

from typing import Any, Sequence

from smc.core.logmath import NEG_INF
from potentials.base import Potential
from smc.core.counters import register
from samplers.base import Draw, TokenSampler
from samplers.direct import DirectSampler
from smc.backends.base import LMBackend


class ProposalSampler(TokenSampler):
    """Draw tokens from ``proposal_lm`` (or ``lm``) under ``proposal_prompt_ids``, reweight to ``lm``.

    Args:
        lm, potential, prompt_ids: the target, as for every TokenSampler.
        proposal_lm: the LM to draw from (default: ``lm``); same vocabulary as ``lm``.
        proposal_prompt_ids: the prompt the proposal sees (e.g. a more explicit instruction).
        inner: class of the inner sampler ("direct" or "awrs" semantics), default DirectSampler.
    """

    def __init__(
        self,
        lm: LMBackend,
        potential: Potential | None = None,
        prompt_ids: Sequence[int] = (),
        *,
        proposal_lm: LMBackend | None = None,
        proposal_prompt_ids: Sequence[int] = (),
        inner: type[TokenSampler] | None = None,
    ):
        super().__init__(lm, potential, prompt_ids)

        q = lm if proposal_lm is None else proposal_lm
        if list(q.vocab) != list(lm.vocab):
            raise ValueError("the proposal LM must have the same vocabulary as the target LM")
        self.inner = (inner or DirectSampler)(q, potential, proposal_prompt_ids)
        self.stats = self.inner.stats  # checks and steps are the inner sampler's

    async def sample(self, ctx: Sequence[int], rng: Any) -> tuple[int, float]:
        register(self, self.lm)  # before the inner sampler, whose stats dict this one shares
        ctx = tuple(ctx)
        token, log_wq = await self.inner.sample(ctx, rng)
        if log_wq == NEG_INF:
            return token, NEG_INF
        (logp,) = await self.lm_logprobs_at(ctx, [token])
        (logq,) = await self.inner.lm_logprobs_at(ctx, [token])
        return token, log_wq + logp - logq

    async def _sample(self, ctx: tuple[int, ...], draw: Draw) -> tuple[int, float]:
        return await self.sample(ctx, draw)
