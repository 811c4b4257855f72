"""The vLLM backend at other vocabulary sizes: its row builder (no vLLM needed), the tiny-model
builder of benchmarks/bench_vllm.py part 3, and (vLLM installed) the backend on such a model
against the HF forward pass of the same weights, and part 3 itself on a small batch."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from smc.backends.vllm import flat_logprobs_row

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import bench_vllm  # noqa: E402

BASE = 49_152
EXTRA = 64  # synthetic ids on top of the embedded tokenizer: small, so the model builds fast


def test_flat_logprobs_row_scatters_and_renormalizes():
    rng = np.random.default_rng(0)
    V = 1000
    dense = torch.log_softmax(torch.from_numpy(rng.standard_normal(V).astype(np.float32)), 0)
    order = torch.argsort(dense, descending=True).tolist()
    sampled = 17
    # vLLM's flat form: the sampled token first, then every id by rank (so one id twice).
    ids = [sampled] + order
    lps = [float(dense[sampled])] + [float(dense[i]) for i in order]
    row = flat_logprobs_row(ids, lps, V)
    assert row.dtype == torch.float32 and row.shape == (V,)
    torch.testing.assert_close(row, dense, atol=1e-6, rtol=0)
    assert abs(float(torch.logsumexp(row, 0))) < 1e-6


def test_flat_logprobs_row_unlisted_ids_and_bad_input():
    # Ids not listed get -inf; the listed ones are renormalized among themselves.
    row = flat_logprobs_row([2, 0], [np.log(0.2), np.log(0.6)], 4)
    torch.testing.assert_close(row.exp(), torch.tensor([0.75, 0.0, 0.25, 0.0]))
    assert torch.isinf(row[[1, 3]]).all()
    with pytest.raises(ValueError, match="3 token ids but 2 log-probs"):
        flat_logprobs_row([0, 1, 2], [0.0, 0.0], 4)
    with pytest.raises(IndexError):
        flat_logprobs_row([0, 9], [0.0, 0.0], 4)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return bench_vllm.build_tiny_llama(tmp_path_factory.mktemp("tiny"), BASE + EXTRA, seed=0)


@pytest.mark.slow  # reads the embedded model's tokenizer
def test_tiny_llama_builder(tiny_dir):
    from transformers import AutoConfig, AutoTokenizer

    from smc.backends.vocab import build_vocab
    from smc.backends.loading import embedded_model_dir

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    cfg = AutoConfig.from_pretrained(tiny_dir)
    assert len(tok) == cfg.vocab_size == BASE + EXTRA
    assert cfg.hidden_size == bench_vllm.TINY_SHAPE["hidden_size"]
    vocab, _ = build_vocab(tok, cfg.vocab_size)
    base_vocab, _ = build_vocab(AutoTokenizer.from_pretrained(embedded_model_dir()))
    assert vocab[:BASE] == base_vocab
    assert vocab[BASE:] == [bench_vllm.synthetic_piece(k).encode() for k in range(EXTRA)]
    # No merges lead to the synthetic pieces: encoding their text gives embedded ids only.
    text = "".join(bench_vllm.synthetic_piece(k) for k in range(EXTRA))
    ids = tok.encode(text, add_special_tokens=False)
    assert max(ids) < BASE and tok.decode(ids) == text
    with pytest.raises(ValueError, match="below the embedded tokenizer"):
        bench_vllm.build_tiny_llama(tiny_dir.parent / "small", BASE - 1)


def _hf_rows(model_dir: Path, contexts: list[list[int]]) -> torch.Tensor:
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        return torch.stack([
            torch.log_softmax(model(torch.tensor([c])).logits[0, -1].float(), 0) for c in contexts
        ])


@pytest.mark.vllm
@pytest.mark.slow
def test_backend_on_tiny_model_agrees_with_hf(tiny_dir):
    pytest.importorskip("vllm")
    from smc.backends.vllm import VLLMBackend

    contexts = [[1, 200, 300], [1, 200, 301, 5, 6], [1] + [BASE + k for k in range(EXTRA)]]
    with VLLMBackend.from_pretrained(str(tiny_dir), **bench_vllm.ENGINE_ARGS) as lm:
        assert len(lm.vocab) == BASE + EXTRA
        assert lm.vocab[BASE] == b"<x0>"
        got = asyncio.run(lm.batch_next_token_logprobs(contexts))
    assert got.shape == (len(contexts), BASE + EXTRA)
    # Same tolerance as test_vllm_backend.py: fp32 weights, different kernels.
    torch.testing.assert_close(got, _hf_rows(tiny_dir, contexts), atol=2e-3, rtol=0)


@pytest.mark.vllm
@pytest.mark.slow
def test_vocab_benchmark_runs(tiny_dir):
    pytest.importorskip("vllm")
    (row,) = bench_vllm.bench_vocab(str(tiny_dir), [2], 8, 1)
    assert row["vocab"] == BASE + EXTRA and row["batch"] == 2
    for key in ("a_no_logprobs", "b_flat_logprobs", "c_dict_logprobs", "d_backend",
                "e_flat_extend", "front_lists", "convert", "convert_in_d", "engine_arith"):
        assert row[key] > 0, key
    # The logprob listing is part of the output processing that contains it.
    assert row["front_lists"] <= row["front_process_outputs"]
