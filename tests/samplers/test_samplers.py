"""Exactness of the token samplers by enumerating all their randomness (design.md test 1)."""

import asyncio
import math

import numpy as np
import pytest
import torch

from smc.core.logmath import NEG_INF, logsumexp
from samplers import AWRSSampler, DirectSampler, MaskingSampler, ProposalSampler, make_sampler
from samplers.awrs import log_inv_time
from samplers.base import BlockDraw, cpu_stream, draw_streams, inverse_cdf, law_of_cdf
from smc.backends.base import dists_from_logprobs
from tests.toy_problems import FastToyLM, TokenPredicate, TokenSoft, enumerate_paths

VOCAB = [b"a", b"b", b"c", b"d", b"e", b"<eos>"]
EOS = 5


def lm_probs(ids):
    k = len(ids)
    base = np.array([0.30, 0.25, 0.05, 0.15, 0.0, 0.25])  # token "e" has probability 0
    return list(np.roll(base[:5], k).tolist() + [base[5]]) if k % 2 else base.tolist()


LM = FastToyLM(VOCAB, b"<eos>", lm_probs)
Q = FastToyLM(VOCAB, b"<eos>", lambda ids: [0.1, 0.1, 0.3, 0.2, 0.1, 0.2])

# Constraints over token tuples: which next tokens are allowed depends on the context.
ALLOWED = {
    (): {1, 2, 4},  # "b", "c", "e"(p = 0): most LM mass is rejected
    (1,): {0, 5},  # "a" or EOS
    (2,): {3},  # a single allowed token
    (3,): set(),  # dead end: Z = 0
    (0,): set(range(6)),  # everything allowed
}


def viable(x):
    return all(x[k] in ALLOWED.get(x[:k], set(range(6))) for k in range(len(x)))


def done(x):
    return EOS in ALLOWED.get(x, set(range(6)))


PHI = TokenPredicate(6, [EOS], viable, done)


def target(ctx, lm=LM, phi=PHI):
    p = np.array(lm.probs(ctx))
    logw = asyncio.run(phi.logw_next(ctx))
    return p * np.exp(logw)


def enumerated(sampler, ctx):
    """sum over paths of P(path) * w, per token."""
    paths = enumerate_paths(lambda draw: asyncio.run(sampler.sample(ctx, draw)))
    acc = np.zeros(len(VOCAB))
    total = sum(prob for prob, _ in paths)
    assert math.isclose(total, 1.0, rel_tol=1e-9), total
    for prob, (token, logw) in paths:
        if logw > NEG_INF:
            acc[token] += prob * math.exp(logw)
        else:  # -inf only with a token the constraint rejects
            assert target(ctx, sampler.lm)[token] == 0
    return acc


CONTEXTS = [(), (1,), (2,), (3,), (0,), (1, 0)]


@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.parametrize(
    "make",
    [
        lambda: DirectSampler(LM, PHI),
        lambda: AWRSSampler(LM, PHI),
        lambda: AWRSSampler(LM, PHI, max_checks=0),
        lambda: AWRSSampler(LM, PHI, max_checks=1),
        lambda: AWRSSampler(LM, PHI, max_checks=2),
        lambda: ProposalSampler(LM, PHI, proposal_lm=Q),
        lambda: ProposalSampler(LM, PHI, proposal_lm=Q, inner=AWRSSampler),
    ],
    ids=["direct", "awrs", "awrs-cap0", "awrs-cap1", "awrs-cap2", "proposal", "proposal-awrs"],
)
def test_properly_weighted_by_enumeration(make, ctx):
    sampler = make()
    np.testing.assert_allclose(enumerated(sampler, ctx), target(ctx), rtol=1e-6, atol=1e-9)


class KeptMasks(TokenPredicate):
    """PHI, claiming that a full evaluation at any context would be kept (the early fallback's
    condition): the sampler then falls back after its first ``early_fallback`` rejections."""

    async def mask_would_be_kept(self, ctx) -> bool:
        return True


KEPT = KeptMasks(6, [EOS], viable, done)


@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.parametrize("early,permille,cap", [(1, 0, 64), (2, 0, 64), (2, 0, 1), (0, 0, 64), (0, 1, 64),
                                                (0, 300, 64), (8, 200, 2), (2, 500, 64)])
def test_early_fallback_properly_weighted_by_enumeration(ctx, early, permille, cap):
    """Stopping after ``early`` rejections with none accepted, or once the rejected tokens hold
    ``permille`` thousandths of the mass (rules on the discrete path), keeps AWRS properly
    weighted, with and without the check cap."""
    sampler = AWRSSampler(LM, KEPT, max_checks=cap, early_fallback=early, early_fallback_permille=permille)
    np.testing.assert_allclose(enumerated(sampler, ctx), target(ctx), rtol=1e-6, atol=1e-9)


def test_early_fallback_stops_checking_where_masks_are_kept():
    """On a vocabulary where the LM prefers rejected tokens, AWRS falls back after
    ``early_fallback`` rejections when the potential keeps its masks, and checks up to
    ``max_checks`` tokens when it does not."""
    n = 2000
    vocab = [f"t{i}".encode() for i in range(n - 1)] + [b"<eos>"]
    p = np.full(n, 1.0)
    p[::10] = 1e-3  # the allowed tokens (multiples of 10) are unlikely
    p /= p.sum()
    lm = FastToyLM(vocab, b"<eos>", lambda ids: p)
    ok = lambda x: all(t % 10 == 0 for t in x)  # noqa: E731
    never = lambda x: False  # noqa: E731  (EOS, a likely token, is rejected too)
    for pot, most in ((KeptMasks(n, [n - 1], ok, never), 3), (TokenPredicate(n, [n - 1], ok, never), 64)):
        sampler = AWRSSampler(lm, pot, early_fallback=3)
        rng = np.random.default_rng(0)
        for _ in range(20):
            token, logw = asyncio.run(sampler.sample((), rng))
            assert token % 10 == 0 and logw > NEG_INF
        assert sampler.stats["fallbacks"] == 20
        assert sampler.stats["checks"] <= 20 * most
        assert sampler.stats["checks"] > 20 * most // 2
    with pytest.raises(ValueError, match="early_fallback"):
        AWRSSampler(lm, pot, early_fallback=-1)


def test_masking_is_not_properly_weighted():
    ctx = ()
    got = enumerated(MaskingSampler(LM, PHI), ctx)
    want = target(ctx)
    assert not np.allclose(got, want, rtol=1e-6, atol=1e-9)
    # ... it is the locally renormalized target instead
    np.testing.assert_allclose(got, want / want.sum(), rtol=1e-9)


def test_unconstrained_samplers_draw_from_the_lm():
    for name in ["direct", "awrs", "masking"]:
        got = enumerated(make_sampler(name, LM), ())
        np.testing.assert_allclose(got, LM.probs(()), rtol=1e-9)


def test_awrs_tiny_accepted_mass_is_exact_and_finite():
    """The LM puts all but 1e-250 of its mass on rejected tokens: no NaN, no false -inf."""
    tiny = 1e-250
    lm = FastToyLM(VOCAB, b"<eos>", lambda ids: [0.5 - tiny, 0.5 - tiny, tiny, tiny, 0.0, 0.0])
    phi = TokenPredicate(6, [EOS], lambda x: all(t in (2, 3) for t in x))
    for cap in (64, 1):
        sampler = AWRSSampler(lm, phi, max_checks=cap)
        paths = enumerate_paths(lambda draw: asyncio.run(sampler.sample((), draw)))
        for token in (2, 3):
            logs = [math.log(prob) + lw for prob, (t, lw) in paths if t == token and prob > 0]
            assert all(math.isfinite(v) for v in logs)
            assert math.isclose(logsumexp(np.array(logs)), math.log(tiny), rel_tol=1e-9)


def test_awrs_checks_few_tokens_on_a_large_vocabulary():
    n = 2000
    vocab = [f"t{i}".encode() for i in range(n - 1)] + [b"<eos>"]
    p = np.random.default_rng(0).dirichlet(np.ones(n))
    lm = FastToyLM(vocab, b"<eos>", lambda ids: p)
    phi = TokenPredicate(n, [n - 1], lambda x: all(t % 2 == 0 for t in x))
    sampler = AWRSSampler(lm, phi)
    rng = np.random.default_rng(1)
    ws = [math.exp(asyncio.run(sampler.sample((), rng))[1]) for _ in range(300)]
    assert sampler.stats["checks"] / 300 < 6
    z = float(p[::2].sum())
    assert abs(np.mean(ws) - z) < 3 * np.std(ws) / math.sqrt(len(ws))


SOFT = TokenSoft(6, [EOS], lambda x: -0.5 * len(x) - 0.4 * x.count(1), lambda x: -0.5 * len(x) - 1.0)


@pytest.mark.parametrize("checks,draws", [(64, 3), (1, 3), (0, 0)])
def test_awrs_graded_weights_by_thinning(checks, draws):
    sampler = AWRSSampler(LM, SOFT, max_checks=checks, max_draws=draws)
    for ctx in [(), (1,)]:
        np.testing.assert_allclose(enumerated(sampler, ctx), target(ctx, phi=SOFT), rtol=1e-6, atol=1e-12)


def test_awrs_rejects_log_weights_above_zero():
    up = TokenSoft(6, [EOS], lambda x: 0.3 * len(x), lambda x: 0.0)
    with pytest.raises(ValueError, match="<= 0"):
        asyncio.run(AWRSSampler(LM, up).sample((), np.random.default_rng(0)))


def test_log_inv_time_closed_forms():
    for m, k in [(1.0, 2), (0.3, 5), (1e-300, 3)]:
        assert abs(log_inv_time([math.log(m)] * k) - math.log(m / (k - 1))) < 1e-11
    for m1, m2 in [(1.0, 0.5), (1.0, 1e-12), (1e-5, 1e-290)]:
        exact = math.log(m1 * m2 * math.log(m1 / m2) / (m1 - m2))
        assert abs(log_inv_time([math.log(m1), math.log(m2)]) - exact) < 1e-11
    from scipy.integrate import quad

    for rates in [[1.0, 0.5, 0.2], [1.0, 1.0, 0.3, 1e-3], [0.9, 1e-8, 1e-8]]:
        # s = e^u; quad on the u scale, around the rates
        f = lambda u: math.exp(u) * np.prod([m / (m + math.exp(u)) for m in rates])
        pts = sorted(math.log(m) for m in rates)
        val = quad(f, pts[0] - 60, pts[-1] + 60, points=pts, limit=500, epsabs=0, epsrel=1e-12)[0]
        assert abs(log_inv_time([math.log(m) for m in rates]) - math.log(val)) < 1e-9
    with pytest.raises(ValueError):
        log_inv_time([0.0])


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown sampler"):
        make_sampler("gibbs", LM)
    with pytest.raises(ValueError, match="lift"):
        DirectSampler(LM, TokenPredicate(257, [256], lambda x: True))
    with pytest.raises(TypeError, match="Generator"):
        asyncio.run(DirectSampler(LM).sample((), 42))


def test_same_seed_same_draws():
    s = AWRSSampler(LM, PHI)
    a = [asyncio.run(s.sample((), np.random.default_rng(7))) for _ in range(3)]
    assert a[0] == a[1] == a[2]


def enumerate_stream_paths(run, logp, stream_len):
    """Like ``enumerate_paths``, for draws that also expose ``stream_uniform(j)`` (j < stream_len):
    each stream uniform branches over the cells of the stream law q (the CDF that
    ``samplers.base.cpu_stream`` inverts) and returns the cell's midpoint, with probability q_i."""
    c = dists_from_logprobs(torch.from_numpy(np.asarray(logp, dtype=float))[None]).cdf[0].numpy()
    total = c[-1]
    lo = np.concatenate([[0.0], c[:-1]])
    q = (c - lo) / total

    class Draw:
        def __init__(self, branch):
            self.branch = branch

        def __call__(self, probs):
            return self.branch(probs)

        def stream_uniform(self, j):
            if j >= stream_len:
                return None
            i = self.branch(q)
            return (lo[i] + c[i]) / 2 / total

    return enumerate_paths(run, wrap=Draw)


@pytest.mark.parametrize("ctx", [(), (1,), (3,)])
@pytest.mark.parametrize("stream_len,cap", [(1, 64), (3, 64), (1, 2)])
def test_awrs_stream_path_properly_weighted_by_enumeration(ctx, stream_len, cap):
    """The stream phase (i.i.d. candidates from q, removed tokens skipped), then the restricted
    phase once the stream is used up: exact by enumeration of both kinds of randomness."""
    # a draw cap keeps the thinning loops of the graded potential small enough to enumerate
    for phi, draws in ((PHI, 256), (SOFT, 2)):
        sampler = AWRSSampler(LM, phi, max_checks=cap, max_draws=draws)
        paths = enumerate_stream_paths(lambda d: asyncio.run(sampler._sample(ctx, d)),
                                       asyncio.run(sampler.lm_logprobs(ctx)), stream_len)
        acc = np.zeros(len(VOCAB))
        assert math.isclose(sum(pr for pr, _ in paths), 1.0, rel_tol=1e-9)
        for pr, (token, logw) in paths:
            if logw > NEG_INF:
                acc[token] += pr * math.exp(logw)
        np.testing.assert_allclose(acc, target(ctx, phi=phi), rtol=1e-6, atol=1e-12)


def test_stream_draws_have_the_cdf_law():
    """draw_streams (one batched search) picks, for every uniform u, the token inverse_cdf picks
    on q, and reports q(token); over many uniforms the frequencies match q."""
    rng = np.random.default_rng(3)
    V, B, K = 50, 4, 2000
    logp = torch.log(torch.from_numpy(rng.dirichlet(np.full(V, 0.3), size=B)))
    logp[:, 7] = float("-inf")  # a token of probability 0 is never drawn
    logp = torch.log_softmax(logp, dim=-1)
    dists = dists_from_logprobs(logp)
    u = rng.random((B, K))
    streams = draw_streams(dists, u)
    for b in range(B):
        q, _ = law_of_cdf(dists.cdf[b])
        assert np.allclose(q, np.exp(logp[b].numpy()), atol=1e-12)
        want = [inverse_cdf(q, x) for x in u[b, :50]]
        assert streams[b].tokens[:50] == want
        assert np.allclose(streams[b].probs, q[streams[b].tokens], rtol=1e-9)
        freq = np.bincount(streams[b].tokens, minlength=V) / K
        assert freq[7] == 0
        assert np.abs(freq - q).max() < 4 * np.sqrt(0.25 / K)


@pytest.mark.parametrize("phi", [PHI, SOFT, None], ids=["boolean", "graded", "none"])
def test_population_step_equals_reference_path(phi):
    """The population step (one LM call, one batched draw) and the one-particle reference path
    give the same token and weight for the same uniforms, particle by particle."""
    n = 300
    vocab = [f"t{i}".encode() for i in range(n - 1)] + [b"<eos>"]
    p = np.random.default_rng(0).dirichlet(np.full(n, 0.2))
    lm = FastToyLM(vocab, b"<eos>", lambda ids: np.roll(p, len(ids)))
    pot = None if phi is None else TokenPredicate(n, [n - 1], lambda x: all(t % 3 == 0 for t in x))
    if phi is SOFT:
        pot = TokenSoft(n, [n - 1], lambda x: -0.3 * sum(t % 2 for t in x),
                       lambda x: -0.3 * sum(t % 2 for t in x) - 0.5)
    sampler = AWRSSampler(lm, pot, max_checks=8, max_draws=2 if phi is SOFT else 256)
    rng = np.random.default_rng(1)
    ctxs = [(), (3,), (3, 6), (), (9,)] * 8
    blocks = [(rng.random(8), int(rng.integers(2**32)), rng.random(16)) for _ in ctxs]
    items = [(c, BlockDraw(*b)) for c, b in zip(ctxs, blocks)]
    fast = asyncio.run(sampler._population_step(items))
    ref = [asyncio.run(sampler._sample(c, BlockDraw(*b))) for c, b in zip(ctxs, blocks)]
    assert [t for t, _ in fast] == [t for t, _ in ref]
    np.testing.assert_allclose([w for _, w in fast], [w for _, w in ref], rtol=1e-12)
    if pot is not None:
        assert sampler.stats["fallbacks"] > 0  # the cap path is exercised on both paths


def test_sample_with_engine_draws_takes_the_population_step():
    """Concurrent sample() calls with stream-carrying draws are served by one population step
    (one batched LM call); plain draws take the reference path."""
    sampler = AWRSSampler(LM, PHI)
    sizes = []
    step = sampler._sample_population

    async def spy(items, dists, streams):
        sizes.append((len(items), tuple(dists.cdf.shape)))
        return await step(items, dists, streams)

    sampler._sample_population = spy
    rng = np.random.default_rng(2)

    async def go():
        draws = [BlockDraw(rng.random(8), k, rng.random(16)) for k in range(12)]
        return await asyncio.gather(*(sampler.sample((0,), d) for d in draws))

    out = asyncio.run(go())
    assert sizes == [(12, (12, len(VOCAB)))]
    assert len(out) == 12 and all(t in ALLOWED[(0,)] for t, _ in out)
    asyncio.run(sampler.sample((0,), np.random.default_rng(0)))
    assert len(sizes) == 1


def test_corrected_cdf_draw_equals_inverse_cdf_on_the_restricted_row():
    """After the stream, AWRS draws from the remaining tokens on the row's CDF corrected for the
    removed ones; that picks the index inverse_cdf picks on the zeroed row, for the same u."""
    from samplers.awrs import _Pool

    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(300):
        n = int(rng.integers(2, 60))
        logp = np.log(rng.dirichlet(np.full(n, 0.3)))
        candidate, row, cdf = cpu_stream(logp, BlockDraw(np.empty(0), 0, np.empty(0)))
        q, _ = row()
        gone = rng.choice(n, size=int(rng.integers(0, n)), replace=False)
        pool = _Pool(None, row, cdf)
        for k in gone:
            pool.remove(int(k), float(q[k]))
        if pool.removed_mass > 1 - 1e-3:
            continue
        u = rng.random()
        got = pool._corrected(u)
        assert got is None or got[0] not in set(gone.tolist())
        if got is not None:
            hits += 1
            restricted = q.copy()
            restricted[gone] = 0.0
            assert got[0] == inverse_cdf(restricted, u)
            assert math.isclose(got[1], q[got[0]], rel_tol=1e-9)
            assert math.isclose(got[2], math.log(restricted.sum()), rel_tol=1e-9, abs_tol=1e-12)
    assert hits > 200


def test_corrected_cdf_draw_with_removals_between_draws():
    """Removals after the first corrected draw update the sorted removed indices in place; the
    draws then equal those of a pool that saw every removal before its first draw, and inverse_cdf
    on the zeroed row."""
    from samplers.awrs import _Pool

    rng = np.random.default_rng(4)
    checked = 0
    for _ in range(200):
        n = int(rng.integers(3, 80))
        logp = np.log(rng.dirichlet(np.full(n, 0.3)))
        candidate, row, cdf = cpu_stream(logp, BlockDraw(np.empty(0), 0, np.empty(0)))
        q, _ = row()
        live = _Pool(None, row, cdf)
        gone: list[int] = []
        for k in rng.permutation(n)[: int(rng.integers(1, n))]:
            u = rng.random()
            got = live._corrected(u)
            fresh = _Pool(None, row, cdf)
            for d in gone:
                fresh.remove(d, float(q[d]))
            assert got == fresh._corrected(u)
            if got is not None:
                restricted = q.copy()
                restricted[gone] = 0.0
                assert got[0] == inverse_cdf(restricted, u)
                checked += 1
            live.remove(int(k), float(q[k]))
            gone.append(int(k))
            if live.removed_mass > 1 - 1e-3:
                break
        assert live._ri == sorted(gone) or live._ri is None
    assert checked > 500


def test_log_inv_times_batch_equals_one_at_a_time():
    """The batched integral (common grid length, padded rates) agrees with each path alone and
    with the closed forms; bad paths are named."""
    from samplers.awrs import log_inv_times

    rng = np.random.default_rng(5)
    paths = [[0.0, 0.0], [0.0, -1.0], [0.0, -2.0, -2.0], [0.0, -300.0, -300.0, -300.0]]
    for _ in range(50):
        r = np.sort(np.log(rng.random(int(rng.integers(3, 30)))))[::-1]
        paths.append((np.round(r, 1) if rng.random() < 0.5 else r).tolist())
    together = log_inv_times(paths)
    alone = [log_inv_times([p])[0] for p in paths]
    np.testing.assert_allclose(together, alone, rtol=1e-13, atol=1e-13)
    assert abs(together[0] - 0.0) < 1e-15 and abs(together[2] - log_inv_time([0.0, -2.0, -2.0])) < 1e-13
    # three rates 1, m, m: int 1/(1+s) (m/(m+s))^2 ds in closed form
    m = math.exp(-2.0)
    exact = m * m * (math.log(m) / (1 - m) ** 2 + 1 / (m * (1 - m)))
    assert abs(together[2] - math.log(exact)) < 1e-10
    with pytest.raises(ValueError, match="at least two rates"):
        log_inv_times([[0.0, -1.0], [0.0]])
    with pytest.raises(ValueError, match="finite"):
        log_inv_times([[0.0, -math.inf, -1.0]])


def _lifted_regex_case():
    """A regex lifted to a toy vocabulary whose LM puts most mass on rejected tokens."""
    from potentials import Regex
    from potentials.lift import Lifted

    vocab = [b"a", b"b", b"ab", b"ba", b"c", b"cc", b"x", b"<eos>"]
    eos = len(vocab) - 1

    def probs(ids):
        p = np.array([0.05, 0.1, 0.05, 0.1, 0.2, 0.2, 0.25, 0.05])
        return np.roll(p[:-1], len(ids)).tolist() + [p[-1]]

    lm = FastToyLM(vocab, b"<eos>", probs)
    return lm, Lifted(Regex("(ab|ba)*c?"), lm), eos


@pytest.mark.parametrize("ctx", [(), (2,), (3, 4), (6,)])
def test_awrs_known_support_step_properly_weighted_by_enumeration(ctx):
    """Where the lifted constraint's mask is cached (known_support), AWRS takes the exact step
    over the allowed tokens: by enumeration, E[w 1(a)] = p(a) 1[a allowed] for every token."""
    lm, pot, eos = _lifted_regex_case()
    sampler = AWRSSampler(lm, pot)
    asyncio.run(pot.logw_next(()))
    asyncio.run(pot.logw_next(ctx))  # caches the mask of ctx's state (dead ctx: none needed)
    support = asyncio.run(pot.known_support(ctx))
    assert support is not None
    logw = asyncio.run(pot.logw_next(ctx))
    assert support.tolist() == np.flatnonzero(np.isfinite(logw)).tolist()
    paths = enumerate_paths(lambda draw: asyncio.run(sampler.sample(ctx, draw)))
    acc = np.zeros(len(lm.vocab))
    for prob, (token, w) in paths:
        if w > NEG_INF:
            acc[token] += prob * math.exp(w)
    want = np.exp(asyncio.run(sampler.lm_logprobs(ctx)) + logw)
    np.testing.assert_allclose(acc, want, rtol=1e-9, atol=1e-12)
    if want.sum() > 0:
        assert sampler.stats["exact_steps"] > 0 and sampler.stats["checks"] == 0


def test_known_support_none_until_a_mask_is_cached_and_population_equals_reference():
    """known_support is None before the state's mask is computed; once it is cached, the
    population step and the reference path take the same exact step (same token and weight)."""
    lm, pot, eos = _lifted_regex_case()
    assert asyncio.run(pot.known_support((2,))) is None
    sampler = AWRSSampler(lm, pot)
    ctxs = [(), (2,), (3, 4), (6,), (2, 3)] * 4
    for c in set(ctxs):
        asyncio.run(pot.logw_next(c))
    rng = np.random.default_rng(7)
    blocks = [(rng.random(8), int(rng.integers(2**32)), rng.random(16)) for _ in ctxs]
    fast = asyncio.run(sampler._population_step([(c, BlockDraw(*b)) for c, b in zip(ctxs, blocks)]))
    ref = [asyncio.run(sampler._sample(c, BlockDraw(*b))) for c, b in zip(ctxs, blocks)]
    assert [t for t, _ in fast] == [t for t, _ in ref]
    np.testing.assert_allclose([w for _, w in fast], [w for _, w in ref], rtol=1e-12)
    assert sampler.stats["checks"] == 0 and sampler.stats["exact_steps"] == 2 * len(ctxs)
    dead = asyncio.run(pot.known_support((6,)))
    assert dead is not None and len(dead) == 0  # "x" kills the regex: nothing is allowed


@pytest.mark.parametrize("permille", [0, 200])
def test_a_kept_state_is_simulated_until_its_rejected_mass_reaches_the_share_then_exact(permille):
    """At a state whose mask the lifted constraint would keep, AWRS computes the mask once the
    tokens it rejected at a step hold ``early_fallback_permille`` thousandths of the mass,
    accepted tokens before them or not, so every later visit is an exact step: the simulation's
    noise at that state is paid a few times, not at every visit. At () the LM puts 0.2 on "cc"
    and 0.25 on "x" (both rejected) and 0.55 on allowed tokens; with the share off, no visit
    meets 8 rejections, so every visit is simulated and the weights vary."""
    lm, pot, eos = _lifted_regex_case()
    sampler = AWRSSampler(lm, pot, early_fallback_permille=permille)
    rng = np.random.default_rng(0)
    weights = [asyncio.run(sampler.sample((), rng))[1] for _ in range(40)]
    simulated = 40 - sampler.stats["exact_steps"]
    z = math.log(0.05 + 0.1 + 0.05 + 0.1 + 0.2 + 0.05)  # a, b, ab, ba, c and EOS are allowed
    if permille:
        assert sampler.stats["fallbacks"] == 1 and 1 <= simulated <= 5
        assert all(w == pytest.approx(z, abs=1e-12) for w in weights[simulated:])
    else:
        assert sampler.stats["fallbacks"] == 0 and simulated == 40
        assert np.std(weights) > 0.1


def test_lazy_stream_candidates_equal_the_batched_search():
    """With eager=k only k uniforms per row are searched in the batch; candidate(j) for the
    others gives what the batched search of every uniform gives, and None past the last."""
    rng = np.random.default_rng(8)
    V, B, K = 300, 5, 16
    logp = torch.log_softmax(torch.log(torch.from_numpy(rng.dirichlet(np.full(V, 0.2), size=B))), dim=-1)
    logp[:, 11] = float("-inf")
    dists = dists_from_logprobs(logp)
    assert dists.cdf.dtype == torch.float64 and dists.cdf.device.type == "cpu"
    u = rng.random((B, K))
    full = draw_streams(dists, u)
    lazy = draw_streams(dists, u, eager=3)
    for b in range(B):
        assert len(lazy[b].tokens) == 3 and len(full[b].tokens) == K
        assert [lazy[b].candidate(j) for j in range(K)] == [full[b].candidate(j) for j in range(K)]
        assert lazy[b].candidate(K) is None and full[b].candidate(K) is None


@pytest.mark.parametrize("tiny", [False, True], ids=["plain", "tiny-mass"])
def test_batched_exact_steps_equal_the_one_particle_exact_step_bit_for_bit(tiny):
    """Particles of a population step at states with a known support take their exact steps
    together (``_exact_rows``): same tokens and the very same weights as ``_exact_on`` one at a
    time, including a support that holds token 0 and, with ``tiny``, masses below 1e-200 (the
    log-space route)."""
    from potentials import Regex
    from potentials.lift import Lifted

    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = [c.encode() for c in letters] + [(a + b).encode() for a in letters[:10] for b in letters[:10]]
    vocab.append(b"<eos>")
    n = len(vocab)
    p = np.random.default_rng(3).dirichlet(np.full(n, 0.3))
    if tiny:  # the allowed tokens (a-m) get almost no mass at the longer contexts
        low = np.array([v[:1] in b"abcdefghijklm" and v != b"<eos>" for v in vocab])

        def probs(ids):
            q = p.copy()
            if len(ids) >= 2:
                q[low] *= 1e-250
            return q / q.sum()
    else:
        def probs(ids):
            return np.roll(p[:-1], len(ids)).tolist() + [p[-1]]
    lm = FastToyLM(vocab, b"<eos>", probs)
    pot = Lifted(Regex("[a-m]{3,6}" if tiny else "[a-m]{0,6}"), lm)
    sampler = AWRSSampler(lm, pot)
    ctxs = [(), (0,), (1, 2), (0, 12), (3,), (2, 2)] * 5
    for c in set(ctxs):
        asyncio.run(pot.logw_next(c))
    assert all(asyncio.run(pot.known_support(c)) is not None for c in ctxs)
    assert 0 in asyncio.run(pot.known_support(()))
    rng = np.random.default_rng(11)
    blocks = [(rng.random(8), int(rng.integers(2**32)), rng.random(16)) for _ in ctxs]
    fast = asyncio.run(sampler._population_step([(c, BlockDraw(*b)) for c, b in zip(ctxs, blocks)]))
    ref = [asyncio.run(sampler._sample(c, BlockDraw(*b))) for c, b in zip(ctxs, blocks)]
    assert fast == ref
    assert sampler.stats["exact_steps"] == 2 * len(ctxs) and sampler.stats["checks"] == 0
    if tiny:
        assert min(w for _, w in fast) < -500  # the log-space route was taken


@pytest.mark.parametrize("kind", [DirectSampler, MaskingSampler])
@pytest.mark.parametrize("phi", [PHI, SOFT, None], ids=["boolean", "graded", "none"])
def test_direct_population_step_equals_reference_path(kind, phi):
    """The direct (and masking) population step, which forms every particle's row on the LM's
    device and draws with one batched search, gives the reference path's token for the same
    uniform and its weight up to rounding, dead ends included."""
    n = 300
    vocab = [f"t{i}".encode() for i in range(n - 1)] + [b"<eos>"]
    p = np.random.default_rng(4).dirichlet(np.full(n, 0.2))
    lm = FastToyLM(vocab, b"<eos>", lambda ids: np.roll(p, len(ids)))
    pot = None if phi is None else TokenPredicate(n, [n - 1], lambda x: all(t % 3 == 0 for t in x) and len(x) < 3)
    if phi is SOFT:
        pot = TokenSoft(n, [n - 1], lambda x: 0.7 * sum(t % 2 for t in x), lambda x: 0.2 * len(x) - 0.5)
    sampler = kind(lm, pot)
    rng = np.random.default_rng(2)
    ctxs = [(), (3,), (3, 6), (1,), (9, 3, 0)] * 6
    blocks = [(rng.random(8), int(rng.integers(2**32)), rng.random(16)) for _ in ctxs]
    blocks[0][0][0] = np.nextafter(1.0, 0.0)  # u T may round up to T: the last token of positive mass
    fast = asyncio.run(sampler._population_step([(c, BlockDraw(*b)) for c, b in zip(ctxs, blocks)]))
    ref = [asyncio.run(sampler._sample(c, BlockDraw(*b))) for c, b in zip(ctxs, blocks)]
    assert [t for t, _ in fast] == [t for t, _ in ref]
    np.testing.assert_allclose([w for _, w in fast], [w for _, w in ref], rtol=1e-12, atol=1e-12)
    if phi is PHI:
        assert any(w == NEG_INF for _, w in fast) and any(w > NEG_INF for _, w in fast)  # dead ends too


def test_packed_mask_unpacks_to_the_weight_rows():
    """A Boolean potential's rows travel to a non-CPU device as a little-endian bitmask; unpacked
    there they are the same 0 / -inf rows (checked here on the CPU, for odd vocabulary sizes)."""
    from samplers.direct import unpack_mask

    rng = np.random.default_rng(0)
    for v in (1, 7, 8, 9, 300):
        allowed = rng.random((5, v)) < 0.3
        rows = np.where(allowed, 0.0, NEG_INF)
        packed = torch.from_numpy(np.packbits(allowed, axis=1, bitorder="little"))
        assert packed.shape == (5, (v + 7) // 8)
        assert torch.equal(unpack_mask(packed, v), torch.from_numpy(rows))
