"""VLLMBackend: next-token log-probs from vLLM, through its public API only.

For a context x = (x_1..x_n), one request asks vLLM for a single token with
``SamplingParams(max_tokens=1, logprobs=-1)``; the answer carries log softmax(logits(x)), the
log-probability of every vocabulary entry before any sampling transform (``logprobs_mode=
"raw_logprobs"``), which is exactly log p(. | x). Requests from concurrent coroutines are queued
in vLLM's own scheduler and run as one batch; with automatic prefix caching (on by default here)
a request whose context shares full KV blocks with an earlier one computes only the rest, so
sibling particles after resampling share their prefix.

Why logprobs output and not a logits processor: vLLM's V1 logits processors run inside the
engine process and have no public channel to hand data back to the caller; full-vocabulary
logprobs are a documented output (``logprobs=-1``, engine arg ``max_logprobs=-1``), returned in
the compact ``flat_logprobs`` form without detokenization.

vLLM runs its engine core in a child process. Scripts that create a backend therefore need the
usual ``if __name__ == "__main__":`` guard (the child may re-import the main module). Close the
backend with ``close()`` or a ``with`` block; it is also closed at interpreter exit.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import threading
import weakref
from typing import Any, Sequence

import numpy as np
import torch

from smc.backends.base import AsyncLM, new_counters
from smc.backends.prompts import TokenizerPrompts
from smc.backends.vocab import build_vocab, eos_ids

#: KV-cache size on CPU when the caller sets none (vLLM's own default takes 92% of RAM).
CPU_KV_CACHE_BYTES = 2 << 30


def _stop(holder: list, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """Shut the engine down (its child processes exit), then stop the request loop."""
    if holder:
        engine = holder.pop()

        async def shutdown() -> None:
            # On the request loop, so that vLLM's output handler is cancelled there instead
            # of seeing the engine process die under it.
            engine.shutdown()

        if loop.is_running():
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=60)
        else:
            engine.shutdown()
        del engine
    if loop.is_running():
        loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=30)
    if not loop.is_running() and not loop.is_closed():
        loop.close()
    # AsyncLLM sits in reference cycles; collected only at interpreter teardown, its __del__
    # fails there (its module is half gone). Collect it now.
    gc.collect()


def _generation_eos(model: str) -> int | list[int] | None:
    """``eos_token_id`` of the model's generation config, None when it has none."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model).eos_token_id
    except OSError:
        return None


def flat_logprobs_row(
    token_ids: Sequence[int], logprobs: Sequence[float], vocab_size: int
) -> torch.Tensor:
    """The row r of log-probs over the vocabulary from vLLM's flat one-position output.

    With l[v] = ``logprobs[k]`` for every k with ``token_ids[k] == v`` (vLLM lists the sampled
    token first and again in its rank; both carry the same value) and l[v] = -inf for ids not
    listed, r = l - logsumexp(l): vLLM's log_softmax is float32, renormalizing makes
    logsumexp(r) == 0 to rounding.

    Args:
        token_ids, logprobs: ``FlatLogprobs.token_ids`` and ``.logprobs`` of one position.
        vocab_size: length of the row.
    """
    if len(token_ids) != len(logprobs):
        raise ValueError(
            f"flat logprobs: {len(token_ids)} token ids but {len(logprobs)} log-probs"
        )
    # One numpy call per list: at V = 128,256 torch.tensor(list) took 3x as long (measured in
    # benchmarks/bench_vllm.py --vocab), and from_numpy shares the buffer instead of copying.
    row = np.full(vocab_size, -np.inf, dtype=np.float32)
    row[np.array(token_ids, dtype=np.int64)] = np.array(logprobs, dtype=np.float32)
    out = torch.from_numpy(row)
    return out - torch.logsumexp(out, 0)


class VLLMBackend(TokenizerPrompts, AsyncLM):
    """An LM served by a vLLM ``AsyncLLM`` engine: p(. | ids) for any token context.

    Build it with :meth:`from_pretrained` (or ``smc.load_lm(name, backend="vllm")``). The
    engine's requests run on an event loop in a background thread, so the async methods can be
    awaited from any event loop (``asyncio.run`` many times over included).

    Attributes:
        vocab, eos_token_ids, special_token_ids: as in the backend protocol; ``vocab`` has
            one entry per row of the model's output (the model's vocabulary size).
        max_context: longest context accepted (the engine's ``max_model_len`` minus the one
            token each request generates).
        is_chat: whether the tokenizer has a chat template (then ``encode_chat`` works).
        stats: the named counters of ``smc.backends.base.COUNTERS`` (``forward_passes``
            counts rounds of concurrent requests; ``positions_reused`` are the context tokens
            vLLM found in its prefix cache), plus ``prompt_tokens`` and ``cached_tokens``.
    """

    def __init__(self, engine: Any, vllm_config: Any, tokenizer: Any):
        from vllm import SamplingParams

        model_config = vllm_config.model_config
        self.tokenizer = tokenizer
        self.vocab, special = build_vocab(tokenizer, model_config.get_vocab_size())
        self.eos_token_ids = eos_ids(
            tokenizer, len(self.vocab), _generation_eos(model_config.model), repr(model_config.model)
        )
        self.special_token_ids = frozenset(special - set(self.eos_token_ids))
        # Each request generates one token, which needs one free position.
        self.max_context = model_config.max_model_len - 1
        self.stats = new_counters("prompt_tokens", "cached_tokens")
        self._in_flight = 0
        # Greedy: the sampled token is discarded, and raw logprobs do not depend on it.
        self._params = SamplingParams(
            max_tokens=1,
            temperature=0.0,
            logprobs=-1,
            flat_logprobs=True,
            detokenize=False,
        )
        self._ids = itertools.count()
        # The engine is held only here, so that close() releases it.
        self._engine_holder = [engine]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="smc-vllm-requests", daemon=True
        )
        self._thread.start()
        # Runs at close(), at garbage collection, or at interpreter exit, whichever is first.
        self._finalizer = weakref.finalize(
            self, _stop, self._engine_holder, self._loop, self._thread
        )

    @classmethod
    def from_pretrained(
        cls,
        name: str,
        *,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        **engine_args: Any,
    ) -> "VLLMBackend":
        """Start a vLLM engine for the model ``name`` (HF id or local directory).

        Args:
            name: model id or path, as vLLM's ``model`` engine argument.
            device: None, or the device type vLLM runs on here ("cuda", "cpu"); vLLM picks its
                platform itself, so another value is an error rather than silently ignored.
            dtype: weights' dtype; default float32 on CPU (bfloat16 is far slower there) and
                vLLM's "auto" elsewhere.
            engine_args: any ``vllm.AsyncEngineArgs`` field (``gpu_memory_utilization``,
                ``tensor_parallel_size``, ``max_model_len``, ...). ``enable_prefix_caching``
                defaults to True and ``max_logprobs`` to -1 (whole vocabulary). On CPU,
                ``enforce_eager`` defaults to True, ``block_size`` to 32, and the KV
                cache to ``CPU_KV_CACHE_BYTES`` (2 GiB) unless
                ``kv_cache_memory_bytes``, ``gpu_memory_utilization`` or
                ``VLLM_CPU_KVCACHE_SPACE`` says otherwise.
        """
        from transformers import AutoTokenizer
        from vllm import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.v1.engine.async_llm import AsyncLLM

        if device is not None and str(device).split(":")[0] != current_platform.device_type:
            raise ValueError(
                f"device={device!r} but vLLM runs on {current_platform.device_type!r} here; "
                "leave device unset or use vLLM's own placement engine arguments"
            )
        if dtype is None:
            dtype = "float32" if current_platform.is_cpu() else "auto"
        if current_platform.is_cpu():
            # torch.compile takes minutes on CPU and the prefix cache only shares full blocks
            # (vLLM's CPU default is 128 tokens; SMC contexts differ in their last few tokens).
            engine_args.setdefault("enforce_eager", True)
            engine_args.setdefault("block_size", 32)
        if current_platform.is_cpu() and not (
            {"kv_cache_memory_bytes", "gpu_memory_utilization"} & engine_args.keys()
            or "VLLM_CPU_KVCACHE_SPACE" in os.environ
        ):
            # On CPU vLLM would otherwise reserve 92% of the machine's memory up front.
            engine_args["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        if isinstance(dtype, torch.dtype):
            dtype = str(dtype).removeprefix("torch.")
        engine_args.setdefault("enable_prefix_caching", True)
        engine_args.setdefault("max_logprobs", -1)
        engine_args.setdefault("disable_log_stats", True)
        if engine_args.get("logprobs_mode", "raw_logprobs") != "raw_logprobs":
            raise ValueError("VLLMBackend needs logprobs_mode='raw_logprobs' (log p, unmodified)")
        try:
            args = AsyncEngineArgs(model=str(name), dtype=dtype, **engine_args)
        except TypeError as e:
            raise TypeError(f"bad vLLM engine argument: {e}") from e
        vllm_config = args.create_engine_config()
        vocab_size = vllm_config.model_config.get_vocab_size()
        max_lp = vllm_config.model_config.max_logprobs
        if max_lp != -1 and max_lp < vocab_size:
            raise ValueError(
                f"max_logprobs={max_lp} is below the vocabulary size {vocab_size}; "
                "full-vocabulary log-probs need max_logprobs=-1"
            )
        tokenizer = AutoTokenizer.from_pretrained(
            vllm_config.model_config.tokenizer,
            revision=vllm_config.model_config.tokenizer_revision,
            trust_remote_code=vllm_config.model_config.trust_remote_code,
        )
        # No local name for the engine: vLLM keeps this frame alive, and close() must be able
        # to drop the last reference.
        return cls(
            AsyncLLM.from_vllm_config(vllm_config, disable_log_stats=True), vllm_config, tokenizer
        )

    # -- log-probs ---------------------------------------------------------------------------

    async def _request(self, ids: tuple[int, ...]) -> torch.Tensor:
        from vllm.inputs import TokensPrompt

        final = None
        async for out in self._engine_holder[0].generate(
            TokensPrompt(prompt_token_ids=list(ids)), self._params, f"smc-{next(self._ids)}"
        ):
            final = out
        cached = final.num_cached_tokens or 0
        self.stats["prompt_tokens"] += len(ids)
        self.stats["cached_tokens"] += cached
        self.stats["positions_reused"] += cached
        self.stats["positions_computed"] += len(ids) - cached
        lp = final.outputs[0].logprobs
        return flat_logprobs_row(lp.token_ids, lp.logprobs, len(self.vocab))

    async def _next_token_logprobs(self, ids: tuple[int, ...]) -> torch.Tensor:
        if self.closed:
            raise RuntimeError("the vLLM backend is closed")
        self.stats["requests"] += 1
        # A request that finds none in flight starts a new round: vLLM's scheduler batches the
        # requests that are in flight together.
        if self._in_flight == 0:
            self.stats["forward_passes"] += 1
        self._in_flight += 1
        try:
            fut = asyncio.run_coroutine_threadsafe(self._request(ids), self._loop)
            return await asyncio.wrap_future(fut)
        finally:
            self._in_flight -= 1

    # -- lifetime ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Shut the engine down (its child process exits). Idempotent."""
        self._finalizer()

    def __enter__(self) -> "VLLMBackend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
