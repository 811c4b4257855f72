"""Every word at most 5 letters: a probabilistic program with a constraint checked token by token.

The program targets pi(x) ∝ p(x, EOS | prompt) * 1[every word of x has <= 5 letters], with EOS
forced after ``max_tokens`` tokens. Each step draws the next token with AWRS under the
constraint (checking only the few tokens it draws) and scores AWRS's unbiased weight.

    python examples/short_words.py [--particles 8] [--max-tokens 24]
"""

from __future__ import annotations

import argparse
import asyncio
import re

import smc
from potentials import Predicate
from smc.programs.context import LMContext
from smc.programs.model import Model


def short_words(text: str) -> bool:
    """No run of letters longer than 5 (an unfinished last word counts as it stands)."""
    return all(len(w) <= 5 for w in re.findall(r"[^\W\d_]+", text))


SHORT = Predicate(complete=short_words, prefix=short_words)


class ShortWords(Model):
    def __init__(self, lm, prompt: str, max_tokens: int = 24):
        super().__init__()
        self.context = LMContext(lm, prompt, chat=getattr(lm, "is_chat", False))
        self.eos = lm.eos_token_ids[0]
        self.max_tokens = max_tokens

    async def step(self):
        if len(self.context.tokens) >= self.max_tokens:
            # EOS is forced: score its probability (and the constraint's verdict on the text)
            await self.observe(self.context.next_token(SHORT), self.eos)
            self.finish()
            return
        await self.sample(self.context.next_token(SHORT, sampler="awrs"))
        if self.context.done:
            self.finish()


async def main(lm=None, particles: int = 8, max_tokens: int = 24, seed: int = 0) -> smc.Result:
    lm = lm or smc.load_lm()
    model = ShortWords(lm, "Describe a cat in one sentence.", max_tokens)
    return await smc.smc(model, particles, seed=seed)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--particles", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=24)
    args = ap.parse_args()
    result = asyncio.run(main(particles=args.particles, max_tokens=args.max_tokens))
    for text, prob in result.posterior.items():
        print(f"{prob:.3f}  {text!r}")
    print(f"log_ml = {result.log_ml:.3f}")
