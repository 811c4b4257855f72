"""Concurrent population steps of runs sharing an HF backend (a server's requests) are gathered
into the same forward pass, and each call gets exactly its own rows."""

from __future__ import annotations

import asyncio

import pytest
import torch

from tests.smc.backends.rounding import FLOAT32_ROUNDING

pytestmark = pytest.mark.slow


def test_concurrent_calls_share_one_forward(embedded_lm):
    lm = embedded_lm
    a = [lm.encode("The cat sat on"), lm.encode("The dog ran to")]
    b = [lm.encode("Numbers: 1, 2,"), lm.encode("Hello"), lm.encode("The cat sat on")]
    lm.clear_cache()
    alone = [asyncio.run(lm.batch_next_token_dists(x)) for x in (a, b)]
    lm.clear_cache()

    async def both():
        return await asyncio.gather(lm.batch_next_token_dists(a), lm.batch_next_token_dists(b))

    before = lm.stats["forward_passes"]
    together = asyncio.run(both())
    assert lm.stats["forward_passes"] - before == 1
    for x, y in zip(alone, together):
        assert x.logp.shape == y.logp.shape
        torch.testing.assert_close(x.logp, y.logp, atol=FLOAT32_ROUNDING, rtol=0)
        torch.testing.assert_close(x.cdf, y.cdf, atol=FLOAT32_ROUNDING, rtol=0)


def test_a_bad_call_fails_alone(embedded_lm):
    lm = embedded_lm

    async def both():
        return await asyncio.gather(lm.batch_next_token_dists([lm.encode("Hi")]),
                                    lm.batch_next_token_dists([[len(lm.vocab) + 5]]), return_exceptions=True)

    good, bad = asyncio.run(both())
    assert good.logp.shape == (1, len(lm.vocab)) and isinstance(bad, ValueError)
