"""Neutral helpers that every layer may use: log-space arithmetic, resampling indices, run
counters, concurrency and the library's exception root.

Nothing here imports anything else of the project (tests/test_layers.py checks it), so a lower
layer (backends, potentials, samplers) can use these without reaching up into the engine.
"""
