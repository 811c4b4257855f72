"""MLXLM: an mlx-lm causal LM as an async backend (Apple silicon's GPU through Metal, or CPU).

    log p(. | ids) = log_softmax(logits[len(ids) - 1, :V])      V = len(vocab)

The same contract, counters (``smc.backends.base.COUNTERS``) and prompt rule
(``smc.backends.prompts.TokenizerPrompts``, over the model's Hugging Face tokenizer) as the HF
backend. mlx-lm builds and runs the model (``mlx_lm.utils.load_model``, its own layers); this
module only lays out batches and keeps states:

- Requests from concurrent coroutines are batched into one forward pass
  (``smc.backends.batching``).
- A prefix trie (``smc.backends.kvtrie``, the HF backend's) keeps every cached position's
  key/value state and the log-prob rows, under one byte budget with LRU eviction, so a request
  pays only for its tokens after its longest cached prefix. Its pool is a CPU torch tensor;
  a batch's past is gathered there and copied into MLX (on Apple silicon both live in the same
  unified memory).

A batch of contexts with cached prefixes of lengths c_r and n_r new tokens is laid out as

    [zero slots]*(P - c_r) + cached states (c_r)  |  [pad]*(N - n_r) + new tokens (n_r)

with P = max c_r and N = max n_r. Every layer gets a ``_BatchCache`` (mlx-lm's cache protocol:
``offset``, ``update_and_fetch``, ``make_mask``) that returns the past concatenated with the new
states, an explicit mask (causal among real positions; a padded query sees only itself) and a
per-row rotary offset

    offset_r = c_r - (N - n_r),   so new column k has position c_r + k - (N - n_r):

its true position for every real token. The last column is every row's last token.

Whether a model's layers follow that protocol is checked, not assumed: at construction a ragged
probe batch run this way must equal plain forwards of the same contexts; otherwise (e.g.
sliding-window or recurrent layers) contexts are recomputed in full, one forward pass per
distinct length in a batch (no padding needed), with cached log-prob rows. Likewise the logits
of the last column alone (the model's body, then its output layer) are used only where the
probe finds them equal to the full forward's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from smc.backends.base import AsyncLM, NextTokenDists, check_backend_kwargs, new_counters
from smc.backends.batching import AutoBatcher
from smc.backends.kvtrie import CACHE_BUDGET_BYTES, KVTrie, Node
from smc.backends.prompts import TokenizerPrompts
from smc.backends.vocab import build_vocab, eos_ids

INSTALL_HINT = (
    "backend='mlx' needs MLX and mlx-lm: pip install 'smc-steer[mlx]' (macOS, Apple silicon) "
    "or 'smc-steer[mlx-cpu]' (Linux, CPU)"
)
#: keyword arguments of ``MLXLM`` that ``load_lm(backend="mlx")`` passes on
MLX_KWARGS = frozenset({"max_batch", "cache_budget_bytes", "kv_cache"})
DEVICES = ("cpu", "gpu")
DTYPES = ("float32", "float16", "bfloat16")


def mlx_available() -> bool:
    """Whether ``mlx.core`` and ``mlx_lm`` import here (on Linux MLX needs ``mlx[cpu]``)."""
    try:
        import mlx.core  # noqa: F401
        import mlx_lm  # noqa: F401
    except ImportError:
        return False
    return True


def rope_overrides(config: dict[str, Any]) -> dict[str, Any]:
    """Top-level ``rope_theta`` / ``rope_scaling`` entries for a config that keeps them only in
    transformers 5's ``rope_parameters`` (as the embedded model's converted config does).

    mlx-lm 0.32's Llama-family arguments read the top-level names and would otherwise silently
    use their defaults (theta 10000 instead of the model's 100000: wrong logits from position 1
    on). Per-layer-type parameter dicts (Gemma-style) are left to the model's own code.
    """
    params = config.get("rope_parameters")
    if not isinstance(params, dict) or "rope_theta" not in params:
        return {}
    out: dict[str, Any] = {}
    if "rope_theta" not in config:
        out["rope_theta"] = params["rope_theta"]
    if params.get("rope_type", "default") != "default" and not config.get("rope_scaling"):
        out["rope_scaling"] = dict(params)
    return out


def _torch_dtype(dtype: Any) -> torch.dtype:
    import mlx.core as mx

    table = {mx.float32: torch.float32, mx.float16: torch.float16, mx.bfloat16: torch.bfloat16}
    if dtype not in table:
        raise ValueError(f"unsupported key/value state dtype {dtype}")
    return table[dtype]


def to_torch(x: Any) -> torch.Tensor:
    """A CPU torch copy of MLX array ``x`` (bfloat16 through its bits: numpy has no bfloat16)."""
    import mlx.core as mx

    if x.dtype == mx.bfloat16:
        return torch.from_numpy(np.array(mx.view(x, mx.int16))).view(torch.bfloat16)
    return torch.from_numpy(np.array(x))


def to_mlx(t: torch.Tensor) -> Any:
    """An MLX copy of CPU tensor ``t`` (bfloat16 through its bits)."""
    import mlx.core as mx

    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return mx.view(mx.array(t.view(torch.int16).numpy()), mx.bfloat16)
    return mx.array(t.numpy())


class _BatchCache:
    """One layer's cache for one forward pass (mlx-lm's cache protocol): the gathered past
    [B, H, P, D] with the new states appended, the batch's mask and per-row rotary offsets."""

    def __init__(self, keys: Any, values: Any, offset: Any, mask: Any):
        self.past_keys, self.past_values = keys, values
        self.offset = offset
        self.mask = mask
        self.new_keys = self.new_values = None

    def update_and_fetch(self, keys: Any, values: Any) -> tuple[Any, Any]:
        import mlx.core as mx

        self.new_keys, self.new_values = keys, values
        if self.past_keys is None:
            return keys, values
        return (mx.concatenate([self.past_keys, keys], axis=2),
                mx.concatenate([self.past_values, values], axis=2))

    def make_mask(
        self, N: int, return_array: bool = False, window_size: int | None = None, **kwargs: Any
    ) -> Any:
        if window_size is not None:
            # A sliding window is not laid out here; the probe sends such models to recompute.
            raise NotImplementedError("sliding-window attention")
        return self.mask

    def empty(self) -> bool:
        return self.past_keys is None and self.new_keys is None


@dataclass
class _Row:
    ids: tuple[int, ...]
    past: Node
    new: tuple[int, ...]


class MLXLM(TokenizerPrompts, AsyncLM):
    """An mlx-lm causal LM with auto-batching and a prefix-trie cache.

    Args:
        model: an mlx-lm model (``mlx_lm.load`` / ``mlx_lm.utils.load_model``).
        tokenizer: its Hugging Face tokenizer.
        config: the model's config dict (for the context length and generation EOS).
        max_batch: most contexts in one forward pass.
        cache_budget_bytes: bound on cached key/value states plus cached log-prob rows
            (default ``kvtrie.CACHE_BUDGET_BYTES``, 1 GiB).
        kv_cache: reuse cached key/value states (default: when the probe in the module
            docstring passes; True makes a failing probe an error).
        device: ``"cpu"`` or ``"gpu"`` (Metal); default MLX's default device.
        eos_token_id: the generation config's EOS id(s), tried before the tokenizer's.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        config: dict[str, Any] | None = None,
        *,
        max_batch: int = 256,
        cache_budget_bytes: int | None = None,
        kv_cache: bool | None = None,
        device: str | None = None,
        eos_token_id: int | list[int] | None = None,
    ):
        import mlx.core as mx

        self.model = model
        self.tokenizer = tokenizer
        self.config = dict(config or {})
        self.device = _mlx_device(device)
        self.stats = new_counters("batch_rows", "recomputed_positions")
        with mx.stream(self.device):
            logit_rows = int(self._full_logits(mx.array([[0]])).shape[-1])
        vocab, special = build_vocab(tokenizer, min(len(tokenizer), logit_rows))
        self.vocab = vocab
        generation_eos = eos_token_id if eos_token_id is not None else self.config.get("eos_token_id")
        self.eos_token_ids = eos_ids(
            tokenizer, len(vocab), generation_eos,
            repr(self.config.get("_name_or_path") or type(model).__name__),
        )
        self.special_token_ids = frozenset(special - set(self.eos_token_ids))
        self.max_context = self._find_max_context()
        self._pad_id = self.eos_token_ids[0]
        self._split_head = None  # (body, head) once the probe found them exact
        self._kv_shape: tuple[int, ...] | None = None
        self._state_dtype = torch.float32
        with mx.stream(self.device):
            self._probe(kv_cache)
        self.trie = KVTrie(
            slot_numel=math.prod(self._kv_shape) if self._kv_shape else 0,
            dtype=self._state_dtype,
            device="cpu",
            row_bytes=4 * len(self.vocab),
            budget_bytes=CACHE_BUDGET_BYTES if cache_budget_bytes is None else cache_budget_bytes,
        )
        self._batcher: AutoBatcher[tuple[int, ...], torch.Tensor] = AutoBatcher(self._forward, max_batch)

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, device: str | None = None, dtype: str | None = None, **kwargs: Any
    ) -> "MLXLM":
        """Load the model in local directory ``path`` (safetensors written by transformers'
        ``save_pretrained``, or an MLX checkpoint, quantized ones included, e.g. from
        ``mlx_lm.convert``) with mlx-lm, and its tokenizer with transformers.

        ``dtype`` (None keeps the checkpoint's) casts the floating-point weights.
        """
        import mlx.core as mx
        from mlx_lm.utils import load_model
        from transformers import AutoTokenizer

        path = Path(path)
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        try:
            model, config = load_model(path, model_config=rope_overrides(config))
        except (ValueError, FileNotFoundError) as e:
            raise ValueError(f"mlx-lm cannot load the model in {str(path)!r}: {e}") from e
        if dtype is not None:
            model.set_dtype(getattr(mx, dtype))
        model.eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        eos = _generation_eos(path)
        return cls(model, tokenizer, config, device=device, eos_token_id=eos, **kwargs)

    def _find_max_context(self) -> int | None:
        config = self.config.get("text_config", self.config)
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = config.get(key)
            if isinstance(value, int) and value > 0:
                return value
        limit = getattr(self.tokenizer, "model_max_length", None)
        return limit if isinstance(limit, int) and limit < 10**9 else None

    # ------------------------------------------------------------------ the model
    def _full_logits(self, ids: Any, caches: list[_BatchCache] | None = None) -> Any:
        """Logits of the last column [B, V_model] from the model's full forward."""
        return self.model(ids, cache=caches)[:, -1, :]

    def _last_logits(self, ids: Any, caches: list[_BatchCache] | None = None) -> Any:
        """Logits of the last column [B, V_model], computing the output layer on it alone
        where the probe allowed that."""
        if self._split_head is None:
            return self._full_logits(ids, caches)
        body, head = self._split_head
        return head(body(ids, caches)[:, -1:, :])[:, 0, :]

    def _probe(self, kv_cache: bool | None) -> None:
        """Decide ``_split_head`` and ``_kv_shape`` by comparing with plain forwards (module
        docstring): a ragged batch with a cached past must give the plain logits."""
        import mlx.core as mx

        V = len(self.vocab)
        ids = [self._pad_id, (self._pad_id + 1) % V, (self._pad_id + 2) % V]
        plain = self.model(mx.array([ids]))
        mx.eval(plain)
        scale = 1.0 + float(mx.abs(plain).max())
        tol = (1e-4 if plain.dtype == mx.float32 else 2e-2) * scale

        def close(a: Any, b: Any) -> bool:
            return bool(mx.all(mx.abs(a.astype(mx.float32) - b.astype(mx.float32)) <= tol))

        body = getattr(self.model, "model", None)
        head = getattr(self.model, "lm_head", None)
        embed = getattr(body, "embed_tokens", None)
        if head is None and hasattr(embed, "as_linear"):
            head = embed.as_linear  # tied input and output embeddings
        if callable(body) and callable(head):
            try:
                if close(head(body(mx.array([ids]), None)[:, -1:, :])[:, 0, :], plain[:, -1, :]):
                    self._split_head = (body, head)
            except Exception:  # noqa: BLE001 - any failure means: use the full forward
                pass

        if kv_cache is not False:
            try:
                ok = self._probe_kv(ids, plain, close)
            except Exception as e:  # noqa: BLE001 - a model whose layers need their own caches
                ok, why = False, f"{type(e).__name__}: {e}"
            else:
                why = "its batched, cached logits differ from plain forwards"
            if not ok:
                self._kv_shape = None
                if kv_cache:
                    raise ValueError(
                        f"kv_cache=True, but this model's layers cannot use the batch cache ({why})"
                    )

    def _probe_kv(self, ids: list[int], plain: Any, close) -> bool:
        import mlx.core as mx

        layers = getattr(self.model, "layers", None)
        if not layers:
            return False
        # Step 1: ids[:2] with no past, which also tells the state shape.
        logits, new = self._step(np.array([ids[:2]]), None, np.array([0]), np.array([2]), len(layers))
        if new is None or not close(logits, plain[:, 1, :]):
            return False
        L, two, B, H, N, D = new.shape
        self._kv_shape = (L, 2, H, D)
        self._state_dtype = _torch_dtype(new.dtype)
        # Step 2, ragged: row 0 has ids[:2] cached and runs ids[2]; row 1 runs all of ids.
        past = mx.zeros((2, 2, L, 2, H, D), dtype=new.dtype)
        past[0] = new[:, :, 0].transpose(3, 0, 1, 2, 4)  # [N, L, 2, H, D]
        inputs = np.array([[self._pad_id, self._pad_id, ids[2]], ids])
        logits, _ = self._step(inputs, past, np.array([2, 0]), np.array([1, 3]), L)
        return close(logits[0:1], plain[:, 2, :]) and close(logits[1:2], plain[:, 2, :])

    def _step(
        self, inputs: np.ndarray, past: Any, c: np.ndarray, n: np.ndarray, layers: int
    ) -> tuple[Any, Any]:
        """One forward of the layout in the module docstring.

        Args:
            inputs: [B, N] token ids, row b's new tokens right-aligned (pad before them).
            past: [B, P, L, 2, H, D] MLX states, row b's c_b cached positions right-aligned
                (None when P = 0).
            c, n: cached and new lengths per row.
        Returns:
            the last column's logits [B, V_model] and the new states [L, 2, B, H, N, D].
        """
        import mlx.core as mx

        B, N = inputs.shape
        P = 0 if past is None else past.shape[1]
        k = np.arange(N)
        real_new = k[None, :] >= (N - n)[:, None]  # [B, N]
        key_real = np.concatenate([np.arange(P)[None, :] >= (P - c)[:, None], real_new], axis=1)
        j = np.arange(P + N)
        causal = (j[None, :] < P) | (j[None, :] - P <= k[:, None])  # [N, P + N]
        allowed = key_real[:, None, :] & causal[None, :, :]
        allowed |= (j[None, :] - P == k[:, None])[None]  # a padded query sees itself
        mask = mx.array(allowed[:, None])  # [B, 1, N, P + N], broadcast over heads
        offset = mx.array((c - (N - n)).astype(np.int32))
        caches = []
        for i in range(layers):
            if past is None:
                keys = values = None
            else:
                keys = past[:, :, i, 0].transpose(0, 2, 1, 3)
                values = past[:, :, i, 1].transpose(0, 2, 1, 3)
            caches.append(_BatchCache(keys, values, offset, mask))
        logits = self._last_logits(mx.array(inputs), caches)
        if any(cache.new_keys is None for cache in caches):
            return logits, None
        new = mx.stack([mx.stack([cache.new_keys, cache.new_values]) for cache in caches])
        mx.eval(logits, new)
        return logits, new

    # ------------------------------------------------------------------ scoring
    async def _next_token_logprobs(self, ids: tuple[int, ...]) -> torch.Tensor:
        self.stats["requests"] += 1
        hit = self.trie.cached_logprobs(ids)
        if hit is not None:
            self.stats["cache_hits"] += 1
            return hit.clone()
        return await self._batcher.submit(ids)

    def clear_cache(self) -> None:
        """Forget every cached state and log-prob row."""
        self.trie.clear()

    async def batch_next_token_dists(self, batch: Sequence[Sequence[int]]) -> NextTokenDists:
        """NextTokenDists of every context (the rows' float64 exp and cumsum). Distinct contexts
        are run once, in forward passes of at most ``max_batch`` rows; log-prob rows are not
        cached (a population's contexts are new at every step), key/value states are."""
        requests = [self.check_ids(ids) for ids in batch]
        self.stats["requests"] += len(requests)
        distinct = list(dict.fromkeys(requests))
        step = self._batcher.max_batch
        parts = []
        for k in range(0, len(distinct), step):
            parts.append(self._compute(distinct[k : k + step], keep_rows=False))
        self.trie.evict()
        logp = torch.cat(parts) if parts else torch.empty((0, len(self.vocab)), dtype=torch.float64)
        if len(distinct) < len(requests):
            where = {ids: k for k, ids in enumerate(distinct)}
            logp = logp[torch.tensor([where[ids] for ids in requests])]
        return NextTokenDists(logp.float(), torch.cumsum(torch.exp(logp), dim=-1))

    def _forward(self, requests: list[tuple[int, ...]]) -> list[torch.Tensor]:
        """One batched evaluation of the distinct contexts among ``requests``."""
        distinct = list(dict.fromkeys(requests))
        rows = list(self._compute(distinct, keep_rows=True).float().unbind(0))
        self.trie.evict()
        out = dict(zip(distinct, rows))
        given: set[tuple[int, ...]] = set()
        results = []
        for ids in requests:
            # Each caller gets a tensor of its own, also when several asked the same thing.
            results.append(out[ids].clone() if ids in given else out[ids])
            given.add(ids)
        return results

    def _compute(self, distinct: list[tuple[int, ...]], keep_rows: bool) -> torch.Tensor:
        """float64 log-prob rows [B, V] of ``distinct`` contexts, caching what they computed
        (their log-prob rows too when ``keep_rows``)."""
        import mlx.core as mx

        with mx.stream(self.device):
            if self._kv_shape is None:
                return self._recompute(distinct, keep_rows)
            rows = []
            for ids in distinct:
                # The last token is always run: its logits are what is asked for.
                past = self.trie.longest_prefix(ids, len(ids) - 1)
                rows.append(_Row(ids, past, ids[past.depth :]))
            logp, states = self._run(rows)
        entries = [(r.ids, r.past, r.new, lp.float() if keep_rows else None)
                   for r, lp in zip(rows, logp)]
        self.stats["recomputed_positions"] += self.trie.insert(entries, states)
        return logp

    def _logprobs(self, logits: Any) -> torch.Tensor:
        """float64 log_softmax over the tokenizer's vocabulary (MLX has no float64 on the GPU,
        so rows are normalized by torch on the CPU, as the HF backend normalizes them)."""
        import mlx.core as mx

        logits = to_torch(logits[:, : len(self.vocab)].astype(mx.float32))
        return torch.log_softmax(logits.double(), dim=-1)

    def _run(self, rows: list[_Row]) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 log-prob rows [B, V] and the new positions' states (rows' ``new``
        concatenated, [sum n, L, 2, H, D]) of one forward pass over ``rows``."""
        B = len(rows)
        P = max(r.past.depth for r in rows)
        N = max(len(r.new) for r in rows)
        c = np.array([r.past.depth for r in rows])
        n = np.array([len(r.new) for r in rows])
        inputs = np.full((B, N), self._pad_id, dtype=np.int64)
        for b, r in enumerate(rows):
            inputs[b, N - n[b] :] = r.new
        past = None
        if P:
            slots = np.zeros((B, P), dtype=np.int64)
            for b, r in enumerate(rows):
                if c[b]:
                    slots[b, P - c[b] :] = r.past.path
            gathered = self.trie.pool.index_select(0, torch.from_numpy(slots.reshape(-1)))
            past = to_mlx(gathered.view(B, P, *self._kv_shape))
        logits, new = self._step(inputs, past, c, n, self._kv_shape[0])
        logp = self._logprobs(logits)
        # [L, 2, B, H, N, D] -> [B, N, L, 2, H, D]; keep the real (not padded) positions.
        states = to_torch(new.transpose(2, 4, 0, 1, 3, 5))
        real_new = np.arange(N)[None, :] >= (N - n)[:, None]
        states = states[torch.from_numpy(real_new)]
        self.stats["forward_passes"] += 1
        self.stats["batch_rows"] += B
        self.stats["positions_computed"] += int(n.sum())
        self.stats["positions_reused"] += int(c.sum())
        return logp, states

    def _recompute(self, distinct: list[tuple[int, ...]], keep_rows: bool) -> torch.Tensor:
        """Rows without key/value states: each distinct length is one unpadded forward pass."""
        import mlx.core as mx

        out: list[torch.Tensor | None] = [None] * len(distinct)
        by_length: dict[int, list[int]] = {}
        for k, ids in enumerate(distinct):
            by_length.setdefault(len(ids), []).append(k)
        for length, members in by_length.items():
            logits = self._last_logits(mx.array([distinct[k] for k in members]))
            for k, row in zip(members, self._logprobs(logits)):
                out[k] = row
            self.stats["forward_passes"] += 1
            self.stats["batch_rows"] += len(members)
            self.stats["positions_computed"] += length * len(members)
        if keep_rows:
            root = self.trie.root
            self.trie.insert([(ids, root, ids, row.float()) for ids, row in zip(distinct, out)], None)
        return torch.stack(out)


def _mlx_device(device: str | None) -> Any:
    import mlx.core as mx

    if device is None:
        return mx.default_device()
    if device not in DEVICES:
        raise ValueError(f"unknown MLX device {device!r}; use 'cpu' or 'gpu' (Metal)")
    dev = mx.cpu if device == "cpu" else mx.gpu
    if not mx.is_available(dev):
        raise ValueError(
            f"device={device!r} but this MLX has no {device.upper()} (Metal needs macOS on Apple "
            "silicon); use device='cpu'"
        )
    return dev


def _generation_eos(path: Path) -> int | list[int] | None:
    """``eos_token_id`` of ``path``'s generation_config.json, None when it has none."""
    try:
        text = (path / "generation_config.json").read_text(encoding="utf-8")
        return json.loads(text).get("eos_token_id")
    except (OSError, ValueError):
        return None


def check_mlx_args(kwargs: dict[str, Any], device: Any, dtype: Any) -> None:
    """Errors for ``load_lm(backend="mlx")``'s arguments before the (slow) model load."""
    check_backend_kwargs(kwargs, MLX_KWARGS, "mlx")
    if device is not None and device not in DEVICES:
        raise ValueError(f"unknown MLX device {device!r}; use 'cpu' or 'gpu' (Metal)")
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} for the mlx backend; use one of {', '.join(DTYPES)}")
    if not mlx_available():
        raise ImportError(INSTALL_HINT)
