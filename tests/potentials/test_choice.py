"""Choice: one of a list of strings, as a byte trie; the shipped contract and the oracle
(membership in the list, and being a prefix of a member) on every short string."""

import asyncio
import itertools

import pytest

from potentials.choice import Choice
from potentials.testing import CompleteKeyContract, MaskKeyContract
from smc.core.errors import InvalidArgument, InvalidArgumentType
from smc.core.logmath import NEG_INF

OPTIONS = ["yes", "no", "a.b", "ye", "日本", ""]


class TestChoiceContract(MaskKeyContract, CompleteKeyContract):
    def potential(self):
        return Choice(OPTIONS)

    def contexts(self):
        return [b"", b"y", b"ye", b"yes", b"yes!", b"n", b"no", b"a.", b"a.b", b"x",
                "日".encode(), "日本".encode()[:4], "日本".encode()]


def test_agrees_with_membership_on_every_short_string():
    pot = Choice(OPTIONS)
    data = [o.encode() for o in OPTIONS]
    alphabet = sorted(set(b"".join(data)) | {ord("z")})

    async def go():
        for n in range(4):
            for t in itertools.product(alphabet, repeat=n):
                x = bytes(t)
                assert (await pot.complete(x) == 0.0) == (x in data), x
                assert (await pot.prefix(x) == 0.0) == any(d.startswith(x) for d in data), x

    asyncio.run(go())


def test_regex_metacharacters_are_plain_text():
    pot = Choice(["a.b", "(x|y)*"])
    assert asyncio.run(pot.complete(b"axb")) == NEG_INF
    assert asyncio.run(pot.complete(b"(x|y)*")) == 0.0


@pytest.mark.parametrize("bad, err", [([], InvalidArgument), ("ab", InvalidArgumentType),
                                      (["a", 1], InvalidArgumentType), (["\ud800"], InvalidArgument)])
def test_bad_options(bad, err):
    with pytest.raises(err):
        Choice(bad)
