"""``smc.generate`` / ``smc.agenerate`` / ``smc.resume``: run a ``Request``.

Samples x from pi(x) ∝ p(x, EOS | prompt) phi(x) over |x| <= max_tokens (EOS forced at
max_tokens, see docs/design.md "Length"), where phi is the constraint, with the request's
particles of the built-in ``ConstrainedGeneration`` program, and returns the weighted
particles, the posterior over texts and log Ẑ.

(This module is ``smc.api.generation``, not ``smc.api.generate``: the package ``smc`` exports
a function of that name.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import pickle
from typing import Any, Awaitable, Callable, TypeVar

from potentials.base import Potential
from samplers import make_sampler
from smc.backends.base import LMBackend, check_backend
from smc.backends.loading import load_lm
from smc.backends.prompts import Prompt, encode_prompt
from smc.core import defaults
from smc.core.errors import InvalidArgument, InvalidArgumentType, SearchBudgetExceeded
from smc.engine.checkpoint import (CheckpointError, check_path, lm_description, lm_mismatch, read_header,
                                   type_name, vocab_fingerprint)
from smc.engine.critics import BudgetCritic
from smc.backends.tempered import tempered
from smc.engine.loop import SAME_FILE, Critic, OnStep, aresume_run, smc
from smc.engine.result import Result
from smc.engine.search import run_search
from smc.programs.constrained import ConstrainedGeneration, target_potential
from smc.api.request import SETTINGS, Request, optional_bool

#: bytes per particle and vocabulary entry that one SMC step may hold at once (the float32
#: next-token log-probs, a float64 working copy, the constraint's mask), for the memory check
STEP_BYTES_PER_ENTRY = 16

T = TypeVar("T")


def check_lm(lm: LMBackend) -> None:
    """TypeError unless ``lm`` looks like an LM backend (a name is not one: see ``load_lm``)."""
    if isinstance(lm, (str, bytes, os.PathLike)):
        raise InvalidArgumentType(
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
    """InvalidArgument, before any work, when one step of ``particles`` particles over a
    vocabulary of ``vocab_size`` tokens needs more than the memory available:
    particles * vocab_size * STEP_BYTES_PER_ENTRY > MemAvailable."""
    need = particles * vocab_size * STEP_BYTES_PER_ENTRY
    have = available_memory_bytes()
    if have is not None and need > have:
        most = max(1, have // (vocab_size * STEP_BYTES_PER_ENTRY))
        raise InvalidArgument(
            f"particles={particles} needs about {need / 2**30:.1f} GiB per step for next-token "
            f"distributions over {vocab_size:,} tokens, more than the {have / 2**30:.1f} GiB of "
            f"memory available; use at most about {most:,} particles"
        )


def prompt_ids_for(lm: LMBackend, request: Request) -> list[int]:
    """The prompt's ids by the one prompt rule (``encode_prompt``), checked so that
    len(ids) + max_tokens <= the model's context length."""
    ids = encode_prompt(lm, request.prompt, request.chat, request.tools)
    limit = getattr(lm, "max_context", None)
    if limit is not None and len(ids) + request.max_tokens > limit:
        raise InvalidArgument(
            f"the prompt ({len(ids)} tokens) plus max_tokens ({request.max_tokens}) exceeds the "
            f"model's context of {limit} tokens; lower max_tokens to at most {limit - len(ids)}"
        )
    return ids


def build_program(request: Request, lm: LMBackend, prompt_ids: list[int]) -> ConstrainedGeneration:
    """The request's program: its token sampler (with its options) over the lifted, possibly
    twisted, constraint, on the LM tempered and truncated as the request says
    (``smc.backends.tempered``); the one rule shared by ``agenerate`` and ``resume``."""
    lm = tempered(lm, request.temperature, request.top_p)
    potential = target_potential(request.constraint, lm, request.lookahead)
    sampler = make_sampler(request.sampler, lm, potential, prompt_ids, **request.sampler_options)
    return ConstrainedGeneration(sampler, request.max_tokens, request.finish_share)


def request_critic(request: Request) -> Critic | None:
    """The critic of ``request``'s SMC or beam run: its own, else the budget twist its
    ``per_byte`` names."""
    return request.critic if request.critic is not None else budget_twist(request.per_byte, request.particles)


def budget_twist(per_byte: float, particles: int) -> Critic | None:
    """The critic a request's ``per_byte`` names: ``BudgetCritic(per_byte=per_byte)`` when it
    is > 0, protecting begun literals in runs of few particles
    (``defaults.hold_literals_for``), else None."""
    if per_byte <= 0:
        return None
    return BudgetCritic(per_byte=per_byte, hold_literals=defaults.hold_literals_for(particles))


def as_request(prompt: Prompt | Request, constraint: Any, settings: dict[str, Any]) -> Request:
    """``prompt`` when it is a Request (then no constraint or setting may be given beside it),
    else the Request of these arguments; InvalidArgument(Type) naming a bad one."""
    if isinstance(prompt, Request):
        given = ([] if constraint is None else ["constraint"]) + sorted(settings)
        if given:
            raise InvalidArgument(
                f"give either a Request or its fields, not both: {', '.join(given)} given beside "
                "a Request (use request.replace(...) to change it)")
        return prompt
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise InvalidArgumentType(
            f"unknown setting {unknown[0]!r}; the settings are {', '.join(SETTINGS)}")
    return Request(prompt, constraint, **settings)


def most_probable_settings() -> dict[str, Any]:
    """The settings of temperature 0's first try: the exact best-first search for one answer."""
    return {"method": "top_k", "particles": 1, "max_expansions": defaults.TOP1_MAX_EXPANSIONS}


async def arun_most_probable(request: Request, lm: LMBackend | None = None) -> tuple[Result, str]:
    """argmax_x p(x) phi(x) for ``request``'s prompt and constraint (temperature 0): the exact
    best-first search (``most_probable_settings``: method "top_k", one answer) within
    ``defaults.TOP1_MAX_EXPANSIONS`` expansions, else beam search of width
    ``defaults.TOP1_BEAM_WIDTH`` (a heuristic, ranked by the request's budget twist where it
    has one: ``Request.per_byte``, on by default under a JSONSchema).
    Returns (the Result, "top_k" or "beam": the method that answered)."""
    exact = request.replace(**most_probable_settings())
    try:
        return await arun(exact, lm, False), "top_k"
    except SearchBudgetExceeded:
        beam = exact.replace(method="beam", particles=defaults.TOP1_BEAM_WIDTH, max_expansions=None)
        return await arun(beam, lm, False), "beam"


async def arun(
    request: Request,
    lm: LMBackend | None = None,
    progress: bool | None = None,
    *,
    on_step: OnStep | None = None,
) -> Result:
    """Run ``request`` on ``lm`` (default: the embedded model) and return its Result.

    ``on_step(run)`` is called after every step of an SMC run (``smc.engine.loop.smc``; not
    called by the other methods)."""
    if lm is None:
        lm = load_lm()
    else:
        check_lm(lm)
    check_memory(request.particles, len(lm.vocab))
    ids = prompt_ids_for(lm, request)
    model = build_program(request, lm, ids)
    if request.method != "smc":
        # max_expansions is None for the methods other than top_k, which do not read it
        budget = defaults.MAX_EXPANSIONS if request.max_expansions is None else request.max_expansions
        result = await run_search(model, request.method, request.particles, request.n_beam, request.seed,
                                  budget, critic=request_critic(request))
    else:
        program = None
        if request.checkpoint is not None:
            program = checkpoint_program(request, lm, ids)
        result = await smc(
            model,
            request.particles,
            ess_threshold=request.ess_threshold,
            resampling=request.resampling,
            resampling_power=request.resampling_power,
            seed=request.seed,
            critic=request_critic(request),
            progress=progress,
            progress_total=request.max_tokens + 1,
            islands=request.islands,
            # the program finishes within max_tokens + 1 steps: the bound never cuts it
            max_steps=request.max_tokens + 1,
            checkpoint=request.checkpoint,
            checkpoint_program=program,
            on_step=on_step,
        )
    return described(result, request, len(ids))


def described(result: Result, request: Request, prompt_tokens: int) -> Result:
    """``result`` with what the request adds: its constraint (for ``parsed``) and the prompt's
    length, sampler and budget in ``stats``."""
    stats = dict(result.stats, prompt_tokens=prompt_tokens, max_tokens=request.max_tokens)
    if request.method == "smc":
        stats["sampler"] = request.sampler
    return dataclasses.replace(result, stats=stats, constraint=request.constraint)


def checkpoint_program(request: Request, lm: LMBackend, ids: list[int]) -> tuple[dict[str, Any], bytes]:
    """What a checkpoint of a ``generate`` run stores to rebuild its program: the request's JSON
    form, the prompt's ids and the LM's fingerprint, and the pickled constraint."""
    try:
        constraint = pickle.dumps(request.constraint, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:  # noqa: BLE001
        raise CheckpointError(
            f"cannot checkpoint the run: the constraint ({type(request.constraint).__name__}) "
            f"cannot be pickled: {err}"
        ) from None
    return {"request": request.to_json(), "prompt_ids": ids, "lm_vocab": vocab_fingerprint(lm),
            "lm": lm_description(lm)}, constraint


def rebuild_program(header: dict[str, Any], program_bytes: bytes, lm: LMBackend | None,
                    shared: dict[str, Any]) -> dict[str, Any]:
    """``shared`` plus the token sampler of a checkpointed ``generate`` run, rebuilt from its
    request, ``lm`` and the stored constraint, under the name(s) the particles use for it."""
    program = header["program"]
    if lm is None:
        raise CheckpointError("resume needs the LM the run used: pass lm=... (it is never stored)")
    check_lm(lm)
    why = lm_mismatch(lm, program.get("lm") or {"vocab": program["lm_vocab"]})
    if why is not None:
        raise CheckpointError(f"the LM given is not the run's: {why}; pass the same model")
    try:
        constraint = pickle.loads(program_bytes)
    except Exception as err:  # noqa: BLE001
        raise CheckpointError(f"cannot load the run's constraint: {type(err).__name__}: {err}") from None
    fields = {k: v for k, v in program["request"].items() if k not in ("python_only", "checkpoint", "constraint")}
    # the stored ids are the prompt as encoded, its tools included
    request = Request(**dict(fields, prompt=program["prompt_ids"], constraint=constraint, tools=None))
    sampler = build_program(request, lm, program["prompt_ids"]).sampler
    out = dict(shared)
    for name, rec in header["shared"].items():
        if name not in out and rec["type"] == type_name(sampler):
            out[name] = sampler
    return out


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run the coroutine ``make()`` to its end from synchronous code; inside a running event loop
    (e.g. Jupyter) on a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, make()).result()


async def agenerate(
    prompt: Prompt | Request,
    constraint: Potential | dict[str, Any] | None = None,
    *,
    lm: LMBackend | None = None,
    progress: bool | None = None,
    **settings: Any,
) -> Result:
    """Constrained generation by SMC (async); see ``generate``."""
    request = as_request(prompt, constraint, settings)
    return await arun(request, lm, optional_bool(progress, "progress"))


def generate(
    prompt: Prompt | Request,
    constraint: Potential | dict[str, Any] | None = None,
    *,
    lm: LMBackend | None = None,
    progress: bool | None = None,
    **settings: Any,
) -> Result:
    """Sample from p(x | prompt) * constraint(x) by SMC; x has at most ``max_tokens`` tokens.

    ``generate(prompt, constraint, lm=lm, particles=16, max_tokens=32, ...)`` builds the
    ``smc.Request`` of its arguments (validated once, before any work) and runs it;
    ``generate(request, lm=lm)`` runs a Request built before. The settings are the Request's
    fields (``smc.Request``: particles, max_tokens, seed, sampler, sampler_options,
    ess_threshold, resampling, resampling_power, islands, finish_share, lookahead, per_byte, method,
    n_beam, max_expansions, critic, checkpoint, chat, temperature, top_p; defaults in
    ``smc.core.defaults``).

    Args:
        prompt: text, a list of chat messages, token ids, or a Request.
        constraint: a Potential (Regex, Grammar, JSONSchema, Predicate, ...), a constraint's
            JSON form (``{"regex": ...}``, ``{"json_schema": ...}``, ...), or None.
        lm: the LM backend (default: ``smc.load_lm()``, the embedded model).
        progress: tqdm bar; None shows it only for runs longer than 2 s, False never.
        **settings: the Request's other fields.

    Returns a Result. An unsatisfiable constraint gives a Result with no finished samples and
    log_ml = -inf. Bad arguments raise ``smc.SmcSteerError`` (also a ValueError or TypeError)
    before any work.

    Inside a running event loop (e.g. Jupyter) the run happens on a worker thread; in async
    code prefer ``await agenerate(...)``.
    """
    request = as_request(prompt, constraint, settings)
    progress = optional_bool(progress, "progress")
    if lm is not None:
        check_lm(lm)
    return run_sync(lambda: arun(request, lm, progress))


async def aresume(
    path: str | os.PathLike,
    *,
    lm: LMBackend | None = None,
    shared: dict[str, Any] | None = None,
    critic: Critic | None = None,
    progress: bool | None = None,
    checkpoint: Any = SAME_FILE,
) -> Result:
    """Continue the run checkpointed at ``path`` (async); see ``resume``."""
    # the file the run goes on writing, checked before any work by the one rule for files written
    target = path if checkpoint is SAME_FILE else checkpoint
    if target is not None:
        check_path(target)
    if critic is None:  # a run of a Request had the critic its request names (its budget twist)
        program = read_header(path).get("program")
        if program is not None:  # a checkpoint from before per_byte existed had no such twist
            critic = budget_twist(program["request"].get("per_byte") or 0.0, program["request"]["particles"])
    result, header = await aresume_run(path, lm=lm, shared=shared, critic=critic, progress=progress,
                                       checkpoint=checkpoint, rebuild=rebuild_program)
    program = header["program"]
    if program is None:
        return result
    request = program["request"]
    stats = dict(result.stats, prompt_tokens=len(program["prompt_ids"]), sampler=request["sampler"],
                 max_tokens=request["max_tokens"])
    return dataclasses.replace(result, stats=stats)


def resume(
    path: str | os.PathLike,
    *,
    lm: LMBackend | None = None,
    shared: dict[str, Any] | None = None,
    critic: Critic | None = None,
    progress: bool | None = None,
    checkpoint: Any = SAME_FILE,
) -> Result:
    """Continue an SMC run from its checkpoint and return the Result of the whole run.

    The Result equals, bit for bit, what the uninterrupted run returns with the same seed
    (samples, weights, log_ml, history); ``stats`` counts the LM and sampler work of the resumed
    part only (``steps``, ``tokens`` and ``wall_time_s`` cover the whole run).

    Args:
        path: a file written by ``smc.smc(..., checkpoint=path)`` or
            ``smc.generate(..., checkpoint=path)``.
        lm: the LM backend the run used (never stored in the checkpoint; checked by its
            vocabulary).
        shared: for a Model, ``{path: object}`` for every other shared object the particles
            reach (potentials, samplers, ``Shared`` containers), under the attribute path the
            checkpoint names (``read_header(path)["shared"]`` lists them).
        critic: the critic, if the run had one of its own (a run of ``generate`` gets its
            request's budget twist back by itself).
        progress: tqdm bar, as in ``generate``.
        checkpoint: where to keep writing the run's state (default: ``path``; None: nowhere).

    Raises CheckpointError for a file that is not a checkpoint, is corrupt, or comes from
    another version of smc-steer, and for missing or mismatched shared objects.
    """
    return run_sync(lambda: aresume(path, lm=lm, shared=shared, critic=critic, progress=progress,
                                 checkpoint=checkpoint))
