"""Every default of a generation, defined once, with the measurement that chose it.

``smc.Request`` (and through it ``generate``, the CLI, checkpoints, the server and the batch
runner) and ``smc.smc`` read these names; nothing else writes the values again.
"""

from __future__ import annotations

#: N. At 16, SMC is ahead of masking on the 30 JSON tasks (+0.07 [+0.03, +0.10] field accuracy,
#: benchmarks/bench_quality.py); at 4 the two tie (docs/quality.md)
PARTICLES = 16

#: tokens generated at most before EOS is forced: room for a short answer (a phone number, a
#: 3-field JSON object in compact form); longer outputs set their own budget
MAX_TOKENS = 32

#: every run is reproducible unless asked otherwise
SEED = 0

#: AWRS: an unbiased weight from a few constraint checks per step, against the direct
#: sampler's full vocabulary evaluation (benchmarks/bench_smc.py)
SAMPLER = "awrs"

#: resample when ESS < 0.5 N, the usual choice in the SMC literature; on the 30 JSON tasks x 2
#: seeds at N = 16, 0.25 gave 0.69 [0.64, 0.73] accuracy, no better (benchmarks/bench_quality.py)
ESS_THRESHOLD = 0.5

#: one uniform for all the offspring counts, the least resampling noise of smc.core.resampling's
#: schemes (every one keeps Ẑ unbiased): against multinomial on the 30 JSON tasks and the Ada
#: task (80 paired runs each), log Ẑ +0.46 [+0.01, +0.97] higher on average at N = 8 and +0.27
#: [-0.05, +0.67] at N = 16, accuracy level (-0.01, +0.01); residual lost accuracy on the JSON
#: tasks, -0.05 [-0.10, -0.00] at N = 8 (docs/quality.md, "The resampling scheme")
RESAMPLING = "systematic"

#: independent islands of at least ISLAND_SIZE particles, at most ISLANDS of them (``islands_for``:
#: 2 at N = 16, 4 from 32), one population below 16. Islands keep a runaway lineage inside one:
#: on 30 JSON tasks x 2 seeds at N = 16, 4 islands finished all 60 runs (one population: 58).
#: Islands of 4 were smaller than they need be: at N = 16 with begun literals protected, 2
#: islands of 8 against the 4 of 4 before (benchmarks/RESULTS.md, "Two islands of 8 at N = 16"):
#: Ada (40 seeds) 0.87 -> 0.92, +0.06 [+0.01, +0.10] over masking; the 30 JSON tasks (120 runs)
#: 0.68 -> 0.70, +0.05 [+0.02, +0.08] over masking; one population there: Ada 0.92, JSON 0.69
#: with one collapsed run. At the current engine, over twenty seeds of the JSON tasks at N = 16,
#: 32 and 64 (RESULTS, "One population over twenty seeds"), one population is level in accuracy
#: at each, with a spread of log Ẑ over seeds 29-38% wider, a lower paired mean log Ẑ at N = 32
#: (-0.11 [-0.16, -0.05]) and, at N = 16, a median below genlm-control's (-0.13 [-0.22, -0.00])
ISLANDS = 4
ISLAND_SIZE = 8

#: share of the EOS mass banked wherever the text could end: off by default (it adds samples
#: and a completion check per particle and step)
FINISH_SHARE = 0.0

#: lookahead rate for a byte-level constraint that knows completions: on genlm-eval's patterns
#: it took the copy patterns from 0 of 10 runs with a sample to 9-10 of 10 (benchmarks/RESULTS.md)
LOOKAHEAD = 1.0

#: per-byte rate of the budget twist (smc.engine.critics.BudgetCritic) for an SMC run under a
#: JSON Schema: on the Ada task at N = 8 in one population it took accuracy from 0.59 to 0.88 and
#: runs with no finished sample from 5 of 18 to 0 of 20, at N = 64 in one population from 0.70 to
#: 0.87 with no collapsed run; on the 30 JSON tasks at N = 8 accuracy -0.01 [-0.08, +0.06];
#: c = 0.25 and 1.0 gave 0.82 and 0.81 on Ada at N = 8 (docs/quality.md, benchmarks/RESULTS.md
#: "The grid"). With the 4 islands of N = 16 it took JSONSchemaBench's 43 schemas from 15 valid
#: outputs to 22 (7 schemas gained, none lost), accuracy level on the JSON and Ada tasks
#: (docs/quality.md, "The twist with islands")
PER_BYTE = 0.5

#: the budget twist protects a particle inside a literal it has begun from being dropped by
#: resampling (smc.engine.critics.BudgetCritic(hold_literals=True)) in runs of fewer particles
#: than this. Paired on the same seeds (benchmarks/RESULTS.md, "Never dropping a particle
#: inside a begun literal" and "Two islands of 8 at N = 16"): Ada at N = 4 (40 seeds) accuracy
#: 0.76 -> 0.87, collapsed runs 3 -> 0; Ada at N = 8 0.88 -> 0.94 (+0.08 [+0.03, +0.13] over
#: masking; 2 runs collapsed, none before); Ada at N = 16 in 2 islands 0.90 -> 0.92; the 30 JSON
#: tasks at N = 4 and 8 +0.01 and -0.01, log Ẑ level. At N = 32 (4 islands of 8) it moved
#: nothing beyond noise (Ada -0.03 [-0.11, +0.04], 20 seeds; JSON -0.01 [-0.04, +0.01], 60 runs)
HOLD_LITERALS_BELOW = 32

#: an SMC run under a JSON Schema draws its ancestors by the weights to this power
#: (``smc.engine.smc(resampling_power=...)``; the children carry the rest of the lead), so that
#: a lineage ahead only because its keys are still to come does not take the population in one
#: resampling. Paired on the same seeds against power 1 (benchmarks/RESULTS.md, "Resampling by
#: the weights to a power"), the 30 JSON tasks over 20 seeds: at 0.25 log Ẑ +0.49 [+0.34, +0.66]
#: at N = 4 and +0.67 [+0.51, +0.83] at N = 8 (at 0.5: +0.46 and +0.48; at 0.75, seeds 0-9 at
#: N = 8: +0.32 against 0.5's +0.42 and 0.25's +0.51 there), accuracy level (+0.00, +0.01),
#: collapsed runs 6 -> 4 and 4 -> 2; Ada level (N = 8, 80 seeds: accuracy +0.01 [-0.03, +0.05];
#: N = 4, 40 seeds: -0.00), where not resampling at all lost 0.09 of accuracy at N = 8. In
#: islands (RESULTS "The power at N = 16" and "The power at N = 32 and 64"): the spread of log
#: Ẑ over seeds on the JSON tasks fell by 38-46% at N = 16, 32 and 64 (0.89 -> 0.48, 0.58 ->
#: 0.36, 0.49 -> 0.29), log Ẑ +0.29 [+0.12, +0.48] (seeds 0-7), +0.19 [+0.09, +0.29] (seeds
#: 0-9) and +0.17 [+0.06, +0.29] (seeds 0-4), accuracy -0.01 at each; Ada -0.01 [-0.06, +0.03]
#: (80 seeds), -0.00 at N = 32 and 64 (40 seeds), still above masking; 6% more wall
#: time at N = 64 on the CPU (more resamplings)
RESAMPLING_POWER = 0.25

#: the search method of a generation
METHOD = "smc"

#: children kept per particle by method="steer"
N_BEAM = 2

#: T of the target's per-step tempered LM softmax(logits / T): 1 is the model itself
TEMPERATURE = 1.0

#: nucleus mass of the target's per-step truncation to the top-p tokens: 1 keeps every token
TOP_P = 1.0

#: most expansions the exact top-1 search (temperature 0 on the server) may make before the
#: answer falls back to beam search: one LM call each, about 4 per generated token of budget
#: at the default max_tokens
TOP1_MAX_EXPANSIONS = 128

#: requests in flight at once in one process (the batch runner, ``generate_many``): their
#: population steps share forward passes; on the embedded model on CPU, 16 requests took 94
#: forward passes one at a time, 29 at 4 and 9 at 16, and 2.2-2.4x (4) to 3.2-10x (16) the
#: requests per minute (benchmarks/RESULTS.md, "Batch runner"); 8 keeps the memory of the
#: requests in flight modest for large particle counts
BATCH_CONCURRENCY = 8

#: beams of the fallback when the exact top-1 search exceeds its budget
TOP1_BEAM_WIDTH = 4

#: steps a run of a program takes at most (``smc.smc``, ``smc.beam``, ``smc.steer``): a program
#: whose step never calls finish() would otherwise run until killed (an LMContext program wrote
#: 2,279 tokens in 570 s on the embedded model). Unfinished particles then count as
#: weight 0 and the Result says so (stats["max_steps_reached"]). ``generate``'s own program ends
#: by max_tokens + 1 steps and passes that bound instead, so this never cuts a generation.
MAX_STEPS = 1_000

#: particles method="top_k" expands at most before it raises SearchBudgetExceeded. An expansion
#: is one forward pass and one full next-token weight vector: ~68 ms on the embedded model on CPU
#: (7,183 passes in 488 s for Regex("[0-9]+"), k=3, max_tokens=6), so 256 keeps a top_k
#: call under ~20 s there while leaving room for the answers of short outputs (each answer of T
#: tokens needs at least T + 1 expansions)
MAX_EXPANSIONS = 256


def hold_literals_for(particles: int) -> bool:
    """Whether the budget twist of an SMC run of ``particles`` protects begun literals:
    below HOLD_LITERALS_BELOW."""
    return particles < HOLD_LITERALS_BELOW


def islands_for(particles: int) -> int:
    """The islands of an SMC run when none are given: max{K <= ISLANDS : K | N, N / K >=
    ISLAND_SIZE}, else 1 (one population)."""
    return max((k for k in range(2, ISLANDS + 1) if particles % k == 0 and particles // k >= ISLAND_SIZE),
               default=1)
