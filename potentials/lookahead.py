"""A proposal twist toward texts that can be completed soon.

For a copy language (``^(.+)\\1+$``, ``^(.*?)(.)\\2\\1$``) every prefix is live, so the constraint's
weights say nothing until the text is complete, and the LM, which rarely writes a text twice,
is left to find a copy by chance. ``Lookahead`` charges each token for the bytes it writes off
a short completion of the text so far:

    y(x)        a short completion of x: bytes with x y accepted (``BytePotential.completion``;
                for a pattern with backreferences, potentials.regex.completion's shortest),
    g(x, a)     = 0                                  if a is a prefix of y(x),
                = -rate * (|a| - d + D_d(x))         else, d = lcp(a, y(x)) (common prefix),
                = -rate * |a|                        where y(x) is not known,
    D_d(x)      = max(0, |y(x y[:d] b)| - (|y| - d)) for one byte b other than y[d]: how much
                  longer the completion gets when the text leaves y after d bytes,
    logw'(x)[a] = logw(x)[a] + g(x, a)  for a token a,   logw'(x)[EOS] = logw(x)[EOS],

so prefix'(x) = prefix(x) + G(x) and complete'(x) = complete(x) + G(x), with the twist
G(x) = sum of g along x, <= 0. A token that writes the next bytes of the completion (the copy)
keeps its weight; one that leaves it pays ``rate`` nats per byte it writes off the completion
plus per byte the completion grows (a copy begun is lost); at a complete text (y empty) every
token pays and EOS does not. Every g <= 0, so the rejection sampler takes the twist by thinning
(samplers.awrs). The cost is a few completion searches per context, not one per token: the
tokens that leave y after d bytes share D_d, and the whole next-token vector is one pass over
the vocabulary in byte order.

The twist must not reach the result: ``ConstrainedGeneration`` divides exp(G(x)) out of every
finished text's weight (drawn EOS, banked EOS and the forced EOS at ``max_tokens``), so the
target stays p(x) exp(complete(x)) and Ẑ unbiased for any y, right or wrong: y only decides
where particles go. A constraint that declares no completion of the empty text (regular
patterns on the automaton, grammars) gets g = 0 everywhere, the run unchanged. A JSONSchema
declares completions, so a rate given with one twists its run.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from smc.core.logmath import NEG_INF
from potentials.base import Potential
from potentials.lift import Lifted
from potentials.vocab import per_lm

#: completions and twists kept (per Lookahead and its last-step twin)
CACHE = 50_000
#: bytes that stand for "any other byte" when measuring a detour (the first that differs from
#: the completion's next byte is used)
_OFF = b"a0 -"


class Lookahead(Potential):
    """``inner`` with the twist g of the module docstring added to every token's weight.

    Args:
        lifted: the lifted constraint whose byte states give y.
        rate: nats per byte written off the completion (> 0).
        inner: the potential whose weights are twisted (default ``lifted``; the last step's
            ``potentials.last_step.LastStep(lifted)``, see ``for_inner``).
    """

    def __init__(self, lifted: Lifted, rate: float, inner: Potential | None = None):
        if not isinstance(lifted, Lifted):
            raise TypeError(f"Lookahead needs a lifted byte-level constraint, got {type(lifted).__name__}")
        if isinstance(rate, bool) or not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            raise ValueError(f"lookahead rate must be a finite number > 0, got {rate!r}")
        self.lifted, self.rate = lifted, float(rate)
        self.inner = lifted if inner is None else inner
        self.size, self.eos_ids = lifted.size, tuple(lifted.eos_ids)
        self._eos = frozenset(self.eos_ids)
        vocab = lifted.vocab
        self._lengths = per_lm(lifted.lm, ("byte-lengths",),
                                lambda: np.array([len(v) for v in vocab], dtype=float))
        # the vocabulary in byte order: the tokens that begin with u are one run of it
        self._order, self._sorted = per_lm(lifted.lm, ("byte-order",), lambda: _byte_order(vocab))
        # byte state -> y, token context -> G: shared with the last-step twin
        self._y: OrderedDict[Any, bytes | None] = OrderedDict()
        self._twists: OrderedDict[tuple[int, ...], float] = OrderedDict()
        # (byte state, d) -> D_d: a rejection sampler asks about one token per call
        self._detours: OrderedDict[tuple[Any, int], float] = OrderedDict()
        self.stats = {"completions": 0}
        # a constraint that knows no completion of the empty text knows none: no twist
        self.active = self._completion(lifted.state(())) is not None

    def for_inner(self, inner: Potential) -> "Lookahead":
        """The same twist (same g, same caches) over another inner potential."""
        twin = Lookahead.__new__(Lookahead)
        twin.__dict__.update(self.__dict__)
        twin.inner = inner
        return twin

    def __repr__(self) -> str:
        return f"Lookahead({self.inner!r}, rate={self.rate})"

    def extend(self, ctx: Any, symbol: int) -> Any:
        return self.inner.extend(ctx, symbol)

    def empty(self) -> Any:
        return self.inner.empty()

    # -- y and g
    def _completion(self, state: Any) -> bytes | None:
        """y for the text of byte state ``state``, remembered by the state."""
        got = self._y.get(state, self)
        if got is self:
            self.stats["completions"] += 1
            got = self._y[state] = self.lifted.potential.completion(state)
            if len(self._y) > CACHE:
                self._y.popitem(last=False)
        return got

    def _detour(self, state: Any, y: bytes, d: int) -> float:
        """D_d(x): how much longer the completion gets when the text leaves y after d bytes,
        max(0, |y(x y[:d] b)| - (|y| - d)), b the first byte of ``_OFF`` other than y[d]
        after which the text lives (0 when there is none, or no completion is known);
        remembered by (state, d), as y is a function of the state."""
        got = self._detours.get((state, d))
        if got is None:
            got = self._detours[state, d] = self._new_detour(state, y, d)
            if len(self._detours) > CACHE:
                self._detours.popitem(last=False)
        return got

    def _new_detour(self, state: Any, y: bytes, d: int) -> float:
        for b in _OFF:
            if y[d:d + 1] != bytes((b,)):
                nxt = self.lifted.potential.advance(state, y[:d] + bytes((b,)))
                if nxt is not None:
                    y2 = self._completion(nxt)
                    return 0.0 if y2 is None else float(max(0, len(y2) - (len(y) - d)))
        return 0.0

    def _context(self, ctx: tuple[int, ...]) -> tuple[Any, bytes | None]:
        state = self.lifted.state(ctx)
        return state, (None if state is None else self._completion(state))

    def _g(self, ctx: tuple[int, ...], tokens: Sequence[int]) -> np.ndarray:
        """g(ctx, a) for each token a (live after ctx, not EOS)."""
        if not self.active:
            return np.zeros(len(tokens))
        state, y = self._context(ctx)
        out = -self.rate * self._lengths[list(tokens)]
        if y is None:
            return out
        vocab = self.lifted.vocab
        for k, a in enumerate(tokens):
            d = _lcp(vocab[a], y)
            if d == len(vocab[a]):
                out[k] = 0.0
            else:
                out[k] += self.rate * (d - self._detour(state, y, d))
        return out

    def _g_all(self, ctx: tuple[int, ...]) -> np.ndarray:
        """g(ctx, a) for every token a, by runs of the byte-sorted vocabulary."""
        if not self.active:
            return np.zeros(self.size)
        state, y = self._context(ctx)
        out = -self.rate * self._lengths
        if y is None:
            return out
        lcp = np.zeros(self.size, dtype=np.int64)
        lo, hi = 0, len(self._sorted)
        for d in range(1, len(y) + 1):  # the tokens that begin with y[:d] share d bytes
            lo = bisect_left(self._sorted, y[:d], lo, hi)
            hi = _run_end(self._sorted, y[:d], lo, hi)
            if lo == hi:
                break
            lcp[self._order[lo:hi]] = d
        along = lcp == self._lengths  # a prefix of y (lcp never exceeds the token)
        detour = np.zeros(len(y) + 1)
        for d in np.unique(lcp[~along]):
            detour[d] = self._detour(state, y, int(d))
        out = out + self.rate * (lcp - detour[lcp])
        out[along] = 0.0
        return out

    def twist(self, ctx: Sequence[int]) -> float:
        """G(ctx) = sum_t g(ctx[:t], ctx[t]) (the sum up to a dead prefix stays as it was)."""
        ctx = tuple(ctx)
        k = len(ctx)
        while k > 0 and ctx[:k] not in self._twists:
            k -= 1
        total = self._twists.get(ctx[:k], 0.0)
        for t in range(k, len(ctx)):
            if self.lifted.state(ctx[:t + 1]) is not None:
                total += float(self._g(ctx[:t], [ctx[t]])[0])
            self._twists[ctx[:t + 1]] = total
            if len(self._twists) > CACHE:
                self._twists.popitem(last=False)
        return total

    # -- the Potential interface
    async def prefix(self, ctx: Any) -> float:
        w = await self.inner.prefix(ctx)
        return w if w == NEG_INF else w + self.twist(ctx)

    async def complete(self, ctx: Any) -> float:
        w = await self.inner.complete(ctx)
        return w if w == NEG_INF else w + self.twist(ctx)

    async def logw_subset(self, ctx: Any, symbols: Sequence[int]) -> np.ndarray:
        out = np.asarray(await self.inner.logw_subset(ctx, symbols), dtype=float).copy()
        live = [k for k, a in enumerate(symbols) if out[k] > NEG_INF and int(a) not in self._eos]
        if live:
            out[live] += self._g(tuple(ctx), [int(symbols[k]) for k in live])
        return out

    async def logw_next(self, ctx: Any) -> np.ndarray:
        out = np.asarray(await self.inner.logw_next(ctx), dtype=float).copy()
        g = self._g_all(tuple(ctx))
        g[list(self.eos_ids)] = 0.0
        return out + g  # -inf stays -inf

    # known_support and mask_would_be_kept stay the defaults (None, False): the twisted weights
    # are not all 0 on the support


def _lcp(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def _run_end(words: list[bytes], u: bytes, lo: int, hi: int) -> int:
    """The end of the run of ``words[lo:hi]`` (sorted, from the first that begins with u) whose
    words begin with u: the first word >= the least byte string above every extension of u."""
    while u and u[-1] == 0xFF:
        u = u[:-1]
    if not u:
        return hi
    return bisect_left(words, u[:-1] + bytes((u[-1] + 1,)), lo, hi)


def _byte_order(vocab: Sequence[bytes]) -> tuple[np.ndarray, list[bytes]]:
    """(token ids sorted by their bytes, those bytes)."""
    order = np.array(sorted(range(len(vocab)), key=lambda i: vocab[i]), dtype=np.int64)
    return order, [vocab[i] for i in order]
