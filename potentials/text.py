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
    """(continuation bytes still due, allowed range of the next one) after leading byte b of a
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
    """How many characters the UTF-8 bytes ``data`` begin (ASCII bytes and leading bytes)."""
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


def utf8_range(part: tuple[int, ...]) -> tuple[int, int] | None:
    """Code points whose UTF-8 encoding starts with the incomplete sequence ``part``."""
    first = part[0]
    if 0xC2 <= first <= 0xDF:
        n, lo_cp, hi_cp, bits = 2, 0x80, 0x7FF, first & 0x1F
    elif 0xE0 <= first <= 0xEF:
        n, lo_cp, hi_cp, bits = 3, 0x800, 0xFFFF, first & 0x0F
    elif 0xF0 <= first <= 0xF4:
        n, lo_cp, hi_cp, bits = 4, 0x10000, MAXCP, first & 0x07
    else:
        return None
    for b in part[1:]:
        if not 0x80 <= b <= 0xBF:
            return None
        bits = (bits << 6) | (b & 0x3F)
    free = 6 * (n - len(part))
    lo, hi = max(bits << free, lo_cp), min(((bits + 1) << free) - 1, hi_cp)
    if n == 3:
        if SUR_LO <= lo and hi <= SUR_HI:
            return None
        if SUR_LO <= hi <= SUR_HI:
            hi = SUR_LO - 1
        if SUR_LO <= lo <= SUR_HI:
            lo = SUR_HI + 1
    return (lo, hi) if lo <= hi else None


def utf8_len(first: int) -> int:
    """Length of the UTF-8 character that ``first`` starts (1 for stray continuation bytes)."""
    return 1 if first < 0xC0 else 2 if first < 0xE0 else 3 if first < 0xF0 else 4


def split_utf8(data: bytes) -> tuple[str, bytes] | None:
    """(text of the complete characters, incomplete last character) or None if invalid UTF-8."""
    try:
        return data.decode("utf-8"), b""
    except UnicodeDecodeError as e:
        tail = data[e.start:]
        if e.end != len(data) or len(tail) >= utf8_len(tail[0]) or utf8_range(tuple(tail)) is None:
            return None
        return data[: e.start].decode("utf-8"), tail
