"""An LM's prompt and the tokens generated after it, as a program's state (``LMContext``)."""

from __future__ import annotations

from typing import Any

from potentials.base import Potential
from potentials.lift import as_token_potential
from samplers import SAMPLERS, Draw, TokenSampler
from smc.backends.base import LMBackend, check_backend
from smc.backends.prompts import Prompt, encode_prompt
from smc.backends.vocab import decode
from smc.core.logmath import NEG_INF
from smc.programs.distributions import Distribution


class SamplerCache(dict):
    """(id(constraint), sampler name) -> (constraint, sampler): the token samplers an LMContext
    built for ``lm`` after ``prompt_ids``, shared by all its clones.

    A checkpoint stores no sampler (``rebuilt_on_resume``), only each one's constraint, name and
    kept caches (``TokenSampler.cache_contexts``: AWRS's steps depend on the masks earlier steps
    kept); a loaded copy holds those as ``saved_caches``, and ``restore_caches``, which resume
    awaits before the next step, builds the samplers again and refills their caches, so the
    resumed steps are the uninterrupted run's."""

    shared_by_particles = True
    rebuilt_on_resume = True

    def __init__(self, lm: LMBackend, prompt_ids: tuple[int, ...]):
        super().__init__()
        self.lm, self.prompt_ids = lm, prompt_ids
        self.saved_caches: list[tuple[Potential | None, str, Any]] = []

    def sampler(self, constraint: Potential | None, name: str) -> TokenSampler:
        """The sampler ``name`` under ``constraint`` (built on first use)."""
        key = (id(constraint), name)
        if key not in self:
            if name not in SAMPLERS:
                raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
            pot = as_token_potential(constraint, self.lm)
            self[key] = (constraint, SAMPLERS[name](self.lm, pot, self.prompt_ids))
        return self[key][1]

    def __reduce__(self) -> tuple:
        saved = [(constraint, name, s.cache_contexts()) for (_, name), (constraint, s) in self.items()]
        return (SamplerCache, (self.lm, self.prompt_ids), {"saved_caches": saved})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.saved_caches = state["saved_caches"]

    async def restore_caches(self, saved: list[tuple[Potential | None, str, Any]]) -> None:
        """Build each saved sampler again and refill its caches (``TokenSampler.restore_caches``)."""
        for constraint, name, contexts in saved:
            await self.sampler(constraint, name).restore_caches(contexts)
        self.saved_caches = []


class LMContext:
    """A prompt plus the tokens generated after it, for one LM.

    Args:
        lm: an LM backend.
        prompt: text, a list of ``{"role", "content"}`` chat messages, or token ids; the ids
            the LM sees are ``encode_prompt(lm, prompt, chat)`` (smc.backends.prompts), the same
            rule as ``smc.generate``.
        chat: for a text prompt, apply the LM's chat template (True) or not (False); None
            (default) applies it when the LM has one.

    ``tokens`` are the generated ids (EOS excluded); ``done`` turns True once EOS is sampled.
    """

    def __init__(self, lm: LMBackend, prompt: Prompt = "", *, chat: bool | None = None):
        check_backend(lm)
        self.lm = lm
        self.prompt_ids = tuple(encode_prompt(lm, prompt, chat))
        self.tokens: list[int] = []
        self.done = False
        self._samplers = SamplerCache(lm, self.prompt_ids)

    def next_token(self, constraint: Potential | None = None, sampler: str = "direct") -> "TokenDist":
        """The next-token distribution p(. | prompt + tokens), times ``constraint``'s weights.

        With a constraint the distribution is un-normalized; sampling from it draws a token with
        the named sampler ("direct", "awrs") and scores the local mass estimate.
        """
        return TokenDist(self, self._samplers.sampler(constraint, sampler))

    def text(self) -> str:
        return decode(self.lm, self.tokens)


class TokenDist(Distribution):
    """Next token of an LMContext under a sampler's target (see LMContext.next_token)."""

    def __init__(self, context: LMContext, sampler: TokenSampler):
        self.context, self.sampler = context, sampler

    async def sample(self, draw: Draw) -> tuple[int, float]:
        return await self.sampler.sample(tuple(self.context.tokens), draw)

    async def log_prob(self, token: int) -> float:
        ctx = tuple(self.context.tokens)
        lp = (await self.sampler.lm_logprobs_at(ctx, [token]))[0]
        if self.sampler.potential is None or lp == NEG_INF:
            return lp
        return lp + float((await self.sampler.potential.logw_subset(ctx, [token]))[0])

    def commit(self, token: int) -> None:
        if token in self.sampler.eos_ids:
            self.context.done = True
        else:
            self.context.tokens.append(int(token))
