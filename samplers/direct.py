"""The direct sampler: the exact local distribution.

    a ~ t(.) / T,    log_weight = log T,    T = sum_a t(a)

Exactly properly weighted (E[T f(a)] = sum_a t(a) f(a)) and the lowest-variance choice, at the
cost of evaluating the constraint on every token of the vocabulary each step.

Population step: the rows log t_b = log p_b + logw_b of all particles are formed on the LM's
device, and each particle's token is one inverse-CDF draw on its row,

    C_b = cumsum(exp(log t_b - m_b)),  m_b = max_a log t_b(a),
    a_b = the smallest a with C_b(a) > u_b C_b(V-1),   log T_b = m_b + log C_b(V-1),

with u_b the particle's next uniform (the one the reference path's ``draw(probs)`` uses); only
the B tokens and weights come back to the CPU. Without a potential C_b is the row's own CDF
(``NextTokenDists.cdf``: no O(V) work beyond the backend's). A Boolean potential's weights
(0 or -inf) travel to a non-CPU device as a packed bitmask, V / 8 bytes per particle.
The reference path ``_sample`` computes the same law in numpy; the two agree up to rounding.
"""

from __future__ import annotations

import numpy as np
import torch

from smc.core.logmath import NEG_INF, normalized
from samplers.base import BlockDraw, Draw, TokenSampler
from smc.backends.base import next_token_dists


class DirectSampler(TokenSampler):
    """Draw from t / T over the whole vocabulary; the weight is log T (see module docstring)."""

    population = True

    async def _sample(self, ctx: tuple[int, ...], draw: Draw) -> tuple[int, float]:
        logp = await self.lm_logprobs(ctx)
        logt = logp if self.potential is None else logp + await self.potential_logw(ctx)
        probs, total = normalized(logt)
        if total == NEG_INF:
            return self.dead_token(logp), NEG_INF
        return int(draw(probs)), total

    async def _population_step(self, items: list[tuple[tuple[int, ...], BlockDraw]]) -> list[tuple[int, float]]:
        """The population step of the module docstring for all ``items``."""
        dists = await next_token_dists(self.lm, [self.prompt_ids + ctx for ctx, _ in items])
        logp, cdf = dists.logp, dists.cdf
        if self.potential is None:
            shift = torch.zeros(len(items), dtype=torch.float64, device=cdf.device)
        else:
            rows = np.stack([await self.potential_logw(ctx) for ctx, _ in items])
            logt = logp.to(torch.float64) + device_weights(rows, logp.device)
            shift = logt.max(dim=1).values
            shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
            cdf = torch.cumsum(torch.exp(logt - shift[:, None]), dim=1)
        u = torch.tensor([d.uniform() for _, d in items], dtype=cdf.dtype, device=cdf.device)
        total = cdf[:, -1]
        tok = torch.searchsorted(cdf, (u * total)[:, None], right=True)[:, 0].clamp_(max=cdf.shape[1] - 1)
        inc = cdf.gather(1, tok[:, None])[:, 0] - torch.where(
            tok > 0, cdf.gather(1, (tok - 1).clamp(min=0)[:, None])[:, 0], torch.zeros_like(total))
        log_total = torch.log(total.to(torch.float64)) + shift
        tokens, incs, weights = tok.tolist(), inc.tolist(), log_total.tolist()
        out = []
        for b, (t, q, w) in enumerate(zip(tokens, incs, weights)):
            if w == NEG_INF:
                out.append((self.dead_token(logp[b]), NEG_INF))
                continue
            if q <= 0.0:  # u T rounded up to T: the last token of positive mass (as inverse_cdf)
                t = int(torch.nonzero(torch.diff(cdf[b], prepend=cdf[b, :1] * 0) > 0)[-1])
            out.append((t, w))
        return out


def device_weights(rows: np.ndarray, device: torch.device) -> torch.Tensor:
    """The [B, V] float64 weight rows on ``device``. Rows of only 0 and -inf (a Boolean
    potential) cross to a non-CPU device as a packed bitmask and are unpacked there."""
    if device.type == "cpu":
        return torch.from_numpy(rows)
    finite = np.isfinite(rows)
    if not np.all(rows[finite] == 0.0):
        return torch.from_numpy(rows).to(device)
    return unpack_mask(torch.from_numpy(np.packbits(finite, axis=1, bitorder="little")).to(device), rows.shape[1])


def unpack_mask(packed: torch.Tensor, size: int) -> torch.Tensor:
    """Weights 0 (bit set) or -inf (bit clear) of a [B, ceil(V / 8)] little-endian bitmask, as
    [B, V] float64 on the bitmask's device."""
    bits = (packed[:, :, None] >> torch.arange(8, device=packed.device, dtype=torch.uint8)) & 1
    allowed = bits.reshape(packed.shape[0], -1)[:, :size].bool()
    return torch.zeros(allowed.shape, dtype=torch.float64, device=packed.device).masked_fill_(~allowed, NEG_INF)
