"""Backend benchmark: an SMC-shaped workload on the embedded model (CPU).

16 sequences share a ~40-token prompt and grow 64 tokens; every 4 steps the population is
resampled (multinomial: some sequences duplicated, others dropped). Every variant scores the
same token sequences (fixed in advance from a seeded generator) and returns normalized
next-token log-probs for every sequence at every step:

- backend:   HFLM, particles calling ``await lm.next_token_logprobs(ctx)`` concurrently;
- population: HFLM, one ``await lm.batch_next_token_dists(population)`` per step, as the SMC
             engine's samplers ask;
- loop:      a hand-written batched decode loop with one DynamicCache (reordered at
             resampling), the best a hand-tuned script does for this workload;
- recompute: the prompt's cache is kept, but all generated tokens are run again at every
             step (what a backend without a prefix cache pays); run for the first steps only.

Each variant runs in its own process so that its peak resident memory is its own.
``--prompt-tokens K`` repeats the prompt's text up to K tokens: a long prompt (a JSON Schema in
the prompt runs to 2,000 tokens) is where reading each sequence's past costs the most.
Usage: python benchmarks/bench_backend.py [--repeats 2] [--recompute-steps 16] [--prompt-tokens K]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import torch

PARTICLES = 16
STEPS = 64
RESAMPLE_EVERY = 4
PROMPT = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle on a cold "
    "winter morning. The story should be warm, mysterious, and end with a small surprise."
)


def workload(prompt_ids: list[int], seed: int = 0) -> tuple[list[list[int]], list[np.ndarray | None]]:
    """Tokens appended at each step and the ancestor indices applied after it (or None)."""
    rng = np.random.default_rng(seed)
    tokens = [rng.integers(17, 49152, size=PARTICLES).tolist() for _ in range(STEPS)]
    ancestors = [
        rng.integers(0, PARTICLES, size=PARTICLES) if (t + 1) % RESAMPLE_EVERY == 0 else None
        for t in range(STEPS)
    ]
    return tokens, ancestors


def contexts(prompt_ids, tokens, ancestors):
    """Contexts asked about at each step (the population before appending that step's tokens)."""
    pop = [list(prompt_ids) for _ in range(PARTICLES)]
    out = []
    for t in range(STEPS):
        out.append([tuple(p) for p in pop])
        pop = [p + [tokens[t][i]] for i, p in enumerate(pop)]
        if ancestors[t] is not None:
            pop = [list(pop[a]) for a in ancestors[t]]
    return out


def distinct_positions(all_contexts) -> int:
    """Positions a perfect prefix cache computes: distinct non-empty prefixes of all contexts."""
    seen = set()
    for step in all_contexts:
        for ctx in step:
            for k in range(1, len(ctx) + 1):
                seen.add(ctx[:k])
    return len(seen)


def run_backend(lm_base, prompt_ids, tokens, ancestors, population: bool = False):
    from smc.backends.hf import HFLM

    lm = HFLM(lm_base.model, lm_base.tokenizer, max_batch=PARTICLES)
    peak_cache = 0
    step_times = []

    async def step(pop):
        if population:
            return (await lm.batch_next_token_dists(pop)).logp
        return await asyncio.gather(*(lm.next_token_logprobs(p) for p in pop))

    async def smc():
        nonlocal peak_cache
        pop = [list(prompt_ids) for _ in range(PARTICLES)]
        for t in range(STEPS):
            t0 = time.perf_counter()
            rows = await step(pop)
            step_times.append(time.perf_counter() - t0)
            assert len(rows) == PARTICLES
            pop = [p + [tokens[t][i]] for i, p in enumerate(pop)]
            if ancestors[t] is not None:
                pop = [list(pop[a]) for a in ancestors[t]]
            peak_cache = max(peak_cache, lm.trie.used_bytes)

    start, cpu = time.perf_counter(), time.process_time()
    asyncio.run(smc())
    wall = time.perf_counter() - start
    return {"wall_s": wall, "cpu_s": time.process_time() - cpu, "step_s": step_times,
            "stats": dict(lm.stats),
            "peak_cache_bytes": peak_cache}


@torch.inference_mode()
def run_loop(lm_base, prompt_ids, tokens, ancestors):
    from transformers import DynamicCache

    from smc.backends.hf import cache_kwarg

    model, V = lm_base.model, len(lm_base.vocab)
    step_times = []
    start, cpu = time.perf_counter(), time.process_time()
    t0 = time.perf_counter()
    cache = DynamicCache()
    out = model(torch.tensor([prompt_ids]), use_cache=True, **{cache_kwarg(model): cache}, logits_to_keep=1)
    torch.log_softmax(out.logits[:, -1, :V].double(), -1).float().expand(PARTICLES, V)
    cache.batch_repeat_interleave(PARTICLES)
    step_times.append(time.perf_counter() - t0)
    pos = len(prompt_ids)
    for t in range(STEPS - 1):
        t0 = time.perf_counter()
        ids = torch.tensor(tokens[t])[:, None]
        if ancestors[t] is not None:
            idx = torch.as_tensor(ancestors[t])
            cache.reorder_cache(idx)
            ids = ids[idx]
        out = model(ids, use_cache=True, **{cache_kwarg(model): cache},
                    position_ids=torch.full((PARTICLES, 1), pos), logits_to_keep=1)
        torch.log_softmax(out.logits[:, -1, :V].double(), -1).float()
        pos += 1
        step_times.append(time.perf_counter() - t0)
    kv_bytes = sum(l.keys.nbytes + l.values.nbytes for l in cache.layers)
    return {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu,
            "step_s": step_times, "final_kv_bytes": kv_bytes}


@torch.inference_mode()
def run_recompute(lm_base, prompt_ids, tokens, ancestors, steps: int):
    """Prompt KV kept; every generated token run again at each step (batched, 16 rows)."""
    from transformers import DynamicCache

    from smc.backends.hf import cache_kwarg

    model, V = lm_base.model, len(lm_base.vocab)
    all_ctx = contexts(prompt_ids, tokens, ancestors)
    P = len(prompt_ids)
    step_times = []
    start = time.perf_counter()
    cache0 = DynamicCache()
    out = model(torch.tensor([prompt_ids]), use_cache=True, **{cache_kwarg(model): cache0}, logits_to_keep=1)
    torch.log_softmax(out.logits[:, -1, :V].double(), -1)
    prompt_kv = [(l.keys, l.values) for l in cache0.layers]
    step_times.append(time.perf_counter() - start)
    for t in range(1, steps):
        t0 = time.perf_counter()
        gen = torch.tensor([list(c[P:]) for c in all_ctx[t]])
        cache = DynamicCache(ddp_cache_data=[
            (k.expand(PARTICLES, -1, -1, -1).contiguous(), v.expand(PARTICLES, -1, -1, -1).contiguous())
            for k, v in prompt_kv
        ])
        pos = torch.arange(P, P + gen.shape[1]).expand(PARTICLES, -1)
        out = model(gen, use_cache=True, **{cache_kwarg(model): cache}, position_ids=pos, logits_to_keep=1)
        torch.log_softmax(out.logits[:, -1, :V].double(), -1).float()
        step_times.append(time.perf_counter() - t0)
    return {"wall_s": time.perf_counter() - start, "step_s": step_times}


def child(variant: str, recompute_steps: int, prompt_tokens: int) -> None:
    from smc.backends.loading import load_lm

    torch.manual_seed(0)
    lm = load_lm()
    prompt_ids = lm.encode(PROMPT)
    while len(prompt_ids) < prompt_tokens:
        prompt_ids = prompt_ids + lm.encode(" " + PROMPT)
    if prompt_tokens:
        prompt_ids = prompt_ids[:prompt_tokens]
    tokens, ancestors = workload(prompt_ids)
    if variant in ("backend", "population"):
        res = run_backend(lm, prompt_ids, tokens, ancestors, population=variant == "population")
    elif variant == "loop":
        res = run_loop(lm, prompt_ids, tokens, ancestors)
    else:
        res = run_recompute(lm, prompt_ids, tokens, ancestors, recompute_steps)
    res["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    res["prompt_tokens"] = len(prompt_ids)
    res["distinct_positions"] = distinct_positions(contexts(prompt_ids, tokens, ancestors))
    print(json.dumps(res))


def spawn(variant: str, recompute_steps: int, prompt_tokens: int) -> dict:
    cmd = [sys.executable, __file__, "--child", variant, "--recompute-steps", str(recompute_steps),
           "--prompt-tokens", str(prompt_tokens)]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--recompute-steps", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=0,
                    help="repeat the prompt's text up to this many tokens (0: the prompt as it is)")
    ap.add_argument("--child", choices=["backend", "population", "loop", "recompute"])
    args = ap.parse_args()
    if args.child:
        child(args.child, args.recompute_steps, args.prompt_tokens)
        return

    runs = []
    for _ in range(args.repeats):
        # Alternate, so that a burst of load from other processes hits all alike.
        loop = spawn("loop", args.recompute_steps, args.prompt_tokens)
        backend = spawn("backend", args.recompute_steps, args.prompt_tokens)
        population = spawn("population", args.recompute_steps, args.prompt_tokens)
        runs.append((backend, loop, population))
    recompute = spawn("recompute", args.recompute_steps, args.prompt_tokens)
    k = args.recompute_steps
    backend, loop, population = runs[-1]
    st = backend["stats"]
    report = {
        "ratio_backend_over_loop": [b["wall_s"] / l["wall_s"] for b, l, _ in runs],
        # CPU seconds of the process: less sensitive than wall time to other load on the machine.
        "cpu_ratio_backend_over_loop": [b["cpu_s"] / l["cpu_s"] for b, l, _ in runs],
        "ratio_population_over_loop": [p["wall_s"] / l["wall_s"] for _, l, p in runs],
        "cpu_ratio_population_over_loop": [p["cpu_s"] / l["cpu_s"] for _, l, p in runs],
        "backend_wall_s": [b["wall_s"] for b, _, _ in runs],
        "population_wall_s": [p["wall_s"] for _, _, p in runs],
        "loop_wall_s": [l["wall_s"] for _, l, _ in runs],
        "population_positions_computed": population["stats"]["positions_computed"],
        "positions_computed": st["positions_computed"],
        "distinct_positions": backend["distinct_positions"],
        "recomputed_prefix_tokens": st["positions_computed"] - backend["distinct_positions"],
        "recomputed_positions_stat": st["recomputed_positions"],
        "forward_passes": st["forward_passes"],
        "cache_hits": st["cache_hits"],
        "requests": st["requests"],
        f"first_{k}_steps_s": {
            "backend": sum(backend["step_s"][:k]),
            "loop": sum(loop["step_s"][:k]),
            "recompute": recompute["wall_s"],
        },
        "recompute_over_backend_first_steps": recompute["wall_s"] / sum(backend["step_s"][:k]),
        "peak_cache_bytes_backend": backend["peak_cache_bytes"],
        "final_kv_bytes_loop": loop["final_kv_bytes"],
        "max_rss_bytes": {"backend": backend["max_rss_bytes"], "loop": loop["max_rss_bytes"],
                          "recompute": recompute["max_rss_bytes"]},
        "prompt_tokens": backend["prompt_tokens"],
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
