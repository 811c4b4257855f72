"""LM backends: the protocol (base), ToyLM, HF transformers, vLLM."""

from smc.backends.base import AsyncLM, LMBackend
from smc.backends.toy import ToyLM

__all__ = ["AsyncLM", "LMBackend", "ToyLM"]
