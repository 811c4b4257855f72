"""The outcome of an SMC run: weighted samples, the posterior over texts, log Ẑ, genealogy, stats.

With final log weights lw_i (i = 1..N; -inf for dead particles, and unfinished particles count as
-inf in the estimates) the run estimates

    Ẑ = (1/N) sum_i exp(lw_i)                       (log_ml = log Ẑ, unbiased for Z in Ẑ)
    posterior(s) = sum_{i: text_i = s} exp(lw_i) / sum_j exp(lw_j)   over finished particles
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from potentials import JSONSchema
from smc.core.logmath import NEG_INF, json_number, logsumexp, normalized
from smc.core.resampling import ess as _ess
from smc.engine import viz
from smc.programs.model import Sample

if TYPE_CHECKING:  # annotations only: importing it loads torch
    from smc.backends.base import LMBackend


@dataclass(frozen=True)
class StepRecord:
    """What happened at one SMC step; particle i is the i-th particle of that step's population.

    Attributes:
        step: 1-based step number.
        active: whether particle i was advanced in this step (not yet finished, weight > 0).
        tokens: tokens particle i added during this step (() if it was finished, dead, or forced EOS).
        log_weights: log weights after the step, before any resampling (twists included).
        finished: whether particle i had finished after the step.
        ess: effective sample size of ``log_weights``.
        ancestors: None if no resampling followed this step; else the next step's particle k
            descends from this step's particle ``ancestors[k]``.
    """

    step: int
    active: list[bool]
    tokens: list[tuple[int, ...]]
    log_weights: list[float]
    finished: list[bool]
    ess: float
    ancestors: list[int] | None = None


@dataclass
class Result:
    """Weighted samples from an SMC run (see the module docstring for the estimates).

    Attributes:
        samples: the N final particles, then the finished copies the run banked
            (``Model.bank``, ``finish_share``; ``stats["banked"]`` of them).
        log_ml: log Ẑ, log((1/N) sum of the finished samples' weights) (-inf when none finished).
        history: one StepRecord per step, for genealogy plots.
        stats: run statistics: particles, steps, resampling_events, banked, tokens, wall_time_s,
            lm_forward_passes, constraint_checks (single-token checks), full_evaluations (whole
            next-token weight vectors), and raw counter deltas under "lm", "samplers" and
            "critic" (empty without one, or where it was not asked) (counters of objects shared
            with concurrent runs include those runs' work).
        constraint: the constraint the run sampled under, as the caller passed it (set by
            ``smc.generate``; None for an unconstrained run or a custom program), read by
            ``parsed``.
    """

    samples: list[Sample]
    log_ml: float
    history: list[StepRecord] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    constraint: Any = field(default=None, repr=False, compare=False)

    @property
    def finished(self) -> list[Sample]:
        return [s for s in self.samples if s.finished]

    @property
    def weights(self) -> np.ndarray:
        """Normalized weights of the samples (finished ones only; zeros if none has weight)."""
        return normalized([s.log_weight if s.finished else NEG_INF for s in self.samples])[0]

    @property
    def posterior(self) -> dict[str, float]:
        """Normalized weight of every distinct finished text, most probable first."""
        by_text: dict[str, list[float]] = {}
        for s in self.samples:
            if s.finished and s.log_weight > NEG_INF:
                by_text.setdefault(s.text, []).append(s.log_weight)
        if not by_text:
            return {}
        logs = {t: logsumexp(np.array(v)) for t, v in by_text.items()}
        total = logsumexp(np.array(list(logs.values())))
        probs = {t: math.exp(v - total) for t, v in logs.items()}
        return dict(sorted(probs.items(), key=lambda kv: -kv[1]))

    @property
    def ess(self) -> float:
        """Effective sample size of the final weights (finished particles)."""
        return _ess(np.array([s.log_weight if s.finished else NEG_INF for s in self.samples]))

    @property
    def best(self) -> str | None:
        """The finished text of highest posterior probability, or None if none finished."""
        post = self.posterior
        return next(iter(post)) if post else None

    @property
    def parsed(self) -> list[Any]:
        """The finished samples' values: parsed[i] = S.parse(finished[i].text), in the order of
        ``finished`` (pair them with ``finished[i].log_weight``), where S is the run's
        JSONSchema constraint (alone, or the one JSONSchema factor of a product or lifted
        constraint). For ``JSONSchema(M)`` with M a pydantic model these are M instances,
        validated by pydantic; for a plain schema, the decoded JSON values. Empty when no
        sample finished.

        ValueError when the run has no JSONSchema constraint, or several that parse
        differently (then call ``schema.parse(sample.text)`` with the one wanted)."""
        schema = self._json_schema()
        out = []
        for i, s in enumerate(self.finished):
            try:
                out.append(schema.parse(s.text))
            except ValueError as err:
                # cannot happen for a run of smc.generate (complete() checked every finished
                # sample), so say which sample and why instead of one bare pydantic error
                raise ValueError(f"finished sample {i} ({s.text!r}) does not parse: {err}") from err
        return out

    @property
    def parsed_best(self) -> Any:
        """``best`` parsed as in ``parsed`` (None when no sample finished; ValueError as in
        ``parsed``)."""
        schema = self._json_schema()
        best = self.best
        return None if best is None else schema.parse(best)

    def _json_schema(self) -> Any:
        """The run's one JSONSchema factor (see ``parsed``)."""
        factors = () if self.constraint is None else self.constraint.factors()
        found = [c for c in factors if isinstance(c, JSONSchema)]
        if not found:
            what = ("no constraint" if self.constraint is None
                    else f"the constraint {self.constraint!r}")
            raise ValueError(
                f"Result.parsed needs a run constrained by a JSONSchema (e.g. "
                f"JSONSchema(MyModel) for a pydantic model); this run had {what}"
            )
        # plain schemas all parse to the same JSON value; pydantic models may not agree
        if len({id(s.model) for s in found if s.model is not None}) > 1:
            raise ValueError(
                "the constraint has JSONSchema factors of several pydantic models "
                f"({', '.join(s.model.__name__ for s in found if s.model is not None)}); "
                "parse with the one you want: schema.parse(sample.text)"
            )
        return next((s for s in found if s.model is not None), found[0])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary; log values of -inf (zero weight) are written as None (null)."""
        return {
            "samples": [
                {"text": s.text, "log_weight": json_number(s.log_weight), "finished": s.finished}
                for s in self.samples
            ],
            "posterior": self.posterior,
            "log_ml": json_number(self.log_ml),
            "ess": self.ess,
            "stats": self.stats,
        }

    def __repr__(self) -> str:
        return (
            f"Result(particles={len(self.samples)}, finished={len(self.finished)}, "
            f"log_ml={self.log_ml:.4g}, ess={self.ess:.3g}, best={self.best!r})"
        )

    def plot(self, ax: Any = None) -> Any:
        """Final weights, ESS trace with resampling events, posterior over texts (see smc.engine.viz.plot)."""
        return viz.plot(self, ax)

    def to_html(self, path: Any, lm: LMBackend | None = None) -> Any:
        """Write the genealogy page to ``path`` and return it; ``lm`` decodes tokens (see smc.engine.viz.save)."""
        return viz.save(self, path, lm)
