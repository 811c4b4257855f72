"""The LM backend contract (``LMBackend``), its check, the named counters, and a base class.

A backend is anything with the five members of ``LMBackend`` (``LM_MEMBERS``; a user can write
their own, e.g. a toy LM):

    vocab: list[bytes]                       byte string of every token id, special tokens included
    eos_token_ids: list[int]                 ids that end a sequence
    encode(text) -> list[int]                prompt text to token ids
    async next_token_logprobs(ids)           log p(. | ids): 1-D float tensor over the vocabulary,
                                             normalized (logsumexp == 0)
    async batch_next_token_logprobs(batch)   the same for many contexts: 2-D tensor, one row each

Optional members (with the library's backends that have them); the library uses the first seven
when present, ``clear_cache`` and ``close`` are for the user:

    stats: dict[str, int]                    named counters, at least ``COUNTERS``   all four
    special_token_ids: frozenset[int]        control tokens (other than EOS) that    all four
                                             never stand for text; lifted
                                             constraints give them weight 0
    max_context: int | None                  longest context accepted                all four
    async batch_next_token_dists(batch)      NextTokenDists: the rows and their      all four
                                             CDFs on the backend's device (the
                                             population step's input; without it
                                             they are derived from
                                             batch_next_token_logprobs)
    is_chat: bool                            the tokenizer has a chat template       HF, vLLM, MLX, ToyLM(chat_template=)
    encode_chat(prompt, system=None)         prompt ids with the chat template       HF, vLLM, MLX, ToyLM(chat_template=)
    chat_takes_tools: bool                   the template renders tools:             HF, vLLM, MLX
                                             encode_chat(..., tools=) (else the
                                             prompt rule writes them as text)
    clear_cache()                            forget cached states and rows           HF, MLX
    close()                                  release the engine (idempotent)         vLLM

``is_lm`` and ``check_backend`` test exactly ``LM_MEMBERS``; ``AsyncLM`` below supplies the
batch method, ``batch_next_token_dists``, ``special_token_ids`` and ``max_context`` from
``encode`` and one-context scoring.

Counters. Every backend of this library (ToyLM, HF, vLLM, MLX) keeps, in ``stats``, the counters
named in ``COUNTERS`` (more may follow them); the engine reports their change over a run in
``Result.stats`` (``lm_requests``, ``lm_forward_passes``; a backend without ``stats`` counts 0):

    requests             contexts asked for (each row of a batch counts)
    cache_hits           requests answered from a cache without running the model
    forward_passes       batched model evaluations (vLLM: rounds of concurrent requests, each
                         one or more scheduler steps, which its public API does not expose)
    positions_computed   context positions the model ran (0 for a ToyLM: it runs none)
    positions_reused     context positions taken from a key/value cache instead

Backends know nothing of potentials or SMC.
"""

from __future__ import annotations

import asyncio
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

import torch

from smc.core.counters import register
from smc.core.errors import InvalidArgument, InvalidArgumentType


_INT = {int}

COUNTERS = ("requests", "cache_hits", "forward_passes", "positions_computed", "positions_reused")


def new_counters(*extra: str) -> dict[str, int]:
    """A backend's ``stats``: every name of ``COUNTERS`` and ``extra`` at 0."""
    return dict.fromkeys((*COUNTERS, *extra), 0)


@dataclass(frozen=True)
class NextTokenDists:
    """Next-token laws of a batch of contexts, on the backend's device.

        logp[b, a] = log p(a | ctx_b)                  [B, V]
        cdf[b, a]  = sum_{a' <= a} exp(logp[b, a'])      [B, V], float64 where the device has it

    A sampler draws token a for row b by inverse CDF, a = searchsorted(cdf[b], u * cdf[b, -1]),
    so the law drawn from is q_b(a) = (cdf[b, a] - cdf[b, a - 1]) / cdf[b, -1]: the CDF's own
    increments, which is also the law a weight must use. Backends compute both tensors as part
    of their forward (on a GPU that costs microseconds); ``dists_from_logprobs`` derives them.
    """

    logp: torch.Tensor
    cdf: torch.Tensor


def dists_from_logprobs(logp: torch.Tensor) -> NextTokenDists:
    """NextTokenDists of log-prob rows [B, V]: cdf = cumsum(exp(logp)) in float64 (float32 on
    devices without float64, e.g. MPS)."""
    wide = torch.float32 if logp.device.type == "mps" else torch.float64
    return NextTokenDists(logp, torch.cumsum(torch.exp(logp.to(wide)), dim=-1))


async def next_token_dists(lm: LMBackend, batch: Sequence[Sequence[int]]) -> NextTokenDists:
    """``lm.batch_next_token_dists(batch)`` when the backend has it, else derived from
    ``lm.batch_next_token_logprobs`` (any object meeting the backend protocol)."""
    register(lm)
    method = getattr(lm, "batch_next_token_dists", None)
    if method is not None:
        return await method(batch)
    rows = await lm.batch_next_token_logprobs(batch)
    return dists_from_logprobs(torch.as_tensor(rows))


@runtime_checkable
class LMBackend(Protocol):
    """The members every LM backend has (the module docstring says what each means, and lists
    the optional ones). ``isinstance(x, LMBackend)`` tests that ``x`` has them all."""

    vocab: list[bytes]
    eos_token_ids: list[int]

    def encode(self, text: str) -> list[int]: ...

    async def next_token_logprobs(self, ids: Sequence[int]) -> torch.Tensor: ...

    async def batch_next_token_logprobs(self, batch: Sequence[Sequence[int]]) -> torch.Tensor: ...


#: the names of ``LMBackend``'s members, in the order errors list them; the one list that
#: ``is_lm`` and ``check_backend`` test (tests check it equals the Protocol's members)
LM_MEMBERS = ("vocab", "eos_token_ids", "encode", "next_token_logprobs", "batch_next_token_logprobs")


def missing_members(obj: Any) -> list[str]:
    """The names in ``LM_MEMBERS`` that ``obj`` lacks (empty for a backend)."""
    return [name for name in LM_MEMBERS if not hasattr(obj, name)]


def is_lm(obj: Any) -> bool:
    """Whether ``obj`` is an LM backend: it has every member of ``LM_MEMBERS``."""
    return all(hasattr(obj, name) for name in LM_MEMBERS)


def check_backend(obj: Any, what: str = "lm") -> None:
    """TypeError naming the members of ``LM_MEMBERS`` that ``obj`` lacks, if any.

    Args:
        obj: the object passed as an LM backend.
        what: the argument's name, for the message.
    """
    missing = missing_members(obj)
    if missing:
        raise InvalidArgumentType(
            f"{what} must be a language-model backend (e.g. smc.load_lm() or smc.ToyLM(...)); "
            f"{type(obj).__name__} has no {', '.join(missing)}"
        )


def check_backend_kwargs(kwargs: dict[str, Any], accepted: set[str] | frozenset[str], backend: str) -> None:
    """Errors for a backend's keyword arguments before the (slow) model load: an unknown name,
    and the options every caching backend shares (``max_batch`` >= 1, ``cache_budget_bytes``
    >= 0 or None for the backend's default, ``kv_cache`` a bool or None)."""
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise InvalidArgumentType(
            f"unknown argument(s) for the {backend} backend: {', '.join(unknown)} "
            f"(accepted: {', '.join(sorted(accepted))}, device, dtype)"
        )
    for key, low in (("max_batch", 1), ("cache_budget_bytes", 0)):
        # None is the backend's own default budget (sized to its device)
        if key in kwargs and not (key == "cache_budget_bytes" and kwargs[key] is None):
            v = kwargs[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InvalidArgument(f"{key} must be an integer >= {low}, got {v!r}")
    if kwargs.get("kv_cache") not in (None, True, False):
        raise InvalidArgument(f"kv_cache must be True, False or None, got {kwargs['kv_cache']!r}")


class BackendView:
    """A view of a backend: the members a subclass defines, and the backend's own for every
    other name (vocabulary, ``encode``, ``encode_chat``, ``max_context``, ``stats``, ...).

    ``weak=True`` refers to the backend weakly: a cache of views keyed weakly by the backend
    must not keep the backend alive through its own values. A view is shared by all particles,
    like the backend it views.
    """

    #: shared by all particles, never copied or pickled with one (like any backend)
    shared_by_particles = True

    def __init__(self, lm: LMBackend, *, weak: bool = False):
        self.ref = weakref.ref(lm) if weak else (lambda: lm)
        self.vocab = lm.vocab
        self.eos_token_ids = lm.eos_token_ids

    @property
    def inner(self) -> LMBackend:
        """The backend viewed (RuntimeError once it is gone)."""
        lm = self.ref()
        if lm is None:
            raise RuntimeError(f"the backend of this {type(self).__name__} no longer exists")
        return lm

    def __getattr__(self, name: str) -> Any:
        # only called for names not found on the view; "ref" missing means a half-built
        # object (e.g. during copying), which must not recurse
        if name == "ref":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)


class AsyncLM(ABC):
    """Base class for backends: request validation, decoding, and the batch method.

    Subclasses set ``vocab``, ``eos_token_ids`` and ``stats`` (``new_counters()``, counted in
    ``_next_token_logprobs``) and implement ``encode`` and ``_next_token_logprobs`` (one
    context; may rely on concurrent calls being batched).
    """

    vocab: list[bytes]
    eos_token_ids: list[int]
    special_token_ids: frozenset[int] = frozenset()
    #: shared by all particles: never copied with a particle, never pickled in a checkpoint
    #: (smc.programs.sharing.is_shared; backends that do not subclass AsyncLM count as shared too)
    shared_by_particles = True
    #: Longest context (prompt plus generated tokens) the model accepts; None when unbounded.
    max_context: int | None = None

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> bytes:
        """Concatenated bytes of ``ids``."""
        return b"".join(self.vocab[i] for i in self.check_ids(ids, allow_empty=True))

    def check_ids(self, ids: Sequence[int], *, allow_empty: bool = False) -> tuple[int, ...]:
        """``ids`` as a tuple of ints, or ValueError naming what is wrong with them."""
        if type(ids) is tuple and set(map(type, ids)) <= _INT:
            out = ids  # the common case (engine contexts): nothing to convert
        else:
            try:
                out = tuple(int(i) for i in ids)
            except (TypeError, ValueError) as e:
                raise InvalidArgument(f"token ids must be a sequence of integers, got {ids!r}") from e
        if not out and not allow_empty:
            raise InvalidArgument(
                "empty token list: the model needs at least one token of context "
                "(encode a prompt, or use a backend with a BOS token)"
            )
        n = len(self.vocab)
        if out and (min(out) < 0 or max(out) >= n):
            bad = [i for i in out if not 0 <= i < n]
            raise InvalidArgument(f"token ids out of range [0, {n}): {bad[:5]}")
        if self.max_context is not None and len(out) > self.max_context:
            raise InvalidArgument(
                f"context of {len(out)} tokens is longer than the model's maximum of "
                f"{self.max_context} tokens"
            )
        return out

    async def next_token_logprobs(self, ids: Sequence[int]) -> torch.Tensor:
        """log p(. | ids) over the whole vocabulary (1-D, logsumexp == 0)."""
        register(self)
        return await self._next_token_logprobs(self.check_ids(ids))

    async def batch_next_token_logprobs(self, batch: Sequence[Sequence[int]]) -> torch.Tensor:
        """Rows log p(. | ids) for every context in ``batch`` (2-D)."""
        register(self)
        checked = [self.check_ids(ids) for ids in batch]
        if not checked:
            return torch.empty((0, len(self.vocab)))
        rows = await asyncio.gather(*(self._next_token_logprobs(ids) for ids in checked))
        return torch.stack(rows)

    async def batch_next_token_dists(self, batch: Sequence[Sequence[int]]) -> NextTokenDists:
        """NextTokenDists of every context in ``batch`` (backends override this to compute the
        CDF inside their forward; this default derives it from the batch's rows)."""
        return dists_from_logprobs(await self.batch_next_token_logprobs(batch))

    @abstractmethod
    async def _next_token_logprobs(self, ids: tuple[int, ...]) -> torch.Tensor: ...
