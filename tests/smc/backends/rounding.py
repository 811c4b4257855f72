"""The tolerance of the backend tests that compare two forward passes of the embedded model.

A batched pass (padded rows, cached keys and values, rows moved between steps, LoRA rows routed
by adapter) and a plain unbatched one sum in different orders, so in float32 their log-probs
differ by rounding; a stale, misplaced or misrouted row differs by tenths of a nat or more.
Largest rounding measured, on log-probs near -20 to -25, one or two torch threads: 3.7e-4 (a
ragged population over cached rows, test_stepstates) and 1.9e-4 (base and two adapters in one
pass, test_adapters) on a CPU with AVX-512 and AMX; 1.26e-4 at most on the CPUs before it.
"""

#: largest |log p_batched - log p_plain| a test accepts, in nats: about 2.7 times the largest
#: rounding measured
FLOAT32_ROUNDING = 1e-3
