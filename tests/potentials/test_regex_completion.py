"""Shortest completions of texts under patterns with backreferences (potentials.regex.completion),
checked against brute force over short strings."""

import itertools
import re

import pytest
import regex

from potentials import Regex
from potentials.regex.completion import shortest_completion


def brute(pattern: str, text: str, alphabet: str, longest: int) -> int | None:
    """min |y| over y in alphabet^<=longest with text + y fully matching, or None."""
    for n in range(longest + 1):
        for y in itertools.product(alphabet, repeat=n):
            if regex.fullmatch(pattern, text + "".join(y)):
                return n
    return None


CASES = [
    (r"^(.+)\1+$", ["", "1", "12", "121", "1212", "123"]),
    (r"^(.*?)(.)\2\1$", ["", "1", "12", "123", "1221", "ab"]),
    (r"^(\w*?(\w))\1\2$", ["", "a", "ab", "aba", "abc"]),
    (r"(\w+(\d+))\1", ["", "a", "a1", "a1a", "a12"]),
    (r"(a|bc)+\1", ["", "a", "b", "bca"]),
    (r"x{2,3}(y)?(?(1)z|w)", ["", "x", "xxy", "xxx"]),
    (r"(?P<n>ab)c(?P=n)", ["a", "abc"]),
    (r"^(a+)b\1$", ["aa", "aab"]),
    (r"(?s)(.)x\1", ["\n", "\nx"]),
    (r"([^a])\1", ["b"]),
]


@pytest.mark.parametrize("pattern,texts", CASES)
def test_the_shortest_completion_is_found(pattern, texts):
    for text in texts:
        y = shortest_completion(pattern, 0, text)
        want = brute(pattern, text, sorted(set(text + "abcxyzw12\n")), 5)
        assert want is not None  # the cases all complete within 5 characters
        assert y is not None and len(y) == want, (pattern, text, y, want)
        assert regex.fullmatch(pattern, text + y), (pattern, text, y)  # and it is a completion


def test_a_text_that_cannot_be_completed_has_none():
    assert shortest_completion(r"^(a+)b\1$", 0, "ab1") is None
    assert shortest_completion(r"(ab)\1", 0, "abb") is None


@pytest.mark.parametrize("pattern,flags", [
    (r"(?=a)(a)\1", 0),  # lookarounds
    (r"\b(a)\1", 0),  # word boundaries: the next character is not written yet
    (r"(a)\1", re.IGNORECASE),
    (r"(?i)(a)\1", 0),
    (r"(a)\1", re.MULTILINE),
    (r"(a)(?R)?\1", 0),  # recursion: regex-only syntax that re cannot parse
])
def test_what_the_search_does_not_model_gets_none(pattern, flags):
    assert shortest_completion(pattern, flags, "a") is None


def test_a_search_past_its_budget_keeps_the_best_found_or_none():
    long = "ab" * 30 + "c"
    assert shortest_completion(r"^(.+).*\1$", 0, long, budget=10) is None
    y = shortest_completion(r"^(.+).*\1$", 0, long)
    assert y is not None and regex.fullmatch(r"^(.+).*\1$", long + y)


def test_regex_completion_is_the_fallbacks_only():
    back = Regex(r"^(.+)\1+$")
    assert back.completion(back.initial()) == b"aa"  # two copies of one written character
    state = back.advance(back.initial(), "é1".encode())
    assert back.completion(state) == "é1".encode()
    assert back.completion(back.advance(back.initial(), "é".encode()[:1])) is None  # half a character
    auto = Regex(r"[ab]+c")
    assert auto.completion(auto.initial()) is None  # the automaton declares none
