"""StepStates: a population's key/value states kept between passes give exactly the log-probs of
a plain forward, read nothing from the trie for contexts of the last pass, and move only the
rows that resampling duplicated."""

import asyncio

import numpy as np
import pytest

from smc.backends import stepstates
from smc.backends.stepstates import placement
from tests.smc.backends.rounding import FLOAT32_ROUNDING


@pytest.mark.parametrize(
    "parent",
    [
        [0, 1, 2, 3],  # one step, no resampling: nothing moves
        [0, 0, 1, 3],  # particle 0 duplicated, 2 dropped
        [2, 2, 2, 2],  # one lineage left
        [-1, 0, -1, 1],  # new contexts beside continued ones
        [5, 4, 0, 0, 1],  # parents beyond the new batch
        [0, 1],  # the batch shrank
        [0, 1, 2, 2, 2, 1],  # the batch grew
    ],
)
def test_placement_keeps_first_continuations_in_place_and_moves_no_source(parent):
    B = len(parent)
    order, moves = placement(parent, B)
    assert sorted(order) == list(range(B))
    sources = {s for s, _ in moves}
    destinations = [d for _, d in moves]
    assert not sources & set(destinations) and len(set(destinations)) == len(destinations)
    for b, r in enumerate(order):
        if parent[r] >= 0 and parent[r] != b:
            assert (parent[r], b) in moves
    # the fewest moves: one per continuing row beyond the first of its buffer row (or all of
    # them for a buffer row beyond B)
    kept = {q for q in parent if 0 <= q < B}
    assert len(moves) == sum(q >= 0 for q in parent) - len(kept)


def check(rows, contexts, reference):
    for ids, row in zip(contexts, rows):
        diff = (row.float() - reference(ids)).abs().max().item()
        assert diff <= FLOAT32_ROUNDING, (len(ids), diff)


def population_steps(rng, prompt, particles, steps):
    """Each step's contexts: every particle one token longer, resampled every other step."""
    pop = [list(prompt) for _ in range(particles)]
    out = []
    for t in range(steps):
        out.append([tuple(p) for p in pop])
        pop = [p + [int(rng.integers(17, 49152))] for p in pop]
        if t % 2 == 1:
            pop = [list(pop[a]) for a in np.sort(rng.integers(0, particles, size=particles))]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", ["population", "requests"])
async def test_kept_states_are_exact_and_read_nothing_from_the_trie(make_lm, reference, path):
    lm = make_lm()
    rng = np.random.default_rng(0)
    prompt = rng.integers(17, 49152, size=12).tolist()

    async def step(contexts):
        if path == "population":
            return (await lm.batch_next_token_dists(contexts)).logp
        return await asyncio.gather(*(lm.next_token_logprobs(c) for c in contexts))

    for contexts in population_steps(rng, prompt, particles=6, steps=6):
        check(await step(contexts), contexts, reference)
    # every pass after the prompt's found each past in the kept buffer; resampling duplicated
    # particles, whose copies moved between buffer rows
    assert lm.stats["kv_read_positions"] == 0
    assert lm.stats["kv_moved_positions"] > 0
    assert lm.stats["recomputed_positions"] == 0


@pytest.mark.slow
async def test_new_contexts_ragged_rows_growth_and_reallocation_stay_exact(make_lm, reference, monkeypatch):
    # one free column: a kept buffer is reallocated at every other pass
    monkeypatch.setattr(stepstates, "SLACK_SHARE", 10**9)
    monkeypatch.setattr(stepstates, "SLACK_MIN", 1)
    lm = make_lm()
    rng = np.random.default_rng(1)
    a = tuple(rng.integers(17, 49152, size=9).tolist())
    b = tuple(rng.integers(17, 49152, size=4).tolist())
    passes = [
        [a, b],
        [a + (5,), a + (6,), b + (7,)],  # continuations; the batch grows
        [a + (5, 8), b + (7, 9, 10, 11)],  # ragged: b's row has 3 new tokens, a's 1
        [a + (5, 8, 12), b + (7, 9, 10, 11, 13)],  # a is kept; b had padding: read from the trie
        [a + (5, 8, 12, 14)] + [tuple(rng.integers(17, 49152, size=30).tolist())],  # longer than E
        [a + (5, 8, 12, 14, 15), a + (5, 8, 12, 14, 16), a + (5, 8, 12, 14, 17)],
    ]
    for contexts in passes:
        check((await lm.batch_next_token_dists(contexts)).logp, contexts, reference)
    assert lm.stats["kv_read_positions"] > 0


@pytest.mark.slow
async def test_a_failed_pass_leaves_no_stale_rows(make_lm, reference, monkeypatch):
    lm = make_lm()
    rng = np.random.default_rng(2)
    prompt = rng.integers(17, 49152, size=10).tolist()
    first = [tuple(prompt + [t]) for t in (101, 102, 103, 104)]
    await lm.batch_next_token_dists(first)
    real = lm.model.forward

    def broken(*args, **kwargs):
        raise RuntimeError("device failure (simulated)")

    # resampled: particle 0 three times, 3 once; the pass copies the duplicates over the rows
    # of the dropped 1 and 2, then the forward fails
    resampled = [first[0] + (5,), first[0] + (6,), first[0] + (7,), first[3] + (8,)]
    moved = lm.stats["kv_moved_positions"]
    monkeypatch.setattr(lm.model, "forward", broken)
    with pytest.raises(RuntimeError, match="simulated"):
        await lm.batch_next_token_dists(resampled)
    assert lm.stats["kv_moved_positions"] == moved + 2 * len(first[0])
    monkeypatch.setattr(lm.model, "forward", real)
    # the dropped contexts continued after all: their rows must not be trusted
    again = [c + (9,) for c in first]
    check((await lm.batch_next_token_dists(again)).logp, again, reference)
    check((await lm.batch_next_token_dists(resampled)).logp, resampled, reference)


@pytest.mark.slow
async def test_kept_states_survive_eviction_and_clear_cache(make_lm, reference):
    probe = make_lm()
    lm = make_lm(cache_budget_bytes=20 * probe.trie.slot_bytes)  # less than one context
    rng = np.random.default_rng(3)
    steps = population_steps(rng, rng.integers(17, 49152, size=15).tolist(), particles=4, steps=4)
    for k, contexts in enumerate(steps):
        check((await lm.batch_next_token_dists(contexts)).logp, contexts, reference)
        if k == 1:
            lm.clear_cache()
    assert lm.trie.evictions > 0
