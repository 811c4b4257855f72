"""Products of potentials: log weights add.

    prefix_{a*b}(x) = prefix_a(x) + prefix_b(x)      complete_{a*b}(x) = complete_a(x) + complete_b(x)

so logw_next adds too. (For weighted factors ``prefix`` is the sum of the factors' prefix
weights, the usual SMC twist, not the log of the product's own sum over completions.) Two byte
potentials make a byte potential whose state is the pair of states, so the product lifts to a
token vocabulary with the same per-token cost as its factors. Token-level factors must agree on
the vocabulary (``size``) and the EOS positions.
"""

from __future__ import annotations

from typing import Any, Collection, Hashable, Sequence

import numpy as np

from smc.core.logmath import NEG_INF
from potentials.base import BytePotential, Potential


def product(a: Potential, b: Potential) -> Potential:
    """``a * b``: a ByteProduct for two byte potentials, else a (token-level) Product."""
    for p in (a, b):
        if not isinstance(p, Potential):
            raise TypeError(f"cannot multiply a potential by {type(p).__name__}")
    if isinstance(a, BytePotential) and isinstance(b, BytePotential):
        return ByteProduct(a, b)
    return Product(a, b)


class ByteProduct(BytePotential):
    """Product of two byte potentials; the state is (state of a, state of b)."""

    def __init__(self, a: BytePotential, b: BytePotential):
        self.a, self.b = a, b
        self.boolean = a.boolean and b.boolean

    def __repr__(self) -> str:
        return f"({self.a!r} * {self.b!r})"

    def factors(self) -> tuple[Potential, ...]:
        return self.a.factors() + self.b.factors()

    def initial(self) -> tuple[Any, Any]:
        return (self.a.initial(), self.b.initial())

    def advance(self, state: tuple[Any, Any], data: bytes) -> tuple[Any, Any] | None:
        sa = self.a.advance(state[0], data)
        if sa is None:
            return None
        sb = self.b.advance(state[1], data)
        return None if sb is None else (sa, sb)

    def mask_key(self, state: tuple[Any, Any]) -> Hashable | None:
        ka = self.a.mask_key(state[0])
        kb = None if ka is None else self.b.mask_key(state[1])
        return None if kb is None else (ka, kb)

    def completion_key(self, state: tuple[Any, Any]) -> Hashable | None:
        ka = self.a.completion_key(state[0])
        kb = None if ka is None else self.b.completion_key(state[1])
        return None if kb is None else (ka, kb)

    def complete_key(self, state: tuple[Any, Any]) -> Hashable | None:
        ka = self.a.complete_key(state[0])
        kb = None if ka is None else self.b.complete_key(state[1])
        return None if kb is None else (ka, kb)

    def final_bytes(self) -> bytes | None:
        fa, fb = self.a.final_bytes(), self.b.final_bytes()
        if fa is None or fb is None:
            return fb if fa is None else fa
        return bytes(sorted(set(fa) & set(fb)))

    def next_bytes(self, state: tuple[Any, Any]) -> Collection[int] | None:
        na, nb = self.a.next_bytes(state[0]), self.b.next_bytes(state[1])
        if na is None or nb is None:
            return nb if na is None else na
        return frozenset(na) & frozenset(nb)

    def plain_text_budget(self, state: tuple[Any, Any]) -> float | None:
        ba = self.a.plain_text_budget(state[0])
        bb = None if ba is None else self.b.plain_text_budget(state[1])
        return None if bb is None else min(ba, bb)

    async def state_prefix(self, state: tuple[Any, Any]) -> float:
        wa = await self.a.state_prefix(state[0])
        return NEG_INF if wa == NEG_INF else wa + await self.b.state_prefix(state[1])

    async def state_complete(self, state: tuple[Any, Any]) -> float:
        wa = await self.a.state_complete(state[0])
        return NEG_INF if wa == NEG_INF else wa + await self.b.state_complete(state[1])


class Product(Potential):
    """Product of two potentials over the same vocabulary (same ``size`` and ``eos_ids``)."""

    def __init__(self, a: Potential, b: Potential):
        if a.size != b.size or tuple(a.eos_ids) != tuple(b.eos_ids):
            hint = ""
            if isinstance(a, BytePotential) != isinstance(b, BytePotential):
                hint = "; lift the byte-level one to the LM's tokens first: potential.lift(lm)"
            raise ValueError(
                f"cannot multiply {a!r} (size {a.size}, EOS {tuple(a.eos_ids)}) by {b!r} "
                f"(size {b.size}, EOS {tuple(b.eos_ids)}): they are over different vocabularies"
                + hint)
        self.a, self.b = a, b
        self.size, self.eos_ids = a.size, tuple(a.eos_ids)

    def __repr__(self) -> str:
        return f"({self.a!r} * {self.b!r})"

    def factors(self) -> tuple[Potential, ...]:
        return self.a.factors() + self.b.factors()

    def extend(self, ctx: Any, symbol: int) -> Any:
        return self.a.extend(ctx, symbol)

    def empty(self) -> Any:
        return self.a.empty()

    async def prefix(self, ctx: Any) -> float:
        wa = await self.a.prefix(ctx)
        return NEG_INF if wa == NEG_INF else wa + await self.b.prefix(ctx)

    async def complete(self, ctx: Any) -> float:
        wa = await self.a.complete(ctx)
        return NEG_INF if wa == NEG_INF else wa + await self.b.complete(ctx)

    async def logw_next(self, ctx: Any) -> np.ndarray:
        wa = await self.a.logw_next(ctx)
        if np.all(wa == NEG_INF):
            return wa
        return wa + await self.b.logw_next(ctx)

    async def logw_subset(self, ctx: Any, symbols: Sequence[int]) -> np.ndarray:
        wa = await self.a.logw_subset(ctx, symbols)
        live = np.flatnonzero(wa > NEG_INF)
        if len(live):  # b is asked only about the symbols a keeps
            wa[live] += await self.b.logw_subset(ctx, [symbols[i] for i in live])
        return wa
