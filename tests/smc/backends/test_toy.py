import math

import pytest
import torch

from smc import ToyLM


def make():
    return ToyLM([b"a", b"b", b"<eos>"], b"<eos>", lambda ids: [0.5, 0.25, 0.25])


async def test_toy_logprobs_normalized_and_exact():
    lm = make()
    lp = await lm.next_token_logprobs([])
    assert lp.dtype == torch.float64
    assert abs(torch.logsumexp(lp, 0).item()) < 1e-12
    assert math.isclose(lp[1].item(), math.log(0.25))
    batch = await lm.batch_next_token_logprobs([[], [0, 1]])
    assert batch.shape == (2, 3)


async def test_toy_table_and_encode():
    lm = ToyLM(["ab", "a", "b", "$"], "$", {(): [0.1, 0.2, 0.3, 0.4], None: [0, 0, 0, 1]})
    assert lm.encode("") == []
    assert lm.encode("aba") == [0, 1]
    assert lm.decode([0, 2]) == b"abb"
    assert lm.eos_token_ids == [3]
    assert (await lm.next_token_logprobs([0]))[3].item() == 0.0


async def test_toy_bad_input():
    lm = make()
    with pytest.raises(ValueError, match="out of range"):
        await lm.next_token_logprobs([7])
    with pytest.raises(ValueError, match="not in the vocabulary"):
        ToyLM([b"a"], b"$", lambda ids: [1.0])
    bad = ToyLM([b"a", b"$"], b"$", lambda ids: [0.7, 0.7])
    with pytest.raises(ValueError, match="not a probability vector"):
        await bad.next_token_logprobs([])
    with pytest.raises(ValueError, match="cannot tokenize"):
        make().encode("xyz")
