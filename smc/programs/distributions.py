"""Distributions a program samples from or observes (``Model.sample``, ``Model.observe``)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np

from samplers import Draw
from smc.core.logmath import NEG_INF


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
