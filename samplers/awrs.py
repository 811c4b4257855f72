"""AWRS: adaptive weighted rejection sampling.

Target (Boolean case): t(a) = p(a) 1[a in A], A = tokens the constraint accepts, Z = p(A).

Construction (exponential clocks). Give every token a a Poisson process of arrivals with rate
p(a). Rejected tokens are removed after their first arrival; accepted ones keep arriving, so the
arrivals of A form a Poisson process of rate Z whose marks are i.i.d. ~ p restricted to A and
independent of the arrival times. The sampler simulates the superposed process one event at a
time: with remaining mass m_i = sum of p over tokens not yet rejected, the next event is token d
with probability p(d) / m_i after an Exp(1) / m_i wait. It checks d (once; checks are cached),
removes it if rejected, and stops at the second A-arrival. The first accepted token is the
sample a; the second A-arrival time tau_2 ~ Gamma(2, Z) is independent of a and E[1 / tau_2] = Z,
so w = 1 / tau_2 is properly weighted: E[w f(a)] = Z E[f(a)] = sum_a t(a) f(a).

Rao-Blackwellization over the waiting times: given the discrete path, tau_2 = sum_i E_i / m_i, and

    w = E[1 / tau_2 | path] = int_0^inf prod_i m_i / (m_i + s) ds,

computed in log space (``log_inv_time``). Cap: once ``max_checks`` tokens have been checked
without a second acceptance, the whole weight vector is computed, so A and Z are known; the
rest of tau_2 is then Gamma(2 - j, Z) after the j acceptances seen so far (memorylessness), the
sample (if j = 0) is drawn from p restricted to A, and

    w = int_0^inf prod_i m_i / (m_i + s) * (Z / (Z + s))^(2 - j) ds,

still E[1 / tau_2 | what was seen]: unbiased. The same holds for any rule that decides to stop
from the discrete path alone (which tokens came, how their checks went), since the waiting times
after the stop are fresh. So where the potential says a full evaluation at this context would be
kept for later contexts (``Potential.mask_would_be_kept``: a lifted constraint's first visit to
a state), the sampler also stops after ``early_fallback`` rejections with no token accepted yet,
or once the tokens rejected at the step hold ``early_fallback_permille`` thousandths of p's mass
(accepted tokens before them or not); every later particle at that state then takes an exact
step (below), with no variance in its weight. A state that rejects the LM's likely tokens (JSON
punctuation under a prose-minded LM) then costs one cached mask instead of each first visit
spending ``max_checks`` checks; and a state that rejects one likely token among accepted ones is
simulated a few times instead of at every visit: after a JSON document's closing brace the
embedded model puts 0.60 on a rejected line break and 0.39 on EOS, and a simulated step there
returns w = 1 whenever EOS arrives twice first (15% of visits) against Z = 0.39. If Z = 0 the
sampler returns a rejected token with weight -inf (and only then).

Graded weights 0 <= w(a) <= 1 (log weights <= 0, e.g. an LM potential) are handled by thinning:
each arrival of a is accepted with probability w(a) by a coin drawn through the same draw
function, and a stays in the pool (only w = 0 removes it). Accepted arrivals are then a Poisson
process of rate Z = sum_a p(a) w(a) with marks ~ p w / Z, and everything above holds with the
coins added to the path. A check (or the cap) that finds a log weight > 0 raises ValueError:
such potentials need the direct sampler. ``max_draws`` caps thinning loops like ``max_checks``.

Known support. When the potential already knows the allowed set A at the context, with every
weight there exactly 0 (``Potential.known_support``: a lifted Boolean constraint whose mask for
the context's state is cached and small), the step is exact instead: a ~ p 1_A / Z with weight
Z = p(A), read from the row's CDF at A only (O(|A|), no checks). Properly weighted for the same
target (E[Z f(a)] = sum_{a in A} p(a) f(a)), with no variance in the local weight. Which of the
two a step takes depends on the context and the potential's caches (filled by earlier steps, of
any particle), never on this particle's own draws, so each step stays properly weighted. In a
population step the exact steps of all particles at one support run as one set of array
operations (``_exact_rows``), with the same arithmetic per particle, so the same results.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import accumulate
from typing import Callable, Sequence

import numpy as np
import torch

from smc.core.logmath import NEG_INF, normalized
from potentials.base import Potential
from samplers.base import BlockDraw, Draw, Stream, TokenSampler, cpu_stream
from smc.backends.base import LMBackend, NextTokenDists

#: below this remaining mass, draws are computed in log space instead of linear space
_TINY = 1e-200
#: below this remaining mass, no draws from the row's CDF corrected for removed tokens
#: (1 - removed keeps ~13 digits above it)
_LOW = 1e-3
#: trapezoid step (in u = log s) for log_inv_time; the integrand is analytic in |Im u| < pi,
#: so the rule's relative error is about exp(-2 pi (pi - 0.3) / h) ~ 1e-15 at h = 0.5
_STEP = 0.5
#: integration range beyond the extreme log-rates; the cut-off tails are < exp(-40) relative
_MARGIN = 40.0


def log_inv_time(log_rates: Sequence[float]) -> float:
    """log int_0^inf prod_i m_i / (m_i + s) ds, with m_i = exp(log_rates[i]) (>= 2 rates).

    This is log E[1 / sum_i E_i / m_i] for i.i.d. E_i ~ Exp(1). With s = e^u the integrand is
    exp(u - sum_i softplus(u - log m_i)), smooth and unimodal, integrated by the trapezoid rule.
    """
    return log_inv_times([log_rates])[0]


def log_inv_times(paths: Sequence[Sequence[float]]) -> list[float]:
    """``[log_inv_time(r) for r in paths]``, with one set of array operations for all the paths
    that need the trapezoid rule (a population step's particles together).

    Paths of equal rates and of two rates have closed forms. The others are integrated on
    grids u_b + h j, j = 0 .. J - 1 with the common J of the longest: a shorter path's grid
    then runs further into its upper tail, where the integrand is below exp(-40) of its peak.
    """
    out: list[float] = [0.0] * len(paths)
    todo: list[tuple[int, dict[float, int]]] = []
    for b, log_rates in enumerate(paths):
        if len(log_rates) < 2:
            raise ValueError("log_inv_time needs at least two rates (the integral diverges)")
        if not all(math.isfinite(r) for r in log_rates):
            raise ValueError(f"rates must be positive and finite, got log rates {list(log_rates)}")
        hi, lo = max(log_rates), min(log_rates)
        if hi == lo:  # k equal rates m: E[m / Gamma(k, 1)] = m / (k - 1)
            out[b] = lo - math.log(len(log_rates) - 1)
        elif len(log_rates) == 2:  # m1 m2 ln(m1/m2) / (m1 - m2), written stably with r = ln(m1/m2)
            r = hi - lo
            out[b] = lo + math.log(r) - math.log(-math.expm1(-r))
        else:
            counts: dict[float, int] = {}
            for r in log_rates:
                counts[float(r)] = counts.get(float(r), 0) + 1
            todo.append((b, counts))
    if todo:
        width = max(len(c) for _, c in todo)
        rates = np.zeros((len(todo), width))
        mult = np.zeros((len(todo), width))
        for k, (_, counts) in enumerate(todo):
            rates[k, : len(counts)] = list(counts)
            mult[k, : len(counts)] = list(counts.values())
        lo = np.min(np.where(mult > 0, rates, np.inf), axis=1) - _MARGIN
        hi = np.max(np.where(mult > 0, rates, -np.inf), axis=1) + _MARGIN
        n = int(np.max(np.ceil((hi - lo) / _STEP))) + 1
        u = lo[:, None] + _STEP * np.arange(n)[None, :]  # [P, n]
        x = u[:, :, None] - rates[:, None, :]  # [P, n, K]
        # softplus(x) = max(x, 0) + log(1 + exp(-|x|)), in place (np.logaddexp and np.log1p
        # cost 5-30x more per element here; the absolute error stays ~1e-16 per term)
        soft = np.abs(x)
        np.negative(soft, out=soft)
        np.exp(soft, out=soft)
        soft += 1.0
        np.log(soft, out=soft)
        soft += np.maximum(x, 0.0)
        g = u - (soft @ mult[:, :, None])[:, :, 0]
        top = g.max(axis=1)
        logs = math.log(_STEP) + top + np.log(np.exp(g - top[:, None]).sum(axis=1))
        for (b, _), v in zip(todo, logs.tolist()):
            out[b] = v
    return out


class _Pool:
    """Candidates for the event simulation: each ``next()`` is a token d drawn from q restricted
    to the tokens not yet removed, with q(d) and the log of the remaining mass m = q(not removed).

    Stream phase (a draw with stream uniforms): d is the next of a stream of i.i.d. draws from q,
    skipping tokens already removed. Conditioned on not being removed, an i.i.d. draw from q is a
    draw from q restricted to the remaining tokens, so the discrete path has exactly the law of
    the restricted draws. Then, while m > 1e-3 and the draw exposes ``uniform()``, inverse-CDF
    draws from the remaining tokens on the row's CDF C corrected for the removed tokens: the
    smallest i with C(i) - R(i) > u (C(-1) - R(-1)) where R(i) = removed mass at indices <= i,
    found by i <- searchsorted(C, u (C(-1) - R(-1)) + R(i)) from R = 0 (R only grows, and every
    index passed has C - R <= t): no O(V) work per draw. Otherwise (plain draw functions, tiny m,
    rounding) the row q is fetched and d = draw(q restricted / m); below a remaining mass of
    1e-200 the restricted law is normalized in log space.
    """

    __slots__ = ("candidate", "fetch", "cdf", "q", "logq", "alive", "removed", "removed_mass", "j",
                 "_c", "_ri", "_inc", "_rc")

    def __init__(
        self,
        candidate: Callable[[int], tuple[int, float] | None] | None,
        fetch: Callable[[], tuple[np.ndarray, np.ndarray]],
        cdf: Callable[[], np.ndarray] | None = None,
    ):
        self.candidate, self.fetch, self.cdf = candidate, fetch, cdf
        self.q: np.ndarray | None = None
        self.logq: np.ndarray | None = None
        self.alive: np.ndarray | None = None
        self.removed: dict[int, float] = {}
        self.removed_mass = 0.0
        self.j = 0
        self._c: np.ndarray | None = None
        self._ri: list[int] | None = None  # removed indices, sorted (None: not built yet)
        self._inc: list[float] = []  # their CDF increments, in the same order
        self._rc: list[float] = []  # the increments cumulated (left to right, as np.cumsum)

    def log_row(self) -> np.ndarray:
        """log q over the whole vocabulary (removed tokens included)."""
        if self.logq is None:
            q, self.logq = self.fetch()
            self.q, self.alive = q.copy(), np.isfinite(self.logq)
            for d in self.removed:
                self.q[d], self.alive[d] = 0.0, False
        return self.logq

    def q_at(self, idx: np.ndarray) -> np.ndarray:
        """q at the indices ``idx`` (removed tokens included): from the CDF where the pool has one
        (O(len(idx)), the same increments ``law_of_cdf`` takes), else from the row."""
        if self.cdf is None:
            self.log_row()
            return np.exp(self.logq[idx])
        if self._c is None:
            self._c = self.cdf()
        c = self._c
        prev = c[np.maximum(idx - 1, 0)]
        prev[idx == 0] = 0.0
        q = c[idx] - prev
        q /= c[-1]
        return np.maximum(q, 0.0, out=q)

    def log_q_at(self, idx: np.ndarray) -> np.ndarray:
        """log q at the indices ``idx`` (see ``q_at``)."""
        if self.cdf is None:
            return self.log_row()[idx]
        with np.errstate(divide="ignore"):
            return np.log(self.q_at(idx))

    def next(self, draw: Draw) -> tuple[int, float, float] | None:
        """(d, q(d), log m) for the next candidate; None once no token of positive mass remains."""
        while self.candidate is not None and self.q is None and self.removed_mass <= 1.0 - _LOW:
            got = self.candidate(self.j)
            self.j += 1
            if got is None:
                self.candidate = None
                break
            d, mass = got
            if mass > 0.0 and d not in self.removed:
                return d, mass, math.log1p(-self.removed_mass)
        uniform = getattr(draw, "uniform", None)
        if self.cdf is not None and uniform is not None and self.removed_mass <= 1.0 - _LOW:
            got = self._corrected(uniform())
            if got is not None:
                return got
        self.log_row()
        m = float(self.q.sum())
        if m > _TINY:
            d = int(draw(self.q / m))
            return d, float(self.q[d]), math.log(m)
        if not self.alive.any():
            return None
        probs, log_m = normalized(np.where(self.alive, self.logq, NEG_INF))
        d = int(draw(probs))
        return d, float(self.q[d]), log_m

    def _corrected(self, u: float) -> tuple[int, float, float] | None:
        """The corrected-CDF draw of the class docstring for uniform u (None on rounding trouble:
        the caller then draws the O(V) way)."""
        if self._c is None:
            self._c = self.cdf()
        c = self._c
        if self._ri is None:
            self._ri, self._inc, self._rc = [], [], []
            for d in sorted(self.removed):
                self._insert(d)
        total = float(c[-1])
        t = u * (total - (self._rc[-1] if self._rc else 0.0))
        shift = -1.0
        r = 0.0
        while r != shift:
            shift = r
            i = int(np.searchsorted(c, t + shift, side="right"))
            if i >= len(c):
                return None
            k = bisect_right(self._ri, i)
            r = float(self._rc[k - 1]) if k else 0.0
        if i in self.removed:
            return None
        return i, (float(c[i]) - (float(c[i - 1]) if i else 0.0)) / total, math.log1p(-self.removed_mass)

    def remove(self, d: int, mass: float) -> None:
        """Take the rejected token d (of mass q(d)) out of the pool."""
        self.removed[d] = mass
        self.removed_mass += mass
        if self._ri is not None:
            self._insert(d)
        if self.q is not None:
            self.q[d], self.alive[d] = 0.0, False

    def _insert(self, d: int) -> None:
        """Add d to the sorted removed indices and their cumulated CDF increments (O(removed),
        no O(V) work)."""
        c = self._c
        k = bisect_right(self._ri, d)
        self._ri.insert(k, d)
        self._inc.insert(k, float(c[d]) - (float(c[d - 1]) if d else 0.0))
        # left-to-right sums from k on, as np.cumsum adds (accumulate's first item is the start)
        self._rc[k:] = accumulate(self._inc[k:], initial=self._rc[k - 1] if k else 0.0)
        del self._rc[k]


class AWRSSampler(TokenSampler):
    """Adaptive weighted rejection sampling (see the module docstring for the construction).

    Args:
        lm, potential, prompt_ids: as for every TokenSampler; next-token log weights must be
            <= 0 (Boolean constraints, or graded weights in [0, 1] such as LM probabilities).
        max_checks: distinct tokens checked before the exact fallback (0: always the full vector).
        max_draws: draws before the exact fallback (bounds thinning loops on tiny weights).
        early_fallback: distinct tokens rejected, none accepted, before the exact fallback at a
            context where the potential would keep the full evaluation (module docstring,
            "Cap"); 0: never early.
        early_fallback_permille: thousandths of the row's mass rejected at a step (tokens
            accepted before or not) before the exact fallback at such a context; 0: never.

    Has a population step (samplers.base): one LM call and one batched stream draw for all
    particles, then each particle's event simulation (``_simulate``) on the CPU over its stream.
    """

    population = True

    #: max_checks: constraint checks per step before the exact fallback; max_draws: LM draws
    #: per step before it; early_fallback: rejections with none accepted after which a state
    #: whose mask will be kept computes it (potentials: ``mask_would_be_kept``);
    #: early_fallback_permille: rejected mass (in thousandths) after which such a state does.
    #: 50: on the JSON task json-19 one token path's log weight over 256 importance samples
    #: varied by 0.95 nats (sd) without it, 0.23 with it (0.15 falling back at every
    #: rejection, which cost 2.7-3.4 times the engine's time per particle-step on
    #: bench_overhead's JSON row; 50 costs what none does there); on the 30 JSON tasks over 20
    #: seeds it took the median log Ẑ from -0.14 to -0.05 of genlm-control's at N = 8, from
    #: -0.09 to -0.05 at N = 16 (benchmarks/RESULTS.md, "AWRS's noise at states it never
    #: evaluates" and "genlm-control at N = 16 over nineteen seeds")
    OPTIONS = {"max_checks": 64, "max_draws": 256, "early_fallback": 8, "early_fallback_permille": 50}

    def __init__(
        self,
        lm: LMBackend,
        potential: Potential | None = None,
        prompt_ids: Sequence[int] = (),
        **options: int,
    ):
        super().__init__(lm, potential, prompt_ids)
        opts = self.check_options(options)
        self.max_checks, self.max_draws, self.early_fallback = (
            opts["max_checks"], opts["max_draws"], opts["early_fallback"])
        permille = opts["early_fallback_permille"]
        self._fallback_mass = permille / 1000.0 if permille else math.inf
        self.stats.update(fallbacks=0, draws=0, exact_steps=0)

    async def _sample(self, ctx: tuple[int, ...], draw: Draw) -> tuple[int, float]:
        """Reference path: one particle on the CPU; the stream (if the draw has stream
        uniforms) is drawn from the same CDF and uniforms as the population step's."""
        logp = await self.lm_logprobs(ctx)
        stream = cpu_stream(logp, draw)
        if stream is None:
            pool = _Pool(None, lambda: (np.exp(logp), logp))
        else:
            pool = _Pool(*stream)
        return resolve(*await self._simulate(ctx, pool, draw))

    async def _sample_population(
        self, items: list[tuple[tuple[int, ...], BlockDraw]], dists: NextTokenDists, streams: list[Stream]
    ) -> list[tuple[int, float]]:
        out: list[tuple[int, float]] = [(0, NEG_INF)] * len(items)
        paths: list[tuple[int, list[float]]] = []  # (particle, rates) whose weight is pending
        exact: dict[int, tuple[np.ndarray, list[int]]] = {}  # id(support) -> (support, particles)
        for b, ((ctx, draw), st) in enumerate(zip(items, streams)):
            if self.potential is None:
                if st.probs[0] > 0.0:
                    out[b] = (st.tokens[0], 0.0)  # the common case, without building a pool
                    continue
                support = None
            else:
                support = await self.potential.known_support(ctx)
            if support is not None and len(support):
                # exact steps change no cache, so they can wait and run per support together
                exact.setdefault(id(support), (support, []))[1].append(b)
                continue
            pool = _Pool(st.candidate, st.row, st.cdf)
            if support is not None:
                token, w = self._exact_on(support, pool, draw)
            else:
                token, w = await self._simulate(ctx, pool, draw, known=True)
            if type(w) is list:
                paths.append((b, w))
            out[b] = (token, w)
        for support, rows in exact.values():
            for b, got in zip(rows, self._exact_rows(support, rows, [items[b][1] for b in rows], dists, streams)):
                out[b] = got
        if paths:  # every particle's weight integral at once
            for (b, _), w in zip(paths, log_inv_times([r for _, r in paths])):
                out[b] = (out[b][0], w)
        return out

    def _exact_rows(self, support: np.ndarray, rows: list[int], draws: list[BlockDraw], dists: NextTokenDists,
                    streams: list[Stream]) -> list[tuple[int, float]]:
        """``_exact_on(support, ...)`` for the particles ``rows`` of a population step, with one
        set of array operations: q at the support read from the rows' CDFs (one gather on their
        device), the masses Z, and one inverse-CDF draw per row from q 1_A / Z, each step the
        same arithmetic as ``_exact_on``'s (so the same token and weight)."""
        cdf = dists.cdf
        prev = np.maximum(support - 1, 0)
        if cdf.device.type == "cpu":  # numpy's gather: torch's advanced indexing costs ~0.3 ms a call
            c = cdf.detach().numpy()
            r = np.asarray(rows)[:, None]
            hi, lo, total = c[r, support[None, :]], c[r, prev[None, :]], c[r[:, 0], -1]
            if c.dtype != np.float64:
                hi, lo, total = hi.astype(np.float64), lo.astype(np.float64), total.astype(np.float64)
        else:
            idx, before = torch.as_tensor(support, device=cdf.device), torch.as_tensor(prev, device=cdf.device)
            r = torch.as_tensor(rows, device=cdf.device)[:, None]
            hi = cdf[r, idx[None, :]].to("cpu", torch.float64).numpy()
            lo = cdf[r, before[None, :]].to("cpu", torch.float64).numpy()
            total = cdf[r[:, 0], -1].to("cpu", torch.float64).numpy()
        lo[:, support == 0] = 0.0
        q = hi - lo
        q /= total[:, None]
        np.maximum(q, 0.0, out=q)
        z = q.sum(axis=1)
        small = z <= _TINY
        self.stats["exact_steps"] += len(rows) - int(small.sum())  # _exact_on counts the others
        z[small] = 1.0
        probs = q / z[:, None]
        c = np.cumsum(probs, axis=1)
        small_rows = small.tolist()
        u = np.array([d.uniform() if not t else 0.0 for d, t in zip(draws, small_rows)])
        pick = (c <= (u * c[:, -1])[:, None]).sum(axis=1)
        n = len(support)
        at = np.minimum(pick, n - 1)
        # u Z rounded up to Z (as inverse_cdf): the last token of positive mass instead
        redo = ((pick >= n) | (probs[np.arange(len(rows)), at] <= 0)).tolist()
        out = []
        for k, (b, tiny, i, again, zk) in enumerate(zip(rows, small_rows, at.tolist(), redo, z.tolist())):
            if tiny:  # log space, one particle at a time
                out.append(self._exact_on(support, _Pool(None, streams[b].row, streams[b].cdf), draws[k]))
                continue
            if again:
                i = int(np.flatnonzero(probs[k] > 0)[-1])
            out.append((int(support[i]), math.log(zk)))
        return out

    async def _simulate(self, ctx: tuple[int, ...], pool: _Pool, draw: Draw,
                        known: bool = False) -> tuple[int, float | list[float]]:
        """The event simulation of the module docstring over ``pool``'s candidates; shared by the
        reference path, the population step, and plain draw functions (exact enumeration).

        Returns (token, log weight), or (token, rates) when the weight is log_inv_time(rates):
        the population step integrates those of all its particles together (``resolve``)."""
        if self.potential is None:
            got = pool.next(draw)
            return (got[0], 0.0) if got is not None else (self.dead_token(pool.log_row()), NEG_INF)
        if not known:  # (known: the caller asked, and the potential did not know the support)
            support = await self.potential.known_support(ctx)
            if support is not None:
                return self._exact_on(support, pool, draw)
        checked: dict[int, float] = {}
        log_rates: list[float] = []
        first: int | None = None
        last_rejected: int | None = None
        rejected, any_kept = 0, False  # for the early fallback
        kept: bool | None = None  # mask_would_be_kept(ctx), asked once: no mask is kept before the fallback
        stats = self.stats
        while True:
            if len(checked) >= self.max_checks or len(log_rates) >= self.max_draws:
                return await self._fallback(ctx, pool, draw, log_rates, first)
            got = pool.next(draw)
            if got is None:  # every token of positive mass was rejected
                return (self.dead_token(pool.log_row()) if last_rejected is None else last_rejected), NEG_INF
            d, mass, log_m = got
            stats["draws"] += 1
            log_rates.append(log_m)
            v = checked.get(d)
            if v is None:
                stats["checks"] += 1
                v = checked[d] = self._check_weight(float((await self.potential.logw_subset(ctx, [d]))[0]), d)
                any_kept = any_kept or v > NEG_INF
            if v == NEG_INF:  # a first check: rejected tokens leave the pool
                pool.remove(d, mass)
                last_rejected = d
                rejected += 1
                early = (rejected == self.early_fallback and not any_kept) or pool.removed_mass >= self._fallback_mass
                if early and kept is None:
                    kept = await self.potential.mask_would_be_kept(ctx)
                if early and kept:
                    return await self._fallback(ctx, pool, draw, log_rates, first)
                continue
            if v < 0.0 and draw(np.array([math.exp(v), -math.expm1(v)])) != 0:
                continue  # thinned: this arrival is not accepted, the token stays
            if first is not None:
                return first, log_rates
            first = d

    async def _fallback(
        self,
        ctx: tuple[int, ...],
        pool: _Pool,
        draw: Draw,
        log_rates: list[float],
        first: int | None,
    ) -> tuple[int, list[float]] | tuple[int, float]:
        """Exact completion once the budget is spent (module docstring, "Cap").

        Works on the tokens A of finite weight only: Z = sum_{a in A} q(a) w(a) and the draw
        from q w / Z over A (q read from the CDF at A), so beyond the weight vector itself
        nothing O(V) is computed."""
        self.stats["fallbacks"] += 1
        logw = await self.potential_logw(ctx)
        bad = np.flatnonzero((logw > 1e-12) | np.isnan(logw))
        if len(bad):
            self._check_weight(float(logw[bad[0]]), int(bad[0]))
        allowed = np.flatnonzero(np.isfinite(logw))
        probs, log_z = normalized(pool.log_q_at(allowed) + logw[allowed])
        if log_z == NEG_INF:
            return self.dead_token(pool.log_row()), NEG_INF
        seen = 0 if first is None else 1  # accepted arrivals before the cap
        if first is None:
            first = int(allowed[int(draw(probs))])
        return first, log_rates + [log_z] * (2 - seen)

    def _exact_on(self, support: np.ndarray, pool: _Pool, draw: Draw) -> tuple[int, float]:
        """The exact step when the allowed set A (all weights 0) is known: a ~ q 1_A / Z with
        weight log Z, Z = q(A), properly weighted since E[Z f(a)] = sum_{a in A} q(a) f(a).
        O(|A|): q is read from the CDF at A."""
        self.stats["exact_steps"] += 1
        q = pool.q_at(support)
        z = float(q.sum())
        if z > _TINY:  # linear space: a few microseconds for a few hundred tokens
            return int(support[int(draw(q / z))]), math.log(z)
        with np.errstate(divide="ignore"):
            probs, log_z = normalized(np.log(q))
        if log_z == NEG_INF:
            return self.dead_token(pool.log_row()), NEG_INF
        return int(support[int(draw(probs))]), log_z

    @staticmethod
    def _check_weight(v: float, token: int) -> float:
        if v > 1e-12 or math.isnan(v):
            raise ValueError(
                f"AWRS needs next-token log weights <= 0, but token {token} got {v}; "
                "use sampler='direct' for this potential"
            )
        return min(v, 0.0)


def resolve(token: int, w: float | list[float]) -> tuple[int, float]:
    """(token, log weight) from what ``_simulate`` returns (rates are integrated here)."""
    return (token, log_inv_time(w)) if type(w) is list else (token, w)
