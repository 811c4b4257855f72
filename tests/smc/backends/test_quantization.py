"""Quantized loading: bad arguments fail before any load, and "8bit"/"4bit" models (bitsandbytes,
on CPU here and on CUDA where there is one) serve normalized log-probs close to float32."""

import asyncio

import numpy as np
import pytest
import torch

import smc
from smc.backends import quantization as q


def test_bad_quantization_is_refused_before_loading():
    # not marked slow: the conftest makes any load of the embedded model fail here
    with pytest.raises(ValueError, match="unknown quantization '3bit'"):
        smc.load_lm(quantization="3bit")
    with pytest.raises(TypeError, match="BitsAndBytesConfig"):
        smc.load_lm(quantization=8)
    with pytest.raises(ValueError, match="vLLM takes its own"):
        smc.load_lm("some/model", backend="vllm", quantization="4bit")


@pytest.mark.parametrize("version, why", [(None, "is not installed"), ("0.45.5", "is 0.45.5, too old")])
def test_missing_bitsandbytes_names_the_install_command(monkeypatch, version, why):
    monkeypatch.setattr(q, "bitsandbytes_version", lambda: version)
    with pytest.raises(ImportError, match=f"needs bitsandbytes>=0.46.1.*{why}.*pip install 'smc-steer\\[quantization\\]'"):
        smc.load_lm(quantization="8bit")


def test_configs():
    pytest.importorskip("bitsandbytes")
    eight = q.quantization_config("8bit", torch.device("cpu"), torch.float32)
    assert eight.load_in_8bit and eight.llm_int8_threshold == 0.0
    four = q.quantization_config("4bit", torch.device("cpu"), torch.bfloat16)
    assert four.load_in_4bit and four.bnb_4bit_quant_type == "nf4"
    assert four.bnb_4bit_compute_dtype == torch.bfloat16
    assert q.quantization_config(four, torch.device("cpu"), torch.float32) is four
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        q.quantization_config("4bit", torch.device("mps"), torch.float32)


def _contexts(lm):
    rng = np.random.default_rng(0)
    prompt = lm.encode_chat("Give me a US phone number.")
    return [prompt + rng.integers(17, 49152, size=k).tolist() for k in (0, 3, 6)]


@torch.inference_mode()
def _lone(lm, ids):
    logits = lm.model(input_ids=torch.tensor([ids], device=lm.device)).logits[0, -1, : len(lm.vocab)]
    return torch.log_softmax(logits.double(), -1).float().cpu()


def _check(lm, full, layer_type: str, expected_abs: float, batch_tol: float):
    """``lm`` (quantized) against ``full`` (float32): its linear layers are bitsandbytes', its
    weights smaller, its rows normalized, within ``batch_tol`` of a lone uncached forward of
    itself when served from a ragged batch over cached prefixes, and E_p|log q - log p| below
    ``expected_abs`` (p: float32)."""
    assert type(lm.model.model.layers[0].mlp.up_proj).__name__ == layer_type
    assert lm.model.get_memory_footprint() < 0.75 * full.model.get_memory_footprint()
    ctxs = _contexts(lm)

    async def batched():
        await lm.batch_next_token_logprobs([c[:-2] for c in ctxs])
        return await lm.batch_next_token_logprobs(ctxs)

    rows = asyncio.run(batched()).cpu()
    for ids, row in zip(ctxs, rows):
        assert abs(torch.logsumexp(row.double(), 0).item()) < 1e-5
        assert (row - _lone(lm, ids)).abs().max().item() <= batch_tol
        p = _lone(full, ids)
        assert (p.exp() * (row - p).abs()).sum().item() < expected_abs


@pytest.mark.slow
def test_8bit_on_cpu(embedded_lm):
    pytest.importorskip("bitsandbytes")
    lm = smc.load_lm(quantization="8bit", device="cpu")
    # rows are quantized independently (no outlier columns): batching and caching are exact
    _check(lm, embedded_lm, "Linear8bitLt", expected_abs=0.5, batch_tol=1e-4)


@pytest.mark.slow
def test_4bit_on_cpu(embedded_lm):
    pytest.importorskip("bitsandbytes")
    lm = smc.load_lm(quantization="4bit", device="cpu")
    # bitsandbytes' CPU kernel multiplies in bfloat16, so the batch's shape shows in the rows
    _check(lm, embedded_lm, "Linear4bit", expected_abs=1.5, batch_tol=0.5)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode, layer, expected_abs, batch_tol",
                         [("8bit", "Linear8bitLt", 0.5, 1e-2), ("4bit", "Linear4bit", 1.5, 0.5)])
def test_quantized_on_cuda(embedded_lm, mode, layer, expected_abs, batch_tol):
    pytest.importorskip("bitsandbytes")
    lm = smc.load_lm(quantization=mode, device="cuda", dtype="float32")
    _check(lm, embedded_lm, layer, expected_abs=expected_abs, batch_tol=batch_tol)
