"""One prompt rule for every entry point (``generate``, ``LMContext``, ``LMPotential``, the
samplers, the CLI), and prompt encoding for backends built on a Hugging Face tokenizer.

A prompt is one of

    text       a ``str``
    messages   a non-empty list of chat messages, ``{"role": ..., "content": ...}`` dicts
               (system prompt and few-shot turns included), as in HF ``apply_chat_template``
    token ids  a sequence of ints in [0, |vocab|), used as given

and ``encode_prompt(lm, prompt, chat)`` turns it into the token ids the LM is conditioned on:

    ids(text)     = lm.encode_chat(text)       when chat (default: the LM has a template)
                  = lm.encode(text)            when not chat
    ids(messages) = lm.encode_chat(messages)   (a template is required)
    ids(ids)      = ids

``encode_chat(text)`` is the single user turn ``[{"role": "user", "content": text}]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence, Union

import numpy as np
from smc.core.errors import InvalidArgument, InvalidArgumentType

if TYPE_CHECKING:
    from smc.backends.base import LMBackend

#: a prompt: text, chat messages, or token ids (see the module docstring)
Prompt = Union[str, Sequence[Mapping[str, str]], Sequence[int]]

#: roles a chat message may have (a typo such as "usr" is an error, not a silent new role)
ROLES = ("system", "developer", "user", "assistant", "tool")

_KINDS = "a prompt is text, a list of chat messages ({'role', 'content'} dicts) or token ids"


def check_text(value: Any, name: str) -> str:
    """``value`` if it is a str that UTF-8 can encode; else TypeError/ValueError naming ``name``."""
    if not isinstance(value, str):
        raise InvalidArgumentType(f"{name} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgument(
            f"{name} is not valid Unicode text: {value[e.start:e.end]!r} at position {e.start} is a "
            "lone surrogate (often bytes that were not UTF-8, e.g. from a shell argument or a file "
            "read with the wrong encoding)"
        ) from None
    return value


def check_messages(messages: Any, name: str = "prompt") -> list[dict[str, str]]:
    """``messages`` as a new list of ``{"role", "content"}`` dicts, or TypeError/ValueError naming
    the first bad message: the list must be non-empty, every message a dict with exactly the keys
    ``role`` (one of ROLES) and ``content`` (valid Unicode text)."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidArgumentType(
            f"{name} must be a list of chat messages ({{'role', 'content'}} dicts), "
            f"got {type(messages).__name__}"
        )
    if len(messages) == 0:
        raise InvalidArgument(f"{name} is an empty list of chat messages; give at least one message")
    out = []
    for k, m in enumerate(messages):
        where = f"{name}[{k}]"
        if not isinstance(m, Mapping):
            raise InvalidArgumentType(
                f"{where} must be a chat message, a dict with 'role' and 'content', "
                f"got {type(m).__name__}"
            )
        missing = [key for key in ("role", "content") if key not in m]
        if missing:
            raise InvalidArgument(f"{where} has no {' and no '.join(repr(key) for key in missing)}")
        extra = sorted(map(str, set(m) - {"role", "content"}))
        if extra:
            raise InvalidArgument(f"{where} has keys other than 'role' and 'content': {extra}")
        role = check_text(m["role"], f"{where}['role']")
        if role not in ROLES:
            raise InvalidArgument(f"{where} has role {role!r}; a role is one of {', '.join(ROLES)}")
        out.append({"role": role, "content": check_text(m["content"], f"{where}['content']")})
    return out


def prompt_kind(prompt: Any, name: str = "prompt") -> str:
    """"text", "messages" or "ids": which form ``prompt`` has, checked as far as that is possible
    without an LM (messages fully; ids: integers >= 0). TypeError/ValueError naming the problem.

    An empty sequence is the empty token-id context (see ``encode_prompt``)."""
    if isinstance(prompt, str):
        check_text(prompt, name)
        return "text"
    if isinstance(prompt, (bytes, bytearray, Mapping)) or not isinstance(prompt, (Sequence, np.ndarray)):
        hint = " (decode bytes to str first)" if isinstance(prompt, (bytes, bytearray)) else ""
        raise InvalidArgumentType(f"{name} must be a string, got {type(prompt).__name__}{hint}; {_KINDS}")
    items = list(prompt)
    if items and isinstance(items[0], Mapping):
        check_messages(items, name)
        return "messages"
    for k, i in enumerate(items):
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise InvalidArgumentType(
                f"{name}[{k}] is a {type(i).__name__}; token ids must be integers ({_KINDS})"
            )
        if i < 0:
            raise InvalidArgument(f"{name}[{k}] = {int(i)} is a negative token id")
    return "ids"


def encode_prompt(lm: LMBackend, prompt: Prompt, chat: bool | None = None) -> list[int]:
    """The token ids ``lm`` is conditioned on for ``prompt`` (the rule in the module docstring).

    Args:
        lm: an LM backend (``vocab``, ``encode``; ``encode_chat`` when it has a chat template,
            and ``is_chat`` saying whether it does; a backend without ``encode_chat`` has none).
        prompt: text, a non-empty list of ``{"role", "content"}`` messages, or token ids.
        chat: for text: apply the chat template (True), or not (False); None (default) applies
            it exactly when the LM has one. Messages always go through the
            template and token ids never do, so chat=False with messages and chat=True with ids
            are errors rather than silently ignored.

    Messages need an LM with a chat template: without one they are an error (no plain rendering
    is guessed, since the model was not trained on one). On a Hugging Face tokenizer the
    conversation is rendered ready for the assistant's reply; a last message from the assistant
    is continued (its text is a prefix of the reply), not closed.

    An empty sequence is the empty context ``()``: valid where the LM defines p(. | ()) (a
    ToyLM), a ValueError for a backend that needs at least one token. Raises ValueError when
    ids fall outside [0, |vocab|) or the prompt alone fills the LM's ``max_context``.
    """
    if chat is not None and not isinstance(chat, bool):
        raise InvalidArgumentType(f"chat must be True, False or None, got {chat!r}")
    kind = prompt_kind(prompt)
    # a backend that has encode_chat but does not say is_chat is taken to have a template
    has_template = hasattr(lm, "encode_chat") and bool(getattr(lm, "is_chat", True))
    if kind == "text":
        use_chat = has_template if chat is None else chat
        if not use_chat:
            ids = list(lm.encode(prompt))
        elif has_template:
            ids = list(lm.encode_chat(prompt))
        else:
            raise InvalidArgument(f"chat=True but the LM ({type(lm).__name__}) has no chat template")
    elif kind == "messages":
        if chat is False:
            raise InvalidArgument(
                "chat=False applies to text prompts; chat messages always go through the chat "
                "template (pass a string to use the model without one)"
            )
        if not has_template:
            raise InvalidArgument(
                f"the prompt is a list of chat messages but the LM ({type(lm).__name__}) has no "
                "chat template; pass the prompt as a string or as token ids"
            )
        ids = list(lm.encode_chat(check_messages(prompt)))
    else:
        if chat:
            raise InvalidArgument(
                "chat=True applies to text prompts; token ids are used as given (apply the "
                "template before encoding, or pass text or chat messages)"
            )
        ids = [int(i) for i in prompt]
        n = len(lm.vocab)
        bad = [i for i in ids if i >= n]
        if bad:
            raise InvalidArgument(f"prompt has token ids outside [0, {n}): {bad[:5]}")
        if not ids:
            _check_empty_ok(lm)
    limit = getattr(lm, "max_context", None)
    if limit is not None and len(ids) >= limit:
        raise InvalidArgument(
            f"the prompt is {len(ids)} tokens, longer than the model's context of {limit} tokens"
        )
    return ids


def _check_empty_ok(lm: LMBackend) -> None:
    """ValueError when ``lm`` rejects the empty context (its own ``check_ids`` says so)."""
    check = getattr(lm, "check_ids", None)
    if check is None:
        return
    try:
        check((), allow_empty=False)
    except ValueError:
        raise InvalidArgument(
            "the prompt is an empty list (no chat messages, no token ids), and this model needs "
            "at least one token of context; give text, at least one chat message, or token ids"
        ) from None


def chat_messages(
    prompt: str | Sequence[Mapping[str, str]], system: str | None = None
) -> list[dict[str, str]]:
    """The conversation ``encode_chat(prompt, system)`` renders: ``prompt`` as one user turn
    when it is text, else the checked messages; a ``system`` turn first when given (an error
    when the messages already start with one)."""
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": check_text(prompt, "text")}]
    else:
        messages = check_messages(prompt, "messages")
    if system is not None:
        if messages[0]["role"] == "system":
            raise InvalidArgument("system is given but the messages already start with a system turn")
        messages.insert(0, {"role": "system", "content": check_text(system, "system")})
    return messages


class TokenizerPrompts:
    """Prompt encoding for a backend that holds a Hugging Face ``tokenizer``."""

    tokenizer: Any

    @property
    def is_chat(self) -> bool:
        """Whether the tokenizer has a chat template (then ``encode_chat`` works)."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode(self, text: str) -> list[int]:
        """Token ids of plain ``text`` (no chat template); BOS only if the tokenizer adds one."""
        if not isinstance(text, str):
            raise InvalidArgumentType(f"text must be a str, got {type(text).__name__}")
        return list(self.tokenizer(text)["input_ids"])

    def encode_chat(
        self, prompt: str | Sequence[Mapping[str, str]], system: str | None = None
    ) -> list[int]:
        """Token ids of a conversation in the chat template, ready for the assistant's reply.

        Args:
            prompt: the user's text (one user turn), or a list of ``{"role", "content"}``
                messages (checked by ``check_messages``). A last assistant message is continued,
                not closed, so the reply extends its text.
            system: text of a system turn put first (an error if the messages already start
                with one).
        """
        if not self.is_chat:
            raise InvalidArgument("this tokenizer has no chat template; use encode(text)")
        messages = chat_messages(prompt, system)
        prefill = messages[-1]["role"] == "assistant"
        try:
            rendered = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=not prefill,
                continue_final_message=prefill,
            )
        except Exception as e:  # noqa: BLE001 - a template's own refusal (jinja2 TemplateError, ...)
            roles = ", ".join(m["role"] for m in messages)
            raise InvalidArgument(
                f"the model's chat template rejects these messages (roles: {roles}): {e}"
            ) from e
        return list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])
