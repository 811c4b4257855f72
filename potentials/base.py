"""The public face of the Potential contract: the classes to subclass and their operators.

The contract itself (the three queries, their identities, the byte-level state machine and its
optional hooks) is stated in potentials.contract. Here it gains what needs more than the
contract: ``BytePotential.lift`` (lifting, potentials.lift, is built on the contract, so the
operator that calls it sits above both) and the product of two byte potentials, whose state is
the pair of their states, so the product lifts with the same per-token cost as its factors:

    prefix_{a*b}(x) = prefix_a(x) + prefix_b(x)      complete_{a*b}(x) = complete_a(x) + complete_b(x)

A token-level product (``Product``) needs factors that agree on the vocabulary (``size``) and
the EOS positions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Collection, Hashable, TypeVar


from smc.core.logmath import NEG_INF
from potentials.contract import ByteContract, Context, Potential, Product
from potentials.lift import Lifted

if TYPE_CHECKING:  # annotations only: potentials need nothing of smc at run time
    from smc.backends.base import LMBackend

__all__ = ["NEG_INF", "BytePotential", "ByteProduct", "Context", "Potential", "Product", "product"]

S = TypeVar("S")


class BytePotential(ByteContract[S]):
    """A potential over UTF-8 bytes driven by an incremental state: the contract of
    ``potentials.contract.ByteContract`` (required members and optional hooks, ``HOOKS``),
    with the operators ``lift`` and ``*``. Subclass this one."""

    def lift(self, lm: LMBackend) -> Potential:
        """This potential over ``lm``'s token vocabulary (see potentials.lift)."""
        return Lifted(self, lm)

    def __mul__(self, other: Potential) -> Potential:
        return product(self, other)


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
