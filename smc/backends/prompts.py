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

Tools. ``encode_prompt(lm, prompt, chat, tools)`` with OpenAI function ``tools`` states them in
the prompt (text or messages; never token ids), the way the model was trained to read them:

    the template takes tools  (``lm.chat_takes_tools``: a Hugging Face template that reads a
                              ``tools`` variable)  ->  lm.encode_chat(messages, tools=tools)
    else                      ->  lm.encode_chat(plain_messages(messages, tools)):
                                  ``tools_prompt(tools)`` added to the system message

A conversation may hold an agent loop's history: assistant messages with ``tool_calls`` (OpenAI
shape; content may be null) and ``tool`` messages answering them. A template that takes tools
receives them as they are (arguments as objects, as Hugging Face templates expect); for one
that does not, ``plain_messages`` writes each call as the text the model is told to write,
``<tool_call>{"name": N, "arguments": ARGS}</tool_call>``, and each run of tool results as one
user turn of ``<tool_response>`` blocks.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Mapping, Sequence, Union

import numpy as np
from smc.core.errors import InvalidArgument, InvalidArgumentType

if TYPE_CHECKING:
    from smc.backends.base import LMBackend

#: a prompt: text, chat messages, or token ids (see the module docstring)
Prompt = Union[str, Sequence[Mapping[str, str]], Sequence[int]]

#: roles a chat message may have (a typo such as "usr" is an error, not a silent new role)
ROLES = ("system", "developer", "user", "assistant", "tool")

#: the tool-call tags (Hermes style, also what vLLM's hermes parser reads): what a model whose
#: template has no tool section is told to write (``tools_prompt``), and how its past calls are
#: written back into a conversation (``plain_messages``)
TOOL_CALL_BEGIN, TOOL_CALL_END = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_BEGIN, TOOL_RESPONSE_END = "<tool_response>", "</tool_response>"
#: keys a message may have besides role and content, by role
EXTRA_KEYS = {"assistant": ("tool_calls",), "tool": ("tool_call_id", "name")}

#: a template that reads the variable ``tools`` (jinja: ``{% if tools %}``, ``tools | length``, ...)
_TOOLS_VARIABLE = re.compile(r"\btools\b")

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


def check_messages(messages: Any, name: str = "prompt") -> list[dict[str, Any]]:
    """``messages`` as a new list of checked message dicts, or TypeError/ValueError naming the
    first bad message: the list must be non-empty, every message a dict with ``role`` (one of
    ROLES) and ``content`` (valid Unicode text), and no other key but, for an assistant,
    ``tool_calls`` (then content may be null or absent: it becomes "") and, for a tool result,
    ``tool_call_id`` and ``name``. A call's arguments (JSON text or an object) come back parsed."""
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
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        missing = [key for key in ("role", "content") if key not in m and not (key == "content" and calls)]
        if missing:
            raise InvalidArgument(f"{where} has no {' and no '.join(repr(key) for key in missing)}")
        role = check_text(m["role"], f"{where}['role']")
        if role not in ROLES:
            raise InvalidArgument(f"{where} has role {role!r}; a role is one of {', '.join(ROLES)}")
        allowed = ("role", "content", *EXTRA_KEYS.get(role, ()))
        extra = sorted(map(str, set(m) - set(allowed)))
        if extra:
            names = ", ".join(repr(a) for a in allowed[:-1]) + f" and {allowed[-1]!r}"
            raise InvalidArgument(f"{where} has keys other than {names}: {extra}")
        content = m.get("content")
        message: dict[str, Any] = {
            "role": role, "content": "" if content is None and calls else check_text(content, f"{where}['content']")}
        if "tool_calls" in m:
            message["tool_calls"] = _check_calls(m["tool_calls"], f"{where}['tool_calls']")
        for key in ("tool_call_id", "name"):
            if key in m:
                message[key] = check_text(m[key], f"{where}[{key!r}]")
        out.append(message)
    return out


def _check_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls`` (OpenAI shape), arguments parsed from JSON text."""
    if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)) or not calls:
        raise InvalidArgumentType(f"{where} must be a non-empty list of tool calls")
    out = []
    for i, call in enumerate(calls):
        at = f"{where}[{i}]"
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or call.get("type", "function") != "function" \
                or set(call) - {"id", "type", "function"} or set(fn) - {"name", "arguments"}:
            raise InvalidArgument(f"{at} must be {{'id', 'type': 'function', 'function': {{'name', 'arguments'}}}}")
        arguments = fn.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as e:
                raise InvalidArgument(f"{at}.function.arguments is not valid JSON: {e}") from None
        if not isinstance(arguments, Mapping):
            raise InvalidArgumentType(f"{at}.function.arguments must be a JSON object, got {arguments!r}")
        checked: dict[str, Any] = {"type": "function", "function": {
            "name": check_text(fn.get("name"), f"{at}.function.name"), "arguments": dict(arguments)}}
        if "id" in call:
            checked["id"] = check_text(call["id"], f"{at}.id")
        out.append(checked)
    return out


def tool_functions(tools: Any) -> list[tuple[str, Any, Mapping[str, Any]]]:
    """[(name, parameters schema, the function object)] of an OpenAI ``tools`` list, or
    InvalidArgument(Type) naming the bad entry. The schema is True (arguments unchecked) for a
    function with ``strict: false`` or null parameters, as OpenAI reads them."""
    if not isinstance(tools, list) or not tools:
        raise InvalidArgument("tools must be a non-empty list of {'type': 'function', 'function': {...}}")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, Mapping):
            raise InvalidArgumentType(f"{where} must be an object")
        if tool.get("type", "function") != "function":
            raise InvalidArgument(f"{where}.type must be 'function', got {tool.get('type')!r}")
        fn = tool.get("function")
        if not isinstance(fn, Mapping):
            raise InvalidArgumentType(f"{where}.function must be an object, got {fn!r}")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentType(f"{where}.function.name must be a non-empty string, got {name!r}")
        params = fn.get("parameters", {"type": "object"})
        if fn.get("strict") is False or params is None:
            params = True
        out.append((name, params, fn))
    names = [n for n, _, _ in out]
    if len(set(names)) != len(names):
        raise InvalidArgument(f"tools name a function twice: {names!r}")
    return out


def tools_prompt(tools: Any) -> str:
    """A system message that states the tools and the call format (for templates without a
    tool section, such as the embedded SmolLM2's)."""
    listing = "\n".join(json.dumps({"name": n, "description": fn.get("description", ""), "parameters": p})
                        for n, p, fn in tool_functions(tools))
    return ("You are a function calling AI model. You may call one or more of these functions:\n"
            f"<tools>\n{listing}\n</tools>\n"
            "To call a function, write a JSON object with its name and arguments inside tags:\n"
            f'{TOOL_CALL_BEGIN}{{"name": <function-name>, "arguments": <args-json-object>}}'
            f"{TOOL_CALL_END}")


def plain_messages(messages: Sequence[Mapping[str, Any]], tools: Any = None) -> list[dict[str, str]]:
    """Checked ``messages`` as ``{"role", "content"}`` turns for a template without a tool
    section: ``tools_prompt(tools)`` ends the system message (one is put first if there is
    none), an assistant's calls are appended to its text as ``<tool_call>`` blocks, and each
    run of consecutive tool messages becomes one user turn of ``<tool_response>`` blocks."""
    out: list[dict[str, str]] = []
    previous = None
    for m in messages:
        content = m["content"]
        if m.get("tool_calls"):
            calls = "\n".join(TOOL_CALL_BEGIN + json.dumps({"name": c["function"]["name"],
                                                            "arguments": c["function"]["arguments"]})
                              + TOOL_CALL_END for c in m["tool_calls"])
            content = f"{content}\n{calls}" if content else calls
        if m["role"] == "tool":
            block = f"{TOOL_RESPONSE_BEGIN}\n{content}\n{TOOL_RESPONSE_END}"
            if previous == "tool":
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
        else:
            out.append({"role": m["role"], "content": content})
        previous = m["role"]
    if tools is not None:
        text = tools_prompt(tools)
        if out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{text}" if out[0]["content"] else text
        else:
            out.insert(0, {"role": "system", "content": text})
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


def encode_prompt(lm: LMBackend, prompt: Prompt, chat: bool | None = None, tools: Any = None) -> list[int]:
    """The token ids ``lm`` is conditioned on for ``prompt`` (the rule in the module docstring).

    Args:
        lm: an LM backend (``vocab``, ``encode``; ``encode_chat`` when it has a chat template,
            and ``is_chat`` saying whether it does; a backend without ``encode_chat`` has none).
        prompt: text, a non-empty list of ``{"role", "content"}`` messages, or token ids.
        chat: for text: apply the chat template (True), or not (False); None (default) applies
            it exactly when the LM has one. Messages always go through the
            template and token ids never do, so chat=False with messages and chat=True with ids
            are errors rather than silently ignored.
        tools: OpenAI function tools the prompt states (module docstring), or None. They need
            a prompt that goes through the chat template (text or messages).

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
    if tools is not None:
        tool_functions(tools)
        if kind == "ids" or (kind == "text" and chat is False) or not has_template:
            raise InvalidArgument(
                "tools are stated through the chat template: they need a text or messages prompt "
                f"and an LM with a chat template (chat={chat!r}, prompt of {kind}, "
                f"{type(lm).__name__} {'has one' if has_template else 'has none'})")
        ids = chat_ids(lm, chat_messages(prompt), tools)
    elif kind == "text":
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
        ids = chat_ids(lm, check_messages(prompt), None)
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


def chat_ids(lm: LMBackend, messages: list[dict[str, Any]], tools: Any) -> list[int]:
    """The ids of checked ``messages`` (and ``tools``) through ``lm``'s chat template: as they
    are where the template takes tools, else as ``plain_messages``."""
    if getattr(lm, "chat_takes_tools", False):
        return list(lm.encode_chat(messages, tools=tools))
    return list(lm.encode_chat(plain_messages(messages, tools)))


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
    prompt: str | Sequence[Mapping[str, Any]], system: str | None = None
) -> list[dict[str, Any]]:
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

    @property
    def chat_takes_tools(self) -> bool:
        """Whether the chat template renders tools: it reads a ``tools`` variable (a template
        set whose ``tool_use`` template does counts, as transformers then picks that one)."""
        template = getattr(self.tokenizer, "chat_template", None)
        if isinstance(template, Mapping):
            template = template.get("tool_use", template.get("default"))
        return isinstance(template, str) and _TOOLS_VARIABLE.search(template) is not None

    def encode(self, text: str) -> list[int]:
        """Token ids of plain ``text`` (no chat template); BOS only if the tokenizer adds one."""
        if not isinstance(text, str):
            raise InvalidArgumentType(f"text must be a str, got {type(text).__name__}")
        return list(self.tokenizer(text)["input_ids"])

    def encode_chat(
        self, prompt: str | Sequence[Mapping[str, Any]], system: str | None = None, tools: Any = None
    ) -> list[int]:
        """Token ids of a conversation in the chat template, ready for the assistant's reply.

        Args:
            prompt: the user's text (one user turn), or a list of chat messages (checked by
                ``check_messages``). A last assistant message is continued, not closed, so the
                reply extends its text.
            system: text of a system turn put first (an error if the messages already start
                with one).
            tools: OpenAI function tools, given to the template (``apply_chat_template(...,
                tools=...)``); only for a template that renders them (``chat_takes_tools``).
        """
        if not self.is_chat:
            raise InvalidArgument("this tokenizer has no chat template; use encode(text)")
        messages = chat_messages(prompt, system)
        if tools is not None:
            tool_functions(tools)
            if not self.chat_takes_tools:
                raise InvalidArgument("this chat template has no tool section; state the tools with "
                                      "encode_prompt(..., tools=...), which writes them in the system message")
        prefill = messages[-1]["role"] == "assistant"
        extra = {} if tools is None else {"tools": list(tools)}
        try:
            rendered = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=not prefill,
                continue_final_message=prefill, **extra,
            )
        except Exception as e:  # noqa: BLE001 - a template's own refusal (jinja2 TemplateError, ...)
            roles = ", ".join(m["role"] for m in messages)
            raise InvalidArgument(
                f"the model's chat template rejects these messages (roles: {roles}): {e}"
            ) from e
        return list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])
