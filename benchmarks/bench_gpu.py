"""SMC against plain batched decoding on the same model: an 8B-shaped Llama on a GPU.

The model is a randomly initialized ``LlamaForCausalLM`` built from a config (no download): on
CUDA Llama-3-8B's shape in bfloat16 (hidden 4096, 32 layers, 32 heads, 8 KV heads, intermediate
14336, vocabulary 128,256); elsewhere a tiny config of the same vocabulary in float32, so the
script (and its test) runs on any machine. Its vocabulary is the embedded tokenizer's 49,152
tokens plus 79,104 synthetic lowercase tokens (" q" + base-26 letters), set on the backend after
construction; the tokenizer only encodes the prompt. Timings do not depend on what the tokens
spell; constraint checks do, and with random weights the JSON run is a worst case for AWRS (the
model puts no mass on JSON), so read its ratio as an upper bound.

    ratio = SMC wall / plain wall,

SMC: ``smc.smc`` over HFLM (prefix-trie KV cache, population step), AWRS, N particles, until
every particle has finished or ``tokens`` steps; plain: the same model, the same batch of N rows,
a DynamicCache, one prefill and as many decode steps as the SMC run took, each sampling one
token per row on the device (log_softmax, multinomial). Target: ratio <= 1.3.

    python benchmarks/bench_gpu.py [--particles 16,64] [--tokens 256] [--constraints none,json]
           [--device cuda|cpu] [--config 8b|tiny] [--tokenizer DIR] [--cache-positions K]
           [--repeat K]

Before the timed runs, one short SMC run and one short plain decode warm the device up (CUDA
context, kernels, allocator), so neither side pays for the first call. ``--tokenizer DIR``: a
folder holding the embedded model's tokenizer (default: the embedded model's converted folder);
``--cache-positions K``: the backend's cache budget as K positions' key/value states (default:
its own, ``smc.backends.hf.default_cache_budget``); "positions computed" counts the positions
the SMC run's forward passes computed, which rise far above steps x N when the population's
contexts do not fit.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_overhead import SCHEMA, synthetic_tokens  # noqa: E402
from potentials import JSONSchema  # noqa: E402
from samplers import make_sampler  # noqa: E402
from smc.backends.hf import HFLM, cache_kwarg  # noqa: E402
from smc.engine import smc  # noqa: E402
from smc.programs.constrained import ConstrainedGeneration
from potentials.lift import as_token_potential as lift  # noqa: E402

VOCAB = 128_256
CONFIGS = {
    "8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
               intermediate_size=14336),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128),
}
PROMPT = "Write a short note about the sea as JSON:"


def build(config: str, device: str, tokenizer: str | None = None,
          cache_positions: int | None = None) -> tuple[HFLM, list[int]]:
    """(backend over a random Llama of the named shape, prompt ids); ``cache_positions``: a
    cache budget of that many positions' key/value states (default: the backend's own)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from smc.backends.loading import embedded_model_dir

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    cfg = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=4096, **CONFIGS[config])
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    if device == "cuda":
        # the float32 copy's blocks go back to the device, so the backend's default cache
        # budget (a share of the free memory) sees what a model loaded in bf16 leaves free
        torch.cuda.empty_cache()
    tok = AutoTokenizer.from_pretrained(tokenizer or embedded_model_dir())
    lm = HFLM(model, tok)
    if cache_positions is not None:
        lm = HFLM(model, tok, cache_budget_bytes=cache_positions * lm.trie.slot_cost)
    # the backend's vocabulary is the tokenizer's (the model's rows beyond it are dropped)
    lm.vocab = lm.vocab + synthetic_tokens(VOCAB - len(lm.vocab))
    return lm, list(tok.encode(PROMPT))


@torch.inference_mode()
def plain_decode(model: Any, prompt: list[int], n: int, steps: int, device: str) -> float:
    """Seconds for one prefill of n copies of ``prompt`` and ``steps`` - 1 decode steps."""
    from transformers import DynamicCache

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    gen = torch.Generator(device=device).manual_seed(0)
    sync()
    t0 = time.perf_counter()
    cache = DynamicCache()
    ids = torch.tensor([prompt] * n, device=device)
    for _ in range(steps):
        logits = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{cache_kwarg(model): cache}).logits[:, -1]
        probs = torch.softmax(logits.float(), dim=-1)
        ids = torch.multinomial(probs, 1, generator=gen)
    sync()
    return time.perf_counter() - t0


def smc_run(lm: HFLM, prompt: list[int], constraint: str, n: int, tokens: int, device: str) -> tuple[float, Any]:
    """(seconds, result) of one SMC run of N particles for at most ``tokens`` steps."""
    pot = lift(JSONSchema(SCHEMA) if constraint == "json" else None, lm)
    sampler = make_sampler("awrs", lm, pot, prompt)
    lm.clear_cache()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    r = asyncio.run(smc(ConstrainedGeneration(sampler, tokens), n, seed=0, progress=False))
    sync()
    return time.perf_counter() - t0, r


HEADER = ("| config | device | constraint | N | steps | SMC s | plain s | ratio | target | forward passes "
          "| positions computed | full evals | finished |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def run(config: str, device: str, particles: list[int], tokens: int, constraints: list[str],
        tokenizer: str | None = None, cache_positions: int | None = None, repeat: int = 1) -> list[dict]:
    """``repeat`` rows per (constraint, N), each printed as it is measured."""
    lm, prompt = build(config, device, tokenizer, cache_positions)
    for constraint in constraints:  # warm-up: compiled constraints, kernels, allocator
        smc_run(lm, prompt, constraint, particles[0], 4, device)
    plain_decode(lm.model, prompt, particles[0], 4, device)
    print(HEADER, flush=True)
    rows = []
    for constraint, n, _ in itertools.product(constraints, particles, range(repeat)):
        computed = lm.stats["positions_computed"]
        wall, r = smc_run(lm, prompt, constraint, n, tokens, device)
        computed = lm.stats["positions_computed"] - computed
        steps = r.stats["steps"]
        plain = plain_decode(lm.model, prompt, n, steps, device)
        row = dict(config=config, device=device, constraint=constraint, N=n, steps=steps,
                   smc_s=round(wall, 3), plain_s=round(plain, 3), ratio=round(wall / plain, 2),
                   forward_passes=r.stats["lm_forward_passes"], positions_computed=computed,
                   full_evals=r.stats["full_evaluations"], finished=len(r.finished))
        print(f"| {config} | {device} | {constraint} | {n} | {steps} | {row['smc_s']} | {row['plain_s']} | "
              f"**{row['ratio']}** | 1.3 | {row['forward_passes']} | {computed} | {row['full_evals']} | {row['finished']} |",
              flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--particles", default="16,64")
    ap.add_argument("--tokens", type=int, default=None, help="default 256 on CUDA, 16 elsewhere")
    ap.add_argument("--constraints", default="none,json")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--config", default=None, help="8b (default on CUDA) or tiny")
    ap.add_argument("--tokenizer", help="folder of the embedded tokenizer (default: the converted model's)")
    ap.add_argument("--repeat", type=int, default=1, help="rows per (constraint, N), for the spread")
    ap.add_argument("--cache-positions", type=int,
                    help="cache budget in positions' key/value states (default: the backend's own budget)")
    args = ap.parse_args()
    config = args.config or ("8b" if args.device == "cuda" else "tiny")
    tokens = args.tokens or (256 if args.device == "cuda" else 16)
    run(config, args.device, [int(x) for x in args.particles.split(",")], tokens, args.constraints.split(","),
        args.tokenizer, args.cache_positions, args.repeat)


if __name__ == "__main__":
    main()
