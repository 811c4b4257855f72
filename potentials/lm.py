"""LMPotential: a prompted language model as a potential over its token ids.

With prompt u, temperature T and p_T(. | h) = softmax(log p(. | h) / T) (= p^(1/T) renormalized):

    prefix(x)          = sum_t log p_T(x_t | u, x_<t)
    complete(x)        = prefix(x) + log p_T(EOS | u, x)      (EOS: the total over all EOS ids)
    logw_next(x)[a]    = log p_T(a | u, x)                   (one next-token call)

A context holding an EOS token is finished, so it is no prefix: weight -inf. Prefix values are
memoized per context (LRU-bounded), so ``prefix(x a)`` after ``prefix(x)`` costs one LM call,
which the backend's own prefix cache makes cheap.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from smc.core.logmath import NEG_INF, logsumexp
from potentials.base import Potential
from smc.backends.prompts import Prompt, encode_prompt

if TYPE_CHECKING:  # annotations only: potentials need nothing of smc at run time
    from smc.backends.base import LMBackend


class LMPotential(Potential):
    """``lm`` prompted with ``prompt``: u = ``encode_prompt(lm, prompt, chat)``, the same rule
    as ``smc.generate`` (smc.backends.prompts).

    Args:
        lm: a backend (``vocab``, ``eos_token_ids``, ``encode``, ``next_token_logprobs``).
        prompt: text, a list of ``{"role", "content"}`` chat messages, or token ids (used as
            given); its ids u are put before every context.
        chat: for a text prompt, apply the LM's chat template (True) or not (False); None
            (default) applies it when the LM has one.
        temperature: T > 0; the next-token law is p^(1/T), renormalized.
        cache_size: how many contexts' prefix values are kept.
    """

    def __init__(self, lm: LMBackend, prompt: Prompt = "", temperature: float = 1.0,
                 cache_size: int = 20_000, *, chat: bool | None = None):
        try:
            temperature = float(temperature)
        except (TypeError, ValueError):
            raise TypeError(f"temperature must be a number, got {temperature!r}") from None
        if not (temperature > 0 and math.isfinite(temperature)):
            raise ValueError(f"temperature must be positive and finite, got {temperature}")
        self.lm, self.temperature = lm, temperature
        self.prompt = tuple(encode_prompt(lm, prompt, chat))
        self.size = len(lm.vocab)
        self.eos_ids = tuple(int(i) for i in lm.eos_token_ids)
        self._eos = frozenset(self.eos_ids)
        self._cache_size = cache_size
        self._prefix: OrderedDict[tuple[int, ...], float] = OrderedDict()

    def __repr__(self) -> str:
        return f"LMPotential(prompt={len(self.prompt)} tokens, temperature={self.temperature})"

    def _tempered(self, logp: torch.Tensor) -> np.ndarray:
        """log p_T over the vocabulary, EOS ids carrying the total EOS mass."""
        out = logp.detach().to(torch.float64).cpu()
        if self.temperature != 1.0:
            out = torch.log_softmax(out / self.temperature, dim=-1)
        out = out.numpy().copy()
        if len(self.eos_ids) > 1:
            out[list(self.eos_ids)] = logsumexp(out[list(self.eos_ids)])
        return out

    async def _next(self, ctx: tuple[int, ...]) -> np.ndarray:
        return self._tempered(await self.lm.next_token_logprobs(self.prompt + ctx))

    def _remember(self, ctx: tuple[int, ...], value: float) -> float:
        self._prefix[ctx] = value
        if len(self._prefix) > self._cache_size:
            self._prefix.popitem(last=False)
        return value

    async def prefix(self, ctx: Sequence[int]) -> float:
        ctx = tuple(int(t) for t in ctx)
        got = self._prefix.get(ctx)
        if got is not None:
            self._prefix.move_to_end(ctx)
            return got
        if not ctx:
            return self._remember(ctx, 0.0)
        if ctx[-1] in self._eos:
            return self._remember(ctx, NEG_INF)
        # the longest remembered prefix, then one call per token after it
        k = len(ctx) - 1
        while k > 0 and ctx[:k] not in self._prefix:
            k -= 1
        total = self._prefix.get(ctx[:k], 0.0)
        for j in range(k, len(ctx)):
            if total == NEG_INF or ctx[j] in self._eos:
                total = NEG_INF
            else:
                total += float((await self._next(ctx[:j]))[ctx[j]])
            self._remember(ctx[: j + 1], total)
        return total

    async def complete(self, ctx: Sequence[int]) -> float:
        ctx = tuple(int(t) for t in ctx)
        base = await self.prefix(ctx)
        if base == NEG_INF:
            return NEG_INF
        if not self.eos_ids:
            return NEG_INF
        return base + float((await self._next(ctx))[self.eos_ids[0]])

    async def logw_next(self, ctx: Sequence[int]) -> np.ndarray:
        ctx = tuple(int(t) for t in ctx)
        if await self.prefix(ctx) == NEG_INF:
            return np.full(self.size, NEG_INF)
        return await self._next(ctx)

    async def logw_subset(self, ctx: Sequence[int], symbols: Sequence[int]) -> np.ndarray:
        return (await self.logw_next(ctx))[np.asarray(symbols, dtype=int)]

    async def batch_logw_next(self, ctxs: Sequence[Sequence[int]]) -> np.ndarray:
        """One batched LM call for all live contexts."""
        ctxs = [tuple(int(t) for t in c) for c in ctxs]
        out = np.full((len(ctxs), self.size), NEG_INF)
        live = [i for i, c in enumerate(ctxs) if await self.prefix(c) > NEG_INF]
        if live:
            rows = await self.lm.batch_next_token_logprobs([self.prompt + ctxs[i] for i in live])
            for i, row in zip(live, rows):
                out[i] = self._tempered(row)
        return out
