"""Regex: a Boolean constraint that the text fully matches a Python regular expression.

    complete(x) = 0 if re.fullmatch(pattern, x.decode("utf-8")) else -inf
    prefix(x)   = 0 if some byte string y makes complete(x y) = 0 else -inf

Patterns that ``potentials.fsm`` compiles (everything but lookarounds, backreferences,
conditional groups, atomic groups, possessive repeats and regex-package-only syntax) run on a
byte automaton: the state is an int, advancing costs O(1) per byte, and ``prefix`` is exact.

Other patterns fall back to the ``regex`` package. Then the state is the bytes so far, advancing
re-runs ``regex.fullmatch(pattern, text, partial=True)`` on the whole text (O(length), not
incremental), and ``prefix`` is only approximate: a prefix is kept while ``regex`` says a match
may still be completed, so a kept prefix can turn out to have no matching completion (it is never
the other way round in the cases tested). ``complete`` is exact in both modes.
"""

from __future__ import annotations

from typing import Any, Hashable

import regex as regex_pkg

from potentials.base import NEG_INF, BytePotential
from potentials.fsm import InvalidRegex, UnsupportedRegex, _utf8_len, _utf8_range, compile_regex


def split_utf8(data: bytes) -> tuple[str, bytes] | None:
    """(text of the complete characters, incomplete last character) or None if invalid UTF-8."""
    try:
        return data.decode("utf-8"), b""
    except UnicodeDecodeError as e:
        tail = data[e.start:]
        if e.end != len(data) or len(tail) >= _utf8_len(tail[0]) or _utf8_range(tuple(tail)) is None:
            return None
        return data[: e.start].decode("utf-8"), tail


class Regex(BytePotential):
    """Full match of ``pattern`` (Python ``re`` syntax, ``flags`` as in ``re``) over UTF-8 text.

    Raises InvalidRegex (a ValueError naming the problem and its position) for a pattern that
    neither ``re`` nor ``regex`` accepts.
    """

    def __init__(self, pattern: str, flags: int = 0):
        self.pattern, self.flags = pattern, int(flags)
        self.fallback_reason: str | None = None
        try:
            self.dfa = compile_regex(pattern, self.flags)
        except UnsupportedRegex as e:
            self.dfa = None
            self.fallback_reason = str(e)
            try:
                self._rx = regex_pkg.compile(pattern, self.flags)
            except regex_pkg.error as err:
                raise InvalidRegex(pattern, err.msg, err.pos) from None

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r}{', flags=%d' % self.flags if self.flags else ''})"

    def mask_key(self, state: Any) -> Hashable | None:
        """The DFA state (an int: few of them, so lifted masks are shared per state)."""
        return state if self.dfa is not None else None

    @property
    def exact(self) -> bool:
        """True when prefix viability is exact (the pattern compiled to an automaton)."""
        return self.dfa is not None

    @property
    def is_empty(self) -> bool:
        """True when no text matches. In fallback mode only an empty start is detected."""
        if self.dfa is not None:
            return self.dfa.is_empty
        return self.advance(b"", b"") is None

    def initial(self) -> int | bytes:
        return self.dfa.start if self.dfa is not None else b""

    def advance(self, state: int | bytes, data: bytes) -> int | bytes | None:
        if self.dfa is not None:
            if state == self.dfa.start and self.dfa.is_empty:
                return None
            return self.dfa.walk(state, data)
        text = bytes(state) + bytes(data)
        parts = split_utf8(text)
        if parts is None:
            return None
        done, tail = parts
        if not tail and self._rx.fullmatch(done) is not None:
            return text
        return text if self._rx.fullmatch(done, partial=True) is not None else None

    async def state_prefix(self, state: int | bytes) -> float:
        # advance() only returns live states; only the start may be dead (empty language)
        if self.dfa is not None:
            return 0.0 if self.dfa.live(state) else NEG_INF
        if state == b"" and self.advance(b"", b"") is None:
            return NEG_INF
        return 0.0

    async def state_complete(self, state: int | bytes) -> float:
        if self.dfa is not None:
            return 0.0 if self.dfa.accepts(state) else NEG_INF
        parts = split_utf8(state)
        ok = parts is not None and not parts[1] and self._rx.fullmatch(parts[0]) is not None
        return 0.0 if ok else NEG_INF
