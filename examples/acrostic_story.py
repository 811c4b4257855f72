"""A story whose k-th sentence starts with the k-th letter of a word (an acrostic).

The program stops once the last sentence ends, so it targets
pi(x) ∝ p(x | prompt) * 1[x is len(letters) sentences, sentence k starts with letters[k]],
x ending right after the final sentence's punctuation (or EOS forced after ``max_tokens``,
where the text must then be complete). Which letter is required changes as the story goes:
the constraint reads the sentences written so far, and the program scores progress with a
twist (one unit per finished sentence) that steers resampling and is removed again at the end.

    python examples/acrostic_story.py [--letters SMC] [--particles 8] [--max-tokens 48]
"""

from __future__ import annotations

import argparse
import asyncio
import re

import smc
from potentials import Predicate
from smc.programs.context import LMContext
from smc.programs.model import Model

_END = re.compile(r"[.!?]")


def sentences(text: str) -> tuple[list[str], str]:
    """(finished sentences, the unfinished rest) of ``text``."""
    parts = re.split(r"(?<=[.!?])", text)
    return [p.strip() for p in parts[:-1]], parts[-1].strip()


def acrostic(letters: str, final: bool):
    def check(text: str) -> bool:
        done, rest = sentences(text)
        started = done + ([rest] if rest else [])
        if len(started) > len(letters) or (final and (rest or len(done) != len(letters))):
            return False
        return all(s[0].upper() == c.upper() for s, c in zip(started, letters) if s)

    return check


class Acrostic(Model):
    def __init__(self, lm, letters: str, max_tokens: int = 48):
        super().__init__()
        prompt = f"Write a very short story of {len(letters)} sentences."
        self.context = LMContext(lm, prompt, chat=getattr(lm, "is_chat", False))
        self.constraint = Predicate(complete=acrostic(letters, True), prefix=acrostic(letters, False))
        self.letters, self.max_tokens = letters, max_tokens
        self.eos = lm.eos_token_ids[0]

    async def step(self):
        if len(self.context.tokens) >= self.max_tokens:
            await self.observe(self.context.next_token(self.constraint), self.eos)
            self.finish()
            return
        await self.sample(self.context.next_token(self.constraint, sampler="awrs"))
        done, rest = sentences(self.context.text())
        if self.context.done or (len(done) == len(self.letters) and not rest):
            # stopping here is part of the program: the text so far must be a full acrostic
            self.condition(acrostic(self.letters, True)(self.context.text()))
            self.finish()
        else:
            self.twist(float(len(done)))


async def main(lm=None, letters: str = "SMC", particles: int = 8, max_tokens: int = 48,
               seed: int = 0) -> smc.Result:
    lm = lm or smc.load_lm()
    return await smc.smc(Acrostic(lm, letters, max_tokens), particles, seed=seed)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--letters", default="SMC")
    ap.add_argument("--particles", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()
    result = asyncio.run(main(letters=args.letters, particles=args.particles, max_tokens=args.max_tokens))
    for text, prob in result.posterior.items():
        print(f"{prob:.3f}  {text!r}")
    print(f"log_ml = {result.log_ml:.3f}")
