"""HFLM: exact log-probs under batching and caching, forward-pass and position counts, errors."""

import asyncio
import math

import numpy as np
import pytest
import torch

from tests.smc.backends.rounding import FLOAT32_ROUNDING


def random_ids(rng: np.random.Generator, n: int, V: int = 49152) -> list[int]:
    return rng.integers(17, V, size=n).tolist()


def assert_close(got: torch.Tensor, ref: torch.Tensor):
    assert got.shape == ref.shape
    assert got.dtype == torch.float32
    diff = (got - ref).abs().max().item()
    assert diff <= FLOAT32_ROUNDING, diff


@pytest.mark.slow
async def test_alone_equals_reference(make_lm, reference):
    lm = make_lm()
    rng = np.random.default_rng(0)
    for n in [1, 2, 7, 23]:
        ids = random_ids(rng, n)
        lp = await lm.next_token_logprobs(ids)
        assert_close(lp, reference(ids))
        assert abs(torch.logsumexp(lp.double(), 0).item()) < 1e-6
    assert lm.stats["forward_passes"] == 4


@pytest.mark.slow
async def test_ragged_batch_with_partial_hits_equals_reference(make_lm, reference):
    lm = make_lm(max_batch=64)
    rng = np.random.default_rng(1)
    base = [random_ids(rng, n) for n in (5, 12, 20)]
    await lm.batch_next_token_logprobs(base)  # cached prefixes of different lengths
    batch = [b + random_ids(rng, k) for b in base for k in (1, 3)]
    batch += [random_ids(rng, n) for n in (1, 9, 30)]  # nothing cached
    batch += [base[1][:4], base[2][:15]]  # inside a cached path, no stored log-probs
    before = lm.stats["forward_passes"]
    out = await lm.batch_next_token_logprobs(batch)
    assert lm.stats["forward_passes"] == before + 1
    assert out.shape == (len(batch), len(lm.vocab))
    for ids, row in zip(batch, out):
        assert_close(row, reference(ids))


@pytest.mark.slow
async def test_cache_hits_are_exact_and_free(make_lm, reference):
    lm = make_lm()
    rng = np.random.default_rng(2)
    seqs = [random_ids(rng, n) for n in (3, 8, 13)]
    first = await lm.batch_next_token_logprobs(seqs)
    passes = lm.stats["forward_passes"]
    second = await lm.batch_next_token_logprobs(seqs)
    assert torch.equal(first, second)
    assert lm.stats["forward_passes"] == passes
    assert lm.stats["cache_hits"] == 3
    # A caller modifying its result does not corrupt the cache.
    second[0].zero_()
    assert torch.equal((await lm.next_token_logprobs(seqs[0])), first[0])


@pytest.mark.slow
async def test_extending_by_k_computes_exactly_k_positions(make_lm, reference):
    lm = make_lm()
    rng = np.random.default_rng(3)
    prompt = random_ids(rng, 17)
    await lm.next_token_logprobs(prompt)
    assert lm.stats["positions_computed"] == 17
    for k in (1, 2, 5):
        ext = prompt + random_ids(rng, k)
        before = dict(lm.stats)
        assert_close(await lm.next_token_logprobs(ext), reference(ext))
        assert lm.stats["positions_computed"] - before["positions_computed"] == k
        assert lm.stats["positions_reused"] - before["positions_reused"] == len(prompt)
        prompt = ext  # the next round extends this one, now cached
    assert lm.stats["recomputed_positions"] == 0


@pytest.mark.slow
async def test_siblings_after_resampling_share_their_prefix(make_lm, reference):
    """The SMC step: many particles, each one token past a shared cached prefix."""
    lm = make_lm(max_batch=32)
    rng = np.random.default_rng(4)
    prompt = random_ids(rng, 40)
    await lm.next_token_logprobs(prompt)
    children = [prompt + [t] for t in random_ids(rng, 16)]
    await asyncio.gather(*(lm.next_token_logprobs(c) for c in children))
    grandchildren = [c + [t] for c in children[:8] for t in random_ids(rng, 2)]
    before = dict(lm.stats)
    out = await asyncio.gather(*(lm.next_token_logprobs(g) for g in grandchildren))
    assert lm.stats["forward_passes"] - before["forward_passes"] == 1
    assert lm.stats["positions_computed"] - before["positions_computed"] == 16
    assert lm.stats["positions_reused"] - before["positions_reused"] == 16 * 41
    assert lm.stats["recomputed_positions"] == 0
    for g, row in zip(grandchildren[:3], out[:3]):
        assert_close(row, reference(g))


@pytest.mark.slow
async def test_64_concurrent_requests_batch_into_ceil_64_over_max_batch(make_lm):
    rng = np.random.default_rng(5)
    seqs = [random_ids(rng, int(rng.integers(1, 3))) for _ in range(64)]
    for max_batch in (64, 10):
        lm = make_lm(max_batch=max_batch)

        async def particle(ids):
            # Particles reach the LM through a few awaits of their own.
            await asyncio.sleep(0)
            return await lm.next_token_logprobs(ids)

        await asyncio.gather(*(particle(s) for s in seqs))
        assert lm.stats["forward_passes"] <= math.ceil(64 / max_batch)
        assert lm.stats["batch_rows"] == 64


@pytest.mark.slow
async def test_eviction_never_changes_results(make_lm, reference):
    probe = make_lm()
    slot, row = probe.trie.slot_bytes, probe.trie.row_bytes
    # Room for a few rows and ~12 positions: every batch evicts.
    lm = make_lm(cache_budget_bytes=3 * row + 12 * slot, max_batch=4)
    rng = np.random.default_rng(6)
    prompts = [random_ids(rng, 6) for _ in range(3)]
    seqs = [p + random_ids(rng, k) for p in prompts for k in (0, 1, 2)]
    for _ in range(2):
        out = await lm.batch_next_token_logprobs(seqs)
        assert lm.trie.used_bytes <= lm.trie.budget_bytes
        for ids, r in zip(seqs, out):
            assert_close(r, reference(ids))
    assert lm.trie.evictions > 0
    # A zero budget keeps nothing and stays exact.
    lm0 = make_lm(cache_budget_bytes=0)
    for ids in seqs[:3]:
        assert_close(await lm0.next_token_logprobs(ids), reference(ids))
        assert lm0.trie.used_bytes == 0


@pytest.mark.slow
async def test_without_kv_reuse_still_exact(make_lm, reference):
    lm = make_lm(kv_cache=False)
    rng = np.random.default_rng(7)
    seqs = [random_ids(rng, n) for n in (2, 9, 5)]
    out = await lm.batch_next_token_logprobs(seqs)
    for ids, r in zip(seqs, out):
        assert_close(r, reference(ids))
    assert lm.stats["positions_reused"] == 0


@pytest.mark.slow
async def test_bad_requests_name_the_problem(make_lm):
    lm = make_lm()
    with pytest.raises(ValueError, match="empty token list"):
        await lm.next_token_logprobs([])
    with pytest.raises(ValueError, match="out of range"):
        await lm.next_token_logprobs([5, len(lm.vocab)])
    with pytest.raises(ValueError, match="out of range"):
        await lm.next_token_logprobs([-1])
    with pytest.raises(ValueError, match="integers"):
        await lm.next_token_logprobs(["a"])
    with pytest.raises(ValueError, match="longer than the model's maximum of 8192"):
        await lm.next_token_logprobs([5] * 8193)
    with pytest.raises(ValueError, match="empty token list"):
        await lm.batch_next_token_logprobs([[5], []])
    assert lm.stats["forward_passes"] == 0


@pytest.mark.slow
async def test_failed_forward_fails_its_batch_only(make_lm, reference, monkeypatch):
    lm = make_lm()
    real_run = lm._run
    calls = {"n": 0}

    def failing_once(rows, steps):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated device failure")
        return real_run(rows, steps)

    monkeypatch.setattr(lm, "_run", failing_once)
    results = await asyncio.gather(
        *(lm.next_token_logprobs([10 + i, 20]) for i in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, RuntimeError) and "simulated" in str(r) for r in results)
    assert_close(await lm.next_token_logprobs([10, 20]), reference([10, 20]))


@pytest.mark.slow
async def test_failing_model_forward_keeps_backend_serving(make_lm, reference, monkeypatch):
    lm = make_lm()
    real_forward = lm.model.forward

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr(lm.model, "forward", broken)
    with pytest.raises(RuntimeError, match="simulated"):
        await lm.next_token_logprobs([11, 12, 13])
    monkeypatch.setattr(lm.model, "forward", real_forward)
    assert_close(await lm.next_token_logprobs([11, 12, 13]), reference([11, 12, 13]))
    assert lm.trie.used_bytes > 0


@pytest.mark.slow
async def test_cancelled_waiter_leaves_backend_usable(make_lm, reference):
    lm = make_lm()
    task = asyncio.ensure_future(lm.next_token_logprobs([30, 31]))
    other = asyncio.ensure_future(lm.next_token_logprobs([40, 41]))
    await asyncio.sleep(0)  # both are queued, the batch has not run
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_close(await other, reference([40, 41]))
    assert lm.stats["batch_rows"] == 1
    assert_close(await lm.next_token_logprobs([30, 31]), reference([30, 31]))


@pytest.mark.slow
def test_usable_across_event_loops(make_lm, reference):
    lm = make_lm()
    a = asyncio.run(lm.next_token_logprobs([50, 51]))
    b = asyncio.run(lm.next_token_logprobs([50, 51, 52]))
    assert_close(a, reference([50, 51]))
    assert_close(b, reference([50, 51, 52]))


@pytest.mark.slow
def test_encoding_and_metadata(embedded_lm):
    lm = embedded_lm
    assert lm.encode("Hello world") == lm.tokenizer("Hello world")["input_ids"]
    assert lm.decode(lm.encode("Hello world")) == b"Hello world"
    chat = lm.encode_chat("Hi", system="Be brief.")
    text = lm.decode(chat).decode()
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert lm.is_chat
    assert lm.eos_token_ids == [2]
    with pytest.raises(TypeError, match="str"):
        lm.encode(b"bytes")


@pytest.mark.slow
async def test_population_dists_equal_reference_and_stay_on_device(make_lm, reference):
    """batch_next_token_dists: rows equal the reference, cdf = cumsum(exp(logp)) in float64,
    duplicates run once, forward passes of at most max_batch distinct rows, KV reused."""
    lm = make_lm(max_batch=4)
    rng = np.random.default_rng(11)
    prefix = random_ids(rng, 5)
    batch = [prefix + random_ids(rng, 1) for _ in range(6)]
    batch += [batch[0], batch[3]]  # siblings after resampling ask the same context
    d = await lm.batch_next_token_dists(batch)
    assert d.logp.shape == (8, 49152) and d.cdf.dtype == torch.float64
    assert d.logp.device == lm.device and d.cdf.device == lm.device
    for b, ids in enumerate(batch):
        assert_close(d.logp[b], reference(ids))
        np.testing.assert_allclose(d.cdf[b].numpy(), np.cumsum(np.exp(d.logp[b].double().numpy())),
                                   rtol=1e-6, atol=1e-9)
        assert abs(d.cdf[b, -1].item() - 1.0) < 1e-9
    assert lm.stats["forward_passes"] == 2 and lm.stats["batch_rows"] == 6
    # the next step extends every context by one token: one new position per distinct row
    before = lm.stats["positions_computed"]
    await lm.batch_next_token_dists([ids + [100] for ids in batch[:6]])
    assert lm.stats["positions_computed"] - before == 6


@pytest.mark.slow
def test_gpu_benchmark_runs_on_cpu_with_a_tiny_config():
    """benchmarks/bench_gpu.py end to end on CPU: SMC and the plain decode loop both run, with
    the 128,256-token vocabulary; one forward pass per SMC step (the population fits max_batch)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import bench_gpu

    (row,) = bench_gpu.run("tiny", "cpu", [3], 3, ["none"])
    assert row["steps"] == 4  # 3 tokens, then the forced EOS
    assert row["forward_passes"] == row["steps"]
    assert row["finished"] == 3 and row["smc_s"] > 0 and row["plain_s"] > 0
    # the 10-token prompt once, then one new position per particle and step: nothing recomputed
    assert row["positions_computed"] <= 10 + 3 * row["steps"]


def test_default_cache_budget_is_a_share_of_free_cuda_memory(monkeypatch):
    """No CUDA needed: the device's free memory is read through torch.cuda.mem_get_info."""
    from smc.backends.hf import CUDA_CACHE_SHARE, default_cache_budget
    from smc.backends.kvtrie import CACHE_BUDGET_BYTES

    assert default_cache_budget(torch.device("cpu")) == CACHE_BUDGET_BYTES == 1 << 30
    seen = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: seen.append(d) or (60 << 30, 80 << 30))
    assert default_cache_budget(torch.device("cuda", 0)) == int(CUDA_CACHE_SHARE * (60 << 30))
    assert seen == [torch.device("cuda", 0)]


@pytest.mark.slow
async def test_a_population_that_outgrows_the_cache_recomputes_its_contexts(make_lm, reference):
    """The cache must hold a population's contexts: with room for fewer positions than the
    population holds, each step runs whole contexts again (still exact); the default budget
    (CPU: kvtrie.CACHE_BUDGET_BYTES) runs one new position per context and step."""
    rng = np.random.default_rng(11)
    prompts = [random_ids(rng, 12) for _ in range(8)]
    steps = [random_ids(rng, 6) for _ in range(8)]

    async def run(lm) -> int:
        for k in range(1, 7):
            batch = [p + s[:k] for p, s in zip(prompts, steps)]
            d = await lm.batch_next_token_dists(batch)
        for ids, row in zip(batch, d.logp):
            assert_close(row, reference(ids))
        return lm.stats["positions_computed"]

    roomy = make_lm()
    assert roomy.trie.budget_bytes == 1 << 30
    slot = roomy.trie.slot_bytes
    tight = make_lm(cache_budget_bytes=40 * slot)  # the population holds 8 x 18 positions
    assert await run(roomy) == 8 * 13 + 5 * 8  # the prompts and first tokens, then one per step
    assert await run(tight) > 3 * (8 * 13 + 5 * 8)  # 549 when written
