"""MLX backend against the HF backend on the embedded model, on the CPU: forward rows per second.

The SMC step's workload: B contexts share a cached chat prompt (~40 tokens) and each adds one new
token, so a forward pass runs B rows of one new position over the cached prompt. Both backends are
loaded in one process and measured alternately (the machine is shared: alternating keeps the load
the same for both), best of ``--repeats`` rounds; each round asks every backend for ``--steps``
batches of fresh contexts (new random last tokens: no log-prob row is a cache hit), after a warm-up
batch. Reported: rows per second = B * steps / seconds, and the forward passes per batch.

``--backends hf`` (or ``mlx``) loads one backend only (each in a process of its own). On a small
shared machine run with ``OMP_NUM_THREADS=1``: torch's OpenMP threads stall when the cores are
oversubscribed.

Usage: python benchmarks/bench_mlx.py [--rows 1 16 64] [--steps 4] [--repeats 3]
       [--backends hf mlx] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import smc  # noqa: E402

PROMPT = "Give me a JSON object describing a lighthouse keeper: name, age and a short biography."


async def rows_per_second(lm, prompt: list[int], rows: int, steps: int, rng: np.random.Generator) -> tuple[float, float]:
    """(rows per second, forward passes per batch) over ``steps`` batches of ``rows`` contexts."""
    fresh = lambda: [prompt + [int(t)] for t in rng.integers(17, 49152, size=rows)]  # noqa: E731
    await lm.batch_next_token_logprobs(fresh())  # warm: the prompt's states are cached
    before = lm.stats["forward_passes"]
    t0 = time.perf_counter()
    for _ in range(steps):
        await lm.batch_next_token_logprobs(fresh())
    dt = time.perf_counter() - t0
    return rows * steps / dt, (lm.stats["forward_passes"] - before) / steps


def machine() -> str:
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    import os

    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}, load average {os.getloadavg()[0]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backends", nargs="+", choices=["hf", "mlx"], default=["hf", "mlx"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import mlx.core as mx
    import torch

    load = {"hf": lambda: smc.load_lm(device="cpu"), "mlx": lambda: smc.load_lm(backend="mlx", device="cpu")}
    lms = {name: load[name]() for name in args.backends}
    prompts = [lm.encode_chat(PROMPT) for lm in lms.values()]
    assert all(p == prompts[0] for p in prompts)
    prompt = prompts[0]
    rng = np.random.default_rng(0)
    best: dict[tuple[str, int], float] = {}
    passes: dict[tuple[str, int], float] = {}
    for _ in range(args.repeats):
        for rows in args.rows:
            for name, lm in lms.items():
                rate, fp = asyncio.run(rows_per_second(lm, prompt, rows, args.steps, rng))
                best[name, rows] = max(best.get((name, rows), 0.0), rate)
                passes[name, rows] = fp
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    info = {
        "machine": machine(), "commit": commit, "prompt_tokens": len(prompt),
        "versions": {"mlx": mx.__version__, "torch": torch.__version__, "torch_threads": torch.get_num_threads()},
        "rows": {str(r): {name: round(best[name, r], 1) for name in lms} for r in args.rows},
    }
    if args.json:
        print(json.dumps(info))
        return
    print(f"machine: {info['machine']}; commit {commit}; prompt {len(prompt)} tokens; {info['versions']}")
    names = list(lms)
    print("| rows per forward | " + " | ".join(f"{n.upper()} CPU rows/s" for n in names)
          + (" | MLX / HF" if len(names) == 2 else "") + " | forward passes per batch |")
    print("|---" * (len(names) + (3 if len(names) == 2 else 2)) + "|")
    for r in args.rows:
        cells = [f"{best[n, r]:.1f}" for n in names]
        if len(names) == 2:
            cells.append(f"×{best['mlx', r] / best['hf', r]:.2f}")
        cells.append(", ".join(f"{passes[n, r]:g}" for n in names))
        print(f"| {r} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
