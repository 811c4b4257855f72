"""The engine's per-step hook: ``on_step(run)`` is called once after every step with the run's
particles, and a run with the hook gives exactly the Result of the run without it."""

from __future__ import annotations

from potentials import Regex
from smc.api.generation import arun
from smc.api.request import Request
from smc.api.openai import settled_text
from tests.toy_problems import FastToyLM

VOCAB = ["a", "b", "1", "2", "<eos>"]


def lm() -> FastToyLM:
    return FastToyLM(VOCAB, "<eos>", {None: [0.3, 0.2, 0.2, 0.2, 0.1]})


async def test_on_step_is_called_every_step_and_changes_nothing():
    base = lm()
    request = Request("", Regex("ab[12]{1,3}"), particles=8, max_tokens=6, seed=2, ess_threshold=0.9)
    seen: list[tuple[int, str]] = []
    with_hook = await arun(request, base, False, on_step=lambda run: seen.append((run.step, settled_text(run))))
    without = await arun(request, base, False)
    assert [s.text for s in with_hook.samples] == [s.text for s in without.samples]
    assert [s.log_weight for s in with_hook.samples] == [s.log_weight for s in without.samples]
    assert with_hook.log_ml == without.log_ml
    assert [k for k, _ in seen] == list(range(1, with_hook.stats["steps"] + 1))
    # the settled text only grows, and every finished answer starts with it
    texts = [t for _, t in seen]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    assert texts[1] == "ab" and all(t.startswith(texts[-1]) for t in with_hook.posterior)
