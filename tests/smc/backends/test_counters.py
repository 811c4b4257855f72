"""Every backend keeps the named counters of smc.backends.base.COUNTERS, and a run reports their
change: ToyLM, the HF backend (embedded model) and the vLLM backend over a fake engine."""

import asyncio
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest

import smc
from potentials import Regex
from smc.backends.base import COUNTERS

VOCAB = ["a", "b", "<eos>"]


def toy():
    return smc.ToyLM(VOCAB, "<eos>", lambda ids: [0.4, 0.4, 0.2])


async def test_toy_counts_requests_and_forward_passes():
    lm = toy()
    assert set(COUNTERS) <= set(lm.stats)
    await lm.next_token_logprobs((0,))
    await lm.batch_next_token_logprobs([(0,), (1,), (0, 1)])
    assert lm.stats["requests"] == 4 and lm.stats["forward_passes"] == 4


def test_run_reports_requests_and_forward_passes():
    r = smc.generate("", Regex("(a|b){1,3}"), lm=toy(), particles=4, max_tokens=4, seed=0)
    assert r.stats["lm_requests"] > 0 and r.stats["lm_forward_passes"] > 0
    assert r.stats["lm"]["requests"] == r.stats["lm_requests"]


@pytest.mark.slow
async def test_hf_counters(embedded_lm):
    assert set(COUNTERS) <= set(embedded_lm.stats)
    before = dict(embedded_lm.stats)
    ids = embedded_lm.encode("Counting forward passes")
    await embedded_lm.batch_next_token_logprobs([ids, ids[:-1], ids[:-2]])
    d = {k: embedded_lm.stats[k] - before[k] for k in COUNTERS}
    assert d["requests"] == 3 and d["forward_passes"] == 1
    assert d["positions_computed"] + d["positions_reused"] >= len(ids)


# ------------------------------------------------------------------ vLLM over a fake engine
class FakeTokenizer:
    eos_token_id = 2

    def __len__(self):
        return len(VOCAB)

    def convert_ids_to_tokens(self, ids):
        return [VOCAB[i] for i in ids]

    def __call__(self, text):
        return {"input_ids": [VOCAB.index(c) for c in text]}


class FakeEngine:
    """Answers every request with fixed log-probs; reports the first token as cached."""

    def __init__(self):
        self.requests = 0

    async def generate(self, prompt, params, request_id):
        self.requests += 1
        await asyncio.sleep(0.01)  # let concurrent requests overlap, as in a real engine
        lp = SimpleNamespace(token_ids=[0, 1, 2], logprobs=list(np.log([0.4, 0.4, 0.2])))
        yield SimpleNamespace(num_cached_tokens=1, outputs=[SimpleNamespace(logprobs=lp)])

    def shutdown(self):
        pass


@pytest.fixture
def fake_vllm(monkeypatch, tmp_path):
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = lambda **kw: SimpleNamespace(**kw)
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: SimpleNamespace(prompt_token_ids=prompt_token_ids)
    vllm.inputs = inputs
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    from smc.backends.vllm import VLLMBackend

    config = SimpleNamespace(model_config=SimpleNamespace(
        get_vocab_size=lambda: len(VOCAB), model=str(tmp_path), max_model_len=64))
    engine = FakeEngine()
    lm = VLLMBackend(engine, config, FakeTokenizer())
    yield lm, engine
    lm.close()


async def test_vllm_counters_with_a_fake_engine(fake_vllm):
    lm, engine = fake_vllm
    assert set(COUNTERS) <= set(lm.stats)
    await asyncio.gather(*(lm.next_token_logprobs((0, 1, k)) for k in range(2)))
    await lm.next_token_logprobs((1, 1))
    s = lm.stats
    assert s["requests"] == engine.requests == 3
    assert s["forward_passes"] == 2  # one round of two concurrent requests, then one alone
    assert s["positions_reused"] == 3 and s["positions_computed"] == 3 + 3 + 2 - 3


def test_vllm_run_reports_forward_passes(fake_vllm):
    lm, engine = fake_vllm
    r = smc.generate("a", Regex("(a|b){1,3}"), lm=lm, particles=4, max_tokens=4, seed=0, chat=False)
    assert r.stats["lm_requests"] == engine.requests > 0
    assert 0 < r.stats["lm_forward_passes"] <= r.stats["lm_requests"]
