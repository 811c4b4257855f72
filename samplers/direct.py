"""The direct sampler: the exact local distribution.

    a ~ t(.) / T,    log_weight = log T,    T = sum_a t(a)

Exactly properly weighted (E[T f(a)] = sum_a t(a) f(a)) and the lowest-variance choice, at the
cost of evaluating the constraint on every token of the vocabulary each step.
"""

from __future__ import annotations

from samplers.base import Draw, TokenSampler
from potentials.base import NEG_INF, normalized


class DirectSampler(TokenSampler):
    """Draw from t / T over the whole vocabulary; the weight is log T (see module docstring)."""

    async def _sample(self, ctx: tuple[int, ...], draw: Draw) -> tuple[int, float]:
        logp = await self.lm_logprobs(ctx)
        logt = logp if self.potential is None else logp + await self.potential_logw(ctx)
        probs, total = normalized(logt)
        if total == NEG_INF:
            return self.dead_token(logp), NEG_INF
        return int(draw(probs)), total
