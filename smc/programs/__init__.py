"""Probabilistic programs: ``Model`` and its primitives, the distributions it samples, the LM
context, the sharing rule for clones, and the built-in constrained-generation program."""
