"""Token samplers: the interface, and how randomness is injected.

A token sampler targets the un-normalized next-token weights

    t(a) = p(a | prompt + ctx) * exp(logw_next(ctx)[a])

where p is the LM and logw_next the token-level potential's next-symbol log weights (EOS ids
included). ``sample(ctx, rng)`` returns ``(a, log_w)`` that is *properly weighted*:

    E[exp(log_w) * f(a)] = sum_a f(a) * t(a)      for every f.

So exp(log_w) is an unbiased estimate of the local mass sum_a t(a), and the pair can be used
inside SMC as an importance-weighted draw from t / sum(t).

Randomness: every random choice goes through a *draw function* ``draw(probs) -> index`` that
picks an index of a probability vector. ``rng`` may be a numpy Generator (turned into an
inverse-CDF draw) or such a function directly (tests pass one that enumerates every path).
Inverse-CDF draws also expose ``uniform()``, the u in [0, 1) that ``draw`` would use, so that a
sampler may invert a CDF it maintains itself (same index, without building ``probs``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Sequence, Union

import numpy as np

from potentials.base import NEG_INF, Potential, logsumexp

#: picks an index of a probability vector (entries >= 0, summing to 1 up to rounding)
Draw = Callable[[np.ndarray], int]
RandomSource = Union[np.random.Generator, Draw]


def inverse_cdf(probs: np.ndarray, u: float) -> int:
    """The index i with cumsum(probs)[i-1] <= u * sum(probs) < cumsum(probs)[i], for u in [0, 1)."""
    c = np.cumsum(probs)
    i = int(np.searchsorted(c, u * c[-1], side="right"))
    if i >= len(c) or probs[i] <= 0:  # rounding at the top end: take the last positive entry
        i = int(np.flatnonzero(probs > 0)[-1])
    return i


class Categorical:
    """Inverse-CDF draws, one uniform from ``rng`` each."""

    def __init__(self, rng: np.random.Generator):
        self._rng = rng

    def uniform(self) -> float:
        return self._rng.random()

    def __call__(self, probs: np.ndarray) -> int:
        return inverse_cdf(probs, self.uniform())


def categorical(rng: np.random.Generator) -> Draw:
    """Inverse-CDF draws, one uniform from ``rng`` each."""
    return Categorical(rng)


class BlockDraw:
    """Inverse-CDF draws from a given block of uniforms, then from ``default_rng(seed)``.

    Lets an engine hand each particle its own random stream from one vectorized draw per step
    (creating a Generator per particle per step costs more than a whole toy step).
    """

    def __init__(self, uniforms: np.ndarray, seed: int):
        self._u = uniforms
        self._k = 0
        self._seed = seed
        self._rng: np.random.Generator | None = None

    def uniform(self) -> float:
        if self._k < len(self._u):
            self._k += 1
            return float(self._u[self._k - 1])
        if self._rng is None:
            self._rng = np.random.default_rng(self._seed)
        return self._rng.random()

    def __call__(self, probs: np.ndarray) -> int:
        return inverse_cdf(probs, self.uniform())


def as_draw(rng: RandomSource) -> Draw:
    """A draw function from a numpy Generator, or ``rng`` itself when it is already one."""
    if isinstance(rng, np.random.Generator):
        return categorical(rng)
    if callable(rng):
        return rng
    raise TypeError(f"rng must be a numpy Generator or a draw function, got {type(rng).__name__}")


def normalized(logw: np.ndarray) -> tuple[np.ndarray, float]:
    """(exp(logw - L), L) with L = logsumexp(logw); L = -inf when every entry is -inf."""
    total = logsumexp(logw)
    if total == NEG_INF:
        return np.zeros(len(logw)), NEG_INF
    return np.exp(logw - total), total


class TokenSampler(ABC):
    """Draws the next token for contexts that continue ``prompt_ids`` under ``lm``.

    Args:
        lm: an LM backend (vocab, eos_token_ids, next_token_logprobs).
        potential: a token-level Potential over ``lm``'s vocabulary (``size == len(lm.vocab)``,
            contexts are tuples of generated token ids), or None for no constraint.
        prompt_ids: the prompt's token ids; the LM sees ``prompt_ids + ctx``.

    ``stats`` counts ``steps`` (calls to sample), ``checks`` (single tokens whose weight was
    asked for) and ``full_evaluations`` (whole next-token weight vectors computed).
    Samplers are shared by all particles and never copied when particles are.
    """

    def __init__(self, lm: Any, potential: Potential | None = None, prompt_ids: Sequence[int] = ()):
        n = len(lm.vocab)
        if potential is not None:
            if not isinstance(potential, Potential):
                raise TypeError(f"potential must be a Potential, got {type(potential).__name__}")
            if potential.size != n:
                raise ValueError(
                    f"potential has {potential.size} symbols but the LM vocabulary has {n} tokens; "
                    "lift byte-level constraints first (constraint.lift(lm))"
                )
        self.lm = lm
        self.potential = potential
        self.prompt_ids = tuple(int(i) for i in prompt_ids)
        self.eos_ids = tuple(int(i) for i in lm.eos_token_ids)
        self.stats = {"steps": 0, "checks": 0, "full_evaluations": 0}

    def __deepcopy__(self, memo: dict) -> "TokenSampler":
        return self  # shared by all particles

    async def lm_logprobs(self, ctx: Sequence[int]) -> np.ndarray:
        """log p(. | prompt + ctx) as float64."""
        lp = await self.lm.next_token_logprobs(self.prompt_ids + tuple(ctx))
        return lp.detach().to("cpu").double().numpy() if hasattr(lp, "detach") else np.asarray(lp, float)

    async def potential_logw(self, ctx: Sequence[int]) -> np.ndarray:
        """logw_next(ctx) over the whole vocabulary (zeros without a potential)."""
        if self.potential is None:
            return np.zeros(len(self.lm.vocab))
        self.stats["full_evaluations"] += 1
        return np.asarray(await self.potential.logw_next(tuple(ctx)), dtype=float)

    async def target_logw(self, ctx: Sequence[int]) -> np.ndarray:
        """log t(.) = log p(. | prompt + ctx) + logw_next(ctx), the whole vector."""
        logp = await self.lm_logprobs(ctx)
        if self.potential is None:
            return logp
        return logp + await self.potential_logw(ctx)

    async def sample(self, ctx: Sequence[int], rng: RandomSource) -> tuple[int, float]:
        """A properly weighted draw ``(token, log_weight)`` for the target t at ``ctx``."""
        self.stats["steps"] += 1
        return await self._sample(tuple(ctx), as_draw(rng))

    @abstractmethod
    async def _sample(self, ctx: tuple[int, ...], draw: Draw) -> tuple[int, float]: ...

    @staticmethod
    def dead_token(logp: np.ndarray) -> int:
        """The token returned alongside weight -inf: the LM's most likely one (rejected too)."""
        return int(np.argmax(logp))
