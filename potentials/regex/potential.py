"""Regex: a Boolean constraint that the text fully matches a Python regular expression.

    complete(x) = 0 if fullmatch(pattern, x.decode("utf-8")) else -inf
    prefix(x)   = 0 if some byte string y makes complete(x y) = 0 else -inf

``fullmatch`` is Python ``re``'s where ``re`` accepts the pattern, else the ``regex`` package's
(VERSION0 unless the pattern or ``flags`` ask for VERSION1); see ``docs/constraints/regex.md``.

Patterns that ``potentials.regex.automaton`` compiles run on a byte automaton: the state is an int, advancing
costs O(1) per byte, and ``prefix`` is exact.

Other patterns (backreferences, recursion, conditionals, lookarounds, atomic groups, ...) fall
back to the ``regex`` package. Then the state is the bytes so far and advancing asks
``regex.fullmatch(pattern, text, partial=True)`` about the whole text (O(length), not
incremental). With t the text of the complete characters and u an incomplete last character:

    viable(t, "") = fullmatch(pattern, t, partial=True) succeeds
    viable(t, u)  = some character c whose UTF-8 encoding starts with u has viable(t + c, "")

so a fully matching text is extended by a partial character only if some character after it can
continue the match. ``regex``'s partial matching is permissive (a lookahead that reaches the end
of the text makes any text "partial"), so two sound tests run first (``potentials.regex.relax``):
the text must be a live prefix of R(P), a regular superset of L(P) (lookarounds relaxed,
backreferences read as their group's body, recursion as strings of the pattern's characters),
and no extension-stable leading ``(?!C)`` may already match it. Either "dead" is final, so
``prefix`` is at least as tight as the ``regex`` package's partial matching and never loses a
prefix that the package itself keeps. ``complete`` asks R(P) first too (a cheap rejection).
Partial-match answers and R(P)'s states are cached per text (a token check re-asks about its
parent's text).
Every call to ``regex`` runs under a time budget (``timeout`` seconds); a prefix check that runs
out of it keeps the prefix (a satisfiable prefix is never lost) and a completion check that runs
out of it rejects the text (an unverified text is never returned); both are counted in
``budget_exceeded``.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any, Hashable, Iterable, Sequence


from smc.core.logmath import NEG_INF
from potentials.base import BytePotential
from potentials.regex.chars import representatives
from potentials.regex.completion import shortest_completion
from potentials.regex.automaton import (
    ByteDFA,
    InvalidRegex,
    UnsupportedRegex,
    check_flags,
    compile_regex,
    regex_package_compile,
)
from potentials.regex.relax import leading_negative_lookaheads, relaxed_automaton
from potentials.text import split_utf8, utf8_range

#: default time budget (seconds) of one prefix or completion check in fallback mode
DEFAULT_TIMEOUT = 1.0
#: entries kept by each fallback cache (relaxed-automaton states, partial-match answers)
CACHE_SIZE = 1 << 16


@functools.lru_cache(maxsize=64)
def _automaton(pattern: str, flags: int) -> ByteDFA:
    """The pattern's automaton, shared by the Regex objects of one pattern: a ByteDFA fills its
    transition table as texts reach new states, so a later generation with the pattern starts
    with the states earlier ones reached instead of determinizing them again."""
    return compile_regex(pattern, flags, lookaround=True)


class Regex(BytePotential):
    """Full match of ``pattern`` over UTF-8 text (``re`` syntax, widened to ``regex``'s).

    Args:
        pattern: the regular expression, matched against the whole text.
        flags: an int of ``re`` flags (IGNORECASE, MULTILINE, DOTALL, VERBOSE, ASCII, UNICODE)
            and the ``regex`` package's VERSION0/VERSION1; anything else is a ValueError.
        timeout: seconds one check may spend in the ``regex`` package (fallback mode only).

    Raises InvalidRegex (a ValueError naming the problem and its position) for a pattern that
    neither ``re`` nor ``regex`` accepts, TypeError for a non-str pattern or non-int flags.
    """

    def __init__(self, pattern: str, flags: int = 0, timeout: float = DEFAULT_TIMEOUT):
        self.flags = check_flags(flags)
        if not isinstance(pattern, str):
            raise TypeError(f"regex pattern must be a str, got {type(pattern).__name__}")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.pattern, self.timeout = pattern, float(timeout)
        self.fallback_reason: str | None = None
        self.budget_exceeded = 0
        self._tail_cache: dict[tuple[str, bytes], bool] = {}
        try:
            self.dfa = _automaton(pattern, self.flags)
        except UnsupportedRegex as e:
            self.dfa = None
            self.fallback_reason = str(e)
            self._rx = regex_package_compile(pattern, self.flags)
            # sound dead-prefix tests in front of the regex package (potentials.regex.relax)
            self.relaxed = relaxed_automaton(pattern, self.flags)
            self.negative_leads = leading_negative_lookaheads(pattern, self.flags)
            self._relaxed_at: dict[bytes, int] = {}
            self._partial_cache: dict[str, bool] = {}

    def __reduce_ex__(self, protocol: Any) -> Any:
        # on the fallback, the arguments (compiled again on load): the relaxed automaton holds
        # parse trees of re's that do not pickle (a checkpointed run pickles its constraint)
        if self.dfa is not None:
            return super().__reduce_ex__(protocol)
        return (type(self), (self.pattern, self.flags, self.timeout))

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r}{', flags=%d' % self.flags if self.flags else ''})"

    def mask_key(self, state: Any) -> Hashable | None:
        """The DFA state (an int: few of them, so lifted masks are shared per state)."""
        return state if self.dfa is not None else None

    def complete_key(self, state: Any) -> Hashable | None:
        """The DFA state too (it decides acceptance); none on the fallback."""
        return state if self.dfa is not None else None

    def completion(self, state: Any) -> bytes | None:
        """On the fallback, the shortest completion that potentials.regex.completion finds for
        the text (None past its budget, for syntax it does not search, or after an incomplete
        UTF-8 character); None on the automaton."""
        if self.dfa is not None:
            return None
        parts = split_utf8(bytes(state))
        if parts is None or parts[1]:
            return None
        y = shortest_completion(self.pattern, self.flags, parts[0])
        return None if y is None else y.encode("utf-8")

    def plain_text_key(self, state: Any) -> tuple[Hashable, float] | None:
        """On the automaton: (the DFA state, inf), L_k = the DFA from state k survives the
        bytes (``advance`` is that walk for any bytes). None on the fallback or an empty
        language."""
        if self.dfa is None or self.dfa.is_empty:
            return None
        return state, math.inf

    def plain_text_automata(self, key: Hashable) -> Sequence[Sequence[tuple[Any, Any]]] | None:
        """The DFA in state ``key``: lifting reads the plain tokens' L_k off its character
        table (one array gather per depth of the character trie) instead of walking the
        byte trie."""
        return [[(self.dfa, key)]] if self.dfa is not None else None

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
        if parts is None or not self._relaxed_live(bytes(state), bytes(data), text):
            return None
        if self.negative_leads and self._lead_kills(parts[0]):
            return None
        return text if self._viable(*parts) else None

    # -- fallback mode
    def _relaxed_live(self, state: bytes, data: bytes, text: bytes) -> bool:
        """text is a live prefix of the relaxed automaton R(P) ⊇ L(P) (True without one)."""
        dfa = self.relaxed
        if dfa is None:
            return True
        q = self._relaxed_at.get(state)
        q = dfa.walk(dfa.start if q is None else q, text if q is None else data)
        if q is None:
            return False
        if len(self._relaxed_at) > CACHE_SIZE:
            self._relaxed_at.clear()
        self._relaxed_at[text] = q
        return True

    def _lead_kills(self, done: str) -> bool:
        """Some extension-stable leading (?!C) of the pattern already matches at the start of
        ``done``, so no completion can match (potentials.regex.relax); False when out of time."""
        for rx in self.negative_leads:
            try:
                if rx.match(done, timeout=self.timeout) is not None:
                    return True
            except TimeoutError:
                self.budget_exceeded += 1
        return False

    def _partial(self, text: str, deadline: float) -> bool:
        """regex.fullmatch(pattern, text, partial=True) succeeds; True when out of time.
        Answers are remembered per text (a token check re-asks about its parent's text)."""
        got = self._partial_cache.get(text)
        if got is not None:
            return got
        left = deadline - time.monotonic()
        if left <= 0:
            self.budget_exceeded += 1
            return True
        try:
            got = self._rx.fullmatch(text, partial=True, timeout=left) is not None
        except TimeoutError:
            self.budget_exceeded += 1
            return True  # not remembered: a later check may have the time to decide
        if len(self._partial_cache) > CACHE_SIZE:
            self._partial_cache.clear()
        self._partial_cache[text] = got
        return got

    def _viable(self, done: str, tail: bytes) -> bool:
        """viable(done, tail) of the module docstring, within one time budget."""
        deadline = time.monotonic() + self.timeout
        if not self._partial(done, deadline):
            return False
        if not tail:
            return True
        key = (done, tail)
        got = self._tail_cache.get(key)
        if got is None:
            got = self._tail_viable(done, tail, deadline)
            if len(self._tail_cache) > 4096:
                self._tail_cache.clear()
            self._tail_cache[key] = got
        return got

    def _tail_viable(self, done: str, tail: bytes, deadline: float) -> bool:
        # One representative per class of characters the pattern cannot tell apart, plus the
        # characters of ``done`` up to case (backreferences compare with them); see
        # potentials.regex.chars. Without classes every character is tried. Out of time the
        # prefix is kept, never dropped.
        lo, hi = utf8_range(tuple(tail))
        reps = representatives(self.pattern, lo, hi)
        # the classes are computed once per pattern (bounded: linear in its atoms); the budget
        # is for the regex calls
        deadline = max(deadline, time.monotonic() + self.timeout)
        if reps is None:
            cands: Iterable[int] = range(lo, hi + 1)
        else:
            seen = set(reps)
            for ch in set(done):
                for v in (ch, ch.lower(), ch.upper(), ch.casefold(), ch.title()):
                    if len(v) == 1 and lo <= ord(v) <= hi:
                        seen.add(ord(v))
            cands = sorted(seen)
        rx = self._rx
        for k, cp in enumerate(cands):
            left = deadline - time.monotonic() if k % 256 == 0 else left
            if left <= 0:
                self.budget_exceeded += 1
                return True
            try:
                if rx.fullmatch(done + chr(cp), partial=True, timeout=max(left, 1e-3)) is not None:
                    return True
            except TimeoutError:
                self.budget_exceeded += 1
                return True
        return False

    async def state_prefix(self, state: int | bytes) -> float:
        # advance() only returns live states; only the start may be dead (empty language)
        if self.dfa is not None:
            return 0.0 if self.dfa.live(state) else NEG_INF
        if state == b"" and self.advance(b"", b"") is None:
            return NEG_INF
        return 0.0

    async def complete_after(self, state: int | bytes, data: bytes) -> float:
        """state_complete(advance(state, data)). On the fallback the text is asked about
        directly: a text ``regex.fullmatch`` accepts is in R(P), escapes the leading lookaheads
        and is a partial match, so ``advance`` would have kept it."""
        if self.dfa is not None:
            nxt = self.dfa.walk(state, data)
            return 0.0 if nxt is not None and self.dfa.accepts(nxt) else NEG_INF
        state, data = bytes(state), bytes(data)
        if not self._relaxed_accepts(state, data):
            return NEG_INF
        return await self._fullmatch(state + data)

    async def state_complete(self, state: int | bytes) -> float:
        if self.dfa is not None:
            return 0.0 if self.dfa.accepts(state) else NEG_INF
        if not self._relaxed_accepts(bytes(state), b""):
            return NEG_INF  # outside R(P) ⊇ L(P)
        return await self._fullmatch(bytes(state))

    def _relaxed_accepts(self, state: bytes, data: bytes) -> bool:
        """state + data is in R(P) (True without R(P)); from the cached state of ``state``."""
        dfa = self.relaxed
        if dfa is None:
            return True
        q = self._relaxed_at.get(state)
        q = dfa.walk(dfa.start, state + data) if q is None else dfa.walk(q, data)
        return q is not None and dfa.accepts(q)

    async def _fullmatch(self, state: bytes) -> float:
        """0 if the text fully matches (regex package, within the time budget), else -inf."""
        parts = split_utf8(state)
        if parts is None or parts[1]:
            return NEG_INF
        try:
            ok = self._rx.fullmatch(parts[0], timeout=self.timeout) is not None
        except TimeoutError:
            self.budget_exceeded += 1
            ok = False
        return 0.0 if ok else NEG_INF
