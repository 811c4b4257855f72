"""Token samplers: the interface, and how randomness is injected.

A token sampler targets the un-normalized next-token weights

    t(a) = p(a | prompt + ctx) * exp(logw_next(ctx)[a])

where p is the LM and logw_next the token-level potential's next-symbol log weights (EOS ids
included). ``sample(ctx, rng)`` returns ``(a, log_w)`` that is *properly weighted*:

    E[exp(log_w) * f(a)] = sum_a f(a) * t(a)      for every f.

So exp(log_w) is an unbiased estimate of the local mass sum_a t(a), and the pair can be used
inside SMC as an importance-weighted draw from t / sum(t).

Randomness: every random choice goes through a *draw function* ``draw(probs) -> index`` that
picks an index of a probability vector. ``rng`` may be a numpy Generator (turned into an
inverse-CDF draw) or such a function directly (tests pass one that enumerates every path).
Inverse-CDF draws also expose ``uniform()``, the u in [0, 1) that ``draw`` would use, and
``stream_uniform(j)``: the j-th of a few uniforms reserved for a sampler's stream of i.i.d.
candidate draws (None past the reserve), which a sampler inverts through the LM's CDF itself.

Population step: when ``sample`` gets a draw that carries a block of stream uniforms (the engine's
``BlockDraw``) and the sampler has a population step (``population = True``), the call joins a
batch with every other particle asking meanwhile (``smc.backends.batching.AutoBatcher``); the
batch asks the LM once for all contexts (``NextTokenDists`` on the LM's device), draws every
particle's stream with one batched inverse-CDF search, and moves only the drawn ids and their
probabilities to the CPU. ``_sample`` (one particle, on the CPU) is the reference path: it uses the
same uniforms and the same CDF, so both paths return the same (token, weight).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence, Union

import numpy as np
import torch

from potentials.base import Potential
from potentials.last_step import last_step
from smc.backends.base import (
    LMBackend, NextTokenDists, check_backend, dists_from_logprobs, next_token_dists,
)
from smc.backends.batching import AutoBatcher
from smc.backends.prompts import Prompt, encode_prompt
from smc.core.concurrency import run_all
from smc.core.counters import register
from smc.core.resampling import inverse_cdf

#: picks an index of a probability vector (entries >= 0, summing to 1 up to rounding)
Draw = Callable[[np.ndarray], int]
RandomSource = Union[np.random.Generator, Draw]


#: uniforms an engine hands each particle per step for its draws (``BlockDraw``), before the
#: particle falls back to a Generator of its own
BLOCK_UNIFORMS = 8
#: uniforms per particle and step for a sampler's candidate stream (``stream_uniform``); a
#: Generator-backed draw offers as many, drawn lazily in order of use
STREAM_UNIFORMS = 16


class GeneratorDraw:
    """Inverse-CDF draws, one uniform from ``rng`` each."""

    def __init__(self, rng: np.random.Generator):
        self._rng = rng

    def uniform(self) -> float:
        return self._rng.random()

    def stream_uniform(self, j: int) -> float | None:
        """The next uniform while j < 16 (callers ask for j = 0, 1, ... in order), else None."""
        return self._rng.random() if j < STREAM_UNIFORMS else None

    def __call__(self, probs: np.ndarray) -> int:
        return inverse_cdf(probs, self.uniform())


def categorical(rng: np.random.Generator) -> Draw:
    """Inverse-CDF draws, one uniform from ``rng`` each."""
    return GeneratorDraw(rng)


class BlockDraw:
    """Inverse-CDF draws from a given block of uniforms, then from ``default_rng(seed)``; and a
    separate block ``stream`` of uniforms for a sampler's candidate stream (``stream_uniform``).

    Lets an engine hand each particle its own random stream from one vectorized draw per step
    (creating a Generator per particle per step costs more than a whole toy step). The two
    blocks are disjoint, so candidates and coins are independent.
    """

    __slots__ = ("_u", "_k", "_seed", "_rng", "stream")

    def __init__(self, uniforms: np.ndarray, seed: int, stream: np.ndarray | None = None):
        self._u = uniforms
        self._k = 0
        self._seed = seed
        self._rng: np.random.Generator | None = None
        self.stream = np.empty(0) if stream is None else stream

    @classmethod
    def from_row(cls, row: np.ndarray, seed: int) -> "BlockDraw":
        """The draw of one particle for one step from a row of BLOCK_UNIFORMS + STREAM_UNIFORMS
        uniforms (the engine draws all particles' rows at once) and a fallback seed."""
        return cls(row[:BLOCK_UNIFORMS], seed, row[BLOCK_UNIFORMS:])

    def stream_uniform(self, j: int) -> float | None:
        return float(self.stream[j]) if j < len(self.stream) else None

    def uniform(self) -> float:
        if self._k < len(self._u):
            self._k += 1
            return float(self._u[self._k - 1])
        if self._rng is None:
            self._rng = np.random.default_rng(self._seed)
        return self._rng.random()

    def __call__(self, probs: np.ndarray) -> int:
        return inverse_cdf(probs, self.uniform())


def as_draw(rng: RandomSource) -> Draw:
    """A draw function from a numpy Generator, or ``rng`` itself when it is already one."""
    if isinstance(rng, np.random.Generator):
        return categorical(rng)
    if callable(rng):
        return rng
    raise TypeError(f"rng must be a numpy Generator or a draw function, got {type(rng).__name__}")


class TokenSampler(ABC):
    """Draws the next token for contexts that continue ``prompt_ids`` under ``lm``.

    Args:
        lm: an LM backend (``smc.backends.base.LMBackend``).
        potential: a token-level Potential over ``lm``'s vocabulary (``size == len(lm.vocab)``,
            contexts are tuples of generated token ids), or None for no constraint.
        prompt_ids: the prompt: token ids (used as given), or text or chat messages, encoded
            by the one prompt rule ``encode_prompt(lm, prompt)`` (smc.backends.prompts: the
            chat template when the LM has one). The LM sees ``self.prompt_ids + ctx``; the
            default, no prompt, leaves contexts as they are.

    ``stats`` counts ``steps`` (calls to sample), ``checks`` (single tokens whose weight was
    asked for) and ``full_evaluations`` (whole next-token weight vectors computed); the sampler
    registers itself, its LM and its potential with the current run (smc.core.counters) when it works.
    Samplers are shared by all particles and never copied when particles are.
    """

    #: the sharing rule (smc.programs.sharing.is_shared): clones of a particle keep the same
    #: sampler, and a checkpoint names it instead of pickling it
    shared_by_particles = True

    #: the sampler's own keyword options and their defaults (a Request's ``sampler_options``)
    OPTIONS: dict[str, int] = {}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, int]:
        """``options`` with the defaults of ``OPTIONS`` filled in; ValueError/TypeError naming
        an unknown option or a value that is not an integer >= 0 (every option is a count)."""
        for name, value in options.items():
            if name not in cls.OPTIONS:
                known = ", ".join(cls.OPTIONS) or "none"
                raise ValueError(f"unknown option {name!r} of the {cls.__name__}; its options: {known}")
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} must be an integer >= 0, got {value!r}")
            if value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        # plain ints (a numpy integer is accepted as the int it is; the JSON form needs ints)
        return {**cls.OPTIONS, **{name: int(value) for name, value in options.items()}}

    def __init__(self, lm: LMBackend, potential: Potential | None = None, prompt_ids: Prompt = ()):
        check_backend(lm)
        n = len(lm.vocab)
        if potential is not None:
            if not isinstance(potential, Potential):
                raise TypeError(f"potential must be a Potential, got {type(potential).__name__}")
            if potential.size != n:
                raise ValueError(
                    f"potential has {potential.size} symbols but the LM vocabulary has {n} tokens; "
                    "lift byte-level constraints first (constraint.lift(lm))"
                )
        self.lm = lm
        self.potential = potential
        # an empty prompt is no prompt here (contexts may hold the whole input), so it skips
        # encode_prompt's check that the LM accepts an empty context
        empty = isinstance(prompt_ids, (list, tuple)) and len(prompt_ids) == 0
        self.prompt_ids = () if empty else tuple(encode_prompt(lm, prompt_ids))
        self.eos_ids = tuple(int(i) for i in lm.eos_token_ids)
        self.stats = {"steps": 0, "checks": 0, "full_evaluations": 0}

    async def lm_logprobs(self, ctx: Sequence[int]) -> np.ndarray:
        """log p(. | prompt + ctx) as float64."""
        register(self, self.lm)
        lp = await self.lm.next_token_logprobs(self.prompt_ids + tuple(ctx))
        return lp.detach().to("cpu").double().numpy() if hasattr(lp, "detach") else np.asarray(lp, float)

    async def lm_logprobs_at(self, ctx: Sequence[int], tokens: Sequence[int]) -> list[float]:
        """[log p(a | prompt + ctx) for a in tokens], without copying the whole row."""
        register(self, self.lm)
        lp = await self.lm.next_token_logprobs(self.prompt_ids + tuple(ctx))
        picked = lp[list(tokens)]
        return [float(x) for x in (picked.tolist() if hasattr(picked, "tolist") else picked)]

    async def potential_logw(self, ctx: Sequence[int]) -> np.ndarray:
        """logw_next(ctx) over the whole vocabulary (zeros without a potential)."""
        register(self, self.potential)
        if self.potential is None:
            return np.zeros(len(self.lm.vocab))
        self.stats["full_evaluations"] += 1
        return np.asarray(await self.potential.logw_next(tuple(ctx)), dtype=float)

    async def target_logw(self, ctx: Sequence[int]) -> np.ndarray:
        """log t(.) = log p(. | prompt + ctx) + logw_next(ctx), the whole vector."""
        logp = await self.lm_logprobs(ctx)
        if self.potential is None:
            return logp
        return logp + await self.potential_logw(ctx)

    def for_last_step(self) -> "TokenSampler":
        """This sampler for a step after which EOS is forced: the same class, LM, prompt and
        settings, targeting ``potentials.last_step.last_step(potential)`` (tokens after which
        the text cannot finish get weight 0; exact, see that module). ``self`` without a
        potential. Built once and kept; it shares ``stats`` with this sampler."""
        got = self.__dict__.get("_for_last_step")
        if got is None:
            if self.potential is None:
                got = self
            else:
                got = copy.copy(self)
                for private in ("_for_last_step", "_population_batcher"):
                    got.__dict__.pop(private, None)  # the batcher is bound to this sampler
                got.potential = last_step(self.potential)
                inner = getattr(self, "inner", None)
                if isinstance(inner, TokenSampler):  # a ProposalSampler's inner sampler
                    got.inner = inner.for_last_step()
            self._for_last_step = got
        return got

    def cache_contexts(self) -> dict[str, Any]:
        """What this sampler's steps depend on besides their contexts and draws: the caches of
        its potential (``Potential.cache_contexts``), of its last-step twin once built, and of
        an inner sampler's. A checkpoint stores it (docs/checkpoint.md)."""
        saved: dict[str, Any] = {}
        if self.potential is not None:
            saved["potential"] = self.potential.cache_contexts()
        twin = self.__dict__.get("_for_last_step")
        if twin is not None and twin is not self:
            saved["last_step"] = twin.cache_contexts()
        inner = getattr(self, "inner", None)
        if isinstance(inner, TokenSampler):
            saved["inner"] = inner.cache_contexts()
        return saved

    async def restore_caches(self, saved: dict[str, Any]) -> None:
        """Fill the caches again from a ``cache_contexts()`` value of an equal sampler."""
        if saved.get("potential") is not None:
            await self.potential.restore_caches(saved["potential"])
        if "last_step" in saved:
            await self.for_last_step().restore_caches(saved["last_step"])
        if "inner" in saved:
            await self.inner.restore_caches(saved["inner"])

    #: True when the sampler has a population step (``_sample_population``)
    population: bool = False
    #: most particles in one population step
    max_population = 4096

    async def sample(self, ctx: Sequence[int], rng: RandomSource) -> tuple[int, float]:
        """A properly weighted draw ``(token, log_weight)`` for the target t at ``ctx``."""
        register(self, self.lm, self.potential)
        self.stats["steps"] += 1
        draw = as_draw(rng)
        ctx = ctx if type(ctx) is tuple else tuple(ctx)
        if self.population and type(draw) is BlockDraw and len(draw.stream):
            batcher = self.__dict__.get("_population_batcher")
            if batcher is None:
                batcher = self._population_batcher = AutoBatcher(self._population_step, self.max_population)
            return await batcher.submit((ctx, draw))
        return await self._sample(ctx, draw)

    async def sample_many(self, items: Sequence[tuple[Sequence[int], RandomSource]]) -> list[tuple[int, float]]:
        """``[await self.sample(ctx, rng) for ctx, rng in items]``, computed together: with a
        population step and engine draws (``BlockDraw`` with stream uniforms) the items go to
        ``_population_step`` directly, ``max_population`` at a time, in order, which is the
        batch the concurrent ``sample`` calls would form; otherwise the calls run concurrently."""
        if not (self.population and all(type(d) is BlockDraw and len(d.stream) for _, d in items)):
            return await run_all(self.sample(ctx, d) for ctx, d in items)
        register(self, self.lm, self.potential)
        self.stats["steps"] += len(items)
        batch = [(ctx if type(ctx) is tuple else tuple(ctx), d) for ctx, d in items]
        out: list[tuple[int, float]] = []
        for k in range(0, len(batch), self.max_population):
            out += await self._population_step(batch[k : k + self.max_population])
        return out

    async def _population_step(self, items: list[tuple[tuple[int, ...], BlockDraw]]) -> list[tuple[int, float]]:
        """One batched LM call and one batched stream draw for all ``items``, then the sampler's
        per-particle work (``_sample_population``)."""
        prompt = self.prompt_ids
        dists = await next_token_dists(self.lm, [prompt + ctx for ctx, _ in items])
        widths = {len(d.stream) for _, d in items}
        if len(widths) == 1:
            streams = draw_streams(dists, np.stack([d.stream for _, d in items]), eager=_EAGER)
        else:  # blocks of different lengths (hand-made draws): one search per particle
            streams = [draw_streams(NextTokenDists(dists.logp[b : b + 1], dists.cdf[b : b + 1]),
                                    d.stream[None])[0] for b, (_, d) in enumerate(items)]
        return await self._sample_population(items, dists, streams)

    async def _sample_population(
        self,
        items: list[tuple[tuple[int, ...], BlockDraw]],
        dists: NextTokenDists,
        streams: list["Stream"],
    ) -> list[tuple[int, float]]:
        raise NotImplementedError

    @abstractmethod
    async def _sample(self, ctx: tuple[int, ...], draw: Draw) -> tuple[int, float]: ...

    @staticmethod
    def dead_token(logp: np.ndarray | torch.Tensor) -> int:
        """The token returned alongside weight -inf: the LM's most likely one (rejected too)."""
        return int(logp.argmax())


#: stream candidates searched for all particles at once; the rest (rarely used: a particle
#: usually stops after 2 or 3 candidates) one at a time when asked for, on CPU float64 rows
_EAGER = 4


class Stream:
    """I.i.d. candidates from one row's law q(a) = (cdf[a] - cdf[a-1]) / cdf[-1], for the row's
    stream uniforms: ``tokens[j]`` and ``probs[j]`` = q(tokens[j]) for those searched in the
    batch, ``candidate(j)`` for every j (the later ones searched here, the same way);
    ``row()`` fetches (q, log q) over the whole vocabulary as float64 numpy (O(V), only when a
    sampler needs the full row)."""

    __slots__ = ("tokens", "probs", "_dists", "_b", "_rest", "_c")

    def __init__(self, tokens: list[int], probs: list[float], dists: NextTokenDists | None, b: int,
                 rest: np.ndarray | None = None):
        self.tokens, self.probs, self._dists, self._b = tokens, probs, dists, b
        self._rest = rest  # the uniforms after the searched ones
        self._c: np.ndarray | None = None

    def candidate(self, j: int) -> tuple[int, float] | None:
        """(token, q(token)) for the j-th stream uniform; None past the last one."""
        if j < len(self.tokens):
            return self.tokens[j], self.probs[j]
        j -= len(self.tokens)
        if self._rest is None or j >= len(self._rest):
            return None
        if self._c is None:
            self._c = self.cdf()
        c = self._c
        total = float(c[-1])
        a = min(int(np.searchsorted(c, float(self._rest[j]) * total, side="right")), len(c) - 1)
        return a, (float(c[a]) - (float(c[a - 1]) if a > 0 else 0.0)) / total

    def row(self) -> tuple[np.ndarray, np.ndarray]:
        return law_of_cdf(self._dists.cdf[self._b])

    def cdf(self) -> np.ndarray:
        """The row's CDF as float64 numpy (a view, no copy, on a CPU device)."""
        return self._dists.cdf[self._b].detach().to("cpu", torch.float64).numpy()


def law_of_cdf(cdf: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(q, log q) as float64 numpy for one CDF row: q(a) = (cdf[a] - cdf[a-1]) / cdf[-1]."""
    c = cdf.detach().to("cpu", torch.float64).numpy()
    q = np.diff(c, prepend=0.0) / c[-1]
    np.maximum(q, 0.0, out=q)
    with np.errstate(divide="ignore"):
        return q, np.log(q)


@contextmanager
def one_thread(device: torch.device) -> Iterator[None]:
    """Run small CPU tensor ops on one thread: B * K binary searches (or one row's cumsum) take
    microseconds there, while handing them to the intra-op pool costs 2-20 ms per call on a
    loaded 2-core machine (measured)."""
    threads = torch.get_num_threads() if device.type == "cpu" else 1
    if threads > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if threads > 1:
            torch.set_num_threads(threads)


def draw_streams(dists: NextTokenDists, uniforms: np.ndarray, eager: int | None = None) -> list[Stream]:
    """For every row b and uniform u = uniforms[b, j]: the token a with
    cdf[b, a-1] <= u cdf[b, -1] < cdf[b, a] (one batched search on the rows' device) and its
    probability q_b(a). Only these [B, K] ids and probabilities leave the device.

    With ``eager`` and float64 rows on the CPU, only the first ``eager`` uniforms of each row
    are searched in the batch, the others by ``Stream.candidate`` when a sampler asks (each
    search reads ~17 cache lines of a row that is not in cache: most of the batch's cost)."""
    cdf = dists.cdf
    rest = None
    if eager is not None and eager < uniforms.shape[1] and cdf.device.type == "cpu" and cdf.dtype == torch.float64:
        uniforms, rest = uniforms[:, :eager], uniforms[:, eager:]
    with one_thread(cdf.device):
        u = torch.from_numpy(np.ascontiguousarray(uniforms)).to(cdf.device, cdf.dtype)
        total = cdf[:, -1:]
        ids = torch.searchsorted(cdf, u * total, right=True).clamp_(max=cdf.shape[1] - 1)
        hi = cdf.gather(1, ids)
        lo = cdf.gather(1, (ids - 1).clamp_(min=0))
        lo = torch.where(ids > 0, lo, torch.zeros((), dtype=cdf.dtype, device=cdf.device))
        probs = ((hi - lo) / total).tolist()
        tokens = ids.tolist()
    if rest is None:
        return [Stream(t, q, dists, b) for b, (t, q) in enumerate(zip(tokens, probs))]
    return [Stream(t, q, dists, b, rest[b]) for b, (t, q) in enumerate(zip(tokens, probs))]


def cpu_stream(logp: np.ndarray, draw: Any) -> tuple[Callable[[int], tuple[int, float] | None],
                                                     Callable[[], tuple[np.ndarray, np.ndarray]],
                                                     Callable[[], np.ndarray]] | None:
    """The reference (one particle, CPU) version of ``draw_streams`` for a draw exposing
    ``stream_uniform``: (candidate(j) -> (token, q) or None past the reserve, row() -> (q, log q),
    cdf() -> the CDF), the CDF computed exactly as ``dists_from_logprobs`` does. None for plain
    draw functions."""
    stream_uniform = getattr(draw, "stream_uniform", None)
    if stream_uniform is None:
        return None
    with one_thread(torch.device("cpu")):
        cdf_t = dists_from_logprobs(torch.from_numpy(np.ascontiguousarray(logp))[None]).cdf[0]
    c = cdf_t.numpy()
    total = float(c[-1])
    cache: list[tuple[np.ndarray, np.ndarray]] = []

    def candidate(j: int) -> tuple[int, float] | None:
        u = stream_uniform(j)
        if u is None:
            return None
        a = min(int(np.searchsorted(c, u * total, side="right")), len(c) - 1)
        return a, (float(c[a]) - (float(c[a - 1]) if a > 0 else 0.0)) / total

    def row() -> tuple[np.ndarray, np.ndarray]:
        if not cache:
            cache.append(law_of_cdf(cdf_t))
        return cache[0]

    return candidate, row, lambda: c
