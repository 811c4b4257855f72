"""Local masking ("locally constrained decoding"): the IMPROPER baseline, for comparisons only.

    a ~ t(.) / T,    log_weight = 0   (or -inf when T = 0)

The draw is the direct sampler's, but the weight drops the local mass T, so E[w f(a)] =
sum_a f(a) t(a) / T: the target is renormalized at every step. Whole sequences then follow
prod_k t_k / T_k instead of the global posterior prod_k t_k / Z, which over-weights prefixes whose
allowed continuations the LM finds unlikely. Used inside SMC the weights carry no information,
so this is what plain constrained decoding does; it is *not* properly weighted.
"""

from __future__ import annotations

from smc.core.logmath import NEG_INF
from samplers.base import BlockDraw, Draw
from samplers.direct import DirectSampler


class MaskingSampler(DirectSampler):
    """Draw from t / T; weight 0 (not properly weighted; see module docstring)."""

    def for_last_step(self) -> "MaskingSampler":
        """Itself: the baseline stays plain local masking, which knows nothing of max_tokens
        (the last-step restriction of TokenSampler.for_last_step is part of exact SMC)."""
        return self

    async def _sample(self, ctx: tuple[int, ...], draw: Draw) -> tuple[int, float]:
        token, log_mass = await super()._sample(ctx, draw)
        return token, NEG_INF if log_mass == NEG_INF else 0.0

    async def _population_step(self, items: list[tuple[tuple[int, ...], BlockDraw]]) -> list[tuple[int, float]]:
        return [(t, NEG_INF if w == NEG_INF else 0.0) for t, w in await super()._population_step(items)]
