"""Local masking ("locally constrained decoding"): the IMPROPER baseline, for comparisons only.

    a ~ t(.) / T,    log_weight = 0   (or -inf when T = 0)

The draw is the direct sampler's, but the weight drops the local mass T, so E[w f(a)] =
sum_a f(a) t(a) / T: the target is renormalized at every step. Whole sequences then follow
prod_k t_k / T_k instead of the global posterior prod_k t_k / Z, which over-weights prefixes whose
allowed continuations the LM finds unlikely. Used inside SMC the weights carry no information,
so this is what plain constrained decoding does; it is *not* properly weighted.
"""

from __future__ import annotations

from samplers.base import Draw, TokenSampler, normalized
from potentials.base import NEG_INF


class MaskingSampler(TokenSampler):
    """Draw from t / T; weight 0 (not properly weighted; see module docstring)."""

    async def _sample(self, ctx: tuple[int, ...], draw: Draw) -> tuple[int, float]:
        logp = await self.lm_logprobs(ctx)
        logt = logp if self.potential is None else logp + await self.potential_logw(ctx)
        probs, total = normalized(logt)
        if total == NEG_INF:
            return self.dead_token(logp), NEG_INF
        return int(draw(probs)), 0.0
