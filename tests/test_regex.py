"""Regex potential: the contract, agreement with regex.fullmatch, fallback mode, bad input."""

from __future__ import annotations

import itertools
import re

import pytest
import regex
from potential_contract import MaskKeyContract, PotentialContract

from potentials.base import NEG_INF
from potentials.fsm import InvalidRegex
from potentials.regex import Regex


class TestRegexContract(MaskKeyContract):
    def potential(self):
        return Regex(r"[0-9]{2}(-é)?|ab\b")

    def contexts(self):
        return [b"", b"1", b"12", b"12-", b"12-\xc3", b"12-\xc3\xa9", b"123", b"a", b"ab",
                b"\xff", b"\xc3", b"\x00", b"7", b"34"]


class TestRegexFallbackContract(PotentialContract):
    def potential(self):
        return Regex(r"(a+)b\1|x(?!y)")

    def contexts(self):
        return [b"", b"a", b"aab", b"aaba", b"aabaa", b"x", b"xy", b"\xc3", b"\xe2\x82"]


async def test_agrees_with_regex_fullmatch_exhaustively():
    for pattern, alphabet in [(r"a{3}b", "ab"), (r"(?i)[a-c]+é?", "aBé€"), (r"\d+\.?\d*", "1.a")]:
        pot = Regex(pattern)
        assert pot.exact
        for n in range(5):
            for chars in itertools.product(alphabet, repeat=n):
                text = "".join(chars)
                want = 0.0 if regex.fullmatch(pattern, text) else NEG_INF
                assert await pot.complete(text.encode()) == want, (pattern, text)
                if want == 0.0:
                    data = text.encode()
                    for i in range(len(data) + 1):
                        assert await pot.prefix(data[:i]) == 0.0


async def test_exact_dead_ends():
    pot = Regex(r"a{3}b")
    assert await pot.prefix(b"aaa") == 0.0
    assert await pot.prefix(b"aaaa") == NEG_INF
    logw = await pot.logw_next(b"aaa")
    assert [b for b in range(256) if logw[b] == 0.0] == [ord("b")]
    assert logw[256] == NEG_INF


async def test_fallback_for_lookarounds_and_backreferences():
    pot = Regex(r"(a+)b\1")
    assert not pot.exact and "backreference" in pot.fallback_reason
    assert await pot.complete(b"aabaa") == 0.0
    assert await pot.complete(b"aaba") == NEG_INF
    assert await pot.prefix(b"aaba") == 0.0
    assert await pot.prefix(b"aabaaa") == NEG_INF
    look = Regex(r"\w+(?<!x)")
    assert await look.complete(b"abx") == NEG_INF and await look.complete(b"ab") == 0.0
    for pot, alphabet in [(Regex(r"(a|b)+\1"), "ab"), (Regex(r"a(?=b)\w+"), "abc")]:
        for n in range(6):
            for chars in itertools.product(alphabet, repeat=n):
                text = "".join(chars)
                want = regex.fullmatch(pot.pattern, text) is not None
                assert (await pot.complete(text.encode()) == 0.0) == want
                if want:  # completion exact, and a match's prefixes are all kept
                    for i in range(len(text) + 1):
                        assert await pot.prefix(text[:i].encode()) == 0.0


def test_bad_patterns_name_the_problem():
    with pytest.raises(InvalidRegex, match="at position"):
        Regex(r"(ab")
    with pytest.raises(ValueError, match="unterminated character set"):
        Regex("[]")
    with pytest.raises(InvalidRegex, match="min repeat greater than max repeat"):
        Regex(r"a{2,1}")
    assert not Regex(r"(?<=a+)b").exact  # variable lookbehind: valid for `regex`, so fallback


async def test_empty_language():
    for pattern in [r"[^\s\S]", r"a\Zb"]:
        pot = Regex(pattern)
        assert pot.is_empty
        assert await pot.prefix(b"") == NEG_INF
    assert not Regex(r"").is_empty
    assert Regex(r"(?!)").is_empty  # fallback mode detects an impossible start too


async def test_odd_contexts_are_dead_not_errors():
    pot = Regex(r"(?s).*")
    for bad in [b"\xff", b"a\x80b", b"\xed\xa0\x80", b"\xc0\xaf"]:
        assert await pot.prefix(bad) == NEG_INF
        assert await pot.complete(bad) == NEG_INF
    assert await pot.complete(b"\x00\x1b\n") == 0.0
    assert await Regex(r"a(?=b)b").prefix(b"\xff") == NEG_INF


async def test_partial_character_judged_by_its_completions():
    pot = Regex(r"é|€")
    assert await pot.prefix(b"\xc3") == 0.0     # é = c3 a9
    assert await pot.prefix(b"\xc3\xa8") == NEG_INF
    assert await pot.prefix(b"\xe2\x82") == 0.0  # € = e2 82 ac
    assert await pot.complete(b"\xc3") == NEG_INF
    assert await pot.prefix(b"\xc4") == NEG_INF


def test_flags_are_used():
    assert Regex(r"abc", re.IGNORECASE).dfa.fullmatch(b"AbC")
    assert not Regex(r"abc").dfa.fullmatch(b"AbC")
