"""The tempered, nucleus-truncated view of an LM backend (``temperature``, ``top_p``).

For a backend p with next-token log-probs log p(a | x) = logits(a | x) - log Σ_b exp(logits(b | x)),
the view answers, per step,

    q_T(a | x)   = softmax(logits(· | x) / T)[a] = p(a | x)^(1/T) / Σ_b p(b | x)^(1/T)
    N_P(x)       = the smallest set of the most probable tokens under q_T whose mass is >= P:
                   with q_T sorted in decreasing order (ties by token id), a token is kept when
                   the mass of the tokens before it is < P (so the top token is always kept)
    q(a | x)     = q_T(a | x) 1[a ∈ N_P(x)] / Σ_{b ∈ N_P(x)} q_T(b | x)

and that q is the LM of the run's target: π(y) ∝ Π_t q(y_t | x, y_<t) · φ(y). T = 1 and P = 1
give back p itself (``tempered`` then returns the backend unchanged, so nothing changes for a
run that does not ask). This is the per-step law an OpenAI-style sampler draws from at these
settings, now conditioned exactly on the constraint instead of masked.

The view shares everything else with the backend (vocabulary, prompts, caches, counters): its
``stats`` is the backend's own dict, so a run counts the work once.
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict
from typing import Any, Sequence

import torch

from smc.backends.base import BackendView, LMBackend, NextTokenDists, dists_from_logprobs, next_token_dists
from smc.core import defaults
from smc.core.counters import register


def check_sampling(temperature: Any, top_p: Any) -> tuple[float, float]:
    """(T, P) as floats, or ValueError/TypeError naming the bad one: T a finite number > 0,
    P a number in (0, 1]."""
    for name, value in (("temperature", temperature), ("top_p", top_p)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if temperature <= 0:
        raise ValueError(
            f"temperature must be > 0 (the target's LM is softmax(logits / temperature)), got "
            f"{temperature!r}; for the most probable output use method='top_k' with particles=1"
        )
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (the nucleus mass kept per step), got {top_p!r}")
    return float(temperature), float(top_p)


def temper(logp: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """log q(· | x) of the module docstring for rows log p(· | x) (any leading shape, the
    vocabulary last); rows are renormalized, dropped tokens get -inf."""
    x = logp
    if temperature != 1.0:
        x = x / temperature
        x = x - torch.logsumexp(x, dim=-1, keepdim=True)
    if top_p < 1.0:
        ordered, order = torch.sort(x, dim=-1, descending=True, stable=True)
        # float64 for the running mass: the boundary token must not move with rounding
        probs = ordered.to(torch.float64).exp()
        before = torch.cumsum(probs, dim=-1) - probs
        drop = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before >= top_p)
        x = x.masked_fill(drop, -math.inf)
        x = x - torch.logsumexp(x, dim=-1, keepdim=True)
    return x


class TemperedLM(BackendView):
    """The view q of ``lm`` at temperature T and nucleus mass P (module docstring).

    Every member the view does not define is the backend's own (vocabulary, ``encode``,
    ``encode_chat``, ``max_context``, ``special_token_ids``, ``stats``, ``clear_cache``, ...).
    """

    def __init__(self, lm: LMBackend, temperature: float, top_p: float, *, weak: bool = False):
        super().__init__(lm, weak=weak)
        self.temperature, self.top_p = check_sampling(temperature, top_p)

    async def next_token_logprobs(self, ids: Sequence[int]) -> torch.Tensor:
        """log q(· | ids) (1-D, logsumexp == 0)."""
        register(self.inner)
        return temper(await self.inner.next_token_logprobs(ids), self.temperature, self.top_p)

    async def batch_next_token_logprobs(self, batch: Sequence[Sequence[int]]) -> torch.Tensor:
        """Rows log q(· | ids), one per context."""
        return (await self.batch_next_token_dists(batch)).logp

    async def batch_next_token_dists(self, batch: Sequence[Sequence[int]]) -> NextTokenDists:
        """The backend's rows for ``batch`` (one batched call: concurrent runs still share its
        forward passes and caches), tempered and truncated, with their CDFs."""
        dists = await next_token_dists(self.inner, batch)
        return dists_from_logprobs(temper(dists.logp, self.temperature, self.top_p))

    def __repr__(self) -> str:
        return f"TemperedLM({self.inner!r}, temperature={self.temperature}, top_p={self.top_p})"


#: tempered views kept per backend, so that runs at the same settings reuse one view (and the
#: vocabulary tables built for it); at most this many per backend, least recently used dropped
VIEWS_PER_LM = 16
_VIEWS: "weakref.WeakKeyDictionary[Any, OrderedDict[tuple[float, float], TemperedLM]]" = weakref.WeakKeyDictionary()


def tempered(lm: LMBackend, temperature: float = defaults.TEMPERATURE, top_p: float = defaults.TOP_P) -> LMBackend:
    """``lm`` itself when T = 1 and P = 1, else its view ``TemperedLM(lm, T, P)`` (one per
    backend and settings, reused). The view refers to ``lm`` weakly (so the cache never keeps
    a backend alive): its caller keeps ``lm`` while it uses the view, as a run does."""
    temperature, top_p = check_sampling(temperature, top_p)
    if temperature == 1.0 and top_p == 1.0:
        return lm
    try:
        views = _VIEWS.setdefault(lm, OrderedDict())
    except TypeError:  # a backend that cannot be weakly referenced: a new view each time
        return TemperedLM(lm, temperature, top_p)
    key = (temperature, top_p)
    view = views.get(key)
    if view is None:
        view = views[key] = TemperedLM(lm, temperature, top_p, weak=True)
        while len(views) > VIEWS_PER_LM:
            views.popitem(last=False)
    views.move_to_end(key)
    return view
