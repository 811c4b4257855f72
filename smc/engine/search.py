"""``smc.beam`` and ``smc.steer``: beam search and without-replacement steering over the programs
and potentials that ``smc.smc`` runs.

(The module is ``smc.engine.search``: a submodule named ``smc.beam`` would replace the function on the
package.)

Both searches grow particles by *expanding* them: a particle x of log weight W(x) has children
c, each with the exact log mass

    W(c) = W(x) + log t_x(c),

where t_x is what one step of the program contributes in expectation. For the built-in
ConstrainedGeneration program (``smc.generate``) the children are the next tokens a with
t_x(a) = p(a | prompt + x) * exp(logw_next(x)[a]) (the sampler's target; the EOS ids are merged
into one finished child of mass sum_{e in EOS} t_x(e), and at ``max_tokens`` the only child is that
forced EOS), so W(x) = log p(x) + prefix(x) and a finished x has W(x) = log p(x, EOS) + complete(x),
the log of the target's unnormalized mass. The token sampler itself is not used (no draws): one
full next-token weight vector is computed per expanded particle, as the direct sampler does.

Any other Model is expanded by enumerating the random paths of one ``step()``: every sequence of
choices its ``draw(probs)`` calls can make is replayed on a clone of the particle, and the child
is that clone with log mass (its weight after the step) + log P(path). The step's randomness must
go through ``draw(probs)`` (Categorical/Bernoulli, a TokenDist of any sampler; a sampler that asks
for a uniform directly cannot be enumerated and raises); at most ``max_paths`` paths per step.
With exact draws (Categorical, the direct sampler) a path is a value and W(c) is its exact mass;
with AWRS one value is reached by many paths whose masses add up to its mass, so beam search, which
ranks single children, should be run on programs whose samplers are "direct".

``beam(model, beam_width)`` (deterministic): the beam starts as {the started model}; each round
every unfinished beam is expanded, and the new beam is the ``beam_width`` highest-W elements of
(finished beams) + (all children of unfinished beams), ties broken by token ids. It stops when every
beam has finished (or after ``max_steps`` rounds). Sample weights are the exact W of each returned
sequence; log_ml = log sum of the returned finished W, the log of the target mass the beams cover
(a lower bound on log Z, not an estimate of it). Beam search is a heuristic: a candidate is
ranked by its own W, so a sequence can be pruned in favour of a prefix whose completions all
turn out worse (greedy search, beam_width = 1, is the extreme case). When no candidate is ever
pruned (beam_width at least the number of candidates in every round) the beams are every
sequence of positive mass, highest first: the exact enumeration of the target.

``top_k(model, k)`` (deterministic, exact): best-first search returns the k highest-W finished
sequences, provided W never increases from a particle to its children (a normalized LM with
Boolean constraints or weights <= 1; checked, ValueError otherwise). Its cost is one expansion per
frontier element of W above the k-th answer's, which can be many: at most ``max_expansions``.

``steer(model, n_particles, n_beam, seed)`` (random, unbiased; the idea of llamppl's
``smc_steer``, with both the expansion and the selection made without replacement): weights are
kept so that their *sum* estimates the target mass. Both stages of a round use one cut,
``keep_without_replacement`` (Fearnhead & Clifford's optimal resampling): to keep n of elements
with weights v_j, c solves sum_j min(1, c v_j) = n; elements with c v_j >= 1 stay with weight
v_j, the others are chosen by systematic sampling with inclusion probability c v_j and get the
weight 1 / c (nothing is cut when there are at most n). Each round, every unfinished particle
keeps ``n_beam`` of its children (weights exp(W(c))) by this cut; then the pool of kept children
and finished particles is cut to ``n_particles``. A chosen element's new weight 1 / c is the
total weight of the elements that were cut by chance divided by the slots they share, never more
than that total: weights stay bounded by the mass they stand for. Each cut satisfies
E[new weight of j * 1{j kept}] = v_j, so by induction over rounds, for every function f of the
finished sequences,

    E[ sum_i exp(W_i) f(x_i) ] = sum_x p(x, EOS) phi(x) f(x),      Ẑ = sum_i exp(W_i),  E[Ẑ] = Z.

When every particle's children number at most ``n_beam`` and every pool at most
``n_particles``, nothing is random and the result is the exact enumeration of the target.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import numpy as np

from smc.core import defaults
from smc.core.errors import SearchBudgetExceeded
from smc.core.logmath import NEG_INF, logsumexp
from smc.core.counters import RunCounters, current
from smc.core.concurrency import run_all
from smc.engine.loop import MAX_PARTICLES, Critic, critic_value
from smc.programs.constrained import ConstrainedGeneration
from smc.programs.model import Model
from smc.backends.base import is_lm
from smc.engine.result import Result
from smc.programs.model import Sample

#: random paths one step of a general Model may have before ``beam``/``steer`` refuse it
MAX_PATHS = 10_000

METHODS = ("smc", "beam", "steer", "top_k")
#: the methods a critic (the budget twist included) acts in: SMC resamples by it, beam search ranks by it
CRITIC_METHODS = ("smc", "beam")


def _check_count(value: Any, name: str, limit: int = MAX_PARTICLES) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if value > limit:
        raise ValueError(f"{name}={value} is more than the limit of {limit:,}")
    return int(value)


def _check_model(model: Any) -> None:
    if not isinstance(model, Model):
        raise TypeError(
            f"model must be an smc.Model (e.g. the ConstrainedGeneration behind smc.generate), "
            f"got {type(model).__name__}"
        )


# ---------------------------------------------------------------------------- expansion
@dataclass
class _Expansion:
    """The children of one parent: ``logw[j]`` = W(child j) (-inf: no such child), ``key(j)``
    its token ids (for ties), ``make(j, w)`` builds child j with log weight w."""

    logw: np.ndarray
    key: Callable[[int], tuple]
    make: Callable[[int, float], Model]


async def _expand_tokens(p: ConstrainedGeneration) -> _Expansion:
    s = p.sampler
    ctx = tuple(p.tokens)
    eos = list(s.eos_ids)
    if len(ctx) >= p.max_tokens:
        logt = np.full(len(s.lm.vocab), NEG_INF)
        at_eos = np.array(await s.lm_logprobs_at(ctx, eos))
        if s.potential is not None:
            at_eos = at_eos + np.asarray(await s.potential.logw_subset(ctx, eos))
    else:
        logt = np.array(await s.target_logw(ctx), dtype=float)
        at_eos = logt[eos]
    logt[eos] = NEG_INF
    logt[eos[0]] = logsumexp(at_eos)  # one finished child: x followed by any EOS id
    logt += p.weight
    eos_set = set(eos)

    def key(j: int) -> tuple:
        return (*ctx, j) if j not in eos_set else (*ctx, -1)

    def make(j: int, w: float) -> Model:
        c = p.clone()
        if j in eos_set:
            c.finish()
        else:
            c.tokens.append(int(j))
        c.weight = w
        return c

    return _Expansion(logt, key, make)


class _PathDraw:
    """Replays the choices ``forced``, then takes the first positive index of each new draw and
    queues the other positive ones on ``stack``; accumulates log P(path)."""

    def __init__(self, forced: list[int], stack: list[list[int]]):
        self.forced, self.stack = forced, stack
        self.chosen: list[int] = []
        self.logp = 0.0

    def __call__(self, probs: np.ndarray) -> int:
        probs = np.asarray(probs, dtype=float)
        d = len(self.chosen)
        if d < len(self.forced):
            i = self.forced[d]
        else:
            support = np.flatnonzero(probs > 0)
            if len(support) == 0:
                raise ValueError("a step asked to draw from a distribution with no positive entry")
            # pushed in reverse so that paths are visited in increasing index order
            self.stack.extend(self.chosen + [int(j)] for j in support[:0:-1])
            i = int(support[0])
        self.chosen.append(i)
        self.logp += math.log(probs[i] / probs.sum())
        return i


async def _expand_paths(p: Model, max_paths: int) -> _Expansion:
    children: list[Model] = []
    logw: list[float] = []
    stack: list[list[int]] = [[]]
    while stack:
        if len(children) >= max_paths:
            raise ValueError(
                f"one step of {type(p).__name__} has more than max_paths={max_paths} random paths; "
                "beam and steer enumerate every path of a step (raise max_paths, or use a program "
                "whose step draws from fewer values)"
            )
        draw = _PathDraw(stack.pop(), stack)
        c = p.clone()
        c.use_draw(draw)
        try:
            await c.step()
        except AttributeError as e:
            if "uniform" in str(e):
                raise ValueError(
                    f"{type(p).__name__}.step asked for a uniform random number directly; beam and "
                    "steer can only enumerate steps whose randomness goes through draw(probs) "
                    "(Categorical, Bernoulli, TokenDist)"
                ) from e
            raise
        finally:
            c.use_draw(None)
        children.append(c)
        logw.append(c.weight + draw.logp if c.weight > NEG_INF else NEG_INF)

    def make(j: int, w: float) -> Model:
        c = children[j]
        c.weight = w
        return c

    return _Expansion(np.array(logw, dtype=float), lambda j: (*children[j].token_ids(), j), make)


async def _expand(p: Model, max_paths: int) -> _Expansion:
    if isinstance(p, ConstrainedGeneration):
        return await _expand_tokens(p)
    p.untwist()
    return await _expand_paths(p, max_paths)


def _top(logw: np.ndarray, k: int) -> np.ndarray:
    """Indices of the (at most) k largest finite entries, largest first, ties by index."""
    finite = np.flatnonzero(logw > NEG_INF)
    if len(finite) > k:
        cut = np.partition(logw[finite], len(finite) - k)[len(finite) - k]
        finite = finite[logw[finite] >= cut]
    order = np.lexsort((finite, -logw[finite]))
    return finite[order[:k]]


# ---------------------------------------------------------------------------- bookkeeping
class _Run:
    """The Result at the end of a search run: its LMs' counters come from the objects that
    registered with the run (smc.core.counters; the search functions run inside ``_counted``)."""

    def __init__(self) -> None:
        self.counters = current() or RunCounters()
        self.t0 = time.perf_counter()

    def result(self, pop: list[Model], log_ml: float, stats: dict[str, Any]) -> Result:
        samples = [
            Sample(p.text(), tuple(p.token_ids()), float(p.weight), bool(p.finished and p.weight > NEG_INF))
            for p in pop
        ]
        lm_delta = [d for o, d in self.counters.deltas() if is_lm(o)]
        stats.update(
            wall_time_s=time.perf_counter() - self.t0,
            lm_requests=sum(d.get("requests", 0) for d in lm_delta),
            lm_forward_passes=sum(d.get("forward_passes", 0) for d in lm_delta),
        )
        return Result(samples=samples, log_ml=log_ml, stats=stats)


def _counted(fn: Callable[..., Awaitable[Result]]) -> Callable[..., Awaitable[Result]]:
    """Run the search ``fn`` as a run of its own for the counters (smc.core.counters)."""

    @functools.wraps(fn)
    async def counted(*args: Any, **kwargs: Any) -> Result:
        with RunCounters().active():
            return await fn(*args, **kwargs)

    return counted


# ---------------------------------------------------------------------------- beam search
#: with a critic, each beam offers this many times beam_width of its highest-W children for
#: the critic to rank: at temperature 0 on JSONSchemaBench's 43 schemas, 1 and 2 finish the
#: same 21, 2 with outputs 0.5 nats likelier on average (benchmarks/RESULTS.md, "Strict mode at
#: the current defaults, and temperature 0 ranked by the budget twist")
CRITIC_CHILDREN = 2


@_counted
async def beam(
    model: Model, beam_width: int = 4, *, max_steps: int | None = defaults.MAX_STEPS,
    max_paths: int = MAX_PATHS, critic: Critic | None = None
) -> Result:
    """Deterministic beam search: the ``beam_width`` highest-mass sequences it reaches (see the
    module docstring for the children and their masses W).

    B_0 = {model started}; B_{k+1} = the beam_width largest-score elements of
    {finished b in B_k} ∪ {children of unfinished b in B_k} (ties by token ids); stop when every
    element of B_k is finished or after ``max_steps`` rounds. The score is W, or with a
    ``critic`` W + psi(c) for an unfinished candidate c (psi estimates the log mass its
    completion will still cost; a finished one scores W), each unfinished b then offering its
    CRITIC_CHILDREN * beam_width highest-W children instead of beam_width (psi costs a search
    per child, so not all of them): a round where psi rates some unfinished candidate None
    ranks by W alone, as an SMC island is then left untwisted.

    Args:
        model: the initial program (left untouched); a ConstrainedGeneration expands into next
            tokens, any other Model into the random paths of one step.
        beam_width: k >= 1.
        max_steps: stop after this many rounds (default ``defaults.MAX_STEPS``; None: no bound);
            unfinished beams are returned unfinished and ``stats["max_steps_reached"]`` is True.
        max_paths: most random paths one step of a general Model may have.
        critic: the ranking heuristic psi (``smc.engine.critics.BudgetCritic``: a candidate far
            from an end it can reach within max_tokens ranks below one close to it, which plain
            W, blind to the budget, prefers when its prefix is likelier), or None. It changes
            which sequences are kept, never their W.

    Returns a Result whose samples are the final beams, highest score first, with log_weight = W
    (exact), and log_ml = log sum of the finished beams' masses (-inf when none finished).
    """
    _check_model(model)
    k = _check_count(beam_width, "beam_width")
    _check_count(max_paths, "max_paths", limit=10**9)
    if max_steps is not None:
        _check_count(max_steps, "max_steps", limit=10**9)
    run = _Run()
    root = model.clone()
    await root.start()
    pool = [root] if root.weight > NEG_INF else []
    steps = expansions = 0
    while any(not b.finished for b in pool) and (max_steps is None or steps < max_steps):
        steps += 1
        live = [b for b in pool if not b.finished]
        expansions += len(live)
        exps = await run_all(_expand(b, max_paths) for b in live)
        # (score, tie key, build) over finished beams and each parent's k best children
        cands: list[tuple[float, tuple, Callable[[], Model]]] = [
            (b.weight, (*b.token_ids(), -1), (lambda b=b: b)) for b in pool if b.finished
        ]
        for e in exps:
            for j in _top(e.logw, k if critic is None else CRITIC_CHILDREN * k):
                w = float(e.logw[j])
                cands.append((w, e.key(int(j)), (lambda e=e, j=int(j), w=w: e.make(j, w))))
        if critic is not None:
            cands = await _with_heuristic(critic, cands)
        cands.sort(key=lambda c: (-c[0], c[1]))
        pool = [build() for _, _, build in cands[:k]]
    finished = np.array([b.weight for b in pool if b.finished], dtype=float)
    stats = {"method": "beam", "beam_width": k, "steps": steps, "expansions": expansions,
             "max_steps_reached": any(not b.finished for b in pool)}
    return run.result(pool, logsumexp(finished), stats)


async def _with_heuristic(critic: Critic, cands: list[tuple[float, tuple, Callable[[], Model]]]
                          ) -> list[tuple[float, tuple, Callable[[], Model]]]:
    """The candidates (W, key, build) scored W + psi(c) for the unfinished ones of W > -inf;
    unchanged when psi rates one of those None."""
    built = [(w, key, build()) for w, key, build in cands]
    rated = [i for i, (w, _, c) in enumerate(built) if not c.finished and w > NEG_INF]
    values = await run_all(critic_value(critic, built[i][2]) for i in rated)
    if any(v is None for v in values):
        return [(w, key, (lambda c=c: c)) for w, key, c in built]
    twist = dict(zip(rated, values))
    return [(w + float(twist.get(i, 0.0)), key, (lambda c=c: c)) for i, (w, key, c) in enumerate(built)]


# ---------------------------------------------------------------------------- exact top k
@_counted
async def top_k(
    model: Model,
    k: int = 4,
    *,
    max_expansions: int = defaults.MAX_EXPANSIONS,
    max_paths: int = MAX_PATHS,
) -> Result:
    """The exact ``k`` highest-W finished sequences, by best-first search.

    The frontier starts as {model started}; repeatedly the frontier element of largest W is
    removed: finished, it is the next answer; unfinished, it is expanded and its children join
    the frontier (lazily: each expanded particle offers its children one at a time, in
    decreasing W). This is exact when W never increases from a particle to its children
    (log t_x(c) <= 0: a normalized LM with Boolean constraints or weights <= 1, Categorical
    draws, observed probabilities): every sequence not yet returned extends a frontier element of
    W no larger than the one just removed. Ties are broken by token ids, as in ``beam``.

    Args:
        model: the initial program (left untouched).
        k: number of sequences, >= 1.
        max_expansions: most particles expanded (each one LM call for ConstrainedGeneration);
            the search is exact but can need many expansions when the k-th best sequence is
            improbable.
        max_paths: most random paths one step of a general Model may have.

    Returns a Result of at most k finished samples, highest W first (fewer when the target has
    fewer sequences), log_weight = W, log_ml = log of their total mass. Raises ValueError when a
    child's W exceeds its parent's by more than 1e-9 (the order would not be exact), and
    ``smc.core.errors.SearchBudgetExceeded`` (a ValueError) after ``max_expansions`` expansions
    (default ``defaults.MAX_EXPANSIONS``).
    """
    _check_model(model)
    k = _check_count(k, "k")
    _check_count(max_expansions, "max_expansions", limit=10**9)
    _check_count(max_paths, "max_paths", limit=10**9)
    run = _Run()
    root = model.clone()
    await root.start()
    seq = itertools.count()
    # frontier entries (-W, tie key, n, parent expansion, children in order, rank of the child)
    frontier: list[tuple[float, tuple, int, _Expansion | None, Any, int]] = []

    def offer(e: _Expansion, order: np.ndarray, r: int) -> None:
        if r < len(order):
            j = int(order[r])
            heapq.heappush(frontier, (-float(e.logw[j]), e.key(j), next(seq), e, order, r))

    if root.weight > NEG_INF:
        frontier.append((-root.weight, (*root.token_ids(),), next(seq), None, root, 0))
    out: list[Model] = []
    expansions = 0
    while frontier and len(out) < k:
        negw, _, _, e, order, r = heapq.heappop(frontier)
        if e is None:
            node = order  # the root
        else:
            offer(e, order, r + 1)
            node = e.make(int(order[r]), -negw)
        if node.finished:
            out.append(node)
            continue
        if expansions >= max_expansions:
            raise SearchBudgetExceeded(
                f"top_k expanded max_expansions={max_expansions} particles before finding {k} "
                f"sequences (found {len(out)}); raise max_expansions, lower k, or use beam"
            )
        expansions += 1
        child = await _expand(node, max_paths)
        finite = np.flatnonzero(child.logw > NEG_INF)
        if len(finite) and float(child.logw[finite].max()) > node.weight + 1e-9:
            raise ValueError(
                "top_k needs weights that never increase along a sequence, but a child has log "
                f"weight {float(child.logw[finite].max()):.6g} > its parent's {node.weight:.6g} "
                "(a potential with weights > 1?); use beam instead"
            )
        offer(child, finite[np.lexsort((finite, -child.logw[finite]))], 0)
    stats = {"method": "top_k", "k": k, "expansions": expansions}
    return run.result(out, logsumexp(np.array([p.weight for p in out], dtype=float)), stats)


# ---------------------------------------------------------------------------- steering
def keep_without_replacement(
    logw: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Optimal resampling to n elements without replacement (Fearnhead & Clifford 2003).

    Over the finite entries with weights v_j: c solves sum_j min(1, c v_j) = n; entries with
    c v_j >= 1 are kept with their weight, the rest are chosen by systematic sampling with
    inclusion probability c v_j and get the weight 1 / c. Returns (indices, new log weights),
    with E[new weight_j * 1{j kept}] = v_j, and the total weight kept exactly: the n - m chosen
    at random get (n - m) / c = the total weight of the elements cut at random. With at most n finite entries all are kept unchanged.
    """
    finite = np.flatnonzero(logw > NEG_INF)
    if len(finite) <= n:
        return finite, logw[finite]
    total = logsumexp(logw[finite])
    v = np.exp(logw[finite] - total)  # relative weights; sum 1
    order = np.argsort(-v, kind="stable")
    vs = v[order]
    tail = np.cumsum(vs[::-1])[::-1]  # tail[m] = sum of vs[m:]
    m = 0  # entries kept for sure
    while m < n and (n - m) * vs[m] >= tail[m]:
        m += 1
    if m == n:  # the remaining weights underflowed to 0 relative to the kept ones
        return finite[order[:n]], logw[finite[order[:n]]]
    c = (n - m) / tail[m]
    incl = c * vs[m:]
    points = rng.random() + np.arange(n - m)
    picked = np.searchsorted(np.cumsum(incl), points, side="right")
    picked = np.unique(np.minimum(picked, len(incl) - 1))
    idx = np.concatenate([order[:m], order[m:][picked]])
    new = np.concatenate([logw[finite[order[:m]]], np.full(len(picked), total - math.log(c))])
    return finite[idx], new


def _reweighted(p: Model, w: float) -> Model:
    p.weight = w
    return p


@_counted
async def steer(
    model: Model,
    n_particles: int = 16,
    n_beam: int = 4,
    *,
    seed: int | None = 0,
    max_steps: int | None = defaults.MAX_STEPS,
    max_paths: int = MAX_PATHS,
) -> Result:
    """Without-replacement SMC steering (see the module docstring for the estimator).

    Each round every unfinished particle keeps ``n_beam`` of its children, and the pool of
    children and finished particles is cut to ``n_particles``, both by optimal resampling
    without replacement (``keep_without_replacement``). Unbiased: E[sum_i exp(W_i) f(x_i)] = sum_x p(x, EOS) phi(x) f(x), where
    the sum runs over finished particles; Ẑ = sum_i exp(W_i) (log_ml = log Ẑ, E[Ẑ] = Z).

    Args:
        model: the initial program (left untouched).
        n_particles: N >= 1, most particles kept after each round.
        n_beam: children kept per particle and round (>= 1).
        seed: seeds all randomness (None: fresh entropy).
        max_steps: stop after this many rounds (default ``defaults.MAX_STEPS``; None: no bound);
            unfinished particles count as 0 in log_ml and ``stats["max_steps_reached"]`` is True.
        max_paths: most random paths one step of a general Model may have.

    Returns a Result of at most N particles whose log weights *sum* (not average) to Ẑ.
    """
    _check_model(model)
    n = _check_count(n_particles, "n_particles")
    kb = _check_count(n_beam, "n_beam")
    _check_count(max_paths, "max_paths", limit=10**9)
    if max_steps is not None:
        _check_count(max_steps, "max_steps", limit=10**9)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
    rng = np.random.default_rng(seed)
    run = _Run()
    root = model.clone()
    await root.start()
    pop = [root] if root.weight > NEG_INF else []
    steps = expansions = 0
    while any(not p.finished for p in pop) and (max_steps is None or steps < max_steps):
        steps += 1
        live = [p for p in pop if not p.finished]
        expansions += len(live)
        exps = await run_all(_expand(p, max_paths) for p in live)
        builds: list[Callable[[float], Model]] = []
        logw: list[float] = []
        for p in pop:
            if p.finished:
                builds.append(lambda w, p=p: _reweighted(p, w))
                logw.append(p.weight)
        for e in exps:
            kept, w = keep_without_replacement(e.logw, kb, rng)
            for j, wj in zip(kept.tolist(), w.tolist()):
                builds.append(lambda w, e=e, j=j: e.make(j, w))
                logw.append(wj)
        idx, new = keep_without_replacement(np.array(logw, dtype=float), n, rng)
        pop = [builds[i](float(w)) for i, w in zip(idx.tolist(), new.tolist())]
    final = np.array([p.weight if p.finished else NEG_INF for p in pop], dtype=float)
    stats = {"method": "steer", "particles": n, "n_beam": kb, "steps": steps, "expansions": expansions,
             "max_steps_reached": any(not p.finished for p in pop)}
    return run.result(pop, logsumexp(final), stats)


#: children per particle of ``generate(method="steer")`` when ``n_beam`` is not given
DEFAULT_N_BEAM = 2


async def run_search(model: Model, method: str, particles: int, n_beam: int | None, seed: int | None,
                     max_expansions: int = defaults.MAX_EXPANSIONS, critic: Critic | None = None) -> Result:
    """The non-SMC methods of ``smc.generate``: ``beam(model, particles, critic=critic)`` for "beam",
    ``top_k(model, particles, max_expansions=max_expansions)`` for "top_k",
    ``steer(model, particles, n_beam, seed=seed)`` for "steer" (``n_beam`` defaulting to
    DEFAULT_N_BEAM). A ConstrainedGeneration finishes within max_tokens + 1 rounds, which is
    the bound passed for its rounds (any other program: ``defaults.MAX_STEPS``)."""
    rounds = model.max_tokens + 1 if isinstance(model, ConstrainedGeneration) else defaults.MAX_STEPS
    if method == "beam":
        return await beam(model, particles, max_steps=rounds, critic=critic)
    if method == "top_k":
        return await top_k(model, particles, max_expansions=max_expansions)
    if method == "steer":
        return await steer(model, particles, DEFAULT_N_BEAM if n_beam is None else n_beam, seed=seed,
                           max_steps=rounds)
    raise ValueError(f"run_search runs 'beam', 'top_k' or 'steer', not {method!r}")
