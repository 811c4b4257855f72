"""HFLM: a Hugging Face transformers causal LM as an async backend (CPU or CUDA, any dtype).

    log p(. | ids) = log_softmax(logits[len(ids) - 1, :V])      V = len(vocab)

Rows of the output layer beyond the tokenizer's vocabulary (padding added for speed) are
dropped before normalizing. Requests from concurrent coroutines are batched into one forward
pass (`smc.backends.batching`); a prefix trie (`smc.backends.kvtrie`) keeps key/value states and
log-probs, so a request pays only for the tokens after its longest cached prefix.

A batch of contexts with cached prefixes of lengths c_r and n_r new tokens is laid out as

    [zero slots]*(P - c_r) + cached states (c_r)  |  [pad]*(N - n_r) + new tokens (n_r)

with P = max c_r and N = max n_r, an explicit 4-D mask (causal among real positions; a padded
query sees only itself, so no row is all masked) and true positions c_r + k. The last column
is then every row's last token, the only one whose logits are computed. The states are laid out
by ``smc.backends.stepstates``: a population's steps keep their buffer, so a row continuing a
context of the step before reads its past in place instead of from the trie.

LoRA adapters (`smc.backends.adapters`): ``lm.adapter(name)`` is a view whose log-probs are
those of the model with that adapter. Every view (the base model included) is a *source* with
its own prefix trie, so cached states and rows of different adapters never mix; a forward pass
may hold rows of several sources, and PEFT applies each row's adapter (``adapter_names``).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from smc.backends.adapters import BASE_ADAPTER, AdapterView, LoraRouter, Source
from smc.backends.base import AsyncLM, NextTokenDists, new_counters
from smc.backends.batching import AutoBatcher
from smc.backends.kvtrie import CACHE_BUDGET_BYTES, KVTrie, Node
from smc.backends.prompts import TokenizerPrompts
from smc.backends.quantization import quantization_config
from smc.backends.stepstates import StepStates
from smc.backends.vocab import build_vocab, eos_ids


@dataclass
class _Row:
    src: Source
    ids: tuple[int, ...]
    past: Node
    new: tuple[int, ...]


class _PooledLayer(DynamicLayer):
    """A cache layer over a preallocated [B, H, P + N, D] buffer whose first P positions hold
    the batch's past; ``update`` writes new states in place (no concatenation)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, past: int):
        super().__init__()
        self._k, self._v, self._len = keys, values, past
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True
        self.keys = keys[:, :, :past]
        self.values = values[:, :, :past]

    def update(self, key_states, value_states, *args, **kwargs):
        n = key_states.shape[-2]
        self._k[:, :, self._len : self._len + n] = key_states
        self._v[:, :, self._len : self._len + n] = value_states
        self._len += n
        self.keys = self._k[:, :, : self._len]
        self.values = self._v[:, :, : self._len]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._len


def cache_kwarg(model: Any) -> str:
    """The name under which ``model.forward`` takes a key/value cache: ``"cache"`` where the
    installed transformers declares it (5.2x renamed it and warns on the old name), else
    ``"past_key_values"`` (older releases, e.g. the < 5.20 that vLLM pins). Read from the
    signature, which ``deprecate_kwarg`` keeps (``functools.wraps``), not guessed from a version."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _as_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if dtype is None:
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r} (use e.g. 'float32', 'bfloat16', 'float16')")
    return value


#: share of a CUDA device's free memory (read when the backend is built, the model already on it)
#: that the default cache budget takes. A population's contexts must fit in the cache, or every
#: step recomputes them: an 8B model (128 KiB per position) at N = 64 and 256 tokens needs
#: 2.1 GB, and with 1 GiB SMC took 3.9x a plain decode loop on an H100, 1.06x at N = 16
#: (benchmarks/RESULTS.md, "bench_gpu.py"). 0.3 leaves room for the pool's doubling (1.5x the
#: pool while it copies), the population's step buffer and the activations.
CUDA_CACHE_SHARE = 0.3


def default_cache_budget(device: torch.device) -> int:
    """B = CUDA_CACHE_SHARE * (free bytes on ``device``) on CUDA, else CACHE_BUDGET_BYTES."""
    if device.type != "cuda":
        return CACHE_BUDGET_BYTES
    free, _ = torch.cuda.mem_get_info(device)
    return int(CUDA_CACHE_SHARE * free)


#: most concurrent population steps (``batch_next_token_dists`` calls) gathered into one call
POPULATION_CALLS = 64


class HFLM(TokenizerPrompts, AsyncLM):
    """A transformers causal LM with auto-batching and a prefix-trie cache.

    Args:
        model: a causal LM (``AutoModelForCausalLM``); put it on its device first.
        tokenizer: its tokenizer.
        max_batch: most contexts in one forward pass (default 256: a population of up to 256
            particles takes one forward pass per step).
        cache_budget_bytes: bound on cached key/value states plus cached log-prob rows
            (default ``default_cache_budget``: 30% of the free memory on a CUDA device, 1 GiB
            elsewhere). Log-prob rows live in host memory but count here too.
        kv_cache: reuse cached key/value states (default: when every layer is plain full
            attention with one state shape; other models recompute contexts, still batched
            and with cached log-probs).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch: int = 256,
        cache_budget_bytes: int | None = None,
        kv_cache: bool | None = None,
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        logit_rows = model.get_output_embeddings().weight.shape[0]
        vocab, special = build_vocab(tokenizer, min(len(tokenizer), logit_rows))
        self.vocab = vocab
        self.eos_token_ids = eos_ids(
            tokenizer,
            len(vocab),
            getattr(getattr(model, "generation_config", None), "eos_token_id", None),
            repr(getattr(model, "name_or_path", "") or type(model).__name__),
        )
        self.special_token_ids = frozenset(special - set(self.eos_token_ids))
        self.max_context = self._find_max_context()
        self.stats = new_counters("batch_rows", "recomputed_positions", "kv_read_positions", "kv_moved_positions")
        self._pad_id = self.eos_token_ids[0]
        self._keep_arg = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._cache_arg = cache_kwarg(model)
        self._kv_shape = self._probe_kv_shape() if kv_cache is not False else None
        if kv_cache and self._kv_shape is None:
            raise ValueError(
                "kv_cache=True needs a model whose layers all keep full-attention key/value "
                "states of one shape"
            )
        if cache_budget_bytes is None:
            cache_budget_bytes = default_cache_budget(self.device)
        self._cache_budget = cache_budget_bytes
        self._base = Source(BASE_ADAPTER, self._new_trie(cache_budget_bytes))
        self.trie = self._base.trie
        self._lora: LoraRouter | None = None  # created by the first load_adapter
        self._adapters: dict[str, Source] = {}
        # states buffers kept from one pass to the next: per source, one for population steps
        # and one for the batcher's single requests (each path's contexts continue its own)
        self._steps: dict[tuple[Source, str], StepStates] = {}
        self._batcher: AutoBatcher[tuple[Source, tuple[int, ...]], torch.Tensor | None] = AutoBatcher(
            self._forward, max_batch
        )
        # population steps of concurrent runs: each item is one call's contexts
        self._population: AutoBatcher[tuple[Source, list[tuple[int, ...]]], Any] = AutoBatcher(
            self._dists_of_calls, POPULATION_CALLS
        )

    def _new_trie(self, budget_bytes: int) -> KVTrie:
        return KVTrie(
            slot_numel=math.prod(self._kv_shape) if self._kv_shape else 0,
            dtype=self.dtype,
            device=self.device,
            row_bytes=4 * len(self.vocab),
            budget_bytes=budget_bytes,
        )

    # ------------------------------------------------------------------ adapters
    def load_adapter(self, path_or_hub_id: str, name: str, *, cache_budget_bytes: int | None = None) -> AdapterView:
        """Load a PEFT LoRA adapter onto the model as ``name``; returns ``self.adapter(name)``.

        PEFT adds the LoRA branches to ``lm.model`` in place, but no adapter is active: a plain
        ``lm.model(...)`` call, and ``lm`` itself, still compute log p_base; only requests
        through the view apply the adapter.

        Args:
            path_or_hub_id: a directory written by PEFT's ``save_pretrained`` (with
                adapter_config.json), or a Hub id of one.
            name: the adapter's name (letters, digits, '_' and '-'); unique among loaded ones.
            cache_budget_bytes: the view's own cache budget (default: the base's; on CUDA,
                where that is a share of the free memory, give each of several views its own).
        """
        if name in self._adapters:
            raise ValueError(f"an adapter named {name!r} is already loaded; unload_adapter({name!r}) first")
        budget = self._cache_budget if cache_budget_bytes is None else cache_budget_bytes
        trie = self._new_trie(budget)  # checks the budget before the (slow) load
        if self._lora is None:
            self._lora = LoraRouter(self.model)
        self._lora.load(path_or_hub_id, name)
        src = Source(name, trie)
        src.view = AdapterView(self, src)
        self._adapters[name] = src
        return src.view

    def adapter(self, name: str) -> AdapterView:
        """The backend view of loaded adapter ``name``: the same protocol as ``self``, with
        log p_name(. | ids); it shares ``stats`` and the batcher with ``self``."""
        src = self._adapters.get(name)
        if src is None:
            loaded = ", ".join(map(repr, self._adapters)) or "none"
            raise KeyError(f"no adapter named {name!r} is loaded (loaded: {loaded}); use load_adapter")
        return src.view

    @property
    def adapters(self) -> list[str]:
        """Names of the loaded adapters."""
        return list(self._adapters)

    def unload_adapter(self, name: str) -> None:
        """Remove adapter ``name`` from the model and drop its cache. Its view stops working
        (requests raise, also those already waiting); a later ``load_adapter`` under the same
        name makes a new view with an empty cache."""
        src = self._adapters.pop(name, None)
        if src is None:
            raise KeyError(f"no adapter named {name!r} is loaded")
        src.live = False
        src.trie.clear()
        for path in ("population", "requests"):
            self._steps.pop((src, path), None)
        self._lora.unload(name)

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(
        cls,
        name: str,
        *,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        quantization: Any = None,
        **kwargs: Any,
    ) -> "HFLM":
        """Load ``name`` (a Hub id or a local directory) with ``AutoModelForCausalLM``.

        ``dtype`` defaults to float32 on CPU and bfloat16 on CUDA; ``quantization`` is None,
        "8bit", "4bit" (bitsandbytes, see ``smc.backends.quantization``) or a transformers
        quantization config; other keyword arguments go to the constructor.
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        torch_dtype = _as_dtype(dtype, device)
        config = quantization_config(quantization, device, torch_dtype)
        extra: dict[str, Any] = {}
        if config is not None:
            # A quantized model is placed while it loads; moving it afterwards is not supported.
            extra = {"quantization_config": config, "device_map": {"": str(device)}}
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype, **extra)
        except (OSError, ValueError) as e:
            raise ValueError(
                f"cannot load model {name!r}: no such local directory, and the Hugging Face Hub "
                f"has no such model or cannot be reached (offline?). Cause: {e}"
            ) from e
        return cls(model if config is not None else model.to(device), tokenizer, **kwargs)

    def _find_max_context(self) -> int | None:
        config = self.model.config.get_text_config()
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(config, key, None)
            if isinstance(value, int) and value > 0:
                return value
        limit = getattr(self.tokenizer, "model_max_length", None)
        return limit if isinstance(limit, int) and limit < 10**9 else None

    @torch.inference_mode()
    def _probe_kv_shape(self) -> tuple[int, ...] | None:
        """(layers, 2, heads, head_dim) when every layer caches plain full-attention states."""
        config = self.model.config.get_text_config()
        types = getattr(config, "layer_types", None)
        if types and any(t != "full_attention" for t in types):
            return None
        if getattr(config, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
            return None
        cache = DynamicCache()
        ids = torch.tensor([[self._pad_id]], device=self.device)
        self.model(input_ids=ids, use_cache=True, **{self._cache_arg: cache})
        layers = getattr(cache, "layers", [])
        if not layers or any(type(layer) is not DynamicLayer for layer in layers):
            return None
        shapes = {tuple(layer.keys.shape) for layer in layers}
        shapes |= {tuple(layer.values.shape) for layer in layers}
        if len(shapes) != 1:
            return None
        _, heads, _, dim = shapes.pop()
        return (len(layers), 2, heads, dim)

    # ------------------------------------------------------------------ scoring
    async def _next_token_logprobs(self, ids: tuple[int, ...]) -> torch.Tensor:
        return await self._score(self._base, ids)

    async def _score(self, src: Source, ids: tuple[int, ...]) -> torch.Tensor:
        """log p_src(. | ids): from ``src``'s trie, else from a batched forward pass."""
        src.check_live()
        self.stats["requests"] += 1
        hit = src.trie.cached_logprobs(ids)
        if hit is not None:
            self.stats["cache_hits"] += 1
            return hit.clone()
        # The batch hands out its own rows; the trie keeps copies, so callers may modify theirs.
        row = await self._batcher.submit((src, ids))
        if row is None:
            src.check_live()  # unloaded while the request waited: raises
        return row

    def clear_cache(self) -> None:
        """Forget every cached state and log-prob row (of the base model and every adapter)."""
        self.trie.clear()
        for src in self._adapters.values():
            src.trie.clear()
        self._steps.clear()

    async def batch_next_token_dists(self, batch: Sequence[Sequence[int]]) -> NextTokenDists:
        """NextTokenDists of every context, computed on the model's device inside the forward
        (float64 log-softmax, its exp and cumsum): no row leaves the device. Distinct contexts
        are run once (in forward passes of at most ``max_batch`` rows); log-prob rows are not
        cached (a population's contexts are new at every step; KV states are). Concurrent
        calls (the population steps of runs sharing this backend, e.g. a server's requests)
        are gathered into the same forward passes."""
        got = await self._population.submit((self._base, [self.check_ids(ids) for ids in batch]))
        if isinstance(got, BaseException):
            raise got
        return got

    def _dists_of_calls(
        self, calls: list[tuple[Source, list[tuple[int, ...]]]]
    ) -> list[NextTokenDists | BaseException]:
        """``_dists`` of several concurrent calls in one: each source's contexts of all calls
        run together, and each call gets its own rows back. If the gathered call fails, each
        call is run alone, so that only a failing call gets its exception."""
        if len(calls) == 1:
            return [self._dists(*calls[0])]
        groups: dict[int, list[int]] = {}
        for k, (src, _) in enumerate(calls):
            groups.setdefault(id(src), []).append(k)
        out: list[NextTokenDists | BaseException | None] = [None] * len(calls)
        try:
            for members in groups.values():
                src = calls[members[0]][0]
                d = self._dists(src, [ids for k in members for ids in calls[k][1]])
                start = 0
                for k in members:
                    end = start + len(calls[k][1])
                    out[k] = NextTokenDists(d.logp[start:end], d.cdf[start:end])
                    start = end
        except Exception:  # noqa: BLE001 - retried one call at a time below
            out = []
            for call in calls:
                try:
                    out.append(self._dists(*call))
                except Exception as e:  # noqa: BLE001 - handed to that call's caller
                    out.append(e)
        return out  # type: ignore[return-value]

    @torch.inference_mode()
    def _dists(self, src: Source, requests: list[tuple[int, ...]]) -> NextTokenDists:
        src.check_live()
        self.stats["requests"] += len(requests)
        distinct = list(dict.fromkeys(requests))
        step = self._batcher.max_batch
        steps = self._kept(src, "population") if len(distinct) <= step else None
        parts, order = [], []
        for k in range(0, len(distinct), step):
            rows, logp, states = self._run(self._rows([(src, ids) for ids in distinct[k : k + step]]), steps)
            self._cache(rows, states, None)  # the population path keeps no rows: KV states only
            parts.append(logp)
            order += [r.ids for r in rows]
        src.trie.evict()
        logp = parts[0] if len(parts) == 1 else torch.cat(parts)
        if order != requests:
            where = {ids: k for k, ids in enumerate(order)}
            logp = logp[torch.tensor([where[ids] for ids in requests], device=logp.device)]
        return NextTokenDists(logp.float(), torch.cumsum(torch.exp(logp), dim=-1))

    def _kept(self, src: Source, path: str) -> StepStates | None:
        """The states buffer that ``path``'s passes over ``src`` keep (None without a KV cache)."""
        if self._kv_shape is None:
            return None
        key = (src, path)
        if key not in self._steps:
            self._steps[key] = StepStates(self._kv_shape, self.dtype, self.device, self.stats, keep=True)
        return self._steps[key]

    def _rows(self, distinct: list[tuple[Source, tuple[int, ...]]]) -> list[_Row]:
        rows: list[_Row] = []
        for src, ids in distinct:
            # The last token is always run: its logits are what is asked for.
            past = src.trie.longest_prefix(ids, len(ids) - 1) if self._kv_shape else src.trie.root
            rows.append(_Row(src, ids, past, ids[past.depth :]))
        return rows

    @torch.inference_mode()
    def _forward(self, requests: list[tuple[Source, tuple[int, ...]]]) -> list[torch.Tensor | None]:
        """One forward pass for the distinct (source, context) pairs among ``requests``; None
        for a request whose adapter was unloaded while it waited."""
        rows = self._rows([key for key in dict.fromkeys(requests) if key[0].live])
        out: dict[tuple[Source, tuple[int, ...]], torch.Tensor] = {}
        if rows:
            sources = {r.src for r in rows}
            steps = self._kept(rows[0].src, "requests") if len(sources) == 1 else None
            rows, logp, states = self._run(rows, steps)
            logprobs = list(logp.float().cpu().unbind(0))
            self._cache(rows, states, logprobs)
            out = {(r.src, r.ids): lp for r, lp in zip(rows, logprobs)}
            for src in {id(r.src): r.src for r in rows}.values():
                src.trie.evict()
        given: set[tuple[Source, tuple[int, ...]]] = set()
        results: list[torch.Tensor | None] = []
        for key in requests:
            # Each caller gets a tensor of its own, also when several asked the same thing.
            row = out.get(key)
            results.append(row.clone() if row is not None and key in given else row)
            given.add(key)
        return results

    def _cache(self, rows: list[_Row], states: torch.Tensor | None,
               logprobs: list[torch.Tensor] | None) -> None:
        """Put the rows' new positions (and, when given, their log-prob rows) into their
        sources' tries (``states``: the rows' new positions, concatenated in row order)."""
        groups: dict[int, list[int]] = {}
        for b, r in enumerate(rows):
            groups.setdefault(id(r.src), []).append(b)
        offsets = np.cumsum([0] + [len(r.new) for r in rows])
        for members in groups.values():
            part = states
            if states is not None and len(groups) > 1:
                index = np.concatenate([np.arange(offsets[b], offsets[b + 1]) for b in members])
                part = states[torch.from_numpy(index).to(states.device)]
            self.stats["recomputed_positions"] += rows[members[0]].src.trie.insert(
                [(rows[b].ids, rows[b].past, rows[b].new, None if logprobs is None else logprobs[b])
                 for b in members],
                part,
            )

    def _run(
        self, rows: list[_Row], steps: StepStates | None
    ) -> tuple[list[_Row], torch.Tensor, torch.Tensor | None]:
        """The rows in the order they ran, log p(. | r.ids) for each as float64 [B, V] on the
        device, running only ``r.new`` on top of ``r.past``'s states (layout in the module
        docstring; ``steps``: the population's kept buffer, None for a buffer used once), and
        the new positions' key/value states (rows' ``new`` concatenated; None without a KV
        cache)."""
        view = None
        if self._kv_shape is not None:
            steps = steps or StepStates(self._kv_shape, self.dtype, self.device, self.stats, keep=False)
            order, view = steps.place([r.past for r in rows], [len(r.new) for r in rows],
                                      [r.src.trie.pool for r in rows])
            rows = [rows[i] for i in order]
        B = len(rows)
        P = max(r.past.depth for r in rows)
        N = max(len(r.new) for r in rows)
        c = np.array([r.past.depth for r in rows])
        n = np.array([len(r.new) for r in rows])

        input_ids = np.full((B, N), self._pad_id, dtype=np.int64)
        for b, r in enumerate(rows):
            input_ids[b, N - n[b] :] = r.new
        k = np.arange(N)
        real_new = k[None, :] >= (N - n)[:, None]  # [B, N]
        positions = np.maximum(c[:, None] + k[None, :] - (N - n)[:, None], 0)

        dev = self.device
        kwargs: dict[str, Any] = dict(
            input_ids=torch.from_numpy(input_ids).to(dev),
            position_ids=torch.from_numpy(positions).to(dev),
            use_cache=view is not None,
        )
        if self._keep_arg:
            kwargs["logits_to_keep"] = 1
        if view is None:
            # Nothing cached (P = 0): the model's own padding mask is right.
            kwargs["attention_mask"] = torch.from_numpy(real_new.astype(np.int64)).to(dev)
        else:
            key_real = torch.from_numpy(
                np.concatenate([np.arange(P)[None, :] >= (P - c)[:, None], real_new], axis=1)
            ).to(dev)
            q = torch.arange(N, device=dev)
            j = torch.arange(P + N, device=dev)
            causal = (j[None, :] < P) | (j[None, :] - P <= q[:, None])  # [N, P + N]
            allowed = key_real[:, None, :] & causal[None, :, :]
            allowed |= (j[None, :] - P == q[:, None])[None]  # a padded query sees itself
            mask = torch.zeros(allowed.shape, dtype=self.dtype, device=dev)
            mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)
            kwargs["attention_mask"] = mask[:, None]
            layers = [_PooledLayer(view[i, 0], view[i, 1], P) for i in range(self._kv_shape[0])]
            kwargs[self._cache_arg] = Cache(layers=layers)
        if self._lora is None:
            logits = self.model(**kwargs).logits[:, -1, : len(self.vocab)]
        else:
            # PEFT's mixed batch: each row's LoRA layers add only that row's adapter.
            with self._lora.rows([r.src.peft_name for r in rows]):
                logits = self.model(**kwargs).logits[:, -1, : len(self.vocab)]
        # Normalized in float64 so that rows sum to 1 to float32 precision.
        logprobs = torch.log_softmax(logits.double(), dim=-1)

        self.stats["forward_passes"] += 1
        self.stats["batch_rows"] += B
        self.stats["positions_computed"] += int(n.sum())
        self.stats["positions_reused"] += int(c.sum())
        new_states = None
        if view is not None:
            steps.commit([r.past for r in rows], [r.new for r in rows])
            # [layers, 2, B, heads, N, dim] -> one slot row per real new position
            new = view[:, :, :, :, P:].permute(2, 4, 0, 1, 3, 5)
            new_states = new[torch.from_numpy(real_new).to(dev)]
        return rows, logprobs, new_states
