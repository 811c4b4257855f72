"""Regex potential: the contract, agreement with regex.fullmatch, fallback mode, bad input."""

from __future__ import annotations

import itertools
import re

import pytest
import regex
from potentials.testing import CompleteKeyContract, MaskKeyContract, PlainTextKeyContract, PotentialContract

from smc.core.logmath import NEG_INF
from potentials.regex.automaton import InvalidRegex
from potentials.regex import Regex


class TestRegexContract(MaskKeyContract, CompleteKeyContract, PlainTextKeyContract):
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


# ---------------------------------------------------------------- fallback soundness


async def test_full_match_is_not_extended_by_a_partial_character():
    # regex's partial match ignored the incomplete tail: every particle of (?>a{2,5})bc (now on
    # the automaton) walked into "aaaabc\xe2"; this atomic group stays on the fallback
    pot = Regex(r"(?>aa|a)a{0,3}bc")
    assert not pot.exact
    assert await pot.prefix(b"aaaabc") == 0.0
    assert await pot.complete(b"aaaabc") == 0.0
    for tail in [b"\xc3", b"\xe2", b"\xe2\x82", b"\xf0", b"\xf0\x9f", b"\xf0\x9f\x98", b"\xf4"]:
        assert await pot.prefix(b"aaaabc" + tail) == NEG_INF, tail
        assert await pot.prefix(b"aa" + tail) == NEG_INF, tail
    logw = await pot.logw_next(b"aaaabc")
    assert [b for b in range(256) if logw[b] == 0.0] == [] and logw[256] == 0.0


async def test_partial_character_kept_iff_some_character_continues():
    pot = Regex(r"(?>x)\p{So}|(a)\1é")  # \p{So}: emoji and other symbols
    assert not pot.exact
    assert await pot.prefix(b"x\xf0") == 0.0             # U+1F600 is So
    assert await pot.prefix(b"x\xf0\x9f\x98") == 0.0
    assert await pot.complete("x😀".encode()) == 0.0
    assert await pot.prefix(b"x\xc3") == NEG_INF         # no So among U+00C0..U+00FF
    assert await pot.prefix(b"x\xc2") == 0.0             # U+00A9 (c) is So
    assert await pot.prefix(b"aa\xc3") == 0.0            # é = c3 a9
    assert await pot.prefix(b"aa\xc3\xa8") == NEG_INF
    assert await pot.prefix(b"aa\xc4") == NEG_INF


def _brute(rx, done: str, lo: int, hi: int) -> bool:
    return any(rx.fullmatch(done + chr(c), partial=True) is not None for c in range(lo, hi + 1)
               if not 0xD800 <= c <= 0xDFFF)


@pytest.mark.parametrize("pattern,texts", [
    (r"(\w)\1", ["", "é", "a", "ß"]),
    (r"(?i)(.)\1x", ["", "Σ", "σ", "É"]),
    (r"[\p{L}&&[^\p{Lu}]]+(?<!x)", ["", "a", "ab"]),
    (r"(?V1)[\p{L}--\p{Ll}]\d+(?=.)", ["", "Ä", "Ä1"]),
    (r"(?>é|éß|ß)[\u0100-\u017f]", ["", "é", "ß"]),
    (r"(\d)(?!\1)\d", ["", "5", "٣"]),
])
async def test_partial_character_verdicts_match_brute_force(pattern, texts):
    # the class representatives (potentials.regex.chars) decide exactly what trying every
    # character of the range decides
    pot = Regex(pattern)
    assert not pot.exact
    from potentials.text import utf8_range

    tails = [bytes([b]) for b in range(0xC2, 0xE0)] + [b"\xe2", b"\xe1", b"\xd7"]
    tails += [bytes([0xE0 | (c >> 12), 0x80 | ((c >> 6) & 0x3F)]) for c in (0x100, 0x391, 0x660)]
    for done in texts:
        for tail in tails:
            span = utf8_range(tuple(tail))
            if span is None:
                continue
            want = _brute(pot._rx, done, *span) and pot._rx.fullmatch(done, partial=True)
            got = await pot.prefix(done.encode() + tail) == 0.0
            assert got == bool(want), (pattern, done, tail)
    assert pot.budget_exceeded == 0


async def test_fallback_checks_run_in_bounded_time():
    import time

    pot = Regex(r"(a|aa)+\1(b|c)*$", timeout=0.05)  # catastrophic backtracking in `regex`
    text = b"a" * 40 + b"d"
    # the relaxed automaton (potentials.regex.relax) rejects this text before `regex` runs ...
    assert await pot.complete(text) == NEG_INF and pot.budget_exceeded == 0
    pot.relaxed = None  # ... so switch it off to reach the time budget
    t0 = time.monotonic()
    assert await pot.complete(text) == NEG_INF      # out of budget: rejected, never returned
    assert await pot.prefix(b"a" * 40) == 0.0       # out of budget or not: a satisfiable prefix
    assert time.monotonic() - t0 < 20
    assert pot.budget_exceeded >= 1
    assert await pot.complete(b"aab") == 0.0
    with pytest.raises(ValueError, match="timeout"):
        Regex(r"(a)\1", timeout=0)


# ---------------------------------------------------------------- bad input, size


def test_huge_repeats_get_a_clear_error_quickly():
    import time

    from potentials.regex.automaton import RegexTooLarge

    for pattern in ["a{10000000}", "a{100000000}", "(?:a{10000}){10000}", r"(a)\1{100000000}"]:
        t0 = time.monotonic()
        with pytest.raises(RegexTooLarge, match="too large"):
            Regex(pattern)
        assert time.monotonic() - t0 < 20, pattern
    big = Regex("a{200000}")  # too big for the automaton, fine for the `regex` package
    assert not big.exact and "automaton states" in big.fallback_reason


def test_flags_are_re_flags_only():
    with pytest.raises(TypeError, match="flags must be an int"):
        Regex("a", flags="x")
    with pytest.raises(ValueError, match="LOCALE"):
        Regex("a", flags=re.LOCALE)
    with pytest.raises(ValueError, match="unknown regex flags"):
        Regex("a", flags=2**40)
    with pytest.raises(ValueError, match="unknown regex flags"):
        Regex("a", flags=re.DEBUG)
    with pytest.raises(InvalidRegex, match="'L' flag"):
        Regex("(?L)a")
    assert Regex("a", flags=re.ASCII | re.IGNORECASE).dfa.fullmatch(b"A")


async def test_regex_package_syntax_is_accepted_on_purpose():
    # duplicate names are regex-package syntax: accepted, with regex's meaning
    pot = Regex(r"(?P<n>a)(?P<n>b)")
    assert await pot.complete(b"ab") == 0.0 and await pot.complete(b"aa") == NEG_INF
    with pytest.raises(InvalidRegex, match=r"unknown property at position \d+ \(regex package\)"):
        Regex(r"\p{NoSuchProperty}")


async def test_re_flags_reach_the_regex_package_with_its_numbering():
    # re.ASCII is 256, which the regex package reads as VERSION1: it must be translated
    pot = Regex(r"(\w)\1", re.ASCII)
    assert not pot.exact
    assert await pot.complete("éé".encode()) == NEG_INF
    assert await pot.complete(b"aa") == 0.0
    assert await Regex(r"(\w)\1").complete("éé".encode()) == 0.0


def test_regex_objects_of_one_pattern_share_their_automaton():
    """The lazily determinized automaton is shared by Regex objects of one pattern and flags (a
    later generation reuses the states earlier ones reached); other flags get their own."""
    a, b = Regex(r"[a-z ]{1,20}"), Regex(r"[a-z ]{1,20}")
    assert a.dfa is b.dfa
    assert Regex(r"[a-z ]{1,20}", re.IGNORECASE).dfa is not a.dfa
    assert b.advance(b.initial(), b"ab c") is not None and b.advance(b.initial(), b"A") is None


def test_a_fallback_regex_pickles_as_its_arguments():
    """A checkpointed run pickles its constraint; on the fallback the relaxed automaton holds
    re's parse trees, which do not pickle, so the pattern is compiled again on load."""
    import pickle

    r = Regex(r"([abc]+) \1", timeout=3.0)
    back = pickle.loads(pickle.dumps(r))
    assert back.dfa is None and (back.pattern, back.flags, back.timeout) == (r"([abc]+) \1", 0, 3.0)
    assert back.advance(back.initial(), b"ab a") is not None and back.advance(back.initial(), b"ab b") is None
