"""The next-token weights of a potential for a step after which EOS is forced.

``smc.generate`` forces EOS after ``max_tokens`` tokens, and the forced EOS scores
exp(complete(x) - prefix(x)), which is 0 unless x is a finished text. So at the last sampled
step (T - 1 tokens so far, T = max_tokens) a token a, not EOS, after which x a cannot finish only
makes a particle of weight 0. ``LastStep(phi)`` drops those tokens from the step's target:

    logw_next'(x)[a] = logw_next(x)[a]   if complete(x a) > -inf     (a not EOS)
                       -inf              otherwise
    logw_next'(x)[e] = logw_next(x)[e]                                (e an EOS id)

Why this is exact. SMC's intermediate target after T tokens becomes
gamma'_T(x) = p(x) exp(prefix(x)) 1{complete(x) > -inf} instead of p(x) exp(prefix(x)); the
final target p(x) p(EOS | x) exp(complete(x)) is 0 wherever the indicator is, so the forced
EOS's incremental weight p(EOS | x) exp(complete(x) - prefix(x)) is unchanged and the sampler
stays properly weighted for the same posterior pi, with an unbiased Ẑ. What changes is that the
last step spends its particles only on texts that finish, instead of on prefixes that the forced
EOS would kill (particles still writing a value at 32 tokens).

Works for any token-level potential. Lifted byte potentials take the fast path of
``Lifted.last_step_mask``: one trie walk per ``complete_key`` (a DFA state), or only the tokens that
end in one of the potential's ``final_bytes`` (for JSON: ``}`` and whitespace under an object
root), so the step costs O(V) in Python only for potentials that declare neither. Only the one
step uses it; it is not a potential over whole sequences.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from smc.core.logmath import NEG_INF
from potentials.base import Potential
from potentials.lift import Lifted
from potentials.lookahead import Lookahead

#: next-token rows and supports kept per LastStep potential (a few particles' last steps)
ROW_CACHE = 64


class LastStep(Potential):
    """``inner`` restricted, for one step, to tokens after which the text can finish (above).

    Args:
        inner: a token-level potential (e.g. a lifted Regex, Grammar or JSONSchema).
    """

    def __init__(self, inner: Potential):
        if not isinstance(inner, Potential):
            raise TypeError(f"LastStep needs a Potential, got {type(inner).__name__}")
        self.inner = inner
        self.size = inner.size
        self.eos_ids = tuple(inner.eos_ids)
        self._eos = frozenset(self.eos_ids)
        # ctx -> logw_next(ctx): particles that resampling duplicated ask about the same ctx
        self._rows: OrderedDict[Any, np.ndarray] = OrderedDict()
        self._supports: OrderedDict[Any, np.ndarray] = OrderedDict()

    def __repr__(self) -> str:
        return f"LastStep({self.inner!r})"

    def extend(self, ctx: Any, symbol: int) -> Any:
        return self.inner.extend(ctx, symbol)

    def empty(self) -> Any:
        return self.inner.empty()

    async def prefix(self, ctx: Any) -> float:
        return await self.inner.prefix(ctx)

    async def complete(self, ctx: Any) -> float:
        return await self.inner.complete(ctx)

    async def logw_subset(self, ctx: Any, symbols: Sequence[int]) -> np.ndarray:
        out = np.asarray(await self.inner.logw_subset(ctx, symbols), dtype=float).copy()
        for k, a in enumerate(symbols):
            if out[k] > NEG_INF and int(a) not in self._eos and not await self._finishes(ctx, int(a)):
                out[k] = NEG_INF
        return out

    async def known_support(self, ctx: Any) -> np.ndarray | None:
        """For a Boolean lifted inner potential, the tokens that finish the text and EOS where
        it may end (all of weight 0), when ``Lifted.last_step_mask`` knows them cheaply (a cached
        ``complete_key``, or few candidate tokens to ask): the samplers' exact step then
        replaces the rejection loop at the last step. Else None."""
        inner = self.inner
        if not isinstance(inner, Lifted) or not inner.potential.boolean:
            return None
        key = tuple(ctx)
        got = self._supports.get(key)
        if got is None:
            keep = await inner.last_step_mask(ctx, cheap=True)
            if keep is None:
                return None
            if await inner.complete(ctx) > NEG_INF:
                keep = np.union1d(keep, self.eos_ids)
            got = self._supports[key] = keep
            if len(self._supports) > ROW_CACHE:
                self._supports.popitem(last=False)
        return got

    def cache_contexts(self) -> list[tuple[Any, np.ndarray]]:
        """The supports ``known_support`` keeps, oldest first: (context, tokens). The inner
        potential's caches are its own (a sampler stores them through its potential)."""
        return list(self._supports.items())

    async def restore_caches(self, saved: list[tuple[Any, np.ndarray]]) -> None:
        self._supports = OrderedDict(saved)

    async def logw_next(self, ctx: Any) -> np.ndarray:
        # completion first: complete(x a) > -inf implies prefix(x a) > -inf (the contract), so
        # the inner weights are needed only for the few tokens that finish, never the inner's
        # whole next-token vector (seconds for a regex on the `regex` fallback)
        key = tuple(ctx)
        got = self._rows.get(key)
        if got is not None:
            return got.copy()
        out = np.full(self.size, NEG_INF)
        inner = self.inner
        if isinstance(inner, Lifted):
            # the ending tokens from the byte state (Lifted.last_step_mask: per complete_key, or
            # only the tokens ending in a final byte); a Boolean potential weighs each 0
            keep = await inner.last_step_mask(ctx)
            if len(keep):
                out[keep] = 0.0 if inner.potential.boolean else await inner.logw_subset(ctx, keep)
            out[list(self.eos_ids)] = await inner.logw_subset(ctx, list(self.eos_ids))
        elif await inner.prefix(ctx) > NEG_INF:
            keep = [a for a in range(self.size) if a in self._eos or await self._finishes(ctx, a)]
            if keep:
                out[keep] = await inner.logw_subset(ctx, keep)
        self._rows[key] = out.copy()
        if len(self._rows) > ROW_CACHE:
            self._rows.popitem(last=False)
        return out

    async def _finishes(self, ctx: Any, a: int) -> bool:
        """complete(ctx a) > -inf (a not EOS)."""
        inner = self.inner
        if isinstance(inner, Lifted):
            # from the byte state of ctx, without caching the state of every token tried
            if not inner.is_text(a):
                return False
            state = inner.state(ctx)
            return state is not None and await inner.potential.complete_after(
                state, inner.vocab[a]) > NEG_INF
        return await inner.complete(inner.extend(ctx, a)) > NEG_INF


def last_step(potential: Potential) -> Potential:
    """The potential of the step after which EOS is forced: ``LastStep(potential)``, and for a
    ``Lookahead`` the same twist over ``LastStep`` of its inner potential (the twist's g is one
    function of (x, a) at every step, as the program's untwisting assumes)."""
    if isinstance(potential, Lookahead):
        return potential.for_inner(LastStep(potential.inner))
    return LastStep(potential)
