"""Unicode and UTF-8 facts shared by the text constraints and by lifting.

Code points run from 0 to MAXCP; the UTF-16 surrogates SUR_LO..SUR_HI are code points that no
well-formed UTF-8 text contains.

*Plain text* is the text the ``plain_text_*`` and ``inner_text_key`` hooks of a byte potential
speak of (potentials.contract): non-empty, whole UTF-8 characters, none of them a control
character (< 0x20), '"' or '\\' -- what a JSON string holds unescaped, and most of an LM's
vocabulary. *Raw text* is the same but may stop inside its last character.
"""

from __future__ import annotations

MAXCP = 0x10FFFF
SUR_LO, SUR_HI = 0xD800, 0xDFFF


def utf8_lead(b: int) -> tuple[int, int, int] | None:
    """(continuation bytes still due, allowed range of the next one) after lead byte b of a
    well-formed UTF-8 sequence (Unicode's table 3-7: no overlongs, no surrogates); None when
    b starts none."""
    if 0xC2 <= b <= 0xDF:
        return (1, 0x80, 0xBF)
    if b == 0xE0:
        return (2, 0xA0, 0xBF)
    if b == 0xED:
        return (2, 0x80, 0x9F)  # no UTF-16 surrogates
    if 0xE1 <= b <= 0xEF:
        return (2, 0x80, 0xBF)
    if b == 0xF0:
        return (3, 0x90, 0xBF)
    if 0xF1 <= b <= 0xF3:
        return (3, 0x80, 0xBF)
    if b == 0xF4:
        return (3, 0x80, 0x8F)
    return None


def is_raw_text(data: bytes) -> bool:
    """Raw text: non-empty well-formed UTF-8 that may stop inside its last character, with no
    control byte (< 0x20), '"' or '\\'; plain text (``is_plain_text``) is raw text of whole
    characters."""
    if not data or b'"' in data or b"\\" in data or min(data) < 0x20:
        return False
    due = None  # (continuation bytes still due, allowed range of the next one)
    for b in data:
        if due is not None:
            need, lo, hi = due
            if not lo <= b <= hi:
                return False
            due = (need - 1, 0x80, 0xBF) if need > 1 else None
        elif b >= 0x80:
            due = utf8_lead(b)
            if due is None:
                return False
    return True


def chars_begun(data: bytes) -> int:
    """How many characters the UTF-8 bytes ``data`` begin (ASCII bytes and lead bytes)."""
    return sum(1 for b in data if b < 0x80 or b >= 0xC0)


def is_plain_text(data: bytes) -> bool:
    """Plain text in the sense of ``BytePotential.plain_text_budget``: non-empty, complete
    UTF-8, with no control character (< 0x20), '"' or '\\'."""
    if not data or b'"' in data or b"\\" in data or min(data) < 0x20:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
