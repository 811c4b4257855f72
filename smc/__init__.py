"""smc-steer: constrained generation from language models by Sequential Monte Carlo.

    import smc
    from potentials import Regex
    lm = smc.load_lm()
    r = smc.generate("prompt", constraint=Regex(r"[0-9]{3}-[0-9]{4}"), lm=lm, particles=16)

Names are imported lazily so that ``import smc`` stays cheap (torch and transformers load only
when a backend is used).
"""

from __future__ import annotations

import importlib
from typing import Any

from smc.core.deprecation import install as install_moved
from smc.core.version import VERSION as __version__

_EXPORTS = {
    "ToyLM": "smc.backends.toy",
    "AsyncLM": "smc.backends.base",
    "LMBackend": "smc.backends.base",
    "load_lm": "smc.backends.loading",
    "with_eos": "smc.backends.stop",
    "SmcSteerError": "smc.core.errors",
    "InvalidArgument": "smc.core.errors",
    "InvalidArgumentType": "smc.core.errors",
    "SearchBudgetExceeded": "smc.core.errors",
    "Model": "smc.programs.model",
    "Sample": "smc.programs.model",
    "Shared": "smc.programs.sharing",
    "LMContext": "smc.programs.context",
    "Categorical": "smc.programs.distributions",
    "Bernoulli": "smc.programs.distributions",
    "Result": "smc.engine.result",
    "smc": "smc.engine.loop",
    "CheckpointError": "smc.engine.checkpoint",
    "beam": "smc.engine.search",
    "steer": "smc.engine.search",
    "top_k": "smc.engine.search",
    "Request": "smc.api.request",
    "generate": "smc.api.generation",
    "agenerate": "smc.api.generation",
    "resume": "smc.api.generation",
    "generate_many": "smc.api.batch",
    "agenerate_many": "smc.api.batch",
    "run_batch": "smc.api.batch",
    "aresume": "smc.api.generation",
}

#: module paths of smc-steer 0.1, importable with a DeprecationWarning: old module ->
#: (the modules its names moved to, {renamed name: "module:new name"})
MOVED = {
    "smc.model": (
        ("smc.programs.model", "smc.programs.sharing", "smc.programs.distributions",
         "smc.programs.context", "smc.programs.constrained", "smc.backends.vocab",
         "smc.backends.base"),
        {"lift": "potentials.lift:as_token_potential", "DEFAULT_LOOKAHEAD": "smc.core.defaults:LOOKAHEAD"},
    ),
    "smc.result": (("smc.engine.result", "smc.programs.model", "smc.core.logmath"), {}),
    "smc.generation": (("smc.api.generation",), {"default_islands": "smc.core.defaults:islands_for"}),
    "smc.checkpoint": (("smc.engine.checkpoint", "smc.api.generation"), {}),
    "smc.search": (("smc.engine.search",), {}),
    "smc.twists": (("smc.engine.critics",), {"BudgetTwist": "smc.engine.critics:BudgetCritic"}),
    "smc.viz": (("smc.engine.viz",), {}),
    "smc.loading": (("smc.backends.loading",), {}),
    "smc.cli": (("smc.api.cli",), {}),
    "smc.counters": (("smc.core.counters",), {}),
    "smc.concurrency": (("smc.core.concurrency",), {}),
    "smc.resampling": (("smc.core.resampling",), {}),
}
install_moved(MOVED)

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'smc' has no attribute {name!r}")
