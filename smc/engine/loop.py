"""The SMC loop: N particles of a Model, advanced together, resampled when the ESS drops.

With log weights lw_i after a step and ESS = (sum w_i)^2 / sum w_i^2, the population is
resampled when ESS < ess_threshold * N: ancestors are drawn with probability w_i / sum_j w_j
(by the chosen scheme) and every new particle gets the mean weight log((1/N) sum_i w_i), so the
mean weight stays an unbiased estimate of Z. ess_threshold = 0 never resamples (importance
sampling); ess_threshold = 1 resamples after every step whose weights are not all equal.

With ``islands=K`` the N particles form K islands of N/K (particles 0..N/K-1, and so on), each
an SMC run of its own: an island is resampled, within itself, when its ESS falls below
ess_threshold * N/K, and its particles then get the island's mean weight. The mean weight over
all particles is then the mean of the K islands' independent estimates of Z, so it stays
unbiased, and the weighted particles combine the islands by their estimates. One lineage that
outgrows the rest can then take over its island only, not the whole population.

A critic may protect particles from being dropped (``critic.holds(particle)``: the budget twist
protects those inside a literal they have begun, smc.engine.critics). When their island
resamples, ancestors are drawn by priorities instead of weights: a held particle still alive
whose weight is below the island's mean priority T / n gets priority T / n (so one child in
expectation, and exactly one with systematic resampling), the others their weight, T the sum
of the priorities; a child of a then gets weight (T / n) w_a / prio_a: its ancestor's own
weight if that was raised, else T / n. Priorities chosen from the current population keep the
population properly weighted and the mean weight an unbiased estimate of Z (E[sum over the
children of w f(x)] = sum_i w_i f(x_i) given the population); without held particles this is
plain resampling.

``resampling_power=a`` in (0, 1] draws ancestors by priorities w_i^a instead of w_i (the held
particles' raised on top of these), and a child of a then gets (T / n) w_a / w_a^a: a lineage
ahead by d nats gets the children of a lead of a d, and its children carry the rest, so
selection on a gap spreads over several resamplings instead of one. A particle that leads only
because its costs are still to come (a JSON key the model will not want to write) then leaves
room for the others until those costs come due. Same rule of priorities, same guarantee.

Finished particles keep their weight and wait (they take part in resampling); particles of
weight -inf are not stepped again but stay in the population (resampling removes them). The run
ends when no live unfinished particle remains, or after ``max_steps`` steps (default
``defaults.MAX_STEPS``: every run of a program is bounded; the Result's
``stats["max_steps_reached"]`` says when the bound cut it), and log_ml = log of the mean final
weight, unfinished particles counting as 0 (so log_ml estimates the mass of the sequences that
finish within max_steps steps). Finished copies a program sets aside
with ``Model.bank`` during a step leave the population after that step (before resampling) and
count with their own weights: log_ml = log((1/N) (sum of final weights + sum of banked
weights)), unbiased because each banked weight is, at its step, one more weighted particle of
the same SMC (its expectation the target mass the program moved out of the particle that went
on). Each step, every live particle gets its own numpy Generator seeded from the run's, so
results do not depend on how concurrent requests interleave.
"""

from __future__ import annotations

import inspect
import math
import os
import time
import warnings
from typing import Any, Awaitable, Callable

import numpy as np
from tqdm.auto import tqdm

from samplers import TokenSampler
from samplers.base import BLOCK_UNIFORMS, STREAM_UNIFORMS, BlockDraw
from smc.backends.base import LMBackend, is_lm
from smc.core import defaults
from smc.core.concurrency import run_all
from smc.core.counters import RunCounters
from smc.core.errors import InvalidArgument
from smc.core.logmath import NEG_INF, logsumexp
from smc.core.resampling import ess as compute_ess
from smc.core.resampling import get_scheme
from smc.engine.checkpoint import CheckpointWriter, Rebuild, Run, load
from smc.engine.result import Result, StepRecord
from smc.programs.model import Model, Sample

#: a log twist for a particle, or None where it cannot rate that particle (see ``smc``)
Critic = Callable[[Model], "float | None | Awaitable[float | None]"]
#: called with the run after every step (its particles, banked samples, history); must not
#: change it
OnStep = Callable[[Run], None]


#: most particles a run may have: beyond it the population itself (one program state and one
#: next-token distribution per particle) outgrows ordinary memory; checked before any work
MAX_PARTICLES = 100_000


def check_smc_args(
    particles: Any, ess_threshold: Any, resampling: Any, seed: Any = None, islands: Any = 1,
    resampling_power: Any = 1.0,
) -> None:
    """TypeError/ValueError naming the first bad argument: ``particles`` not an integer in
    [1, MAX_PARTICLES], ``ess_threshold`` not a number in [0, 1], an unknown resampling scheme,
    ``seed`` neither None nor a non-negative integer, ``islands`` not a divisor of
    ``particles``, or ``resampling_power`` not a number in (0, 1]."""
    if isinstance(particles, bool) or not isinstance(particles, (int, np.integer)) or particles < 1:
        raise ValueError(f"particles must be an integer >= 1, got {particles!r}")
    if particles > MAX_PARTICLES:
        raise ValueError(
            f"particles={particles} is more than the limit of {MAX_PARTICLES:,} particles per run; "
            "use fewer particles (or several runs)"
        )
    if isinstance(ess_threshold, bool) or not isinstance(ess_threshold, (int, float, np.integer, np.floating)) or not (
        0.0 <= ess_threshold <= 1.0
    ):
        raise ValueError(f"ess_threshold must be a number in [0, 1], got {ess_threshold!r}")
    if not isinstance(resampling, str):
        raise TypeError(f"resampling must be a string (the scheme's name), got {type(resampling).__name__}")
    get_scheme(resampling)
    if isinstance(islands, bool) or not isinstance(islands, (int, np.integer)) or islands < 1:
        raise ValueError(f"islands must be an integer >= 1, got {islands!r}")
    if particles % islands:
        raise ValueError(f"islands={islands} must divide particles={particles} (equal islands)")
    if isinstance(resampling_power, bool) or not isinstance(
        resampling_power, (int, float, np.integer, np.floating)
    ) or not 0.0 < resampling_power <= 1.0:
        raise ValueError(f"resampling_power must be a number in (0, 1], got {resampling_power!r}")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be a non-negative integer or None, got {seed!r} ({type(seed).__name__})")
        if seed < 0:
            raise ValueError(f"seed must be a non-negative integer or None, got {seed}")


async def smc(
    model: Model,
    particles: int = defaults.PARTICLES,
    *,
    ess_threshold: float = defaults.ESS_THRESHOLD,
    resampling: str = defaults.RESAMPLING,
    resampling_power: float = 1.0,
    seed: int | None = defaults.SEED,
    critic: Critic | None = None,
    max_steps: int | None = defaults.MAX_STEPS,
    progress: bool | None = None,
    progress_total: int | None = None,
    checkpoint: str | os.PathLike | None = None,
    islands: int = 1,
    checkpoint_program: tuple[dict[str, Any], bytes] | None = None,
    on_step: OnStep | None = None,
) -> Result:
    """Run SMC on ``particles`` copies of ``model`` (see the module docstring).

    Args:
        model: the initial program state (left untouched: particles are clones).
        particles: N >= 1.
        ess_threshold: resample when ESS < ess_threshold * N; 0 = importance sampling.
        resampling: "multinomial", "stratified", "systematic" or "residual".
        resampling_power: a in (0, 1]: ancestors are drawn by priorities w_i^a (module
            docstring); 1 (default) is plain resampling.
        seed: seeds all randomness (None: fresh entropy).
        critic: optional log twist psi(particle) applied after each step to unfinished
            particles (and removed before the next one), to steer resampling; not called
            where nothing resamples (one particle per island, or ess_threshold 0). Where it
            returns None for a particle (it cannot rate it), no particle of that island is
            twisted at that step: an untwisted particle among twisted ones would be compared
            on another footing. A critic with a ``holds(particle)`` method protects the
            particles it holds from being dropped by resampling (module docstring).
        max_steps: stop after this many steps (default ``defaults.MAX_STEPS``, 1,000: a program
            whose step never finishes would otherwise run until killed; None: no bound, for a
            program that always finishes). Particles unfinished then count as weight 0, so
            log_ml estimates the mass of the sequences that finish within max_steps steps;
            ``stats["max_steps_reached"]`` is True and a RuntimeWarning names the bound.
        progress: tqdm bar (None: shown only once the run has lasted 2 s; False: never).
        progress_total: length of the bar (default max_steps).
        checkpoint: a file to which the run's state is written, atomically, after the
            particles start and after every step; ``smc.resume(checkpoint, lm=...)`` continues
            the run from it with exactly the result the uninterrupted run gives
            (docs/checkpoint.md). A particle that cannot be pickled is refused before step 1.
        islands: K, a divisor of N: K independent islands of N/K particles, each resampled
            within itself (module docstring); 1 (default) is plain SMC.
        checkpoint_program: (description, bytes) a caller above the engine stores in the
            checkpoint to rebuild its program on resume (``generate`` does).
        on_step: called as ``on_step(run)`` after every step (after resampling), e.g. to
            stream the text all particles share; reads only, so results are the same with or
            without it.
    """
    check_smc_args(particles, ess_threshold, resampling, seed, islands, resampling_power)
    get_scheme(resampling)
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer))
                                  or max_steps < 0):
        raise InvalidArgument(f"max_steps must be an integer >= 0 or None, got {max_steps!r}")
    max_steps = None if max_steps is None else int(max_steps)
    writer = None
    if checkpoint is not None:
        writer = CheckpointWriter(checkpoint, *(checkpoint_program or ()))
    n = int(particles)
    settings = dict(particles=n, ess_threshold=float(ess_threshold), resampling=resampling,
                    resampling_power=float(resampling_power), seed=None if seed is None else int(seed),
                    max_steps=max_steps, progress_total=progress_total, critic=critic is not None,
                    islands=int(islands))
    counters = RunCounters()
    t0 = time.perf_counter()
    run = Run([model.clone() for _ in range(n)], np.random.default_rng(seed), settings)
    with counters.active():
        await run_all(p.start() for p in run.pop)
    if writer is not None:
        writer.write(run, time.perf_counter() - t0)
    return await run_steps(run, counters, critic=critic, progress=progress, writer=writer, t0=t0,
                         on_step=on_step)


async def run_steps(
    run: Run,
    counters: RunCounters,
    *,
    critic: Critic | None,
    progress: bool | None,
    writer: Any = None,
    t0: float | None = None,
    on_step: OnStep | None = None,
) -> Result:
    """Step ``run`` until no live unfinished particle remains (or ``max_steps``), writing a
    checkpoint after each step when ``writer`` is given and calling ``on_step(run)`` after
    each step when given; then the Result of the whole run, whose
    stats report the work of the objects registered with ``counters`` (smc.core.counters)."""
    t0 = time.perf_counter() if t0 is None else t0
    cfg = run.settings
    n, ess_threshold, max_steps = cfg["particles"], cfg["ess_threshold"], cfg["max_steps"]
    scheme = get_scheme(cfg["resampling"])
    # checkpoints written before the power existed resampled by the weights
    power = cfg.get("resampling_power", 1.0)
    islands = np.arange(n).reshape(cfg.get("islands", 1), -1)
    # a twist acts only through resampling, which never happens with ess_threshold 0 and keeps
    # an island of one particle as it is: then the critic is not called (its searches cost time)
    twisting = critic is not None and islands.shape[1] > 1 and ess_threshold > 0
    holds = getattr(critic, "holds", None) if twisting else None
    rng, pop, history = run.rng, run.pop, run.history
    bar = None
    if progress is not False:
        bar = tqdm(total=cfg["progress_total"] or max_steps, initial=run.step, delay=0 if progress else 2.0,
                   unit="step", leave=False)
    with counters.active():
        if twisting:
            counters.add(critic)
        try:
            step = run.step
            while max_steps is None or step < max_steps:
                live = [i for i, p in enumerate(pop) if not p.finished and p.weight > NEG_INF]
                if not live:
                    break
                step += 1
                lengths = [p.n_tokens() for p in pop]
                uniforms = rng.random((len(live), BLOCK_UNIFORMS + STREAM_UNIFORMS))
                seeds = rng.integers(0, 2**63 - 1, size=len(live)).tolist()
                for i, u, s in zip(live, uniforms, seeds):
                    pop[i].untwist()
                    pop[i].use_draw(BlockDraw.from_row(u, s))
                await step_all([pop[i] for i in live])
                for i in live:
                    run.banked.extend(pop[i].take_banked())
                if twisting:
                    await _twist(critic, pop, live, islands)
                for i in live:
                    pop[i].use_draw(None)
                lw = np.array([p.weight for p in pop], dtype=float)
                e = compute_ess(lw)
                live_set = set(live)
                record = dict(
                    step=step,
                    active=[i in live_set for i in range(n)],
                    tokens=[p.tokens_since(k) for p, k in zip(pop, lengths)],
                    log_weights=lw.tolist(),
                    finished=[p.finished for p in pop],
                    ess=e,
                )

                def held(i: int) -> bool:
                    """Asked by _resample only where an island resamples (most steps none); a
                    particle that died at this step has nothing to protect (raised, it would
                    take a child from the live ones)."""
                    return holds is not None and i in live_set and lw[i] > NEG_INF and bool(holds(pop[i]))

                ancestors, weights = _resample(lw, islands, ess_threshold, scheme, rng, held, power)
                if ancestors is not None:
                    used: set[int] = set()
                    new = []
                    for a in ancestors:
                        new.append(pop[a].clone() if a in used else pop[a])
                        used.add(int(a))
                    for p, w in zip(new, weights):
                        if w is not None:
                            p.weight = w
                    pop = run.pop = new
                    record["ancestors"] = [int(a) for a in ancestors]
                history.append(StepRecord(**record))
                run.step = step
                if writer is not None:
                    writer.write(run, run.elapsed_s + time.perf_counter() - t0)
                if on_step is not None:
                    on_step(run)
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()

    unfinished = sum(not p.finished and p.weight > NEG_INF for p in pop)
    cut = max_steps is not None and run.step >= max_steps and unfinished > 0
    if cut:
        warnings.warn(
            f"the run stopped after max_steps={max_steps} steps with {unfinished} of {n} particles "
            "unfinished; they count as weight 0 in log_ml and the posterior (raise max_steps if "
            "the program needs more steps)", RuntimeWarning, stacklevel=3)
    final = [p.weight if p.finished else NEG_INF for p in pop] + [b.log_weight for b in run.banked]
    samples = [
        Sample(p.text(), tuple(p.token_ids()), float(p.weight), bool(p.finished and p.weight > NEG_INF))
        for p in pop
    ] + run.banked
    deltas = counters.deltas()
    lm_delta = [d for o, d in deltas if is_lm(o)]
    counted = [(o, d) for o, d in deltas if not is_lm(o) and o is not critic]
    stats = {
        "particles": n,
        "steps": len(history),
        "resampling_events": sum(r.ancestors is not None for r in history),
        "banked": len(run.banked),
        "max_steps_reached": cut,
        "tokens": sum(len(t) for r in history for t in r.tokens),
        "wall_time_s": run.elapsed_s + time.perf_counter() - t0,
        "lm_requests": sum(d.get("requests", 0) for d in lm_delta),
        "lm_forward_passes": sum(d.get("forward_passes", 0) for d in lm_delta),
        "constraint_checks": sum(d.get("checks", 0) for o, d in counted if isinstance(o, TokenSampler)),
        "full_evaluations": sum(d.get("full_evaluations", 0) for o, d in counted if isinstance(o, TokenSampler)),
        "lm": lm_delta[0] if len(lm_delta) == 1 else lm_delta,
        "samplers": {f"{type(o).__name__}#{k}": d for k, (o, d) in enumerate(counted)},
        "critic": next((d for o, d in deltas if o is critic), {}),
    }
    return Result(samples=samples, log_ml=logsumexp(np.array(final)) - math.log(n), history=history, stats=stats)


#: ``checkpoint=`` of ``aresume_run``: keep writing to the file the run was resumed from
SAME_FILE = "same file"


async def aresume_run(
    path: str | os.PathLike,
    *,
    lm: LMBackend | None = None,
    shared: dict[str, Any] | None = None,
    critic: Critic | None = None,
    progress: bool | None = None,
    checkpoint: Any = SAME_FILE,
    rebuild: Rebuild | None = None,
) -> tuple[Result, dict[str, Any]]:
    """Continue the run checkpointed at ``path`` to its end: (the Result of the whole run, the
    checkpoint's header). ``rebuild`` binds the shared objects of a program a caller above
    the engine stored (``smc.resume`` passes the one of ``generate``); the other arguments are
    ``smc.resume``'s."""
    run, header, program_bytes = load(path, lm=lm, shared=shared, has_critic=critic is not None,
                                      rebuild=rebuild)
    await run.restore_caches()
    writer = None
    target = path if checkpoint is SAME_FILE else checkpoint
    if target is not None:
        writer = CheckpointWriter(target, header["program"], program_bytes)
    result = await run_steps(run, RunCounters(), critic=critic, progress=progress, writer=writer)
    return result, header


def _resample(
    lw: np.ndarray, islands: np.ndarray, ess_threshold: float, scheme: Any, rng: np.random.Generator,
    held: Callable[[int], bool], power: float = 1.0,
) -> tuple[np.ndarray | None, list]:
    """Ancestors for the next step (None when no island resamples) and each new particle's
    log weight (None to keep its own). Island g (a row of ``islands``, particle indices) is
    resampled when 0 < ESS(lw[g]) < ess_threshold * |g|: ancestors are drawn with probability
    proportional to the priorities exp(lp) of ``_protected(power * lw[g], h)``, h =
    ``held(i)`` for each i in g, and a child of a gets mean(exp(lp)) * w_a / exp(lp_a): with
    power 1 the mean priority (the island's mean weight when none is raised), or for a raised
    ancestor its own weight."""
    ancestors = None
    weights: list = [None] * len(lw)
    for g in islands:
        e = compute_ess(lw[g])
        if e > 0 and e < ess_threshold * len(g):
            h = np.array([held(int(i)) for i in g], dtype=bool)
            lp, raised = _protected(power * lw[g], h)
            total = logsumexp(lp)
            picks = scheme(np.exp(lp - total), len(g), rng)
            if ancestors is None:
                ancestors = np.arange(len(lw))
            ancestors[g] = g[picks]
            mean = total - math.log(len(g))
            for i, a in zip(g, picks):
                a_lw = float(lw[g[a]])
                # a raised ancestor's priority is the mean: its own weight, without rounding
                weights[i] = a_lw if raised[a] else mean + (a_lw - float(lp[a]))
    return ancestors, weights


def _protected(lq: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log priorities lp, raised) from the log priorities lq before protection: lp_i =
    log(T / n) for the held particles whose lq_i is below T / n, lp_i = lq_i for the others,
    with T = sum_i exp(lp_i), so that each held particle has an expected number of children of
    at least 1 (exactly 1, the raised ones). T solves T = U / (1 - |R| / n), U the priority of
    the particles not raised (R): raising a particle below T / n raises T, so R grows until no
    held particle is below."""
    n = len(lq)
    raised = np.zeros(n, dtype=bool)
    while True:
        total = logsumexp(lq[~raised]) - math.log1p(-raised.sum() / n)
        low = held & ~raised & (lq < total - math.log(n))
        # all below the mean happens only by rounding, where all are at it: none needs raising
        if not low.any() or (raised | low).all():
            break
        raised |= low
    return np.where(raised, total - math.log(n), lq), raised


async def step_all(particles: list[Model]) -> None:
    """Every particle's ``step``: through their program's ``step_population`` when they are all
    of one program type (the built-in program steps them all in one call), else each on its
    own, concurrently."""
    kind = type(particles[0])
    if all(type(p) is kind for p in particles):
        await kind.step_population(particles)
    else:
        await Model.step_population(particles)


async def _twist(critic: Critic, pop: list[Model], live: list[int], islands: np.ndarray) -> None:
    """Twist the live unfinished particles by the critic's values, island by island: an
    island where the critic rates some particle None is left untwisted at this step (any
    positive resampling priorities chosen from the current population keep Ẑ unbiased; these
    are the twist's or all 1). An island's particles are rated one after another and the rest
    are not rated once one is None: their values would go unused, and a search that gives up
    is the critic's most expensive answer (on a JSONSchemaBench schema whose literal no
    completion search could close, 16 particles' give-ups were 70% of the CPU time of a run;
    benchmarks/RESULTS.md, "On a GPU (H200): wall time per request on the 43 schemas")."""
    rated = {i for i in live if not pop[i].finished and pop[i].weight > NEG_INF}

    async def twist_island(members: list[int]) -> None:
        values = []
        for i in members:
            value = await critic_value(critic, pop[i])
            if value is None:
                return
            values.append(float(value))
        for i, value in zip(members, values):
            pop[i].twist(value)

    await run_all(twist_island([int(i) for i in g if int(i) in rated]) for g in islands)


async def critic_value(critic: Critic, p: Model) -> float | None:
    """psi(p): the critic's value for particle ``p`` (awaited when the critic is async)."""
    value = critic(p)
    if inspect.isawaitable(value):
        value = await value
    return value
