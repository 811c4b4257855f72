"""Segments: constraints in sequence (literal text, free text ended by a stop string, any
byte-level constraint), free text with triggered tags (tool calls), and the JSON forms that
build them (structural tags, OpenAI tools, reasoning then an answer)."""

from potentials.segments.potential import (
    Constrained,
    FreeText,
    Literal,
    Part,
    Segments,
    Tag,
    Triggered,
)

__all__ = ["Constrained", "FreeText", "Literal", "Part", "Segments", "Tag", "Triggered"]
