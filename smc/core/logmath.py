"""Log-space arithmetic on weights.

``logsumexp`` is written here rather than taken from ``scipy.special``: on this project's
inputs (a handful of particle weights; one vocabulary row) scipy's version costs 40 µs against
4 µs for 4 entries and 790 µs against 330 µs for 49,152 (measured on the development machine,
numpy 2.4, scipy 1.17), and it sits on the per-step path.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

NEG_INF = float("-inf")


def logsumexp(x: np.ndarray | Sequence[float]) -> float:
    """log sum_i exp(x_i); -inf for an empty or all -inf input, NaN when an entry is NaN."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return NEG_INF
    m = float(np.max(x))
    if m == NEG_INF or math.isnan(m):
        return m
    return m + math.log(float(np.sum(np.exp(x - m))))


def normalized(logw: np.ndarray | Sequence[float]) -> tuple[np.ndarray, float]:
    """(exp(logw - L), L) with L = logsumexp(logw); zeros and L = -inf when every entry is -inf
    (or there is none)."""
    logw = np.asarray(logw, dtype=float)
    total = logsumexp(logw)
    if total == NEG_INF:
        return np.zeros(len(logw)), NEG_INF
    return np.exp(logw - total), total


def json_number(x: float) -> float | None:
    """``x`` for JSON, which has no infinities or NaN: None (null) for -inf (a log weight of
    zero weight) and any other non-finite value, else ``float(x)``."""
    return float(x) if math.isfinite(x) else None
