"""The built-in program behind ``smc.generate``: constrained generation, one particle per copy."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from potentials.base import Potential
from potentials.lift import as_token_potential
from potentials.lookahead import Lookahead
from samplers import TokenSampler
from smc.backends.base import LMBackend
from smc.backends.vocab import decode
from smc.core.concurrency import run_all
from smc.core.logmath import NEG_INF, logsumexp
from smc.programs.model import Model


class ConstrainedGeneration(Model):
    """The built-in program behind ``smc.generate``: x ~ pi(x) ∝ p(x, EOS) phi(x), |x| <= max_tokens.

    Initial weight phi.prefix(()); each step draws a token with the sampler and scores its
    weight; EOS finishes. After ``max_tokens`` tokens EOS is forced with the target's weight
    log sum_{e in EOS} p(e | x) exp(logw_next(x)[e]). The last sampled token (max_tokens - 1
    tokens so far) is drawn with ``sampler.for_last_step()``: only tokens after which the text can
    finish, so no particle is spent on a prefix the forced EOS would give weight 0 (the target
    and the unbiasedness of Ẑ are unchanged: potentials.last_step).

    With ``finish_share`` = s in (0, 1), every step before the forced EOS banks (``Model.bank``)
    the finished text x with log weight

        log w + log s + log m(x),   m(x) = sum_{e in EOS} p(e | x) exp(logw_next(x)[e]),

    the EOS mass of the target there, and a drawn EOS gets log(1 - s) more: the finished mass
    in expectation is w m(x) (s of it banked, 1 - s drawn) and the rest is unchanged, so the
    target and Ẑ's unbiasedness stay; every text the particles pass where EOS is allowed is
    then a finished sample, however unlikely the model is to stop there. It costs one
    completion check per particle and step.

    When the sampler's potential is a ``potentials.lookahead.Lookahead`` (``generate(...,
    lookahead=rate)``), the particles' weights carry its twist exp(G(x)) and every finish above
    (drawn, banked, forced) divides it out: log w - G(x), so the target stays pi.
    """

    #: read by particles pickled before the option existed
    finish_share = 0.0

    def __init__(self, sampler: TokenSampler, max_tokens: int, finish_share: float = 0.0):
        super().__init__()
        self.sampler = sampler
        self.max_tokens = int(max_tokens)
        self.finish_share = float(finish_share)
        self.tokens: list[int] = []

    async def start(self) -> None:
        if self.sampler.potential is not None:
            self.score(await self.sampler.potential.prefix(()))

    async def step(self) -> None:
        ctx = tuple(self.tokens)
        if len(ctx) >= self.max_tokens:
            self.score(await self._eos_mass(ctx) - self._twist())
            if self.weight > NEG_INF:  # a dead particle stays unfinished
                self.finish()
            return
        if self.finish_share > 0.0:
            await self._bank_eos()
        self._take(*await self._sampler_now().sample(ctx, self.draw))

    async def _eos_mass(self, ctx: tuple[int, ...]) -> float:
        """log m(x) = log sum_{e in EOS} p(e | x) exp(logw_next(x)[e])."""
        eos = list(self.sampler.eos_ids)
        logw = np.zeros(len(eos))
        if self.sampler.potential is not None:
            logw = np.asarray(await self.sampler.potential.logw_subset(ctx, eos))
            if not (logw > NEG_INF).any():
                # the text cannot end here: no LM row asked for (the population step's rows
                # stay on the device, so this would be a forward pass of its own)
                return NEG_INF
        return logsumexp(np.array(await self.sampler.lm_logprobs_at(ctx, eos)) + logw)

    async def _bank_eos(self) -> None:
        """Bank the text as it is with log s + log m(x) (s = ``finish_share`` > 0)."""
        self.bank(math.log(self.finish_share) + await self._eos_mass(tuple(self.tokens)) - self._twist())

    def _twist(self) -> float:
        """G(x): the lookahead twist the weight carries (potentials.lookahead; 0 without one),
        divided out of every finished text."""
        pot = self.sampler.potential
        return pot.twist(self.tokens) if isinstance(pot, Lookahead) else 0.0

    def _sampler_now(self) -> TokenSampler:
        """The sampler of this step: ``sampler.for_last_step()`` for the last token before the
        forced EOS (only tokens after which the text can finish; the same target pi, see
        potentials.last_step), else ``sampler``."""
        return self.sampler.for_last_step() if len(self.tokens) == self.max_tokens - 1 else self.sampler

    def _take(self, token: int, logw: float) -> None:
        self.score(logw)
        if self.weight == NEG_INF:
            return
        if token in self.sampler.eos_ids:
            if self.finish_share > 0.0:  # the share _bank_eos set aside
                self.score(math.log1p(-self.finish_share))
            self.score(-self._twist())
            self.finish()
        else:
            self.tokens.append(token)

    @classmethod
    async def step_population(cls, particles: Sequence["ConstrainedGeneration"]) -> None:
        """``step`` of every particle, with the same results: the draws of each sampler in one
        ``TokenSampler.sample_many`` call (its population step, without a task per particle);
        particles at ``max_tokens`` take their ``step``."""
        groups: dict[int, tuple[TokenSampler, list[ConstrainedGeneration]]] = {}
        ends = []
        for p in particles:
            if len(p.tokens) >= p.max_tokens:
                ends.append(p.step())
            else:
                s = p._sampler_now()
                groups.setdefault(id(s), (s, []))[1].append(p)

        async def draw_group(sampler: TokenSampler, ps: list[ConstrainedGeneration]) -> None:
            banking = [p._bank_eos() for p in ps if p.finish_share > 0.0]
            if banking:  # no task per particle when nothing is banked (the default)
                await run_all(banking)
            for p, got in zip(ps, await sampler.sample_many([(tuple(p.tokens), p.draw) for p in ps])):
                p._take(*got)

        await run_all([*ends, *(draw_group(s, ps) for s, ps in groups.values())])

    def token_ids(self) -> tuple[int, ...]:
        return tuple(self.tokens)

    def n_tokens(self) -> int:
        return len(self.tokens)

    def tokens_since(self, k: int) -> tuple[int, ...]:
        return tuple(self.tokens[k:])

    def text(self) -> str:
        return decode(self.sampler.lm, self.tokens)


def target_potential(constraint: Potential | None, lm: LMBackend, lookahead: float = 0.0) -> Potential | None:
    """The token-level potential of a run: ``as_token_potential(constraint, lm)``, inside a
    ``Lookahead`` twist of rate ``lookahead`` when that is > 0 and the constraint knows
    completions; the one rule by which ``generate`` and ``resume`` build it."""
    pot = as_token_potential(constraint, lm)
    if not lookahead:
        return pot
    twisted = Lookahead(pot, lookahead)
    return twisted if twisted.active else pot  # no completions known: the plain run, exactly
