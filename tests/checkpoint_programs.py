"""A toy LM and a program for tests/smc/engine/test_checkpoint.py, in a module of their own so that a child
process imports them under the same name (a checkpoint names a program's class by its module)."""

from __future__ import annotations

import re
import time

from potentials import Regex
from smc import Model, ToyLM
from smc.programs.distributions import Categorical
from smc.programs.context import LMContext

VOCAB = ["a", "b", "ab", " ", "c", "<e>"]
#: words of a, b and c separated by single spaces
CONSTRAINT = Regex(r"[abc]+( [abc]+)*")


def next_token_probs(ids: tuple[int, ...], delay: float = 0.0) -> list[float]:
    """A context-dependent law (so that particles differ): it shifts with the length and the
    last token of the context; ``delay`` slows a call down without changing the law."""
    if delay:
        time.sleep(delay)
    k = len(ids) % 3
    last = ids[-1] if ids else 0
    w = [3.0 + k, 2.0 + last % 2, 1.0 + (k == 1), 1.5, 0.5 + 0.5 * (last == 3), 0.4 + 0.2 * len(ids)]
    total = sum(w)
    return [x / total for x in w]


def make_lm(delay: float = 0.0) -> ToyLM:
    return ToyLM(VOCAB, "<e>", lambda ids: next_token_probs(ids, delay))


class Words(Model):
    """Text under CONSTRAINT whose words have at most 3 letters, with a random bonus per word.

    Each step samples a token by AWRS (weight: the allowed mass), kills particles with a word
    longer than 3 letters, and at each space scores a bonus drawn from the engine's randomness.
    """

    def __init__(self, lm: ToyLM, constraint: Regex, max_tokens: int):
        super().__init__()
        self.context = LMContext(lm, "")
        self.constraint = constraint
        self.max_tokens = max_tokens
        self.bonuses: list[float] = []

    async def step(self) -> None:
        await self.sample(self.context.next_token(self.constraint, sampler="awrs"))
        text = self.context.text()
        self.condition(all(len(w) <= 3 for w in re.findall(r"[abc]+", text)))
        if text.endswith(" "):
            bonus = await self.sample(Categorical([0.0, 0.5, 1.0], [0.5, 0.3, 0.2]))
            self.bonuses.append(bonus)
            self.score(bonus)
        if self.context.done or len(self.context.tokens) >= self.max_tokens:
            self.finish()
