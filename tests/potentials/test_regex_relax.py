"""The fallback's sound dead-prefix tests (potentials.regex.relax), on the genlm-eval patterns
that left no finished sample (tests/data/patterns_nosample.csv) and on hand-made corner cases.

Soundness (a satisfiable prefix is never lost) is checked against the ``regex`` package itself:
every string over a small alphabet that ``regex.fullmatch`` accepts must stay in the relaxed
automaton's language and escape every leading negative lookahead used for pruning.
"""

from __future__ import annotations

import csv
import itertools
import time
import warnings
from pathlib import Path

import pytest
import regex

from smc.core.logmath import NEG_INF
from potentials.regex import Regex
from potentials.regex.relax import leading_negative_lookaheads, mark_recursion, relaxed_automaton

DATA = Path(__file__).parents[1] / "data"


def _rows(name: str) -> list[dict]:
    with open(DATA / name, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


NOSAMPLE = _rows("patterns_nosample.csv")
SUBSET = _rows("patterns_subset.csv")
FALLBACK = [r for r in NOSAMPLE + SUBSET if not Regex(r["regex"]).exact]


def _full(pattern: str, text: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return regex.fullmatch(pattern, text, timeout=2) is not None


@pytest.mark.parametrize("row", NOSAMPLE, ids=[r["regex"] for r in NOSAMPLE])
async def test_examples_viable_and_recorded_dead_ends_dead(row):
    pot = Regex(row["regex"])
    data = row["example"].encode()
    assert _full(row["regex"], row["example"])
    for i in range(len(data) + 1):
        assert await pot.prefix(data[:i]) == 0.0, data[:i]
    assert await pot.complete(data) == 0.0
    if row["dead"]:
        # texts the run kept extending (regex's partial match let them through)
        assert await pot.prefix(row["dead"].encode()) == NEG_INF
        assert pot.budget_exceeded == 0


@pytest.mark.parametrize("row", FALLBACK, ids=[r["regex"] for r in FALLBACK])
def test_relaxations_never_drop_a_match(row):
    # the row's example and every fully matching string over a small alphabet (the pattern's
    # own characters, a combining mark that regex's \w has and re's lacks, a space) are in R(P)
    # and escape the leading negative lookaheads
    pattern = row["regex"]
    relaxed = relaxed_automaton(pattern)
    leads = leading_negative_lookaheads(pattern)
    alphabet = sorted({c for c in pattern if c.isalnum()} | set("a1 \u0301"))[:8]
    matches = [row["example"]]
    for n in range(5):
        for chars in itertools.product(alphabet, repeat=n):
            if _full(pattern, "".join(chars)):
                matches.append("".join(chars))
    assert _full(pattern, row["example"])
    for s in matches:
        assert relaxed is None or relaxed.fullmatch(s.encode()), s
        assert not any(rx.match(s) for rx in leads), s


@pytest.mark.parametrize("pattern,text,completion", [
    (r"(^a)\1", "aa", ""),                 # the copied body loses its ^ (the capture is "a")
    (r"(a)(?i:\1)", "aA", ""),             # a case-insensitive backreference: any string
    (r"(\w)\1", "\u0301\u0301", ""),       # regex's \w has combining marks, re's has not
    (r"(a)\1", "ab", None),
    (r"(.)(?<=\w)\1", "\u0301\u0301", ""),  # a lookbehind's \w is regex's too: relaxed away
    (r"(?>a+)b(?=c)\w", "ab", "c"),
    (r"(?>a+)b(?=c)\w", "ab ", None),       # the lookahead relaxed, the \w still enforced
    (r"(x)(?(1)y|z)\1", "xy", "x"),        # a conditional: both branches kept
    (r"(x)(?(1)y|z)\1", "xw", None),
    (r"^(?<w>\w)(?&w)$", "a", "b"),        # named groups and a named recursive call
    (r"^(?<w>\w)(?&w)$", "a ", None),
])
def test_relaxed_automaton_corner_cases(pattern, text, completion):
    dfa = relaxed_automaton(pattern)
    assert dfa is not None
    alive = dfa.walk(dfa.start, text.encode()) is not None
    assert alive == (completion is not None)
    if completion is not None:
        assert _full(pattern, text + completion)  # the prefix kept is indeed satisfiable


def test_nosample_fallback_patterns_all_get_a_relaxed_automaton():
    pats = [r["regex"] for r in NOSAMPLE if not Regex(r["regex"]).exact]
    assert len(pats) == 13
    assert all(relaxed_automaton(p) is not None for p in pats)


def test_recursion_is_marked_outside_classes_and_escapes():
    got, found = mark_recursion(r"[(?R)]\(?0)(a(?R)|(?1)|(?&n)|(?P>n)|(?-1))")
    assert found
    assert got.count("(?:\U000ffffd*)") == 5 and got.startswith(r"[(?R)]\(?0)")
    assert mark_recursion("\U000ffffd") is None


def test_leading_lookaheads_only_when_extension_stable():
    assert leading_negative_lookaheads(r"^(?!.*(.).*\1)[a-z]+$")        # stable: used
    assert not leading_negative_lookaheads(r"^(?!ab$)\w+")             # $ sees the end: not
    assert not leading_negative_lookaheads(r"^(?!\w+\b)x")             # \b: not
    assert not leading_negative_lookaheads(r"^(?!(?>a+))b")            # atomic: not
    assert not leading_negative_lookaheads(r"a(?!b)")                  # not at the start
    assert not leading_negative_lookaheads(r"^(?=(a))(?!(b)\2)")       # groups renumbered


async def test_recursive_pattern_rejects_non_word_text_without_the_regex_engine():
    # `regex` needs seconds to say no here (exponential backtracking); R(P) = \w{2,}
    pot = Regex(r"(\w+(?0)?\w+)")
    text = b"abcdefghijklmnopqrstuvwxyz0123"
    t0 = time.monotonic()
    assert await pot.prefix(text + b" ") == NEG_INF
    assert await pot.prefix(text) == 0.0 and await pot.complete(text) == 0.0
    assert time.monotonic() - t0 < 1.0
    assert pot.budget_exceeded == 0


@pytest.mark.parametrize("row", NOSAMPLE + SUBSET, ids=[r["regex"] for r in NOSAMPLE + SUBSET])
async def test_complete_after_equals_advance_then_complete(row):
    # the shortcut the last step before the forced EOS uses (potentials.last_step)
    pot = Regex(row["regex"])
    data = row["example"].encode()
    for i in range(len(data) + 1):
        state = pot.advance(pot.initial(), data[:i])
        assert state is not None
        for rest in [data[i:], data[i:-1], data[i:] + b"a", data[i:] + b"\xc3", b" ", b"1a"]:
            nxt = pot.advance(state, rest)
            want = NEG_INF if nxt is None else await pot.state_complete(nxt)
            assert await pot.complete_after(state, rest) == want, (data[:i], rest)
