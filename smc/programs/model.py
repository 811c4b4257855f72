"""Probabilistic programs (LLaMPPL-style): ``Model``, one particle's program, and its primitives.

A Model is one particle's program state. The SMC engine runs N copies; each ``await step()``
extends a particle and multiplies its weight by whatever the step scored:

    weight <- weight * exp(sum of the step's scores),

where ``sample`` from a distribution scores the sampler's log weight (0 for exact draws, the
local mass estimate for a constrained token sampler, log p/q for a proposal), ``observe`` scores
log p(value), ``condition(False)`` scores -inf and ``score`` adds a log weight directly. A
``twist`` is a temporary score that guides resampling only: it is removed again before the
particle's next step and when it finishes, so final weights are untwisted.

LMs, potentials and samplers are shared by all particles: cloning a particle deep-copies its
state but never those (the sharing rule, ``smc.programs.sharing``).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence

from samplers import Draw, TokenSampler
from smc.core.concurrency import run_all
from smc.core.errors import InvalidArgument
from smc.core.logmath import NEG_INF
from smc.programs.context import LMContext
from smc.programs.distributions import Distribution
from smc.programs.sharing import clone_state


@dataclass(frozen=True)
class Sample:
    """One final particle: text, token ids (EOS excluded), log weight, and ``finished``.

    ``finished`` means the program ended normally (EOS, or the forced EOS at max_tokens) with
    a positive weight; dead particles (weight 0) and unfinished ones are False.
    """

    text: str
    token_ids: tuple[int, ...]
    log_weight: float
    finished: bool


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

    def use_draw(self, draw: Draw | None) -> None:
        """Hand the particle the randomness of its next step (the engine's and the searches'
        call, before a step); None takes it back after the step."""
        self._draw = draw

    @classmethod
    async def step_population(cls, particles: Sequence["Model"]) -> None:
        """``step`` of every particle of this program, as the engine calls it each step. The
        default steps each particle on its own, concurrently; a program may step them all at
        once (the built-in ConstrainedGeneration does), with the same results."""
        await run_all(p.step() for p in particles)

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
        raise InvalidArgument(f"{what} must be finite or -inf, got {logw}")
    return logw
