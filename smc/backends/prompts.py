"""Prompts as token ids for backends built on a Hugging Face tokenizer: plain text, or a user
turn in the model's chat template."""

from __future__ import annotations

from typing import Any


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
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return list(self.tokenizer(text)["input_ids"])

    def encode_chat(self, text: str, system: str | None = None) -> list[int]:
        """Token ids of ``text`` as a user turn in the chat template, ready for the reply
        (after an optional system turn)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not self.is_chat:
            raise ValueError("this tokenizer has no chat template; use encode(text)")
        messages = [{"role": "user", "content": text}]
        if system is not None:
            messages.insert(0, {"role": "system", "content": system})
        rendered = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])
