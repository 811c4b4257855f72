"""``Request``: one validated description of a generation.

A Request holds the prompt, the constraint and every setting of a run; it is checked once,
where it is built, and never again. ``smc.generate``, the CLI, checkpoints, the HTTP server and
the batch runner all build and read this one value. Defaults come from ``smc.core.defaults``
and are resolved when the Request is built (``RESOLVED``: islands, lookahead, per_byte,
resampling_power, n_beam, max_expansions), so a Request says
exactly what will run.

JSON form (``Request.from_json`` / ``to_json``): the prompt (text, chat messages or token ids),
the constraint as one of ``{"regex": R}``, ``{"grammar": LARK}``, ``{"json_schema": SCHEMA}``,
``{"json_object": true}`` (any JSON object), ``{"choice": [S, ...]}``, ``{"segments": [...]}``,
``{"structural_tag": {...}}``, ``{"tools": {...}}``, ``{"reasoning": {...}}`` (see
``CONSTRAINT_KINDS`` and potentials.segments.forms) or null, and every JSON-valued setting.
Python-only parts (a ``Predicate`` or any other potential object, a pydantic class, products, a
critic) attach in Python; ``to_json`` lists them under ``"python_only"`` instead of writing them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from potentials.json import JSONSchema
from potentials.segments.forms import constraint_part, reasoning_from_json, tools_from_json
from potentials.base import BytePotential, Potential
from samplers import SAMPLERS
from smc.backends.prompts import Prompt, prompt_kind, tool_functions
from smc.backends.tempered import check_sampling
from smc.core import defaults
from smc.core.errors import InvalidArgument, InvalidArgumentType
from smc.engine.checkpoint import check_path
from smc.engine.loop import MAX_PARTICLES, Critic, check_smc_args
from smc.engine.search import CRITIC_METHODS, METHODS

#: "method='smc' or 'beam'": the methods a critic acts in, as the errors name them
_CRITIC_METHODS_TEXT = "method=" + " or ".join(repr(m) for m in CRITIC_METHODS)

#: largest search budget accepted (max_expansions): a bound on what a request may ask for, far
#: beyond any run that ends in reasonable time
MAX_BUDGET = 10**9

#: the keys of a constraint's JSON form, each naming what its value is
CONSTRAINT_KINDS = {
    "regex": "a regular expression (Python `re`/`regex` syntax)",
    "grammar": "a Lark grammar",
    "json_schema": "a JSON Schema (an object, or its JSON text); beside it, \"strict\": true closes "
                   "its open objects (potentials.json.strict)",
    "json_object": "true: any JSON object",
    "choice": "a list of strings, one of which is the output",
    "segments": "a list of segments in sequence: {\"text\": S}, {\"free_text\": {\"stop\": S, "
                "\"max_bytes\": B}}, or a constraint {\"regex\"|\"grammar\"|\"json_schema\"|\"choice\": V}",
    "structural_tag": "a structural tag (vLLM's response_format type structural_tag, either form: "
                      "{\"structures\", \"triggers\"} or {\"format\"})",
    "tools": "{\"tools\": OpenAI tools, \"tool_choice\": \"auto\"|\"required\"|\"none\"|{...}, "
             "\"parallel_tool_calls\": bool}: free text with <tool_call> calls",
    "reasoning": "{\"answer\": a constraint or null, \"max_bytes\": B}: <think>...</think> then the answer",
}


def _integer(value: Any, name: str, low: int, high: int | None = None) -> int:
    """``value`` as an int in [low, high]; InvalidArgument naming ``name`` otherwise (a value
    of another type too, as ``smc.smc`` answers for ``particles``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{name} must be an integer >= {low}, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high:,}]" if high is not None else f">= {low}"
        raise InvalidArgument(f"{name} must be an integer {bound}, got {value!r}")
    return int(value)


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidArgumentType(f"{name} must be a number, got {value!r}")
    return float(value)


def optional_bool(value: Any, name: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise InvalidArgumentType(f"{name} must be True, False or None, got {value!r}")
    return value


def constraint_from_json(spec: Any) -> Potential | None:
    """The potential a constraint's JSON form describes (see ``CONSTRAINT_KINDS``); None for
    null. InvalidArgument naming the problem for any other value, an unknown key, or two keys."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise InvalidArgumentType(
            f"constraint must be a Potential (e.g. potentials.Regex), its JSON form (an object "
            f"with one of the keys {', '.join(CONSTRAINT_KINDS)}) or None; got {type(spec).__name__}"
        )
    # "strict" is an option of json_schema (potentials.segments.forms.constraint_part), not a kind
    kinds = [k for k in spec if k != "strict"]
    unknown = [k for k in kinds if k not in CONSTRAINT_KINDS]
    if unknown:
        raise InvalidArgument(
            f"unknown constraint kind {unknown[0]!r}; the kinds are {', '.join(CONSTRAINT_KINDS)}"
        )
    if len(kinds) != 1:
        raise InvalidArgument(
            f"a constraint has exactly one kind, got {len(kinds)}: {', '.join(kinds) or 'none'}"
        )
    kind, value = kinds[0], spec[kinds[0]]
    if "strict" in spec and kind != "json_schema":
        raise InvalidArgument(f"constraint.strict applies to a json_schema constraint, not {kind}")
    if kind == "tools":  # tool_choice "none" is no constraint here, where null is one
        return tools_from_json(value)
    if kind == "reasoning":
        return reasoning_from_json(value)
    return constraint_part(spec, "constraint")


@dataclass(frozen=True)
class Request:
    """One generation: prompt, constraint and every setting, validated when built.

    Attributes:
        prompt: text, a list of ``{"role", "content"}`` chat messages (a last assistant message
            is continued), or token ids (used as given). Text and messages go through the LM's
            chat template by the one prompt rule (``smc.backends.prompts``; see ``chat``).
        constraint: a byte-level potential (Regex, Grammar, JSONSchema, Predicate, ...; lifted
            to the LM's tokens), a token-level Potential over the LM's vocabulary, a constraint's
            JSON form (``constraint_from_json``), or None (unconstrained).
        model: the model the request is for, when it names one (the server and the batch runner
            check it against the model they serve); ``generate`` ignores it.
        particles: N, 1 <= N <= smc.engine.MAX_PARTICLES.
        max_tokens: at most this many generated tokens; EOS is forced after them.
        seed: a non-negative integer seeding all randomness, or None for fresh entropy.
        sampler: "awrs", "direct" or "masking" (the improper baseline).
        sampler_options: the sampler's own options (AWRS: max_checks, max_draws,
            early_fallback, early_fallback_permille; see its class).
        ess_threshold: resample when ESS < ess_threshold * N (0: never, importance sampling).
        resampling: "multinomial", "stratified", "systematic" or "residual".
        resampling_power: a in (0, 1]: ancestors are drawn by the weights to the power a, the
            children carrying the rest (``smc.engine.smc``); None:
            ``defaults.RESAMPLING_POWER`` for an SMC run under a JSONSchema, else 1
            (docs/quality.md).
        islands: K, a divisor of N: K independent SMC islands (None: ``defaults.islands_for``).
        finish_share: s in [0, 1): bank s of the EOS mass wherever the text could end.
        lookahead: rate >= 0 of the lookahead twist (None: ``defaults.LOOKAHEAD`` for an SMC
            run with a byte-level constraint, else 0).
        per_byte: nats per byte still to write of the budget twist that steers resampling
            (``smc.engine.critics.BudgetCritic``; removed from the final weights, so the target
            is unchanged), or ranks the beams of method="beam" (docs/beam.md); None:
            ``defaults.PER_BYTE`` for an SMC or beam run under a JSONSchema, else 0
            (docs/quality.md).
        method: "smc", "beam", "top_k" or "steer" (docs/beam.md).
        n_beam: children per particle of method="steer" (None: ``defaults.N_BEAM``).
        max_expansions: most particles method="top_k" expands before it raises
            ``SearchBudgetExceeded`` (None: ``defaults.MAX_EXPANSIONS``; only for top_k).
        critic: a log twist psi(particle) guiding resampling, or ranking the beams of
            method="beam" (Python only).
        checkpoint: a file the run's state is written to after every step (Python and CLI only).
        chat: apply the LM's chat template to a text prompt (None: when the LM has one).
        tools: OpenAI function tools the prompt states (the chat template's tool section, else
            a system message: ``smc.backends.prompts``), or None. They inform the model only;
            a constraint such as ``{"tools": {...}}`` makes its calls well-formed.
        temperature: T > 0; the target's LM is the per-step tempered softmax(logits / T)
            (``smc.backends.tempered``; 1: the model itself).
        top_p: P in (0, 1]; the target's LM is truncated per step to the smallest set of most
            probable tokens (after tempering) of mass >= P, renormalized (1: no truncation).

    Build one with ``Request(prompt, constraint, particles=..., ...)`` or
    ``Request.from_json(obj)``; change one with ``dataclasses.replace`` (validated again).
    """

    prompt: Prompt
    constraint: Potential | Mapping[str, Any] | None = None
    model: str | None = None
    particles: int = defaults.PARTICLES
    max_tokens: int = defaults.MAX_TOKENS
    seed: int | None = defaults.SEED
    sampler: str = defaults.SAMPLER
    sampler_options: Mapping[str, Any] = field(default_factory=dict)
    ess_threshold: float = defaults.ESS_THRESHOLD
    resampling: str = defaults.RESAMPLING
    resampling_power: float | None = None
    islands: int | None = None
    finish_share: float = defaults.FINISH_SHARE
    lookahead: float | None = None
    per_byte: float | None = None
    method: str = defaults.METHOD
    n_beam: int | None = None
    max_expansions: int | None = None
    critic: Critic | None = field(default=None, compare=False)
    checkpoint: str | os.PathLike | None = None
    chat: bool | None = None
    temperature: float = defaults.TEMPERATURE
    top_p: float = defaults.TOP_P
    tools: list[Mapping[str, Any]] | None = None
    #: the constraint's JSON form when it was given as one (read by ``to_json``)
    constraint_json: Mapping[str, Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__.__get__(self)
        #: the fields left to their defaults (None), resolved below; ``replace`` resolves them again
        set_("defaulted", frozenset(k for k in RESOLVED if getattr(self, k) is None))
        prompt_kind(self.prompt)
        constraint = self.constraint
        if constraint is not None and not isinstance(constraint, Potential):
            spec = constraint
            if isinstance(constraint, Mapping):
                try:
                    spec = json.loads(json.dumps(constraint))
                except ValueError as e:  # a dict that holds itself
                    raise InvalidArgument(f"the constraint is not JSON: {e}") from None
                except TypeError as e:  # a value JSON has no form for
                    raise InvalidArgumentType(f"the constraint is not JSON: {e}") from None
            constraint = constraint_from_json(spec)
            set_("constraint", constraint)
            set_("constraint_json", spec)
        if self.model is not None and not isinstance(self.model, str):
            raise InvalidArgumentType(f"model must be a string (a model name), got {self.model!r}")
        if not isinstance(self.method, str) or self.method not in METHODS:
            raise InvalidArgument(f"method must be one of {', '.join(map(repr, METHODS))}, got {self.method!r}")
        set_("max_tokens", _integer(self.max_tokens, "max_tokens", 1))
        islands = self.islands
        if islands is None:
            islands = defaults.islands_for(int(self.particles)) if self.method == "smc" and _is_int(self.particles) else 1
        elif self.method != "smc" and islands != 1:
            raise InvalidArgument(f"islands is for method='smc' runs, not method={self.method!r}")
        power = 1.0 if self.resampling_power is None else self.resampling_power
        _checked(check_smc_args, self.particles, self.ess_threshold, self.resampling, self.seed, islands, power)
        set_("particles", int(self.particles))
        set_("islands", int(islands))
        set_("ess_threshold", float(self.ess_threshold))
        set_("seed", None if self.seed is None else int(self.seed))
        if not isinstance(self.sampler, str):
            raise InvalidArgumentType(f"sampler must be a string, one of {', '.join(SAMPLERS)}; got {self.sampler!r}")
        if self.sampler not in SAMPLERS:
            raise InvalidArgument(f"unknown sampler {self.sampler!r}; choose one of {', '.join(SAMPLERS)}")
        if not isinstance(self.sampler_options, Mapping):
            raise InvalidArgumentType(f"sampler_options must be an object, got {self.sampler_options!r}")
        set_("sampler_options", _checked(SAMPLERS[self.sampler].check_options, dict(self.sampler_options)))
        if self.n_beam is not None:
            set_("n_beam", _integer(self.n_beam, "n_beam", 1, MAX_PARTICLES))
            if self.method != "steer":
                raise InvalidArgument(f"n_beam is only used by method='steer', not method={self.method!r}")
        elif self.method == "steer":
            set_("n_beam", defaults.N_BEAM)
        if self.max_expansions is not None:
            set_("max_expansions", _integer(self.max_expansions, "max_expansions", 1, MAX_BUDGET))
            if self.method != "top_k":
                raise InvalidArgument(f"max_expansions is only used by method='top_k', not method={self.method!r}")
        elif self.method == "top_k":
            set_("max_expansions", defaults.MAX_EXPANSIONS)
        if self.critic is not None:
            if not callable(self.critic):
                raise InvalidArgumentType(f"critic must be a function of a particle (or None), got {self.critic!r}")
            if self.method not in CRITIC_METHODS:
                raise InvalidArgument(f"critic is only used by {_CRITIC_METHODS_TEXT}, not method={self.method!r}")
        share = _number(self.finish_share, "finish_share")
        if not 0.0 <= share < 1.0:  # NaN included
            raise InvalidArgument(f"finish_share must be in [0, 1) (the share of EOS mass banked each step), got {share!r}")
        if share > 0 and self.method != "smc":
            raise InvalidArgument(f"finish_share is for method='smc' runs, not method={self.method!r}")
        set_("finish_share", share)
        set_("lookahead", self._lookahead())
        set_("per_byte", self._per_byte())
        set_("resampling_power", self._resampling_power())
        if self.checkpoint is not None:
            if self.method != "smc":
                raise InvalidArgument(f"checkpoint is for method='smc' runs, not method={self.method!r}")
            _checked(check_path, self.checkpoint)
        set_("chat", optional_bool(self.chat, "chat"))
        if self.tools is not None:
            try:  # a copy of its JSON form: the Request holds no caller's mutable list
                set_("tools", json.loads(json.dumps(self.tools)))
            except (TypeError, ValueError) as e:
                raise InvalidArgumentType(f"tools is not JSON: {e}") from None
            _checked(tool_functions, self.tools)
            if prompt_kind(self.prompt) == "ids" or self.chat is False:
                raise InvalidArgument("tools are stated through the chat template: they need a text "
                                      "prompt (with chat not False) or chat messages")
        temperature, top_p = _checked(check_sampling, self.temperature, self.top_p)
        set_("temperature", temperature)
        set_("top_p", top_p)

    def _lookahead(self) -> float:
        """The run's lookahead rate: ``defaults.LOOKAHEAD`` when not given for an SMC run with a
        byte-level constraint other than a JSONSchema (else 0: JSON's completions steer the
        budget twist, ``_per_byte``, and at the patterns' rate it cost accuracy on the Ada task,
        benchmarks/RESULTS.md); a given rate is a finite number >= 0, and > 0 only for an SMC
        run with a byte-level constraint (the twist reads its byte states)."""
        byte_level = isinstance(self.constraint, BytePotential)
        if self.lookahead is None:
            wanted = self.method == "smc" and byte_level and not isinstance(self.constraint, JSONSchema)
            return defaults.LOOKAHEAD if wanted else 0.0
        rate = _number(self.lookahead, "lookahead")
        if not (math.isfinite(rate) and rate >= 0):
            raise InvalidArgument(f"lookahead must be a finite number >= 0 (nats per byte of detour), got {rate!r}")
        if rate > 0 and self.method != "smc":
            raise InvalidArgument(f"lookahead is for method='smc' runs, not method={self.method!r}")
        if rate > 0 and not byte_level:
            what = type(self.constraint).__name__ if self.constraint is not None else None
            raise InvalidArgument(f"lookahead needs a byte-level constraint (Regex, Grammar, JSONSchema, ...), got {what}")
        return rate

    def _per_byte(self) -> float:
        """The per-byte rate of the run's budget twist (``budget_twist``): when not given,
        ``defaults.PER_BYTE`` for a run under a JSONSchema with no critic of its own, SMC with an
        SMC sampler (not masking) or beam search (where it ranks the beams), else 0; a given
        rate is a finite number >= 0, and > 0 only for an SMC or beam run with a byte-level
        constraint and no critic (the twist is a critic)."""
        if self.per_byte is None:
            default = (self.critic is None and isinstance(self.constraint, JSONSchema)
                       and (self.method == "beam" or self._smc_sampling()))
            return defaults.PER_BYTE if default else 0.0
        rate = _number(self.per_byte, "per_byte")
        if not (math.isfinite(rate) and rate >= 0):
            raise InvalidArgument(f"per_byte must be a finite number >= 0 (nats per byte still to write), got {rate!r}")
        if rate > 0 and self.method not in CRITIC_METHODS:
            raise InvalidArgument(f"per_byte is for {_CRITIC_METHODS_TEXT} runs, not method={self.method!r}")
        if rate > 0 and not isinstance(self.constraint, BytePotential):
            what = type(self.constraint).__name__ if self.constraint is not None else None
            raise InvalidArgument(f"per_byte needs a byte-level constraint (Regex, Grammar, JSONSchema, ...), got {what}")
        if rate > 0 and self.critic is not None:
            raise InvalidArgument("per_byte sets the budget twist, which is a critic: give per_byte or critic, not both")
        return rate

    def _smc_sampling(self) -> bool:
        """An SMC run with an SMC sampler (masking is an improper baseline, not steered)."""
        return self.method == "smc" and self.sampler != "masking"

    def _resampling_power(self) -> float:
        """The run's resampling power: when not given, ``defaults.RESAMPLING_POWER`` for an
        SMC run under a JSONSchema with an SMC sampler (where it was measured), else 1; a given
        power (checked with the other SMC settings) is other than 1 only for an SMC run."""
        if self.resampling_power is None:
            measured = isinstance(self.constraint, JSONSchema) and self._smc_sampling()
            return defaults.RESAMPLING_POWER if measured else 1.0
        power = float(self.resampling_power)
        if power != 1.0 and self.method != "smc":
            raise InvalidArgument(f"resampling_power is for method='smc' runs, not method={self.method!r}")
        return power

    # -- JSON form
    @classmethod
    def from_json(cls, obj: Any) -> "Request":
        """A Request from its JSON form (a dict, or its JSON text); InvalidArgument naming an
        unknown or Python-only field."""
        if isinstance(obj, (str, bytes)):
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as e:
                raise InvalidArgument(f"the request is not valid JSON: {e}") from None
        if not isinstance(obj, Mapping):
            raise InvalidArgumentType(f"a request must be a JSON object, got {type(obj).__name__}")
        if "prompt" not in obj:
            raise InvalidArgument("the request has no prompt")
        for key in obj:
            if key not in JSON_FIELDS:
                why = " (it can only be set in Python)" if key in PYTHON_FIELDS else ""
                raise InvalidArgument(f"unknown request field {key!r}{why}; the fields are {', '.join(JSON_FIELDS)}")
        return cls(**obj)

    def to_json(self) -> dict[str, Any]:
        """The JSON form: every JSON-valued field (defaults resolved), and under
        ``"python_only"`` the names of the parts that only exist in Python."""
        out: dict[str, Any] = {}
        python_only = []
        for name in JSON_FIELDS:
            value = getattr(self, name)
            if name == "constraint":
                if value is not None and self.constraint_json is None:
                    python_only.append("constraint")
                    continue
                value = self.constraint_json
            elif name == "prompt" and not isinstance(value, str):
                value = [dict(m) if isinstance(m, Mapping) else int(m) for m in value]
            elif name == "sampler_options":
                value = dict(value)

            out[name] = value
        if self.critic is not None:
            python_only.append("critic")
        if self.checkpoint is not None:
            out["checkpoint"] = os.fspath(self.checkpoint)
        if python_only:
            out["python_only"] = python_only
        return out

    def replace(self, **changes: Any) -> "Request":
        """A copy with ``changes`` applied, validated again."""
        if "constraint" in changes:
            changes.setdefault("constraint_json", None)
        for name in self.defaulted - changes.keys():
            changes[name] = None
        return dataclasses.replace(self, **changes)


#: the fields whose default depends on others (None: resolved when the Request is built)
RESOLVED = ("islands", "lookahead", "per_byte", "resampling_power", "n_beam", "max_expansions")
#: the fields a request's JSON form may hold
JSON_FIELDS = ("prompt", "constraint", "model", "particles", "max_tokens", "seed", "sampler",
               "sampler_options", "ess_threshold", "resampling", "resampling_power", "islands", "finish_share",
               "lookahead", "per_byte", "method", "n_beam", "max_expansions", "chat", "temperature", "top_p",
               "tools")
#: the fields that exist only in Python (or, for checkpoint, the local CLI)
PYTHON_FIELDS = ("critic", "checkpoint", "constraint_json")
#: every setting besides the prompt and the constraint, as keyword arguments of ``generate``
SETTINGS = tuple(f.name for f in dataclasses.fields(Request) if f.name not in ("prompt", "constraint", "constraint_json"))


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _checked(check: Callable[..., Any], *args: Any) -> Any:
    """``check(*args)``, with its ValueError/TypeError re-raised as the library's own kinds."""
    try:
        return check(*args)
    except (InvalidArgument, InvalidArgumentType):
        raise
    except TypeError as e:
        raise InvalidArgumentType(str(e)) from None
    except ValueError as e:
        raise InvalidArgument(str(e)) from None
