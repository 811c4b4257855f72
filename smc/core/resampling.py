"""Resampling schemes: choose n ancestors from normalized weights w (sum w = 1).

Every scheme here is unbiased in its offspring counts, E[#{k : a_k = i}] = n w_i, which is what
keeps the SMC estimate of Z unbiased when all weights are reset to their mean afterwards. They
differ in variance: multinomial > stratified, residual; systematic is usually lowest (but has no
general guarantee). Each takes a numpy Generator and returns ``n`` ancestor indices (int64).
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def inverse_cdf(weights: np.ndarray, u: float | np.ndarray) -> int | np.ndarray:
    """Inverse-CDF draw: with C = cumsum(weights) and W = C[-1], the index i with

        C[i-1] <= u W < C[i]        (C[-1] := 0),

    for each u in [0, 1) (a float gives an int, an array of u an int64 array; u need not be
    sorted). Where rounding puts u W at or past W, the last index of positive weight.

    Args:
        weights: non-negative, not all 0; need not be normalized.
        u: uniform(s) in [0, 1).
    """
    weights = np.asarray(weights)
    c = np.cumsum(weights)
    # u W can round up to W, which leaves an index past the last positive weight; that index is
    # looked up only then, as finding it costs a pass over the weights.
    if np.ndim(u) == 0:  # one draw per call in the samplers: plain ints are several times faster
        i = int(np.searchsorted(c, u * c[-1], side="right"))
        return i if i < len(c) and weights[i] > 0 else int(np.flatnonzero(weights > 0)[-1])
    idx = np.searchsorted(c, np.multiply(u, c[-1]), side="right")
    past = (idx >= len(c)) | (weights[np.minimum(idx, len(c) - 1)] <= 0)
    if np.any(past):
        idx = np.where(past, np.flatnonzero(weights > 0)[-1], idx)
    return idx


def multinomial(w: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """a_k i.i.d. ~ Categorical(w), k = 1..n."""
    return inverse_cdf(w, rng.random(n))


def stratified(w: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """a_k = F^-1((k + U_k) / n) with independent U_k ~ U[0, 1): one draw per stratum."""
    return inverse_cdf(w, (np.arange(n) + rng.random(n)) / n)


def systematic(w: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """a_k = F^-1((k + U) / n) with a single U ~ U[0, 1) shared by all strata."""
    return inverse_cdf(w, (np.arange(n) + rng.random()) / n)


def residual(w: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """floor(n w_i) copies of each i, then the remaining r draws multinomial on n w_i - floor(n w_i)."""
    nw = n * np.asarray(w, dtype=float)
    counts = np.floor(nw).astype(np.int64)
    fixed = np.repeat(np.arange(len(w)), counts)
    r = n - len(fixed)
    if r == 0:
        return fixed
    rest = multinomial(np.maximum(nw - counts, 0.0), r, rng)
    return np.concatenate([fixed, rest])


SCHEMES: dict[str, Callable[[np.ndarray, int, np.random.Generator], np.ndarray]] = {
    "multinomial": multinomial,
    "stratified": stratified,
    "systematic": systematic,
    "residual": residual,
}


def get_scheme(name: str) -> Callable[[np.ndarray, int, np.random.Generator], np.ndarray]:
    """The resampling function called ``name``, or ValueError listing the choices."""
    if name not in SCHEMES:
        raise ValueError(f"unknown resampling scheme {name!r}; choose one of {', '.join(SCHEMES)}")
    return SCHEMES[name]


def ess(log_weights: np.ndarray) -> float:
    """Effective sample size (sum w)^2 / sum w^2 of exp(log_weights); 0 when all are -inf."""
    lw = np.asarray(log_weights, dtype=float)
    if lw.size == 0 or not np.any(lw > -np.inf):
        return 0.0
    w = np.exp(lw - lw.max())
    return float(w.sum() ** 2 / (w**2).sum())
