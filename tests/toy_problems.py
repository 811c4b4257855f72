"""Small exact problems shared by the sampler, engine and generate tests.

Everything here is tiny on purpose: answers are computed by enumeration, and runs are cheap
enough to repeat thousands of times.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Sequence

import numpy as np
import torch

from smc.core.logmath import NEG_INF
from potentials.base import Potential
from smc.backends.toy import ToyLM


class FastToyLM(ToyLM):
    """ToyLM that memoizes each context's log-probs (the tests call the same contexts often)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cache: dict[tuple[int, ...], torch.Tensor] = {}

    async def _next_token_logprobs(self, ids: tuple[int, ...]) -> torch.Tensor:
        self.stats["requests"] += 1
        self.stats["forward_passes"] += 1
        if ids not in self._cache:
            p = torch.tensor(self.probs(ids), dtype=torch.float64)
            self._cache[ids] = torch.log(p / p.sum())
        return self._cache[ids]


class TokenPredicate(Potential):
    """Boolean token-level potential: prefix(x) = 0 iff viable(x); complete(x) = 0 iff also done(x)."""

    def __init__(
        self,
        size: int,
        eos_ids: Sequence[int],
        viable: Callable[[tuple[int, ...]], bool],
        done: Callable[[tuple[int, ...]], bool] = lambda x: True,
    ):
        self.size = size
        self.eos_ids = tuple(eos_ids)
        self._viable, self._done = viable, done

    async def prefix(self, ctx) -> float:
        return 0.0 if self._viable(tuple(ctx)) else NEG_INF

    async def complete(self, ctx) -> float:
        ctx = tuple(ctx)
        return 0.0 if self._viable(ctx) and self._done(ctx) else NEG_INF


class TokenSoft(Potential):
    """Weighted token-level potential: prefix(x) = score(x) (any finite value or -inf)."""

    boolean = False

    def __init__(self, size: int, eos_ids: Sequence[int], score, final):
        self.size, self.eos_ids = size, tuple(eos_ids)
        self._score, self._final = score, final

    async def prefix(self, ctx) -> float:
        return float(self._score(tuple(ctx)))

    async def complete(self, ctx) -> float:
        return float(self._final(tuple(ctx)))


def enumerate_paths(run, wrap=None):
    """Call ``run(draw)`` once per random path; return [(probability, result)] over all paths.

    ``draw(probs)`` picks an index; on the first visit of a branch point the other positive
    entries are queued, so every path of positive probability is visited exactly once.
    ``run`` is synchronous here (wrap coroutines with asyncio.run in the caller). With ``wrap``,
    ``run`` gets ``wrap(draw)`` instead: a draw object with further branch points of its own.
    """
    out = []
    stack: list[list[int]] = [[]]
    while stack:
        forced = stack.pop()
        chosen: list[int] = []
        prob = [1.0]

        def draw(probs: np.ndarray) -> int:
            support = np.flatnonzero(np.asarray(probs) > 0)
            d = len(chosen)
            if d < len(forced):
                i = forced[d]
            else:
                for j in support[1:]:
                    stack.append(chosen + [int(j)])
                i = int(support[0])
            chosen.append(i)
            prob[0] *= float(probs[i])
            return i

        result = run(draw if wrap is None else wrap(draw))
        out.append((prob[0], result))
    return out


def strings(vocab_size: int, eos: int, max_len: int):
    """All token tuples without EOS of length <= max_len."""
    symbols = [a for a in range(vocab_size) if a != eos]
    for n in range(max_len + 1):
        yield from itertools.product(symbols, repeat=n)


def viable_strings(vocab_size: int, eos: int, max_len: int, phi_prefix: Callable[[tuple[int, ...]], float]):
    """The token tuples of ``strings`` whose every prefix has phi_prefix > -inf (a potential's
    prefix weight is 0 on every extension of a prefix where it is 0, so no others can count)."""
    symbols = [a for a in range(vocab_size) if a != eos]
    stack = [()] if phi_prefix(()) > NEG_INF else []
    while stack:
        x = stack.pop()
        yield x
        if len(x) < max_len:
            stack.extend(y for y in (x + (a,) for a in symbols) if phi_prefix(y) > NEG_INF)


def exact_target(lm: ToyLM, phi_complete: Callable[[tuple[int, ...]], float], max_len: int,
                 phi_prefix: Callable[[tuple[int, ...]], float] | None = None):
    """{x: p(x, EOS) * phi(x)} over |x| <= max_len, with EOS forced at max_len (design.md);
    with ``phi_prefix``, only over the strings whose prefixes it allows."""
    eos = lm.eos_token_ids[0]
    out = {}
    xs = strings(len(lm.vocab), eos, max_len) if phi_prefix is None else \
        viable_strings(len(lm.vocab), eos, max_len, phi_prefix)
    for x in xs:
        logp = 0.0
        for k in range(len(x)):
            logp += math.log(lm.probs(x[:k])[x[k]]) if lm.probs(x[:k])[x[k]] > 0 else NEG_INF
        pe = lm.probs(x)[eos]
        logp += math.log(pe) if pe > 0 else NEG_INF
        w = math.exp(logp + phi_complete(x)) if logp > NEG_INF else 0.0
        if w > 0:
            out[x] = w
    return out
