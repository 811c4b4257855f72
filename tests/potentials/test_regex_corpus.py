"""Regression tests on a vendored subset of genlm-eval's pattern corpus (tests/data/patterns_subset.csv).

Each row is a pattern from the wild with a text that matches it and the failure class it guards.
Checks, without the embedded model: the text and all its byte prefixes are viable; no partial
UTF-8 character after a text that no character can continue is viable (the dead end every
particle walked into); the automaton-class rows compile to the automaton; and SMC with a toy LM
that pushes hard towards partial UTF-8 tokens still finishes, with only matching texts.
"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import numpy as np
import pytest
import regex

import smc
from smc.core.logmath import NEG_INF
from potentials.regex import Regex

DATA = Path(__file__).parents[1] / "data" / "patterns_subset.csv"


def _rows() -> list[dict]:
    with open(DATA, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


ROWS = _rows()


def _full(pattern: str, text: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return regex.fullmatch(pattern, text) is not None


def test_vendored_rows_are_consistent():
    assert len(ROWS) >= 12
    for row in ROWS:
        assert _full(row["regex"], row["example"]), row


@pytest.mark.parametrize("row", ROWS, ids=[r["regex"] for r in ROWS])
async def test_example_prefixes_viable_and_no_dead_partial_characters(row):
    pot = Regex(row["regex"])
    assert pot.exact == row["fixed"].startswith("automaton"), pot.fallback_reason
    data = row["example"].encode()
    for i in range(len(data) + 1):
        assert await pot.prefix(data[:i]) == 0.0, data[:i]
    assert await pot.complete(data) == 0.0
    for tail in [b"\xc3", b"\xe2", b"\xe2\x82", b"\xf0", b"\xf0\x9f", b"\xf0\x9f\x98"]:
        got = await pot.prefix(data + tail) == 0.0
        partial = _some_character_continues(row["regex"], row["example"], tail)
        if pot.exact:
            # regex's partial matching over-approximates (a lookahead at the end of the text
            # counts as partial); the automaton is exact, so never more permissive
            assert partial or not got
        else:
            # viable iff some character starting with `tail` keeps regex's partial match
            assert got == partial


def _some_character_continues(pattern: str, text: str, tail: bytes) -> bool:
    from potentials.text import utf8_range

    lo, hi = utf8_range(tuple(tail))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        rx = regex.compile(pattern)
    return any(rx.fullmatch(text + chr(c), partial=True) is not None for c in range(lo, hi + 1)
               if not 0xD800 <= c <= 0xDFFF)


@pytest.mark.parametrize("row", [r for r in ROWS if r["fixed"].startswith("fallback")],
                         ids=lambda r: r["regex"])
def test_smc_finishes_when_the_lm_pushes_partial_characters(row):
    # The LM puts most of its mass on tokens that end inside a UTF-8 character: a fallback that
    # keeps them after a full match leaves every particle unfinished (log_ml = -inf).
    chars = sorted(set(row["example"]))
    vocab = chars + ["\xe2".encode("latin-1"), b"\xf0", b"\xf0\x9f", b"\xc3", "é", "<eos>"]
    probs = np.full(len(vocab), 0.02)
    probs[len(chars):len(chars) + 4] = 0.2
    probs /= probs.sum()
    lm = smc.ToyLM(vocab, "<eos>", lambda ids: probs)
    res = smc.generate("", Regex(row["regex"]), lm=lm, particles=8,
                       max_tokens=len(row["example"]) + 4, seed=0, chat=False, progress=False)
    finished = [s for s in res.samples if s.finished]
    assert finished and res.log_ml > NEG_INF
    assert all(_full(row["regex"], s.text) for s in finished)
