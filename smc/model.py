"""Probabilistic programs (LLaMPPL-style) and the built-in constrained-generation program.

A Model is one particle's program state. The SMC engine runs N copies; each ``await step()``
extends a particle and multiplies its weight by whatever the step scored:

    weight <- weight * exp(sum of the step's scores),

where ``sample`` from a distribution scores the sampler's log weight (0 for exact draws, the
local mass estimate for a constrained token sampler, log p/q for a proposal), ``observe`` scores
log p(value), ``condition(False)`` scores -inf and ``score`` adds a log weight directly. A
``twist`` is a temporary score that guides resampling only: it is removed again before the
particle's next step and when it finishes, so final weights are untwisted.

LMs, potentials and samplers are shared by all particles: cloning a particle deep-copies its
state but never those (the sharing rule, ``is_shared``, below).
"""

from __future__ import annotations


import copy
import math
import types
import warnings
import weakref
from abc import ABC, abstractmethod
from typing import Any, Iterator, Sequence

import numpy as np

from potentials.base import NEG_INF, BytePotential, Potential, logsumexp
from potentials.lookahead import Lookahead
from samplers import SAMPLERS, Draw, TokenSampler
from smc.backends.base import LMBackend, check_backend, is_lm
from smc.backends.prompts import Prompt, encode_prompt
from smc.concurrency import run_all
from smc.result import Sample


# ---------------------------------------------------------------------------- sharing
# The one sharing rule. An object is *shared* by all particles when it is an LM backend or its
# class declares ``shared_by_particles = True`` (AsyncLM, Potential, TokenSampler and Shared do,
# once, in their base classes). Cloning a particle (``clone_state``) keeps every shared object it
# reaches, at any depth, and deep-copies everything else; a checkpoint (smc.checkpoint) names
# every shared object by its attribute path instead of pickling it, and ``resume`` binds the
# names again from ``lm=`` and ``shared={name: object}``.


class Shared:
    """A container whose contents all particles share: ``Shared(table=t).table is t`` in every
    clone, and a checkpoint names it (by its attribute path) instead of pickling it.

    To make a class of your own shared, declare ``shared_by_particles = True`` on it instead.
    """

    shared_by_particles = True

    def __init__(self, **items: Any):
        self.__dict__.update(items)


def is_shared(obj: Any) -> bool:
    """The sharing rule: ``obj`` is an LM backend, or its class declares ``shared_by_particles = True``."""
    how = _HOW.get(type(obj)) or _classify(type(obj))
    return how == "shared" or (how[0] == "?" and is_lm(obj))


#: values that are their own copy (as copy.deepcopy treats them)
_ATOMIC = frozenset({
    type(None), bool, int, float, complex, str, bytes, range, type, type(Ellipsis),
    types.FunctionType, types.BuiltinFunctionType, types.MethodType, weakref.ref,
})
_MISSING = object()
#: per class, how clone_state copies its instances: "shared" (kept), "plain" (attribute by
#: attribute: copy.deepcopy's default protocol), "deepcopy" (a protocol of its own), or "?plain"
#: / "?deepcopy" when only the instance can tell whether it is an LM (protocol members set in
#: __init__); classes are classified once, when first met
_HOW: dict[type, str] = {}


def _classify(t: type) -> str:
    if getattr(t, "shared_by_particles", False) is True:
        how = "shared"
    else:
        plain = (
            all(k.__module__ != "builtins" for k in t.__mro__[:-1])  # not a dict, list, ... subclass
            and not hasattr(t, "__deepcopy__")
            and t.__reduce_ex__ is object.__reduce_ex__
            and t.__reduce__ is object.__reduce__
            and t.__getstate__ is object.__getstate__
            and not hasattr(t, "__setstate__")
            and all("__slots__" not in vars(k) for k in t.__mro__[:-1])
            and hasattr(t, "__dict__")
        )
        how = "plain" if plain else "deepcopy"
        if hasattr(t, "next_token_logprobs"):  # an LM by the protocol, if it has vocab and EOS ids
            how = "?" + how
    _HOW[t] = how
    return how


def clone_state(obj: Any, memo: dict[int, Any] | None = None) -> Any:
    """copy.deepcopy(obj), except that every shared object it reaches (``is_shared``) is kept.

    Lists, dicts, tuples, sets and plain objects are copied here (fast: program state is mostly
    these); anything else goes to copy.deepcopy with the shared objects inside it registered in
    its memo first, so the rule holds at every depth.
    """
    return _clone(obj, {} if memo is None else memo)


def _clone(x: Any, memo: dict[int, Any]) -> Any:
    t = type(x)
    if t in _ATOMIC:
        return x
    y = memo.get(id(x), _MISSING)
    if y is not _MISSING:
        return y
    if t is list:
        if _ATOMIC.issuperset(map(type, x)):  # e.g. token ids: a plain copy
            y = memo[id(x)] = x.copy()
        else:
            y = memo[id(x)] = []
            y.extend(v if type(v) in _ATOMIC else _clone(v, memo) for v in x)
        return y
    if t is dict:
        y = memo[id(x)] = {}
        for k, v in x.items():
            y[_clone(k, memo)] = _clone(v, memo)
        return y
    if t is tuple:
        items = [_clone(v, memo) for v in x]
        y = memo[id(x)] = x if all(a is b for a, b in zip(items, x)) else tuple(items)
        return y
    if t is set or t is frozenset:
        y = memo[id(x)] = t(_clone(v, memo) for v in x)
        return y
    how = _HOW.get(t) or _classify(t)
    if how == "shared" or (how[0] == "?" and is_lm(x)):
        memo[id(x)] = x
        return x
    if how[-5:] == "plain":
        y = memo[id(x)] = t.__new__(t)
        d = y.__dict__
        for k, v in x.__dict__.items():
            d[k] = v if type(v) in _ATOMIC else _clone(v, memo)
        return y
    for s in _shared_inside(x):
        memo[id(s)] = s
    return copy.deepcopy(x, memo)


def _children(x: Any) -> list[tuple[str, Any]]:
    """(path suffix, child) for the members of ``x`` that a copy or a pickle of it visits: a
    container's items, then its attributes (``__dict__`` and ``__slots__``)."""
    if isinstance(x, dict):
        out = [(f"[{k!r}]", v) for k, v in x.items()] + [(f"<key {k!r}>", k) for k in x if type(k) not in _ATOMIC]
    elif isinstance(x, (list, tuple)):
        out = [(f"[{i}]", v) for i, v in enumerate(x)]
    elif isinstance(x, (set, frozenset)):
        out = [(f"<{v!r}>", v) for v in x]
    else:
        out = []
    out += [(f".{k}", v) for k, v in getattr(x, "__dict__", {}).items()]
    for k in type(x).__mro__:
        for name in vars(k).get("__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(x, name):
                out.append((f".{name}", getattr(x, name)))
    return out


def shared_paths(root: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(path, object) for every shared object reachable from ``root`` without passing through
    another shared object, each once, at the first path found breadth-first (e.g. "context.lm")."""
    seen: set[int] = set()
    queue = [(prefix, root)]
    while queue:
        nxt = []
        for path, x in queue:
            if type(x) in _ATOMIC or id(x) in seen:
                continue
            seen.add(id(x))
            if is_shared(x):
                yield path, x
                continue
            nxt.extend((f"{path}{suffix}".lstrip("."), c) for suffix, c in _children(x))
        queue = nxt


def _shared_inside(x: Any) -> Iterator[Any]:
    return (obj for _, obj in shared_paths(x))


def _is_shared(obj: Any) -> bool:
    warnings.warn("smc.model._is_shared is now smc.model.is_shared", DeprecationWarning, stacklevel=2)
    return is_shared(obj)


# ---------------------------------------------------------------------------- distributions
class Distribution(ABC):
    """A (possibly un-normalized) distribution a program can sample from or observe.

    ``sample(draw)`` returns (value, log_weight) properly weighted for the measure whose log
    density is ``log_prob``; ``commit(value)`` is called once a value is chosen (an LM
    next-token distribution extends its context there).
    """

    @abstractmethod
    async def sample(self, draw: Draw) -> tuple[Any, float]: ...

    @abstractmethod
    async def log_prob(self, value: Any) -> float: ...

    def commit(self, value: Any) -> None:
        pass


class Categorical(Distribution):
    """P(values[i]) = probs[i] (normalized here)."""

    def __init__(self, values: Sequence[Any], probs: Sequence[float]):
        p = np.asarray(probs, dtype=float)
        if len(values) != len(p) or len(p) == 0 or np.any(p < 0) or not p.sum() > 0:
            raise ValueError("Categorical needs as many non-negative probabilities as values, not all 0")
        self.values, self.probs = list(values), p / p.sum()

    async def sample(self, draw: Draw) -> tuple[Any, float]:
        return self.values[int(draw(self.probs))], 0.0

    async def log_prob(self, value: Any) -> float:
        p = sum(float(q) for v, q in zip(self.values, self.probs) if v == value)
        return math.log(p) if p > 0 else NEG_INF


def Bernoulli(p: float) -> Categorical:
    """True with probability p."""
    return Categorical([True, False], [p, 1.0 - p])


class SamplerCache(dict):
    """(id(constraint), sampler name) -> (constraint, sampler): the token samplers an LMContext
    built, shared by all its clones. A checkpoint stores it empty (``rebuilt_on_resume``): after
    a resume each sampler is built again, from the LM and the constraint, on first use."""

    shared_by_particles = True
    rebuilt_on_resume = True

    def __reduce__(self) -> tuple:
        return (SamplerCache, ())


class LMContext:
    """A prompt plus the tokens generated after it, for one LM.

    Args:
        lm: an LM backend.
        prompt: text, a list of ``{"role", "content"}`` chat messages, or token ids; the ids
            the LM sees are ``encode_prompt(lm, prompt, chat)`` (smc.backends.prompts), the same
            rule as ``smc.generate``.
        chat: for a text prompt, apply the LM's chat template (True) or not (False); None
            (default) applies it when the LM has one.

    ``tokens`` are the generated ids (EOS excluded); ``done`` turns True once EOS is sampled.
    """

    def __init__(self, lm: LMBackend, prompt: Prompt = "", *, chat: bool | None = None):
        check_backend(lm)
        self.lm = lm
        self.prompt_ids = tuple(encode_prompt(lm, prompt, chat))
        self.tokens: list[int] = []
        self.done = False
        self._samplers = SamplerCache()

    def next_token(self, constraint: Potential | None = None, sampler: str = "direct") -> "TokenDist":
        """The next-token distribution p(. | prompt + tokens), times ``constraint``'s weights.

        With a constraint the distribution is un-normalized; sampling from it draws a token with
        the named sampler ("direct", "awrs") and scores the local mass estimate.
        """
        return TokenDist(self, self._sampler(constraint, sampler))

    def _sampler(self, constraint: Potential | None, name: str) -> TokenSampler:
        key = (id(constraint), name)
        cache = self._samplers
        if key not in cache:
            if name not in SAMPLERS:
                raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
            pot = lift(constraint, self.lm)
            cache[key] = (constraint, SAMPLERS[name](self.lm, pot, self.prompt_ids))
        return cache[key][1]

    def text(self) -> str:
        return decode(self.lm, self.tokens)


class TokenDist(Distribution):
    """Next token of an LMContext under a sampler's target (see LMContext.next_token)."""

    def __init__(self, context: LMContext, sampler: TokenSampler):
        self.context, self.sampler = context, sampler

    async def sample(self, draw: Draw) -> tuple[int, float]:
        return await self.sampler.sample(tuple(self.context.tokens), draw)

    async def log_prob(self, token: int) -> float:
        ctx = tuple(self.context.tokens)
        lp = (await self.sampler.lm_logprobs_at(ctx, [token]))[0]
        if self.sampler.potential is None or lp == NEG_INF:
            return lp
        return lp + float((await self.sampler.potential.logw_subset(ctx, [token]))[0])

    def commit(self, token: int) -> None:
        if token in self.sampler.eos_ids:
            self.context.done = True
        else:
            self.context.tokens.append(int(token))


# ---------------------------------------------------------------------------- programs
class Model:
    """A probabilistic program: subclass it and write ``async def step(self)``.

    Primitives (inside ``step``): ``await self.sample(dist, proposal=None)``,
    ``await self.observe(dist, value)``, ``self.condition(ok)``, ``self.score(logw)``,
    ``self.twist(amount)``, ``self.finish()``, ``self.bank(logw)``. Override ``start`` for work
    before the first step, and ``text`` / ``token_ids`` to describe a particle in the Result (by
    default they read ``self.context`` when it is an LMContext).
    """

    def __init__(self) -> None:
        self.weight = 0.0
        self.twist_amount = 0.0
        self.finished = False
        self._draw: Draw | None = None

    async def start(self) -> None:
        """Called once per particle before the first step."""

    @abstractmethod
    async def step(self) -> None: ...

    # -- primitives
    def score(self, logw: float) -> None:
        """Multiply the weight by exp(logw)."""
        self.weight += _log_weight(logw, "score")

    def condition(self, ok: bool) -> None:
        """Weight 0 unless ``ok``."""
        if not ok:
            self.weight = NEG_INF

    def twist(self, amount: float) -> None:
        """A temporary score for resampling; undone before the next step and at finish."""
        self.score(amount)
        self.twist_amount += float(amount)

    def untwist(self) -> None:
        if self.weight > NEG_INF:
            self.weight -= self.twist_amount
        self.twist_amount = 0.0

    def finish(self) -> None:
        """Stop this particle; its weight becomes final (twists removed)."""
        self.untwist()
        self.finished = True

    def bank(self, logw: float) -> None:
        """Set aside a finished copy of this particle as it is now, of log weight
        ``self.weight + logw``, while the particle itself goes on: the engine moves it out of
        the population after this step (it is never stepped or resampled) and into the
        Result, and counts it in log_ml. The program keeps the run properly weighted by
        taking that share of the mass out of what goes on (``ConstrainedGeneration``'s
        ``finish_share`` banks a share of the EOS mass and gives the drawn EOS the rest)."""
        logw = _log_weight(logw, "bank's log weight")
        if self.weight + logw > NEG_INF:
            self.__dict__.setdefault("_banked", []).append(
                Sample(self.text(), self.token_ids(), self.weight + logw, True))

    def take_banked(self) -> list["Sample"]:
        """The copies ``bank`` set aside since the last call (the engine's call)."""
        return self.__dict__.pop("_banked", [])

    @property
    def draw(self) -> Draw:
        if self._draw is None:
            raise RuntimeError("Model randomness is only available inside a step run by the SMC engine")
        return self._draw

    async def sample(self, dist: Distribution | TokenSampler, proposal: Distribution | None = None) -> Any:
        """A value from ``dist`` (scored by the sampler's weight), or from ``proposal`` with weight p/q.

        With a proposal: value, w_q = proposal.sample(); score w_q + log dist(value) -
        log proposal(value); both distributions then commit the value.
        """
        if proposal is None:
            value, logw = await dist.sample(self.draw)
        else:
            value, logw_q = await proposal.sample(self.draw)
            logw = logw_q + await dist.log_prob(value) - await proposal.log_prob(value) if logw_q > NEG_INF else NEG_INF
            proposal.commit(value)
        self.score(logw)
        dist.commit(value)
        return value

    async def observe(self, dist: Distribution, value: Any) -> None:
        """Score log dist(value) and commit the value."""
        self.score(await dist.log_prob(value))
        dist.commit(value)

    # -- description and copying
    def text(self) -> str:
        ctx = getattr(self, "context", None)
        return ctx.text() if isinstance(ctx, LMContext) else ""

    def token_ids(self) -> tuple[int, ...]:
        ctx = getattr(self, "context", None)
        return tuple(ctx.tokens) if isinstance(ctx, LMContext) else ()

    def n_tokens(self) -> int:
        """len(self.token_ids()); programs may answer without building the tuple."""
        return len(self.token_ids())

    def tokens_since(self, k: int) -> tuple[int, ...]:
        """self.token_ids()[k:]; programs may answer without building the whole tuple."""
        return tuple(self.token_ids()[k:])

    def clone(self) -> "Model":
        """A new particle with a deep copy of this one's state that keeps every shared object
        (LMs, potentials, samplers, ``Shared`` containers: see ``is_shared``)."""
        return clone_state(self)


def _log_weight(logw: float, what: str) -> float:
    """``logw`` as a float, or ValueError naming ``what`` when it is NaN or +inf."""
    logw = float(logw)
    if math.isnan(logw) or logw == math.inf:
        raise ValueError(f"{what} must be finite or -inf, got {logw}")
    return logw


def check_finish_share(share: Any) -> float:
    """``share`` as a float, or ValueError/TypeError naming it: a number in [0, 1)."""
    if isinstance(share, bool) or not isinstance(share, (int, float)):
        raise TypeError(f"finish_share must be a number in [0, 1), got {share!r}")
    if not 0.0 <= share < 1.0:
        raise ValueError(f"finish_share must be in [0, 1) (the share of EOS mass banked each step), got {share!r}")
    return float(share)


#: the lookahead rate of ``generate`` for a byte-level constraint when none is given: chosen
#: on genlm-eval's patterns (benchmarks/RESULTS.md, "The lookahead twist")
DEFAULT_LOOKAHEAD = 1.0


def check_lookahead(rate: Any, constraint: Any = None, method: str = "smc") -> float:
    """The lookahead rate of a run, or ValueError/TypeError naming the problem.

    None (the default) is DEFAULT_LOOKAHEAD for an SMC run with a byte-level constraint, else
    0. A given rate must be a finite number >= 0, and when > 0 the run must be SMC with a
    byte-level constraint (the twist reads its byte states)."""
    if rate is None:
        return DEFAULT_LOOKAHEAD if method == "smc" and isinstance(constraint, BytePotential) else 0.0
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        raise TypeError(f"lookahead must be a number >= 0 (nats per byte of detour), got {rate!r}")
    if not (math.isfinite(rate) and rate >= 0):
        raise ValueError(f"lookahead must be a finite number >= 0 (nats per byte of detour), got {rate!r}")
    if rate > 0 and method != "smc":
        raise ValueError(f"lookahead is for method='smc' runs, not method={method!r}")
    if rate > 0 and not isinstance(constraint, BytePotential):
        raise ValueError("lookahead needs a byte-level constraint (Regex, Grammar, JSONSchema, ...), "
                         f"got {type(constraint).__name__ if constraint is not None else None}")
    return float(rate)


class ConstrainedGeneration(Model):
    """The built-in program behind ``smc.generate``: x ~ pi(x) ∝ p(x, EOS) phi(x), |x| <= max_tokens.

    Initial weight phi.prefix(()); each step draws a token with the sampler and scores its
    weight; EOS finishes. After ``max_tokens`` tokens EOS is forced with the target's weight
    log sum_{e in EOS} p(e | x) exp(logw_next(x)[e]). The last sampled token (max_tokens - 1
    tokens so far) is drawn with ``sampler.finishing()``: only tokens after which the text can
    finish, so no particle is spent on a prefix the forced EOS would give weight 0 (the target
    and the unbiasedness of Ẑ are unchanged: potentials.finishing).

    With ``finish_share`` = s in (0, 1), every step before the forced EOS banks (``Model.bank``)
    the finished text x with log weight

        log w + log s + log m(x),   m(x) = sum_{e in EOS} p(e | x) exp(logw_next(x)[e]),

    the EOS mass of the target there, and a drawn EOS gets log(1 - s) more: the finished mass
    in expectation is w m(x) (s of it banked, 1 - s drawn) and the rest is unchanged, so the
    target and Ẑ's unbiasedness stay; every text the particles pass where EOS is allowed is
    then a finished sample, however unlikely the model is to stop there. It costs one
    completion check per particle and step.

    When the sampler's potential is a ``potentials.lookahead.Lookahead`` (``generate(...,
    lookahead=rate)``), the particles' weights carry its twist exp(G(x)) and every finish above
    (drawn, banked, forced) divides it out: log w - G(x), so the target stays pi.
    """

    #: read by particles pickled before the option existed
    finish_share = 0.0

    def __init__(self, sampler: TokenSampler, max_tokens: int, finish_share: float = 0.0):
        super().__init__()
        self.sampler = sampler
        self.max_tokens = int(max_tokens)
        self.finish_share = check_finish_share(finish_share)
        self.tokens: list[int] = []

    async def start(self) -> None:
        if self.sampler.potential is not None:
            self.score(await self.sampler.potential.prefix(()))

    async def step(self) -> None:
        ctx = tuple(self.tokens)
        if len(ctx) >= self.max_tokens:
            self.score(await self._eos_mass(ctx) - self._twist())
            if self.weight > NEG_INF:  # a dead particle stays unfinished
                self.finish()
            return
        if self.finish_share > 0.0:
            await self._bank_eos()
        self._take(*await self._sampler_now().sample(ctx, self.draw))

    async def _eos_mass(self, ctx: tuple[int, ...]) -> float:
        """log m(x) = log sum_{e in EOS} p(e | x) exp(logw_next(x)[e])."""
        eos = list(self.sampler.eos_ids)
        logw = np.zeros(len(eos))
        if self.sampler.potential is not None:
            logw = np.asarray(await self.sampler.potential.logw_subset(ctx, eos))
            if not (logw > NEG_INF).any():
                # the text cannot end here: no LM row asked for (the population step's rows
                # stay on the device, so this would be a forward pass of its own)
                return NEG_INF
        return logsumexp(np.array(await self.sampler.lm_logprobs_at(ctx, eos)) + logw)

    async def _bank_eos(self) -> None:
        """Bank the text as it is with log s + log m(x) (s = ``finish_share`` > 0)."""
        self.bank(math.log(self.finish_share) + await self._eos_mass(tuple(self.tokens)) - self._twist())

    def _twist(self) -> float:
        """G(x): the lookahead twist the weight carries (potentials.lookahead; 0 without one),
        divided out of every finished text."""
        pot = self.sampler.potential
        return pot.twist(self.tokens) if isinstance(pot, Lookahead) else 0.0

    def _sampler_now(self) -> TokenSampler:
        """The sampler of this step: ``sampler.finishing()`` for the last token before the
        forced EOS (only tokens after which the text can finish; the same target pi, see
        potentials.finishing), else ``sampler``."""
        return self.sampler.finishing() if len(self.tokens) == self.max_tokens - 1 else self.sampler

    def _take(self, token: int, logw: float) -> None:
        self.score(logw)
        if self.weight == NEG_INF:
            return
        if token in self.sampler.eos_ids:
            if self.finish_share > 0.0:  # the share _bank_eos set aside
                self.score(math.log1p(-self.finish_share))
            self.score(-self._twist())
            self.finish()
        else:
            self.tokens.append(token)

    @staticmethod
    async def step_population(particles: Sequence["ConstrainedGeneration"]) -> None:
        """``step`` of every particle, with the same results: the draws of each sampler in one
        ``TokenSampler.sample_many`` call (its population step, without a task per particle);
        particles at ``max_tokens`` take their ``step``."""
        groups: dict[int, tuple[TokenSampler, list[ConstrainedGeneration]]] = {}
        ends = []
        for p in particles:
            if len(p.tokens) >= p.max_tokens:
                ends.append(p.step())
            else:
                s = p._sampler_now()
                groups.setdefault(id(s), (s, []))[1].append(p)

        async def draw_group(sampler: TokenSampler, ps: list[ConstrainedGeneration]) -> None:
            banking = [p._bank_eos() for p in ps if p.finish_share > 0.0]
            if banking:  # no task per particle when nothing is banked (the default)
                await run_all(banking)
            for p, got in zip(ps, await sampler.sample_many([(tuple(p.tokens), p.draw) for p in ps])):
                p._take(*got)

        await run_all([*ends, *(draw_group(s, ps) for s, ps in groups.values())])

    def token_ids(self) -> tuple[int, ...]:
        return tuple(self.tokens)

    def n_tokens(self) -> int:
        return len(self.tokens)

    def tokens_since(self, k: int) -> tuple[int, ...]:
        return tuple(self.tokens[k:])

    def text(self) -> str:
        return decode(self.sampler.lm, self.tokens)


# ---------------------------------------------------------------------------- helpers
def decode(lm: LMBackend, tokens: Sequence[int]) -> str:
    """Text of ``tokens`` (invalid UTF-8, e.g. a character cut by max_tokens, becomes U+FFFD)."""
    return b"".join(lm.vocab[t] for t in tokens).decode("utf-8", errors="replace")


def target_potential(constraint: Potential | None, lm: LMBackend, lookahead: float | None = 0.0) -> Potential | None:
    """``lift(constraint, lm)``, inside a ``Lookahead`` twist of rate ``check_lookahead(lookahead,
    constraint)`` when that is > 0 and the constraint knows completions: the one rule by which
    ``generate`` and ``resume`` build a run's token-level potential."""
    pot = lift(constraint, lm)
    rate = check_lookahead(lookahead, constraint)
    if rate == 0:
        return pot
    twisted = Lookahead(pot, rate)
    return twisted if twisted.active else pot  # no completions known: the plain run, exactly


def lift(constraint: Potential | None, lm: LMBackend) -> Potential | None:
    """A token-level potential for ``lm``: byte-level ones are lifted, token-level ones checked."""
    if constraint is None:
        return None
    if isinstance(constraint, BytePotential):
        return constraint.lift(lm)
    if not isinstance(constraint, Potential):
        raise TypeError(
            f"constraint must be a Potential (e.g. potentials.Regex), got {type(constraint).__name__}"
        )
    if constraint.size != len(lm.vocab):
        raise ValueError(
            f"constraint has {constraint.size} symbols but the LM vocabulary has {len(lm.vocab)} "
            "tokens: pass a byte-level constraint or one lifted to this LM"
        )
    return constraint
