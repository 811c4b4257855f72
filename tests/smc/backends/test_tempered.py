"""The tempered, nucleus-truncated view: q(a | x) = softmax(logits / T)[a] restricted to the
top-p nucleus and renormalized, checked against a direct computation on a toy LM; and a run at
temperature T samples the tempered target exactly (enumeration)."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
import torch

import smc
from potentials import Regex
from smc.backends.tempered import TemperedLM, temper, tempered
from tests.toy_problems import FastToyLM

VOCAB = ["a", "b", "c", "<eos>"]
P = {None: [0.5, 0.3, 0.05, 0.15]}


def lm() -> FastToyLM:
    return FastToyLM(VOCAB, "<eos>", P)


def reference(p: list[float], t: float, top_p: float) -> np.ndarray:
    q = np.array(p) ** (1 / t)
    q /= q.sum()
    order = np.argsort(-q, kind="stable")
    keep = np.zeros(len(q), bool)
    mass = 0.0
    for i in order:
        if mass < top_p:
            keep[i] = True
        mass += q[i]
    q = np.where(keep, q, 0.0)
    return q / q.sum()


@pytest.mark.parametrize("t,top_p", [(1.0, 1.0), (0.5, 1.0), (2.0, 1.0), (1.0, 0.8), (0.7, 0.5), (1.0, 0.5), (3.0, 0.01)])
def test_the_view_is_the_tempered_nucleus(t, top_p):
    base = lm()  # a cached view refers to its backend weakly: the caller keeps it
    view = tempered(base, t, top_p)
    got = asyncio.run(view.next_token_logprobs(())).exp().numpy()
    np.testing.assert_allclose(got, reference(P[None], t, top_p), atol=1e-12)
    rows = asyncio.run(view.batch_next_token_logprobs([(), (0,)])).exp().numpy()
    np.testing.assert_allclose(rows, np.stack([reference(P[None], t, top_p)] * 2), atol=1e-12)


def test_defaults_give_the_backend_itself_and_views_are_reused():
    base = lm()
    assert tempered(base) is base and tempered(base, 1, 1) is base
    assert tempered(base, 0.5, 0.9) is tempered(base, 0.5, 0.9)
    view = tempered(base, 0.5, 0.9)
    assert isinstance(view, TemperedLM) and view.stats is base.stats and view.encode("ab") == base.encode("ab")


@pytest.mark.parametrize("t,top_p", [(0, 1), (-1, 1), (math.inf, 1), (1, 0), (1, 1.5), ("1", 1), (True, 1)])
def test_bad_settings_are_refused_by_the_request(t, top_p):
    with pytest.raises(smc.SmcSteerError):
        smc.Request("", None, temperature=t, top_p=top_p)


def test_temper_keeps_the_top_token_at_tiny_top_p():
    logp = torch.log(torch.tensor([[0.25, 0.25, 0.5]], dtype=torch.float64))
    assert temper(logp, 1.0, 1e-9).exp().tolist() == [[0.0, 0.0, 1.0]]


def test_a_run_samples_the_tempered_target():
    """With enough particles and the direct sampler, the posterior over the two-token language
    {a, b, ab, ba, ...} under the regex matches pi_T computed from the tempered per-step law."""
    base = lm()
    t, top_p = 0.5, 0.95  # keeps a, b, <eos>; drops c
    q = reference(P[None], t, top_p)  # context-free toy: the same law every step
    # target over texts of length <= 2 matching [ab]{1,2}: q(x) q(eos), forced EOS at 2 tokens
    texts = {}
    for x in ["a", "b"]:
        texts[x] = q[VOCAB.index(x)] * q[3]
    for x in ["aa", "ab", "ba", "bb"]:
        texts[x] = q[VOCAB.index(x[0])] * q[VOCAB.index(x[1])] * q[3]
    z = sum(texts.values())
    r = smc.generate("", Regex("[ab]{1,2}"), lm=base, particles=2000, max_tokens=2, seed=1,
                     sampler="direct", temperature=t, top_p=top_p, progress=False)
    for x, w in texts.items():
        assert abs(r.posterior.get(x, 0.0) - w / z) < 0.05, (x, r.posterior)
    assert r.to_dict()["stats"]["max_tokens"] == 2
    assert smc.Request("", temperature=t, top_p=top_p).to_json()["temperature"] == t
