"""The assistant message of a chat answer, read from the generated text.

A chat call's output x is, by its constraint (``smc.api.openai``):

    plain        x = C                               content C
    tools        x = free text with <tool_call>{"name": N, "arguments": A}</tool_call> calls
    reasoning    x = <think> R </think> Y            Y read as above

and the message is (reasoning_content R, content, tool_calls): ``split_reasoning`` takes R off,
``parse_tool_calls`` reads the calls out of the rest and leaves the free text around them as
the content (None when empty). Each call gets a fresh id ``call_<24 hex digits>``, so the ids
of a conversation stay distinct across turns. vLLM (0.11 and later) names the reasoning field
``reasoning``; the message carries it under both names.

Streaming (reasoning only: tool calls are not streamed) sends the fields of a growing prefix
s of x, ``stream_fields(s)``, as deltas. They must only grow, so a prefix shows R up to any
partial ``</think>`` at its end (a suffix that may still become the tag) and the content once
the tag is complete; both are prefixes of the final fields.
"""

from __future__ import annotations

import uuid
from typing import Any

from potentials.segments.forms import THINK_BEGIN, THINK_END, parse_tool_calls, split_reasoning

#: the names the reasoning goes by in a message: vLLM's older one (OpenAI SDK clients read it
#: as ``message.reasoning_content``) and its current one
REASONING_NAMES = ("reasoning_content", "reasoning")


def call_id() -> str:
    """A fresh tool-call id, OpenAI's shape."""
    return "call_" + uuid.uuid4().hex[:24]


def assistant_message(text: str, *, tools: bool, reasoning: bool) -> dict[str, Any]:
    """The message of output ``text`` (the module docstring): ``role``, ``content``,
    ``refusal`` (None), ``tool_calls`` when ``tools`` and there is at least one call, and the
    reasoning under ``REASONING_NAMES`` when ``reasoning``."""
    message: dict[str, Any] = {"role": "assistant"}
    content: str | None = text
    if reasoning:
        thought, content = split_reasoning(text)
        message.update(dict.fromkeys(REASONING_NAMES, thought))
    calls: list[dict[str, Any]] = []
    if tools and content is not None:
        content, calls = parse_tool_calls(content)
    message.update(content=content if content or not (tools or reasoning) else None, refusal=None)
    if calls:
        message["tool_calls"] = [{**c, "id": call_id()} for c in calls]
    return message


def stream_fields(prefix: str, *, reasoning: bool) -> dict[str, str]:
    """The message fields that a prefix of the output settles, each a prefix of its final
    value (module docstring): {"content": prefix} without reasoning."""
    if not reasoning:
        return {"content": prefix}
    stripped = prefix.lstrip()
    if not stripped.startswith(THINK_BEGIN):  # the opening tag is still arriving
        return {"reasoning_content": "", "content": ""}
    rest = stripped[len(THINK_BEGIN):]
    k = rest.find(THINK_END)
    if k >= 0:
        return {"reasoning_content": rest[:k], "content": rest[k + len(THINK_END):].lstrip()}
    held = next((j for j in range(len(THINK_END) - 1, 0, -1) if rest.endswith(THINK_END[:j])), 0)
    return {"reasoning_content": rest[:len(rest) - held], "content": ""}


def final_fields(text: str, *, reasoning: bool) -> dict[str, str]:
    """``stream_fields`` of the whole output: the fields ``assistant_message`` reads (empty
    strings where it has None)."""
    if not reasoning:
        return {"content": text}
    thought, content = split_reasoning(text)
    return {"reasoning_content": thought or "", "content": content or ""}
