"""Resampling schemes: unbiased offspring counts, support, and determinism."""

import numpy as np
import pytest

from smc.core.resampling import SCHEMES, ess, get_scheme

W = np.array([0.5, 0.0, 0.3, 0.15, 0.05])


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_offspring_counts_are_unbiased(name):
    scheme, n, reps = get_scheme(name), 7, 20000
    rng = np.random.default_rng(0)
    counts = np.zeros((reps, len(W)))
    for r in range(reps):
        idx = scheme(W, n, rng)
        assert len(idx) == n and idx.dtype.kind == "i"
        counts[r] = np.bincount(idx, minlength=len(W))
    assert counts[:, 1].sum() == 0  # zero weight is never chosen
    mean, se = counts.mean(0), counts.std(0) / np.sqrt(reps)
    for i in range(len(W)):
        assert abs(mean[i] - n * W[i]) <= 4 * se[i] + 1e-12, (name, i, mean[i], n * W[i])


@pytest.mark.parametrize("name", ["systematic", "residual"])
def test_low_variance_schemes_keep_the_deterministic_part(name):
    # n w_i = 3.5, 0, 2.1, 1.05, 0.35: at least floor(n w_i) copies with these schemes
    rng = np.random.default_rng(1)
    for _ in range(200):
        c = np.bincount(get_scheme(name)(W, 7, rng), minlength=5)
        assert c[0] >= 3 and c[2] >= 2 and c[3] >= 1 and c[1] == 0


def test_same_seed_same_ancestors_and_bad_name():
    for name in SCHEMES:
        a = SCHEMES[name](W, 9, np.random.default_rng(3))
        b = SCHEMES[name](W, 9, np.random.default_rng(3))
        assert (a == b).all()
    with pytest.raises(ValueError, match="unknown resampling"):
        get_scheme("bogus")


def test_ess():
    assert ess(np.zeros(4)) == pytest.approx(4.0)
    assert ess(np.array([0.0, -np.inf, -np.inf])) == pytest.approx(1.0)
    assert ess(np.full(3, -np.inf)) == 0.0
    assert ess(np.log([1.0, 3.0])) == pytest.approx(16 / 10)


def test_inverse_cdf_picks_the_interval_of_u_and_never_a_zero_weight():
    """i(u) satisfies C[i-1] <= u W < C[i] (C = cumsum(w), W = C[-1]); at the top end, where
    u W rounds to W, the last positive index; a float u gives the int the array form gives."""
    from smc.core.resampling import inverse_cdf

    rng = np.random.default_rng(1)
    for _ in range(300):
        w = rng.random(int(rng.integers(1, 12))) * (rng.random() < 0.5 or 1e-300)
        w[rng.random(len(w)) < 0.4] = 0.0
        w = np.concatenate([w, [1e-3 if w.sum() == 0 else 0.0], np.zeros(int(rng.integers(0, 3)))])
        u = np.concatenate([rng.random(40), [0.0, np.nextafter(1.0, 0.0)]])
        got = inverse_cdf(w, u)
        c = np.cumsum(w)
        last = int(np.flatnonzero(w > 0)[-1])
        for x, i in zip(u, got):
            assert w[i] > 0
            lo = c[i - 1] if i else 0.0
            assert lo <= x * c[-1] < c[i] or (i == last and x * c[-1] >= c[i])
        assert [inverse_cdf(w, float(x)) for x in u] == got.tolist()
        assert all(type(inverse_cdf(w, float(x))) is int for x in u[:2])
    # u W == W (what rounding of the product can give): the last positive index
    w = np.array([0.2, 0.8, 0.0, 0.0])
    assert inverse_cdf(w, 1.0) == 1 and inverse_cdf(w, np.array([1.0, 0.1])).tolist() == [1, 0]
