"""Byte strings of a Hugging Face tokenizer's tokens, and its EOS ids.

For every token id i, ``vocab[i]`` is the bytes the token stands for, so that for ordinary text
``b"".join(vocab[i] for i in tokenizer.encode(text)) == text.encode()``. Three encodings occur:

- byte-level BPE (GPT-2, Llama 3, SmolLM): each byte is shown as a printable character by
  GPT-2's ``bytes_to_unicode`` table; the inverse table gives the bytes back;
- SentencePiece (Llama 2, Mistral, Gemma): ``▁`` stands for a space and ``<0xNN>`` byte-fallback
  pieces for single bytes; other characters are UTF-8;
- added and special tokens: their literal text, UTF-8 encoded.

Several ids may map to the same bytes (e.g. a piece and its byte-fallback spelling); that is
allowed. A SentencePiece tokenizer that prepends a space to the text ("dummy prefix") gives the
first token that space: it is what the model saw.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # annotations only
    from smc.backends.base import LMBackend

_SPACE_PIECE = "\u2581"
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode``: printable character -> byte value.

    Printable Latin-1 bytes stand for themselves; the other 68 bytes b are shown as
    chr(256 + k), k counting those bytes in increasing order.
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\xa1"), ord("\xac") + 1),
        *range(ord("\xae"), ord("\xff") + 1),
    ]
    table = {chr(b): b for b in printable}
    k = 0
    for b in range(256):
        if b not in table.values():
            table[chr(256 + k)] = b
            k += 1
    return table


def _component_types(node: Any) -> set[str]:
    """Every ``type`` named in a tokenizer.json component (sequences included)."""
    found: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("type"), str):
            found.add(node["type"])
        if node.get("type") == "Replace" and node.get("pattern", {}).get("String") == _SPACE_PIECE:
            found.add("ReplaceSpacePiece")
        for value in node.values():
            found |= _component_types(value)
    elif isinstance(node, list):
        for value in node:
            found |= _component_types(value)
    return found


def tokenizer_scheme(tokenizer: Any) -> str:
    """How the tokenizer spells bytes: ``"byte_level"``, ``"sentencepiece"`` or ``"text"``."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        types = _component_types(spec.get("decoder")) | _component_types(spec.get("pre_tokenizer"))
        if "ByteLevel" in types:
            return "byte_level"
        model = spec.get("model", {})
        if (
            types & {"Metaspace", "ByteFallback", "ReplaceSpacePiece"}
            or model.get("byte_fallback")
            or _component_types(spec.get("normalizer")) & {"Prepend", "ReplaceSpacePiece"}
        ):
            return "sentencepiece"
        return "text"
    if hasattr(tokenizer, "sp_model") or "sentencepiece" in type(tokenizer).__name__.lower():
        return "sentencepiece"
    return "text"


def token_bytes(piece: str, scheme: str) -> bytes:
    """Bytes of one (non-added) token piece under ``scheme``."""
    if scheme == "byte_level":
        table = byte_decoder()
        # A character outside the table cannot come from byte-level BPE; keep it as UTF-8.
        return b"".join(
            bytes([table[c]]) if c in table else c.encode() for c in piece
        )
    if scheme == "sentencepiece":
        m = _BYTE_PIECE.fullmatch(piece)
        if m:
            return bytes([int(m.group(1), 16)])
        return piece.replace(_SPACE_PIECE, " ").encode()
    return piece.encode()


def build_vocab(tokenizer: Any, size: int | None = None) -> tuple[list[bytes], set[int]]:
    """Byte string of every token id, and the ids of special added tokens.

    Args:
        tokenizer: a transformers tokenizer (or anything with ``convert_ids_to_tokens`` and
            ``added_tokens_decoder``).
        size: number of ids to cover; default ``len(tokenizer)``.

    Returns:
        ``(vocab, special)``: ``vocab[i]`` the bytes of id i (added tokens give their literal
        text); ``special`` the ids of added tokens marked special (control tokens).
    """
    n = len(tokenizer) if size is None else size
    scheme = tokenizer_scheme(tokenizer)
    added = {
        int(i): tok for i, tok in getattr(tokenizer, "added_tokens_decoder", {}).items()
    }
    pieces = tokenizer.convert_ids_to_tokens(list(range(n)))
    vocab: list[bytes] = []
    special: set[int] = set()
    for i, piece in enumerate(pieces):
        if i in added:
            vocab.append(str(added[i].content).encode())
            if getattr(added[i], "special", False):
                special.add(i)
        elif piece is None:
            # An id the tokenizer does not define (a gap in its table) stands for no text.
            vocab.append(b"")
            special.add(i)
        else:
            vocab.append(token_bytes(piece, scheme))
    for i in getattr(tokenizer, "all_special_ids", []):
        if 0 <= i < n:
            special.add(int(i))
    return vocab, special



def eos_ids(tokenizer: Any, size: int, generation_eos: int | Sequence[int] | None = None,
            name: str = "the model") -> list[int]:
    """The ids that end a sequence, for the HF and vLLM backends.

        E = generation_eos, then tokenizer.eos_token_id   (each None, an id, or a list of ids)

    in that order, keeping the first occurrence of each id in [0, size) (an id past the model's
    output rows can never be drawn).

    Args:
        tokenizer: a transformers tokenizer (anything with ``eos_token_id``).
        size: the vocabulary size (number of output rows).
        generation_eos: ``eos_token_id`` of the model's generation config, when it has one: it
            names the end-of-turn tokens of chat models, which the tokenizer may not.
        name: the model, for the error message.

    Raises:
        ValueError: when no id in [0, size) is named (generation could never end).
        TypeError: when an entry is not an integer id.
    """
    found: list[int] = []
    for source in (generation_eos, getattr(tokenizer, "eos_token_id", None)):
        for i in [] if source is None else [source] if isinstance(source, int) else source:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"eos_token_id must be an integer id or a list of them, got {i!r}")
            if 0 <= i < size and i not in found:
                found.append(i)
    if not found:
        raise ValueError(
            f"{name} names no EOS token id below its vocabulary size {size} "
            f"(generation config: {generation_eos!r}, tokenizer: "
            f"{getattr(tokenizer, 'eos_token_id', None)!r})"
        )
    return found


def decode(lm: LMBackend, tokens: Sequence[int]) -> str:
    """Text of ``tokens`` under ``lm``'s vocabulary (invalid UTF-8, e.g. a character cut by
    max_tokens, becomes U+FFFD)."""
    return b"".join(lm.vocab[t] for t in tokens).decode("utf-8", errors="replace")
