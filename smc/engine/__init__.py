"""The engine: the SMC loop (``smc``), checkpoints, deterministic searches and critics, and the
Result they return. It runs programs (smc.programs) and knows nothing of requests."""

from smc.engine.loop import MAX_PARTICLES, Critic, check_smc_args, smc

__all__ = ["MAX_PARTICLES", "Critic", "check_smc_args", "smc"]
