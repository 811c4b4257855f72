"""``with_eos`` (smc.backends.stop): tokens containing a text end generation like EOS, the
sampled law is the one of the LM with that larger EOS set (mean Ẑ against enumeration)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import regex

import smc
from potentials import Regex
from smc.core.logmath import NEG_INF
from smc.backends.stop import with_eos
from tests.toy_problems import FastToyLM

VOCAB = [b"a", b"b", b"\n", b"a\n", b"<eos>"]
EOS, NEWLINES = 4, (2, 3)


def probs(ids):
    # the model ends a line far more often than it emits EOS
    return [0.35, 0.25, 0.2, 0.15, 0.05]


LM = FastToyLM(VOCAB, b"<eos>", probs)


def test_eos_set_grows_and_the_rest_is_the_lm():
    lm = with_eos(LM, ["\n"])
    assert lm.eos_token_ids == [2, 3, 4] and LM.eos_token_ids == [EOS]
    assert lm.vocab is LM.vocab and lm.encode("") == LM.encode("")


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="list of texts"):
        with_eos(LM, "\n")
    with pytest.raises(ValueError, match="empty text"):
        with_eos(LM, [""])
    with pytest.raises(ValueError, match="no token"):
        with_eos(LM, ["z"])
    with pytest.raises(ValueError, match="containing is empty"):
        with_eos(LM, [])
    with pytest.raises(TypeError, match="language-model backend"):
        with_eos("smollm", ["\n"])


def _z(pattern: str, max_tokens: int) -> float:
    """Z' = sum over x (no EOS or newline token) of p(x) * p(end | x) * 1[x matches], |x| <= T."""
    p = np.array(probs(()))
    end = p[[EOS, *NEWLINES]].sum()
    z = 0.0
    for n in range(max_tokens + 1):
        for x in itertools.product([0, 1], repeat=n):
            if regex.fullmatch(pattern, b"".join(VOCAB[t] for t in x).decode()):
                z += float(np.prod(p[list(x)])) * end
    return z


@pytest.mark.parametrize("ess", [0.0, 0.5])
def test_generation_stops_at_a_newline_token_with_an_unbiased_z(ess):
    lm = with_eos(LM, ["\n"])
    pattern, max_tokens, runs = "a+b?", 4, 300
    z = _z(pattern, max_tokens)
    zs = []
    for seed in range(runs):
        r = smc.generate("", Regex(pattern), lm=lm, particles=4, max_tokens=max_tokens, seed=seed,
                         ess_threshold=ess, chat=False, progress=False)
        zs.append(math.exp(r.log_ml) if r.log_ml > NEG_INF else 0.0)
        for s in r.samples:
            assert "\n" not in s.text  # the stopping token is not part of the text
            if s.finished:
                assert regex.fullmatch(pattern, s.text)
    mean, se = np.mean(zs), np.std(zs, ddof=1) / math.sqrt(runs)
    assert abs(mean - z) < 3 * se, (mean, z, se)
    # with the plain EOS only, Z is far smaller: the two targets differ
    z_plain = z * probs(())[EOS] / sum(probs(())[t] for t in (EOS, *NEWLINES))
    assert abs(mean - z_plain) > 3 * se
