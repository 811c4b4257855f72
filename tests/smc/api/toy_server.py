"""A toy LM over printable ASCII with a chat template, and the server app around it: the server's
translation and errors are tested on it without loading a model."""

from __future__ import annotations

import string

from smc.api.openai import Limits
from smc.api.server import create_app
from tests.toy_problems import FastToyLM

CHARS = sorted(set(string.printable) - set("\t\r\x0b\x0c"))
VOCAB = [*CHARS, "<eos>"]
#: characters the toy LM favours, so that short JSON and short answers finish within a few tokens
FAVOURED = {"<eos>": 30.0, "}": 20.0, "{": 10.0, '"': 10.0, "a": 8.0, ":": 6.0, "1": 8.0, "2": 4.0,
            "t": 4.0, "r": 4.0, "u": 4.0, "e": 4.0, "f": 2.0, "l": 2.0, "s": 2.0, "y": 4.0, "n": 4.0,
            # rare, as in text: JSON strings then seldom start \u escapes, which JSONSchema keeps
            # alive past a const key they cannot spell (a prefix check that is approximate)
            "\\": 0.002}
MODEL = "toy"


def probs(ids: tuple[int, ...]) -> list[float]:
    weights = [FAVOURED.get(tok, 0.2) for tok in VOCAB]
    total = sum(weights)
    return [w / total for w in weights]


#: where the toy template hands over to the assistant: the text after its last occurrence is
#: what the LM has generated so far
TURN = "assistant: "


def template(messages: list[dict[str, str]]) -> str:
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + TURN


def toy_lm(**attrs) -> FastToyLM:
    lm = FastToyLM(VOCAB, "<eos>", probs, chat_template=template)
    for k, v in attrs.items():
        setattr(lm, k, v)
    return lm


def scripted_lm(script: str, rendered: list | None = None, mass: float = 0.995) -> FastToyLM:
    """A toy LM that means to write ``script``, as an n-gram model of it: it finds the longest
    suffix of its output that occurs in the script (first occurrence) and gives probability
    ``mass`` to the script's next character there, or to EOS where that occurrence ends the
    script; with no such suffix, EOS has 0.5. Off the script (where a constraint forbids its
    choice) it so picks the script up again as soon as the output matches a piece of it.
    ``rendered`` collects every conversation its chat template is given."""
    eos = len(VOCAB) - 1

    def scripted(ids: tuple[int, ...]) -> list[float]:
        text = b"".join(lm.vocab[i] for i in ids).decode(errors="replace")
        made = text[text.rfind(TURN) + len(TURN):]
        want, share = eos, 0.5
        for k in range(len(made), 0, -1):
            pos = script.find(made[len(made) - k:])
            if pos >= 0:
                end = pos + k
                want, share = (eos if end == len(script) else VOCAB.index(script[end])), mass
                break
        else:
            if not made:
                want, share = VOCAB.index(script[0]), mass
        return [share if i == want else (1 - share) / (len(VOCAB) - 1) for i in range(len(VOCAB))]

    def recording(messages: list[dict[str, str]]) -> str:
        if rendered is not None:
            rendered.append(messages)
        return template(messages)

    lm = FastToyLM(VOCAB, "<eos>", scripted, chat_template=recording)
    return lm


def toy_app(lm=None, **kwargs):
    return create_app(lm if lm is not None else toy_lm(), MODEL, limits=kwargs.pop("limits", Limits(max_particles=32)), **kwargs)
