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

__version__ = "0.1.0"

_EXPORTS = {
    "ToyLM": "smc.backends.toy",
    "AsyncLM": "smc.backends.base",
    "LMBackend": "smc.backends.base",
    "load_lm": "smc.loading",
    "Model": "smc.model",
    "Result": "smc.result",
    "Sample": "smc.result",
    "smc": "smc.engine",
    "generate": "smc.generation",
    "agenerate": "smc.generation",
    "resume": "smc.checkpoint",
    "aresume": "smc.checkpoint",
    "CheckpointError": "smc.checkpoint",
    "beam": "smc.search",
    "steer": "smc.search",
    "top_k": "smc.search",
    "with_eos": "smc.backends.stop",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'smc' has no attribute {name!r}")
