"""LoRA adapter views on the HF backend: the cost of serving base and adapter requests, on the
embedded model (CPU without a GPU).

A random LoRA (rank 8 on every attention and MLP projection, made with PEFT, saved to a temporary
folder) is loaded with ``lm.load_adapter``. B = 16 contexts share a chat prompt and grow one
token per step (the same token sequences for every variant, KV reused); ms per step of:

- plain:   no adapter loaded, all rows base (the backend as before adapters existed);
- base:    the adapter loaded, all rows base (PEFT's LoRA layers route every row to "__base__");
- adapter: all rows through the adapter view;
- mixed:   8 rows base and 8 rows adapter, requested concurrently: one forward pass per step.

Usage: python benchmarks/bench_adapters.py [--steps 16] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

B = 16
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_adapter(model, folder: Path) -> Path:
    import peft

    torch.manual_seed(0)
    config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, init_lora_weights=False)
    peft.get_peft_model(copy.deepcopy(model), config).save_pretrained(folder)
    return folder


def run(sources, prompt: list[int], steps: int, seed: int) -> tuple[float, int]:
    """ms per step for B contexts, row b asking sources[b]; and forward passes per step."""
    rng = np.random.default_rng(seed)
    seqs = [prompt + [int(rng.integers(17, 49152))] for _ in range(B)]
    stats = sources[0].stats

    async def step(seqs):
        await asyncio.gather(*(src.next_token_logprobs(s) for src, s in zip(sources, seqs)))

    asyncio.run(step(seqs))  # the prompt, not timed
    passes = stats["forward_passes"]
    t = time.perf_counter()
    for _ in range(steps):
        seqs = [s + [int(rng.integers(17, 49152))] for s in seqs]
        asyncio.run(step(seqs))
    return 1000 * (time.perf_counter() - t) / steps, (stats["forward_passes"] - passes) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    import smc

    lm = smc.load_lm()
    prompt = lm.encode_chat("Write a short story about a lighthouse keeper.")
    results: dict[str, list[float]] = {k: [] for k in ("plain", "base", "adapter", "mixed")}
    passes = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_adapter(lm.model, Path(tmp))
        for r in range(args.repeats):
            lm.clear_cache()
            results["plain"].append(run([lm] * B, prompt, args.steps, r)[0])
            view = lm.load_adapter(folder, "bench") if not lm.adapters else lm.adapter("bench")
            for name, sources in (("base", [lm] * B), ("adapter", [view] * B),
                                  ("mixed", [lm, view] * (B // 2))):
                lm.clear_cache()
                ms, per_step = run(sources, prompt, args.steps, r)
                results[name].append(ms)
                passes[name] = per_step
            lm.unload_adapter("bench")
    plain = min(results["plain"])
    print(f"torch threads {torch.get_num_threads()}, B={B}, {args.steps} steps, best of {args.repeats}")
    for name, times in results.items():
        best = min(times)
        extra = f", {passes[name]:.0f} forward pass(es) per step" if name in passes else ""
        print(f"{name:8} {best:8.1f} ms/step  x{best / plain:.2f} of plain  (runs: "
              f"{', '.join(f'{t:.1f}' for t in times)}){extra}")


if __name__ == "__main__":
    main()
