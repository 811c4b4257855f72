"""Quantized loading (``load_lm(quantization="8bit" | "4bit")``, bitsandbytes) against float32,
on the embedded model, on this machine's device (CPU without a GPU).

For each mode, in its own process (so that peak resident memory is its own):
- weights: ``model.get_memory_footprint()`` (parameters and buffers), and peak RSS;
- log-prob error against float32, over C contexts (prompts of the chat template plus random
  continuations): with p the float32 next-token law and q the quantized one,
      max |log q - log p| over the vocabulary and contexts,
      E_p |log q - log p| (mean over contexts), KL(p || q) (mean over contexts),
      top-1 agreement (fraction of contexts where argmax q = argmax p);
- batch consistency: max |row from a ragged batch over cached prefixes - row from a lone
  uncached forward| (0 up to float rounding when rows are computed independently);
- decode: ms per step of B contexts growing one token per step through HFLM (KV reused),
  for B = 1 and B = 16.

Usage: python benchmarks/bench_quantization.py [--contexts 8] [--steps 16] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time

import numpy as np
import torch

MODES = ("float32", "8bit", "4bit")
PROMPTS = [
    "Give me a US phone number.",
    "Write a haiku about the sea.",
    "What is the capital of France?",
    "List three prime numbers.",
]


def contexts(lm, n: int) -> list[list[int]]:
    rng = np.random.default_rng(0)
    out = []
    for k in range(n):
        ids = lm.encode_chat(PROMPTS[k % len(PROMPTS)])
        out.append(ids + rng.integers(17, 49152, size=int(rng.integers(0, 8))).tolist())
    return out


@torch.inference_mode()
def lone(lm, ids: list[int]) -> torch.Tensor:
    logits = lm.model(input_ids=torch.tensor([ids], device=lm.device)).logits[0, -1, : len(lm.vocab)]
    return torch.log_softmax(logits.double(), -1).float().cpu()


def run_mode(mode: str, n_ctx: int, steps: int) -> dict:
    import smc

    t = time.perf_counter()
    lm = smc.load_lm(quantization=None if mode == "float32" else mode)
    load_s = time.perf_counter() - t
    ctxs = contexts(lm, n_ctx)
    rows = torch.stack([lone(lm, c) for c in ctxs])

    async def batched():
        await lm.batch_next_token_logprobs([c[:-2] for c in ctxs])  # cached prefixes
        return await lm.batch_next_token_logprobs(ctxs)

    batch_rows = asyncio.run(batched())
    consistency = (batch_rows - rows).abs().max().item()

    decode = {}
    rng = np.random.default_rng(1)
    for B in (1, 16):
        lm.clear_cache()
        seqs = [ctxs[b % len(ctxs)] + [int(rng.integers(17, 49152))] for b in range(B)]
        asyncio.run(lm.batch_next_token_logprobs(seqs))  # the prompts, not timed
        t = time.perf_counter()
        for _ in range(steps):
            seqs = [s + [int(rng.integers(17, 49152))] for s in seqs]
            asyncio.run(lm.batch_next_token_logprobs(seqs))
        decode[B] = 1000 * (time.perf_counter() - t) / steps
    return {
        "mode": mode,
        "load_s": load_s,
        "weights_mb": lm.model.get_memory_footprint() / 2**20,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "batch_consistency": consistency,
        "decode_ms": decode,
        "rows": rows.numpy().tolist(),
    }


def compare(ref: np.ndarray, got: np.ndarray) -> dict:
    p = np.exp(ref)
    d = np.abs(got - ref)
    return {
        "max_abs": float(d.max()),
        "mean_E_p_abs": float((p * d).sum(-1).mean()),
        "mean_kl": float((p * (ref - got)).sum(-1).mean()),
        "top1_agree": float((ref.argmax(-1) == got.argmax(-1)).mean()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--contexts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one mode, in a child process
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.contexts, args.steps)))
        return
    results = {}
    for mode in MODES:
        out = subprocess.run(
            [sys.executable, __file__, "--mode", mode, "--contexts", str(args.contexts), "--steps", str(args.steps)],
            stdout=subprocess.PIPE, text=True, check=True,
        )
        results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    ref = np.array(results["float32"].pop("rows"))
    for mode in MODES[1:]:
        results[mode]["vs_float32"] = compare(ref, np.array(results[mode].pop("rows")))
    if args.json:
        print(json.dumps(results, indent=1))
        return
    base = results["float32"]
    print(f"torch threads {torch.get_num_threads()}, device {'cuda' if torch.cuda.is_available() else 'cpu'}, "
          f"{args.contexts} contexts, {args.steps} decode steps")
    print("mode     weights MB  peak RSS MB  load s  ms/step B=1  ms/step B=16  batch-vs-lone  "
          "max|d|  E_p|d|  KL(p||q)  top1")
    for mode in MODES:
        r = results[mode]
        v = r.get("vs_float32", {})
        print(f"{mode:8} {r['weights_mb']:10.0f} {r['peak_rss_mb']:12.0f} {r['load_s']:7.1f} "
              f"{r['decode_ms']['1']:12.1f} {r['decode_ms']['16']:13.1f} {r['batch_consistency']:14.2e}  "
              + (f"{v['max_abs']:6.3f}  {v['mean_E_p_abs']:6.3f}  {v['mean_kl']:8.4f}  {v['top1_agree']:.2f}"
                 if v else "     -       -         -     -"))
    for mode in MODES[1:]:
        r = results[mode]
        print(f"{mode}: weights x{r['weights_mb'] / base['weights_mb']:.2f}, decode B=1 "
              f"x{r['decode_ms']['1'] / base['decode_ms']['1']:.2f}, B=16 "
              f"x{r['decode_ms']['16'] / base['decode_ms']['16']:.2f} (time relative to float32)")


if __name__ == "__main__":
    main()
