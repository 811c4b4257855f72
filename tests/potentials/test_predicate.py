"""Predicate: user checks over text as a Boolean potential."""

from __future__ import annotations

import asyncio

import pytest
from potentials.testing import PotentialContract

from smc.core.logmath import NEG_INF
from potentials.predicate import Predicate


def no_x(text: str) -> bool:
    return "x" not in text


def even_len(text: str) -> bool:
    return len(text) % 2 == 0


async def async_no_x(text: str) -> bool:
    await asyncio.sleep(0)
    return "x" not in text


CONTEXTS = [b"", b"a", b"ab", b"ax", b"x", b"\xc3", b"a\xc3", b"\xc3\xa9", b"\xc3x", b"\xff",
            b"a\xe2\x82", b"\x00\x01"]


class TestPredicateContract(PotentialContract):
    def potential(self):
        return Predicate(complete=even_len, prefix=no_x)

    def contexts(self):
        return CONTEXTS


class TestAsyncPredicateContract(PotentialContract):
    def potential(self):
        return Predicate(complete=even_len, prefix=async_no_x)

    def contexts(self):
        return CONTEXTS


class TestCompleteOnlyContract(PotentialContract):
    def potential(self):
        return Predicate(complete=lambda t: t.isupper())

    def contexts(self):
        return [b"", b"A", b"a", b"\xc3", b"\xc3\x89"]


@pytest.mark.parametrize("prefix", [no_x, async_no_x])
async def test_values(prefix):
    pot = Predicate(complete=even_len, prefix=prefix)
    assert await pot.prefix(b"ab") == 0.0 and await pot.complete(b"ab") == 0.0
    assert await pot.complete(b"abc") == NEG_INF
    assert await pot.prefix(b"abx") == NEG_INF and await pot.complete(b"ax") == NEG_INF
    # an incomplete last character: prefix judged on "a", never complete
    assert await pot.prefix(b"a\xc3") == 0.0
    assert await pot.complete(b"a\xc3") == NEG_INF
    assert await pot.complete("aé".encode()) == 0.0
    assert await pot.prefix(b"a\xff") == NEG_INF and await pot.complete(b"\xff\xfe") == NEG_INF
    assert pot.boolean == (prefix is no_x)


async def test_async_complete_and_lifting():
    from smc.backends.toy import ToyLM

    async def is_abab(text):
        return text == "abab"

    pot = Predicate(complete=is_abab, prefix=async_no_x)
    lm = ToyLM(["a", "b", "x", "ab", "<e>"], "<e>", lambda ids: [0.2] * 5)
    lifted = pot.lift(lm)
    logw = await lifted.logw_next((0,))
    assert list(logw) == [0.0, 0.0, NEG_INF, 0.0, NEG_INF]
    assert await lifted.complete((3, 3)) == 0.0 and await lifted.complete((3, 0)) == NEG_INF


async def test_user_exceptions_propagate():
    def boom(text):
        raise KeyError("from the user")

    with pytest.raises(KeyError, match="from the user"):
        await Predicate(complete=boom).complete(b"a")
    with pytest.raises(KeyError, match="from the user"):
        await Predicate(complete=even_len, prefix=boom).prefix(b"a")


async def test_bad_arguments():
    with pytest.raises(TypeError, match="callable"):
        Predicate(complete="not a function")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable or None"):
        Predicate(complete=even_len, prefix=3)  # type: ignore[arg-type]

    def sneaky(text):
        return async_no_x(text)

    with pytest.raises(TypeError, match="async def"):
        await Predicate(complete=even_len, prefix=sneaky).prefix(b"a")
