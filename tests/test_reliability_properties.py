"""Property-based layer over the reliability suite.

Random regexes, JSON Schemas and argument values are drawn from the documented domains and just
outside them; every call must end within a time bound, either in a Result whose finished samples
satisfy the constraint (checked by the reference: ``re.fullmatch``, ``jsonschema``) or in one
clean error: an ``smc.SmcSteerError``, ``ValueError`` or ``TypeError`` whose message is one line.
Fast and deterministic: a tiny ToyLM, few examples, a deadline, ``derandomize=True``.
"""

from __future__ import annotations

import json
import math
import os
import re
from datetime import timedelta

import jsonschema
import numpy as np
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import smc
from potentials import JSONSchema, Regex
from tests.test_reliability import within
from tests.toy_problems import FastToyLM

#: a call's time bound: a hang, not a slowdown
BOUND_S = 30.0
PROPERTY = settings(max_examples=60, deadline=timedelta(seconds=BOUND_S), derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

REGEX_VOCAB = ["1", "2", "12", "a", "b", "-", "$"]
JSON_VOCAB = ["{", "}", "[", "]", '"', "a", "b", "1", "-", ":", ",", " ", "true", "null", '"a"', "$"]


def _toy(vocab: list[str]) -> FastToyLM:
    n = len(vocab)

    def probs(ids):
        # a context-dependent law with full support, so every constraint has mass
        w = np.arange(1, n + 1, dtype=float)
        w = np.roll(w, len(ids))
        return (w / w.sum()).tolist()

    return FastToyLM(vocab, "$", probs)


#: with RELIABILITY_OUTCOMES=path set, each call's outcome class is appended there as a JSON line
#: (benchmarks/RESULTS.md, "Reliability", counts them)
OUTCOMES = os.environ.get("RELIABILITY_OUTCOMES")


def _record(outcome: str) -> None:
    if OUTCOMES:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].split(" ")[0]
        with open(OUTCOMES, "a") as f:
            f.write(json.dumps({"test": test, "outcome": outcome}) + "\n")


def _ends_cleanly(call) -> object | None:
    """The call's Result, or None after a clean error; fails on a hang or any other outcome."""
    out = within(BOUND_S, call)
    err = out.get("error")
    if err is None:
        r = out["result"]
        _record("result with finished samples" if r.finished else "result, no finished sample")
        return r
    _record(f"clean error ({type(err).__name__})")
    assert isinstance(err, (smc.SmcSteerError, ValueError, TypeError)), repr(err)
    msg = str(err)
    assert msg and "\n" not in msg and len(msg) < 2000, repr(msg)
    return None


# --------------------------------------------------------------------------- regexes
_ATOMS = st.sampled_from(["1", "2", "a", "b", "-", "[12]", "[a-b]", "[^a]", ".", "\\d", "\\w", "12", "(?:ab)"])


def _regex_tree(depth: int) -> st.SearchStrategy[str]:
    if depth == 0:
        return _ATOMS
    sub = _regex_tree(depth - 1)
    return st.one_of(
        _ATOMS,
        st.tuples(sub, sub).map("".join),
        st.tuples(sub, sub).map(lambda p: f"(?:{p[0]}|{p[1]})"),
        st.tuples(sub, st.sampled_from(["?", "*", "+", "{0,2}", "{1,3}", "{2}", "*?"])).map(
            lambda p: f"(?:{p[0]}){p[1]}"),
    )


#: patterns from the domain, and strings of regex syntax that are mostly not patterns
PATTERNS = st.one_of(_regex_tree(3), st.text(alphabet="()[]{}|*+?\\12ab-^$.,", max_size=10),
                     st.lists(st.sampled_from(["11", "12", "a", "ab", "b1", "2b"]), min_size=1, max_size=8)
                     .map("|".join))


@PROPERTY
@given(pattern=PATTERNS, particles=st.integers(1, 4), max_tokens=st.integers(1, 5),
       sampler=st.sampled_from(["awrs", "direct", "masking"]), seed=st.integers(0, 3))
def test_random_regexes_end_in_valid_samples_or_one_clean_error(pattern, particles, max_tokens, sampler, seed):
    lm = _toy(REGEX_VOCAB)
    result = _ends_cleanly(lambda: smc.generate(
        "", Regex(pattern), lm=lm, particles=particles, max_tokens=max_tokens, sampler=sampler,
        seed=seed, progress=False))
    if result is not None:
        for s in result.finished:
            assert re.fullmatch(pattern, s.text), (pattern, s.text)


# --------------------------------------------------------------------------- JSON schemas
_LEAVES = st.one_of(
    st.sampled_from([{"type": t} for t in ("integer", "string", "boolean", "null", "number", "object", "array")]),
    st.builds(lambda lo, hi: {"type": "integer", "minimum": lo, "maximum": hi}, st.integers(-2, 12), st.integers(-2, 12)),
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 3)),
    st.lists(st.sampled_from([1, "a", True, None, "ab", -1]), min_size=1, max_size=3, unique=True)
    .map(lambda v: {"enum": v}),
    st.sampled_from([True, False, {}]),
)


def _schemas(depth: int) -> st.SearchStrategy:
    if depth == 0:
        return _LEAVES
    sub = _schemas(depth - 1)
    return st.one_of(
        _LEAVES,
        st.lists(sub, min_size=1, max_size=3).map(lambda xs: {"anyOf": xs}),
        st.builds(lambda s, n: {"type": "array", "items": s, "maxItems": n}, sub, st.integers(0, 2)),
        st.builds(lambda s, req: {"type": "object", "properties": {"a": s}, "required": ["a"] if req else [],
                                  "additionalProperties": False}, sub, st.booleans()),
    )


#: schemas from the domain, and values just outside it (not schemas, or invalid ones)
SCHEMAS = st.one_of(_schemas(3), st.sampled_from([
    {"type": "foo"}, {"minimum": "x"}, {"type": "integer", "maximum": 1, "minimum": 5}, {"enum": []},
    {"$ref": "#/nowhere"}, {"properties": 3}, [1], "not json", 5, None]))


@PROPERTY
@given(schema=SCHEMAS, particles=st.integers(1, 3), max_tokens=st.integers(1, 6), seed=st.integers(0, 3))
def test_random_schemas_end_in_valid_documents_or_one_clean_error(schema, particles, max_tokens, seed):
    lm = _toy(JSON_VOCAB)
    result = _ends_cleanly(lambda: smc.generate(
        "", JSONSchema(schema), lm=lm, particles=particles, max_tokens=max_tokens, seed=seed, progress=False))
    if result is not None:
        for s in result.finished:
            jsonschema.validate(json.loads(s.text), schema)


# --------------------------------------------------------------------------- argument values
def _around(good: st.SearchStrategy) -> st.SearchStrategy:
    """Values of the domain and just outside it: other types, numpy scalars, edge numbers."""
    return st.one_of(
        good,
        good.filter(lambda v: isinstance(v, int) and not isinstance(v, bool)).map(np.int64),
        st.sampled_from([None, "1", 1.5, -1, 0, True, [], float("nan"), float("inf"), 10**12]),
    )


SETTINGS = st.fixed_dictionaries({}, optional={
    "particles": _around(st.integers(1, 4)),
    "max_tokens": _around(st.integers(1, 5)),
    "seed": _around(st.integers(0, 5)),
    "sampler": st.sampled_from(["awrs", "direct", "masking", "AWRS", None, 3]),
    "ess_threshold": _around(st.floats(0, 1)),
    "resampling": st.sampled_from(["multinomial", "stratified", "systematic", "residual", "x", None]),
    "islands": _around(st.integers(1, 2)),
    "finish_share": _around(st.floats(0, 0.9)),
    "lookahead": _around(st.floats(0, 2)),
    "method": st.sampled_from(["smc", "beam", "top_k", "steer", "x"]),
    "n_beam": _around(st.integers(1, 3)),
    "max_expansions": _around(st.integers(1, 200)),
    "chat": st.sampled_from([None, False, True, "yes"]),
})


@PROPERTY
@given(settings_=SETTINGS, pattern=st.sampled_from(["[12]+", "a|b1", "(12)*-"]))
def test_random_settings_end_in_valid_samples_or_one_clean_error(settings_, pattern):
    lm = _toy(REGEX_VOCAB)
    result = _ends_cleanly(lambda: smc.generate("", Regex(pattern), lm=lm, progress=False, **settings_))
    if result is not None:
        assert all(re.fullmatch(pattern, s.text) for s in result.finished)
        assert not math.isnan(result.log_ml)


@PROPERTY
@given(pattern=st.text(alphabet="()[]{}|*+?\\12ab-^$.,<=!:", min_size=1, max_size=12))
def test_random_regex_syntax_ends_in_valid_samples_or_one_clean_error(pattern):
    # strings of regex syntax, most of them not patterns: an InvalidRegex naming the position
    lm = _toy(REGEX_VOCAB)
    result = _ends_cleanly(lambda: smc.generate("", Regex(pattern), lm=lm, particles=2, max_tokens=3,
                                                progress=False))
    if result is not None:
        for s in result.finished:
            assert _fullmatch(pattern, s.text), (pattern, s.text)


def _fullmatch(pattern: str, text: str) -> bool:
    """``re.fullmatch``; a pattern only the ``regex`` package accepts is read with its meaning."""
    try:
        return re.fullmatch(pattern, text) is not None
    except re.error:
        return regex.fullmatch(pattern, text) is not None
