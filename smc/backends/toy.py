"""ToyLM: a tiny exact language model, for tests and teaching."""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

import torch

from smc.backends.base import AsyncLM, new_counters
from smc.backends.prompts import chat_messages
from smc.core.errors import InvalidArgument, InvalidArgumentType

NextTokenProbs = Callable[[tuple[int, ...]], Sequence[float]]
#: renders a conversation (checked ``{"role", "content"}`` messages) as the text the model reads
ChatTemplate = Callable[[list[dict[str, str]]], str]


class ToyLM(AsyncLM):
    """An LM given by its next-token probabilities: p(a | ids) = next_token_probs(ids)[a].

    Args:
        vocab: byte string of every token (EOS among them). Strings are UTF-8 encoded.
        eos: the EOS token's byte string (it must be in ``vocab``).
        next_token_probs: a function of the context (a tuple of token ids) returning one
            probability per token, summing to 1; or a table mapping contexts (tuples) to such
            lists, with an optional ``None`` key as the default for contexts not in the table.
        chat_template: optional function rendering a list of ``{"role", "content"}`` messages
            as the text that precedes the assistant's reply (then ``is_chat`` is True and text
            and message prompts go through it, see ``smc.backends.prompts``); that text is
            then tokenized by ``encode``.

    The empty prompt encodes to the empty context ``()``; other prompts are tokenized greedily
    (longest token first), so ``encode`` round-trips any text made of vocabulary tokens.
    Log-probabilities are float64 so that exactness tests can compare to 1e-9.
    """

    def __init__(
        self,
        vocab: Sequence[bytes | str],
        eos: bytes | str,
        next_token_probs: NextTokenProbs | Mapping[tuple[int, ...] | None, Sequence[float]],
        *,
        chat_template: ChatTemplate | None = None,
    ):
        if chat_template is not None and not callable(chat_template):
            raise InvalidArgumentType(
                f"chat_template must be a function of the messages, got {type(chat_template).__name__}"
            )
        self.chat_template = chat_template
        self.vocab = [v.encode() if isinstance(v, str) else bytes(v) for v in vocab]
        eos_b = eos.encode() if isinstance(eos, str) else bytes(eos)
        if eos_b not in self.vocab:
            raise InvalidArgument(f"EOS token {eos_b!r} is not in the vocabulary")
        self.eos_token_ids = [i for i, v in enumerate(self.vocab) if v == eos_b][:1]
        if callable(next_token_probs):
            self._probs = next_token_probs
        else:
            table = dict(next_token_probs)

            def lookup(ids: tuple[int, ...]) -> Sequence[float]:
                if ids in table:
                    return table[ids]
                if None in table:
                    return table[None]
                raise KeyError(f"ToyLM table has no entry for context {ids} and no default")

            self._probs = lookup
        self.stats = new_counters()

    @property
    def is_chat(self) -> bool:
        """Whether this toy LM has a chat template."""
        return self.chat_template is not None

    def encode_chat(
        self, prompt: str | Sequence[Mapping[str, str]], system: str | None = None
    ) -> list[int]:
        """``encode(chat_template(messages))`` for the conversation ``chat_messages(prompt, system)``."""
        if self.chat_template is None:
            raise InvalidArgument("this ToyLM has no chat template; use encode(text)")
        text = self.chat_template(chat_messages(prompt, system))
        if not isinstance(text, str):
            raise InvalidArgumentType(f"chat_template must return a str, got {type(text).__name__}")
        return self.encode(text)

    def encode(self, text: str) -> list[int]:
        data = text.encode()
        ids: list[int] = []
        by_len = sorted(
            (i for i in range(len(self.vocab)) if i not in self.eos_token_ids and self.vocab[i]),
            key=lambda i: -len(self.vocab[i]),
        )
        pos = 0
        while pos < len(data):
            for i in by_len:
                if data.startswith(self.vocab[i], pos):
                    ids.append(i)
                    pos += len(self.vocab[i])
                    break
            else:
                raise InvalidArgument(f"cannot tokenize {text!r}: no token matches at byte {pos}")
        return ids

    def check_ids(self, ids: Sequence[int], *, allow_empty: bool = True) -> tuple[int, ...]:
        # A toy LM defines p(. | ()) itself, so the empty context is valid here.
        return super().check_ids(ids, allow_empty=True)

    def probs(self, ids: Sequence[int]) -> list[float]:
        """The next-token probabilities exactly as the user gave them, validated."""
        ids = self.check_ids(ids)
        p = [float(x) for x in self._probs(ids)]
        if len(p) != len(self.vocab):
            raise InvalidArgument(
                f"next_token_probs{ids} has {len(p)} entries for a vocabulary of {len(self.vocab)}"
            )
        if any(x < 0 or math.isnan(x) for x in p) or abs(sum(p) - 1.0) > 1e-6:
            raise InvalidArgument(f"next_token_probs{ids} is not a probability vector: {p}")
        return p

    async def _next_token_logprobs(self, ids: tuple[int, ...]) -> torch.Tensor:
        self.stats["requests"] += 1
        self.stats["forward_passes"] += 1
        p = torch.tensor(self.probs(ids), dtype=torch.float64)
        return torch.log(p / p.sum())
