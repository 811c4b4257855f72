"""``smc.generate`` / ``smc.agenerate``: constrained generation from an LM by SMC.

(This module is ``smc.generation``, not ``smc.generate``: a submodule of that name would replace
the function ``smc.generate`` on the package as soon as it was imported.)

Samples x from pi(x) ∝ p(x, EOS | prompt) phi(x) over |x| <= max_tokens (EOS forced at
max_tokens, see design.md "Length"), where phi is the constraint, with ``particles`` particles
of the built-in ConstrainedGeneration program, and returns the weighted particles, the
posterior over texts and log Ẑ.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from typing import Any

from potentials.base import Potential
from samplers import SAMPLERS, make_sampler
from smc.backends.base import LMBackend, check_backend
from smc.engine import Critic, check_smc_args, smc
from smc.backends.prompts import Prompt, encode_prompt, prompt_kind
from smc.model import ConstrainedGeneration, check_finish_share, check_lookahead, target_potential
from smc.result import Result
from smc.search import check_method, run_search


#: bytes per particle and vocabulary entry that one SMC step may hold at once (the float32
#: next-token log-probs, a float64 working copy, the constraint's mask), for the memory check
STEP_BYTES_PER_ENTRY = 16


def check_lm(lm: LMBackend) -> None:
    """TypeError unless ``lm`` looks like an LM backend (a name is not one: see ``load_lm``)."""
    if isinstance(lm, (str, bytes, os.PathLike)):
        raise TypeError(
            f"lm must be a language-model backend, got the {type(lm).__name__} {lm!r}; "
            f"to use a model by name, pass lm=smc.load_lm({str(lm)!r})"
        )
    check_backend(lm)


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_memory(particles: int, vocab_size: int) -> None:
    """ValueError, before any work, when one step of ``particles`` particles over a vocabulary of
    ``vocab_size`` tokens needs more than the memory available:
    particles * vocab_size * STEP_BYTES_PER_ENTRY > MemAvailable."""
    need = particles * vocab_size * STEP_BYTES_PER_ENTRY
    have = available_memory_bytes()
    if have is not None and need > have:
        most = max(1, have // (vocab_size * STEP_BYTES_PER_ENTRY))
        raise ValueError(
            f"particles={particles} needs about {need / 2**30:.1f} GiB per step for next-token "
            f"distributions over {vocab_size:,} tokens, more than the {have / 2**30:.1f} GiB of "
            f"memory available; use at most about {most:,} particles"
        )


def check_generate_args(
    prompt: Any,
    particles: Any,
    max_tokens: Any,
    ess_threshold: Any,
    sampler: Any,
    resampling: Any,
    seed: Any = None,
    lm: LMBackend | None = None,
    *,
    chat: Any = None,
    progress: Any = None,
    critic: Any = None,
    islands: Any = None,
    finish_share: Any = 0.0,
    method: Any = "smc",
    lookahead: Any = None,
    constraint: Any = None,
) -> None:
    """TypeError/ValueError naming the first bad argument (run before any work)."""
    prompt_kind(prompt)
    check_smc_args(particles, ess_threshold, resampling, seed, 1 if islands is None else islands)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
    if not isinstance(sampler, str):
        raise TypeError(f"sampler must be a string, one of {', '.join(SAMPLERS)}; got {sampler!r}")
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
    if lm is not None:
        check_lm(lm)
    for name, value in (("chat", chat), ("progress", progress)):
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"{name} must be True, False or None, got {value!r}")
    if critic is not None and not callable(critic):
        raise TypeError(f"critic must be a function of a particle (or None), got {critic!r}")
    if check_finish_share(finish_share) > 0 and method != "smc":
        raise ValueError(f"finish_share is for method='smc' runs, not method={method!r}")
    check_lookahead(lookahead, constraint, method)


def default_islands(particles: int) -> int:
    """The islands ``generate`` uses when none are given: 4 when N is a multiple of 4 and at
    least 16 (islands of 4 or more particles), else 1 (plain SMC).

    Chosen by benchmarks/bench_quality.py: on 30 JSON tasks x 2 seeds at N = 16, 4 islands
    finished all 60 runs (plain SMC: 58) with accuracy 0.71 against 0.70."""
    return 4 if particles % 4 == 0 and particles >= 16 else 1


def prompt_ids_for(lm: LMBackend, prompt: Prompt, chat: bool | None, max_tokens: int) -> list[int]:
    """``encode_prompt(lm, prompt, chat)`` (text, messages or ids; the one prompt rule), checked
    so that len(ids) + max_tokens <= the model's context length."""
    ids = encode_prompt(lm, prompt, chat)
    limit = getattr(lm, "max_context", None)
    if limit is not None:
        if len(ids) + max_tokens > limit:
            raise ValueError(
                f"the prompt ({len(ids)} tokens) plus max_tokens ({max_tokens}) exceeds the model's "
                f"context of {limit} tokens; lower max_tokens to at most {limit - len(ids)}"
            )
    return ids


async def agenerate(
    prompt: Prompt,
    constraint: Potential | None = None,
    *,
    lm: LMBackend | None = None,
    particles: int = 16,
    max_tokens: int = 32,
    seed: int | None = 0,
    sampler: str = "awrs",
    ess_threshold: float = 0.5,
    resampling: str = "multinomial",
    chat: bool | None = None,
    progress: bool | None = None,
    critic: Critic | None = None,
    checkpoint: str | os.PathLike | None = None,
    method: str = "smc",
    n_beam: int | None = None,
    islands: int | None = None,
    finish_share: float = 0.0,
    lookahead: float | None = None,
) -> Result:
    """Constrained generation by SMC (async); see ``generate`` for the arguments."""
    check_generate_args(
        prompt, particles, max_tokens, ess_threshold, sampler, resampling, seed, lm,
        chat=chat, progress=progress, critic=critic, islands=islands, finish_share=finish_share,
        method=method, lookahead=lookahead, constraint=constraint,
    )
    check_method(method, n_beam, critic)
    if checkpoint is not None:  # a bad path is refused before the LM loads
        if method != "smc":
            raise ValueError(f"checkpoint= is for method='smc' runs, not method={method!r}")
        from smc.checkpoint import check_path

        check_path(checkpoint)
    if lm is None:
        from smc.loading import load_lm

        lm = load_lm()
    check_memory(int(particles), len(lm.vocab))
    ids = prompt_ids_for(lm, prompt, chat, max_tokens)
    lookahead = check_lookahead(lookahead, constraint, method)
    token_sampler = make_sampler(sampler, lm, target_potential(constraint, lm, lookahead), ids)
    model = ConstrainedGeneration(token_sampler, max_tokens, finish_share)
    if method != "smc":
        result = await run_search(model, method, particles, n_beam, seed)
        result.stats.update(prompt_tokens=len(ids), max_tokens=max_tokens)
        result.constraint = constraint
        return result
    result = await smc(
        model,
        particles,
        ess_threshold=ess_threshold,
        resampling=resampling,
        seed=seed,
        critic=critic,
        progress=progress,
        progress_total=max_tokens + 1,
        islands=default_islands(particles) if islands is None else islands,
        **checkpoint_args(checkpoint, lm, ids, constraint, sampler, max_tokens, lookahead),
    )
    result.stats.update(prompt_tokens=len(ids), sampler=sampler, max_tokens=max_tokens)
    result.constraint = constraint  # for Result.parsed
    return result


def checkpoint_args(
    checkpoint: str | os.PathLike | None, lm: LMBackend, ids: list[int], constraint: Potential | None,
    sampler: str, max_tokens: int, lookahead: float = 0.0,
) -> dict[str, Any]:
    """The keyword arguments that make ``smc`` checkpoint a generate run (none without a
    checkpoint): what ``smc.resume`` needs besides the particles to rebuild the program."""
    if checkpoint is None:
        return {}
    info = dict(prompt_ids=ids, constraint=constraint, sampler=sampler, max_tokens=max_tokens, lm=lm,
                lookahead=lookahead)
    return dict(checkpoint=checkpoint, _checkpoint_info=info)


def generate(
    prompt: Prompt,
    constraint: Potential | None = None,
    *,
    lm: LMBackend | None = None,
    particles: int = 16,
    max_tokens: int = 32,
    seed: int | None = 0,
    sampler: str = "awrs",
    ess_threshold: float = 0.5,
    resampling: str = "multinomial",
    chat: bool | None = None,
    progress: bool | None = None,
    critic: Critic | None = None,
    checkpoint: str | os.PathLike | None = None,
    method: str = "smc",
    n_beam: int | None = None,
    islands: int | None = None,
    finish_share: float = 0.0,
    lookahead: float | None = None,
) -> Result:
    """Sample from p(x | prompt) * constraint(x) by SMC; x has at most ``max_tokens`` tokens.

    Args:
        prompt: text, a list of chat messages (``{"role", "content"}`` dicts: system prompt,
            few-shot turns, the user's question; a last assistant message is continued), or
            token ids (used as given). Text and messages go through the LM's chat template
            (see ``chat``); messages need an LM that has one.
        constraint: a byte-level potential (Regex, Grammar, JSONSchema, Predicate, ...; lifted
            to the LM's tokens automatically), a token-level Potential over the LM's vocabulary,
            or None (unconstrained).
        lm: the LM backend (default: ``smc.load_lm()``, the embedded model).
        particles: N, 1 <= N <= smc.engine.MAX_PARTICLES (100,000); a run whose first step
            would need more memory than is available is refused before any work.
        max_tokens: at most this many generated tokens; EOS is forced after them.
        seed: a non-negative integer seeding all randomness (the same seed gives the same
            result), or None for fresh entropy.
        sampler: "awrs" (default), "direct", or "masking" (improper baseline).
        ess_threshold: resample when ESS < ess_threshold * N (0: never, importance sampling).
        resampling: "multinomial", "stratified", "systematic" or "residual".
        chat: for a text prompt, apply the LM's chat template (True) or not (False); None
            (default) applies it when the LM has one (``lm.is_chat``). The same default holds
            for ``LMContext``, ``LMPotential`` and the samplers (``smc.backends.prompts``).
        progress: tqdm bar; None shows it only for runs longer than 2 s, False never.
        critic: optional log twist psi(particle) to guide resampling (final weights untwisted).
        checkpoint: a file the run's state is written to after every step (atomically);
            ``smc.resume(checkpoint, lm=lm)`` continues an interrupted run with exactly the
            result of an uninterrupted one (docs/checkpoint.md).
        method: "smc" (default); "beam": deterministic beam search keeping ``particles`` beams,
            returning the highest-mass constrained completions it reaches with their exact log
            masses (``smc.beam``); "top_k": the exact ``particles`` highest-mass completions
            by best-first search (``smc.top_k``; Boolean constraints or weights <= 1);
            "steer": without-replacement steering with ``particles``
            particles and ``n_beam`` children per particle (``smc.steer``; its log weights sum to
            Ẑ). Both use the exact next-token target (the ``sampler`` is not used), ignore
            ``ess_threshold``, ``resampling`` and ``islands``, and take no ``critic``.
        n_beam: children kept per particle by ``method="steer"`` (default 2).
        islands: K, a divisor of ``particles``: K independent SMC islands, each resampled
            within itself, so one runaway lineage cannot take over the whole population
            (smc.engine); 1 is plain SMC. Default (None): ``default_islands(particles)``, 4
            islands from 16 particles on (docs/quality.md has the measurements).
        finish_share: s in [0, 1): at every step where the text could end, a finished copy
            carrying s of the target's EOS mass there is banked into the Result, and a drawn
            EOS carries the rest (``ConstrainedGeneration``; same target, Ẑ unbiased). With
            s > 0 every complete text the particles pass is a sample, which finds answers the
            model is unlikely to end on; the Result then holds more than N samples. Default 0.
        lookahead: rate > 0 steers the proposal toward texts that are short to complete
            (``potentials.lookahead``: a token pays ``rate`` nats per byte it writes off a short
            completion of the text, and per byte that completion grows), the twist divided out
            at every finish (same target, Ẑ unbiased). It acts where the constraint knows
            completions: today a Regex on the ``regex`` fallback (backreferences,
            conditionals), where the model would otherwise write a copy only by chance; for
            other constraints the run is the plain one. Default (None): 1.0
            (``smc.model.DEFAULT_LOOKAHEAD``) for an SMC run with a byte-level constraint,
            else 0; 0 turns it off.

    Returns a Result. An unsatisfiable constraint gives a Result with no finished samples and
    log_ml = -inf. Bad arguments raise ValueError/TypeError before any work.

    Inside a running event loop (e.g. Jupyter) the run happens on a worker thread; in async
    code prefer ``await agenerate(...)``.
    """
    kwargs = dict(
        lm=lm, particles=particles, max_tokens=max_tokens, seed=seed, sampler=sampler,
        ess_threshold=ess_threshold, resampling=resampling, chat=chat, progress=progress,
        critic=critic, checkpoint=checkpoint, method=method, n_beam=n_beam, islands=islands,
        finish_share=finish_share, lookahead=lookahead,
    )
    check_generate_args(
        prompt, particles, max_tokens, ess_threshold, sampler, resampling, seed, lm,
        chat=chat, progress=progress, critic=critic, islands=islands, finish_share=finish_share,
        method=method, lookahead=lookahead, constraint=constraint,
    )
    check_method(method, n_beam, critic)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(agenerate(prompt, constraint, **kwargs))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, agenerate(prompt, constraint, **kwargs)).result()
