"""Twists (critics) for ``smc.generate(..., critic=...)`` that steer resampling toward
particles able to finish within the token budget.

A critic psi(x) > 0 multiplies a particle's weight for resampling only and is removed before
the next step and at finish (smc.engine), so the target pi and the unbiasedness of Ẑ do not
depend on it: it only moves particles. It helps when psi(x) tracks the chance that x can still
end (EOS) within the tokens it has left, which the per-step weights ignore until the forced EOS at
``max_tokens`` gives weight 0 to an unfinished document.

``BudgetTwist``:

    psi(x) = -rate * m(x) / max(r(x), 1)

    m(x) = the fewest bytes that complete x to a text the constraint accepts (a shortest
           accepted completion, by breadth-first search over the constraint's byte states),
    r(x) = max_tokens - |x|, the tokens x has left before EOS is forced.

It is 0 for a particle that could stop now, small while the budget is ample, and grows as the
budget runs out for particles that still have much to write (inside a runaway string, far from
the last required key), so resampling keeps the ones that will finish.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from potentials.base import NEG_INF
from potentials.lift import Lifted

#: bytes tried when searching for a completion: printable ASCII and the JSON/grammar whitespace
COMPLETION_BYTES = tuple(range(0x20, 0x7F)) + (0x09, 0x0A, 0x0D)


class BudgetTwist:
    """The critic psi(x) = -rate * m(x) / max(r(x), 1) of the module docstring.

    Args:
        rate: nats of twist per byte still to write per token left (>= 0).
        max_nodes: states expanded per completion search; past it the search stops and m(x)
            is the depth reached (a lower bound), so a slow search costs a bounded time.
        cache_size: completion lengths remembered, keyed by the constraint's ``mask_key``.

    Works with ``smc.generate`` (particles of the built-in ConstrainedGeneration program) and a
    byte-level constraint; for other particles, or without a constraint, it returns 0 (no twist).
    """

    def __init__(self, rate: float = 1.0, max_nodes: int = 100, cache_size: int = 4096):
        if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate >= 0):
            raise ValueError(f"rate must be a finite number >= 0, got {rate!r}")
        if not (isinstance(max_nodes, int) and max_nodes >= 1):
            raise ValueError(f"max_nodes must be an integer >= 1, got {max_nodes!r}")
        self.rate, self.max_nodes, self.cache_size = float(rate), max_nodes, cache_size
        self._cache: OrderedDict[Any, int] = OrderedDict()
        self.stats = {"searches": 0, "cache_hits": 0, "nodes": 0}

    async def completion_bytes(self, potential: Any, state: Any) -> int:
        """m: the length of a shortest byte string w over COMPLETION_BYTES with
        potential.state_complete(advance(state, w)) > -inf (the depth reached if the search
        stops at max_nodes first). States with equal ``mask_key`` are expanded once."""
        key = potential.mask_key(state)
        if key is not None and key in self._cache:
            self._cache.move_to_end(key)
            self.stats["cache_hits"] += 1
            return self._cache[key]
        self.stats["searches"] += 1
        frontier, seen, depth, nodes = [state], ({key} if key is not None else set()), 0, 0
        found = None
        while frontier and found is None:
            nxt = []
            for s in frontier:
                nodes += 1
                if await potential.state_complete(s) > NEG_INF:
                    found = depth
                    break
                if nodes >= self.max_nodes:
                    found = depth
                    break
                for b in COMPLETION_BYTES:
                    t = potential.advance(s, bytes((b,)))
                    if t is None:
                        continue
                    k = potential.mask_key(t)
                    if k is not None:
                        if k in seen:
                            continue
                        seen.add(k)
                    nxt.append(t)
            frontier, depth = nxt, depth + 1
        self.stats["nodes"] += nodes
        m = depth if found is None else found
        if key is not None:
            self._cache[key] = m
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return m

    async def __call__(self, particle: Any) -> float:
        sampler = getattr(particle, "sampler", None)
        potential = getattr(sampler, "potential", None)
        if not isinstance(potential, Lifted) or self.rate == 0.0:
            return 0.0
        tokens = tuple(particle.token_ids())
        state = potential.state(tokens)
        if state is None:
            return 0.0
        left = max(int(particle.max_tokens) - len(tokens), 1)
        m = await self.completion_bytes(potential.potential, state)
        return -self.rate * m / left
