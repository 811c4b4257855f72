"""Regular expressions compiled to automata over UTF-8 bytes, with exact liveness.

For a pattern P read as a full match over text the byte language is

    L(P) = { s.encode("utf-8") : fullmatch(P, s) }

with ``fullmatch`` Python ``re``'s where ``re`` compiles P, else the ``regex`` package's. And
``ByteDFA.step(q, b)`` is None exactly when no byte string continuing the prefix reaches L(P):
dead ends are found as soon as they exist (``a{3}b`` after ``aaaa``), and a prefix that stops
inside a multi-byte character is alive iff some completion of that character is.

Route: Python's own parser (``re._parser``, reached through ``potentials._compat``) gives the
syntax tree; a Thompson NFA is built over code-point sets, with the zero-width anchors
(``^ $ \\A \\Z \\b \\B``) and lookbehinds kept as guarded epsilon edges; code points are grouped
into classes that every set treats alike; a lazily built DFA over those classes tracks the
previous character's kind (for anchors) and the state of each lookbehind's own automaton; a UTF-8
layer on top turns bytes into characters. Every transition is computed once and then looked up
in O(1).

- Lookarounds only with ``compile_regex(..., lookaround=True)`` (the ``Regex`` potential, which
  reads the pattern as a full match of the whole text; a grammar terminal would see its
  neighbours instead).
- Lookbehind ``(?<=B)`` / ``(?<!B)``: the guard holds where the text so far is (is not) in
  L((?s:.*)B), read off B's automaton stepped along with the main one. B may not look past its
  own end (``$ \\Z \\b \\B``, lookarounds, backreferences): those stay unsupported.
- ``regex``-package-only syntax (``\\p{..}``, VERSION1 set operations, ``(?<name>..)``): see
  ``potentials.regex.syntax``; its character tests are computed by the ``regex`` package itself.
- Case-insensitive sets are made exact by asking Python's ``re`` itself about every cased code
  point, so ``IGNORECASE`` agrees with ``re`` including its special folds (e.g. the Kelvin sign).
- Lookaheads, backreferences, conditional groups, atomic groups and possessive repeats raise
  ``UnsupportedRegex``; so do automata beyond ``MAX_NFA_STATES`` / ``MAX_DFA_STATES``
  (``RegexTooLarge``), found while compiling, never while generating.
"""

from __future__ import annotations

import bisect
import functools
import re
import threading
from array import array
from typing import Any, Iterable

import numpy as np
import regex

from potentials._compat import (
    C,
    parse_regex,
    require,
    subtrees,
    tree_flags,
    tree_items,
    unicode_iscased,
    unicode_tolower,
    width,
)
from potentials.regex.chars import all_chars
from potentials.regex.syntax import translate
from potentials.text import MAXCP, SUR_HI, SUR_LO, utf8_len, utf8_range
from smc.core.errors import InvalidArgument

UNCOMPUTED, DEAD = -2, -1
_NEW_ROW = array("i", [UNCOMPUTED] * 256)
#: largest NFA built for a short pattern; bigger ones raise RegexTooLarge (the Regex potential
#: then falls back to the `regex` package, which counts repeats instead of unrolling them). A
#: long pattern may have NFA_STATES_PER_CHAR states per character of its text: without repeats
#: the NFA has at most one state per character (a literal alternation is built as a trie), so
#: the limit only ever stops repeats that multiply the text, never a long plain pattern (a word
#: list of 50,000 words, a 100,000-character literal)
MAX_NFA_STATES = 100_000
NFA_STATES_PER_CHAR = 2
#: largest character-level DFA explored (patterns with anchors explore all reachable states up
#: front to settle liveness) for a small NFA; bigger ones raise RegexTooLarge. A larger NFA may
#: have as many DFA states as NFA states: the DFA of a trie (a word list) is the trie itself, and
#: what the limit stops is the exponential blow-up of determinization, not linear growth
MAX_DFA_STATES = 20_000
#: characters of a pattern quoted in an error message (the rest is summarized by its length)
SHOWN_CHARS = 80


def shown(pattern: str) -> str:
    """``repr(pattern)``, cut to SHOWN_CHARS characters with its length when longer: error
    messages stay one short line whatever the pattern's size."""
    if len(pattern) <= SHOWN_CHARS:
        return repr(pattern)
    return f"{pattern[:SHOWN_CHARS]!r}... ({len(pattern):,} characters)"


def nfa_limit(pattern: str) -> int:
    """Most NFA states a pattern's automaton may have: max(MAX_NFA_STATES,
    NFA_STATES_PER_CHAR * len(pattern))."""
    return max(MAX_NFA_STATES, NFA_STATES_PER_CHAR * len(pattern))

#: the flags ``Regex``/``compile_regex`` take: Python re's, less LOCALE (bytes patterns only),
#: TEMPLATE and DEBUG
RE_FLAGS = int(re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE | re.ASCII | re.UNICODE)

Intervals = tuple[tuple[int, int], ...]


class UnsupportedRegex(InvalidArgument):
    """A valid pattern that uses a feature this automaton cannot express (lookarounds, ...)."""


class RegexTooLarge(UnsupportedRegex):
    """A pattern whose automaton would exceed ``MAX_NFA_STATES`` (e.g. ``a{10000000}``)."""


class InvalidRegex(InvalidArgument):
    """A pattern Python's ``re`` rejects; ``msg`` and ``pos`` are re's own."""

    def __init__(self, pattern: str, msg: str, pos: int | None):
        super().__init__(f"invalid regex {shown(pattern)}: {msg}{_at(pos)}")
        self.msg, self.pos = msg, pos


# ---------------------------------------------------------------------------- code-point sets


def normalized_intervals(ivs: Iterable[tuple[int, int]]) -> Intervals:
    """The union of the closed ranges ``ivs``, as sorted disjoint non-adjacent ranges."""
    out: list[list[int]] = []
    for lo, hi in sorted(ivs):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def _complement(ivs: Intervals) -> Intervals:
    out, nxt = [], 0
    for lo, hi in ivs:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAXCP:
        out.append((nxt, MAXCP))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _category(escape: str, ascii_: bool) -> Intervals:
    """The code points ``re`` puts in ``\\d``, ``\\w`` or ``\\s`` (read off re itself; no
    surrogate is in any of them)."""
    rx = re.compile(escape + "+", re.ASCII if ascii_ else 0)
    return tuple((m.start(), m.end() - 1) for m in rx.finditer(all_chars()))


@functools.lru_cache(maxsize=1)
def cased_code_points() -> tuple[int, ...]:
    """Every code point that takes part in any case mapping (a generous superset)."""
    out = set()
    for cp in range(MAXCP + 1):
        if SUR_LO <= cp <= SUR_HI:
            continue
        ch = chr(cp)
        if unicode_iscased(cp) or ch.lower() != ch or ch.upper() != ch or ch.casefold() != ch:
            out.add(cp)
            out.add(unicode_tolower(cp))
            for s in (ch.lower(), ch.upper(), ch.casefold()):
                if len(s) == 1:
                    out.add(ord(s))
    return tuple(sorted(out))


_CATEGORY = {
    C.CATEGORY_DIGIT: ("\\d", False), C.CATEGORY_NOT_DIGIT: ("\\d", True),
    C.CATEGORY_SPACE: ("\\s", False), C.CATEGORY_NOT_SPACE: ("\\s", True),
    C.CATEGORY_WORD: ("\\w", False), C.CATEGORY_NOT_WORD: ("\\w", True),
}


def render_item(op, av) -> str:
    """One set item in re syntax (so that re itself can be asked about it)."""
    if op is C.LITERAL:
        return "\\U%08x" % av
    if op is C.RANGE:
        return "\\U%08x-\\U%08x" % av
    if op is C.CATEGORY:
        esc, neg = _CATEGORY[av]
        return esc.upper() if neg else esc
    raise AssertionError(op)


def _item_set(op, av, ascii_: bool) -> Intervals:
    if op is C.LITERAL:
        return ((av, av),)
    if op is C.RANGE:
        return ((av[0], av[1]),)
    if op is C.CATEGORY:
        esc, neg = _CATEGORY[av]
        s = _category(esc, ascii_)
        return _complement(s) if neg else s
    raise AssertionError(op)


@functools.lru_cache(maxsize=4096)
def _charset(items: tuple, flags: int) -> Intervals:
    """Code points matched by the set ``[items]`` under ``flags`` (IGNORECASE settled by re)."""
    ascii_ = bool(flags & C.SRE_FLAG_ASCII)
    negate = bool(items) and items[0][0] is C.NEGATE
    body = items[1:] if negate else items
    ivs = normalized_intervals(iv for op, av in body for iv in _item_set(op, av, ascii_))
    if flags & C.SRE_FLAG_IGNORECASE and body:
        rx = re.compile("[" + "".join(render_item(op, av) for op, av in body) + "]",
                        re.IGNORECASE | (re.ASCII if ascii_ else 0))
        cased = cased_code_points()
        hits = [(cp, cp) for cp in cased if rx.fullmatch(chr(cp))]
        # outside the cased code points membership is the plain one
        keep: list[tuple[int, int]] = []
        for lo, hi in ivs:
            i = bisect.bisect_left(cased, lo)
            start = lo
            while i < len(cased) and cased[i] <= hi:
                if cased[i] > start:
                    keep.append((start, cased[i] - 1))
                start = cased[i] + 1
                i += 1
            if start <= hi:
                keep.append((start, hi))
        ivs = normalized_intervals(keep + hits)
    return _complement(ivs) if negate else ivs


# ---------------------------------------------------------------------------- NFA

# zero-width assertions on epsilon edges
BEGIN, BOL, END_Z, EOL, DOLLAR, BOUND, NONBOUND, BOUND_A, NONBOUND_A = range(9)
_UNSUPPORTED = {
    C.GROUPREF: "backreference", C.GROUPREF_EXISTS: "conditional group",
    C.ATOMIC_GROUP: "atomic group", C.POSSESSIVE_REPEAT: "possessive repeat",
}


class NFA:
    """A Thompson NFA over code-point sets under construction: ``build`` adds a parse tree's
    items between two states; ``ByteDFA`` determinizes it (the relaxed automata of
    potentials.regex.relax extend it)."""

    def __init__(self, pattern: str = "", placeholders: dict[int, Intervals] | None = None,
                 lookaround: bool = False):
        self.pattern, self.allow_lookaround = pattern, lookaround
        self.limit = nfa_limit(pattern)
        # private-use code points standing for character sets (potentials.regex.syntax)
        self.placeholders = placeholders or {}
        self.eps: list[list[tuple[int | None, int]]] = []
        self.chars: list[list[tuple[int, int]]] = []
        self.sets: list[Intervals] = []
        self._set_ids: dict[Intervals, int] = {}
        self.has_assertions = False
        # lookbehinds (?<=B) / (?<!B): (ByteDFA of (?s:.*)B, positive?) -- guards on epsilon edges
        self.lookbehinds: list[tuple["ByteDFA", bool]] = []
        # lookaheads that only the end of the text can see: (NFA of C, its start, its final)
        self.lookaheads: list[tuple["NFA", int, int, bool]] = []
        self._la_edges: list[int] = []  # their targets, checked by check_lookaheads

    def new(self) -> int:
        if len(self.eps) >= self.limit:
            raise RegexTooLarge(f"regex {shown(self.pattern)} needs more than {self.limit:,} "
                                "automaton states (its repeat counts multiply it beyond that)")
        self.eps.append([])
        self.chars.append([])
        return len(self.eps) - 1

    def set_id(self, ivs: Intervals) -> int:
        if ivs not in self._set_ids:
            self._set_ids[ivs] = len(self.sets)
            self.sets.append(ivs)
        return self._set_ids[ivs]

    def char(self, src: int, ivs: Intervals) -> int:
        dst = self.new()
        if ivs:
            self.chars[src].append((self.set_id(ivs), dst))
        return dst

    def build(self, seq, src: int, flags: int, pattern: str) -> int:
        """Add the sequence of parse items starting at ``src``; returns its end state."""
        cur = src
        for op, av in seq:
            cur = self.item(op, av, cur, flags, pattern)
        return cur

    def item(self, op, av, cur: int, flags: int, pattern: str) -> int:
        if op in (C.ASSERT, C.ASSERT_NOT):
            if not self.allow_lookaround:
                raise UnsupportedRegex(f"regex {shown(pattern)} uses a lookaround, which is not "
                                       "regular on its own (compile_regex(lookaround=False))")
            if av[0] == -1:
                return self.lookbehind(av[1], op is C.ASSERT, cur, flags, pattern)
            return self.lookahead(av[1], op is C.ASSERT, cur, flags, pattern)
        if op is C.POSSESSIVE_REPEAT or op is C.ATOMIC_GROUP:
            return self.atomic(op, av, cur, flags, pattern)
        if op in _UNSUPPORTED:
            raise UnsupportedRegex(f"regex {shown(pattern)} uses a {_UNSUPPORTED[op]}, which a finite "
                                   "automaton cannot express")
        ivs = self.char_set(op, av, flags)
        if ivs is not None:
            return self.char(cur, ivs)
        if op is C.SUBPATTERN:
            _, add, remove, sub = av
            return self.build(sub, cur, (flags | add) & ~remove, pattern)
        if op is C.BRANCH:
            words = self.words(av[1], flags)
            if words is not None:
                return self.trie(words, cur)
            end = self.new()
            for alt in av[1]:
                start = self.new()
                self.eps[cur].append((None, start))
                self.eps[self.build(alt, start, flags, pattern)].append((None, end))
            return end
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, sub = av
            for _ in range(lo):
                cur = self.build(sub, cur, flags, pattern)
            if hi is C.MAXREPEAT:
                start = self.new()
                self.eps[cur].append((None, start))
                self.eps[self.build(sub, start, flags, pattern)].append((None, start))
                return start
            end = self.new()
            for _ in range(hi - lo):
                self.eps[cur].append((None, end))
                cur = self.build(sub, cur, flags, pattern)
            self.eps[cur].append((None, end))
            return end
        if op is C.AT:
            self.has_assertions = True
            ml = bool(flags & C.SRE_FLAG_MULTILINE)
            ascii_ = bool(flags & C.SRE_FLAG_ASCII)
            kind = {
                C.AT_BEGINNING: BOL if ml else BEGIN, C.AT_BEGINNING_STRING: BEGIN,
                C.AT_END: EOL if ml else DOLLAR, C.AT_END_STRING: END_Z,
                C.AT_BOUNDARY: BOUND_A if ascii_ else BOUND,
                C.AT_NON_BOUNDARY: NONBOUND_A if ascii_ else NONBOUND,
            }.get(av)
            if kind is None:
                raise UnsupportedRegex(f"regex {shown(pattern)} uses the anchor {av}")
            dst = self.new()
            self.eps[cur].append((kind, dst))
            return dst
        raise UnsupportedRegex(f"regex {shown(pattern)} uses {op}, which is not supported")


    def words(self, alternatives, flags: int) -> list[tuple[Intervals, ...]] | None:
        """Each alternative as its sequence of one-character sets, when every alternative is a
        plain sequence of one-character items (a word list, an enum of names); else None."""
        out = []
        for alt in alternatives:
            word = []
            for op, av in alt:
                ivs = self.char_set(op, av, flags)
                if ivs is None or not ivs:
                    return None
                word.append(ivs)
            out.append(tuple(word))
        return out

    def trie(self, words: list[tuple[Intervals, ...]], cur: int) -> int:
        """The alternation of ``words`` from ``cur``, as a trie: alternatives that begin alike
        share their states, so the NFA has at most one state per character of the pattern
        (Thompson's construction: one per character and alternative, plus each alternative's
        epsilon edges) and, with distinct sets at each node, is already deterministic. The
        language is the same: a path of the trie spells exactly one alternative's prefix."""
        end = self.new()
        children: dict[tuple[int, Intervals], int] = {}
        for word in words:
            node = cur
            for ivs in word:
                nxt = children.get((node, ivs))
                if nxt is None:
                    nxt = children[(node, ivs)] = self.char(node, ivs)
                node = nxt
            self.eps[node].append((None, end))
        return end

    def char_set(self, op, av, flags: int) -> Intervals | None:
        """The code points a one-character item matches, or None for other items."""
        if self.placeholders and op in (C.LITERAL, C.IN):
            items = [(op, av)] if op is C.LITERAL else list(av)
            held = [self.placeholders[a] for o, a in items if o is C.LITERAL
                    and a in self.placeholders]
            if held:
                # re's parser merges one-character branches into a set: (LITERAL u_T | ...)
                rest = [(o, a) for o, a in items if not (o is C.LITERAL and a in self.placeholders)]
                if rest and rest[0][0] is C.NEGATE:
                    raise AssertionError("a negated set holding a placeholder")
                ivs = _charset(tuple(rest), flags) if rest else ()
                return normalized_intervals([*ivs, *(iv for s in held for iv in s)])
        if op is C.LITERAL:
            return _charset(((C.LITERAL, av),), flags)
        if op is C.NOT_LITERAL:
            return _complement(_charset(((C.LITERAL, av),), flags))
        if op is C.ANY:
            return ((0, MAXCP),) if flags & C.SRE_FLAG_DOTALL else _complement(((10, 10),))
        if op is C.IN:
            return _charset(tuple(av), flags)
        if op is C.SUBPATTERN and len(av[3]) == 1:
            (sop, sav), = av[3]
            return self.char_set(sop, sav, (flags | av[1]) & ~av[2])
        return None

    def single(self, seq, flags: int) -> Intervals | None:
        """The set S when the sequence ``seq`` is one one-character item, else None."""
        items = list(seq)
        return self.char_set(*items[0], flags) if len(items) == 1 else None

    def atomic(self, op, av, cur: int, flags: int, pattern: str) -> int:
        """Atomic groups and possessive repeats, where the cut provably keeps the language:

        - S{m,n}+ and (?>S{m,n}) for one character set S: the repeat takes min(n, run of S)
          characters, i.e. all n of them, or fewer with no S next: S{n} | S{m,n-1}(?![S]);
        - (?>S{m,n}?): the lazy repeat commits to its fewest, S{m};
        - (?>X) where every match of X has one length (no lookarounds, no backreferences): then
          at most one match of X starts a given text, so the cut never removes an alternative.
        Anything else stays unsupported.
        """
        what = "possessive repeat" if op is C.POSSESSIVE_REPEAT else "atomic group"
        if op is C.POSSESSIVE_REPEAT:
            lo, hi, sub = av
            s = self.single(sub, flags)
            if s is not None:
                return self.possessive(cur, s, lo, hi)
        else:
            items = list(av)
            if len(items) == 1 and items[0][0] in (C.MAX_REPEAT, C.POSSESSIVE_REPEAT, C.MIN_REPEAT):
                rop, (lo, hi, sub) = items[0]
                s = self.single(sub, flags)
                if s is not None and rop is C.MIN_REPEAT:
                    for _ in range(lo):
                        cur = self.char(cur, s)
                    return cur
                if s is not None:
                    return self.possessive(cur, s, lo, hi)
            wlo, whi = width(av)
            if wlo == whi and _no_lookarounds(items):
                return self.build(items, cur, flags, pattern)
        raise UnsupportedRegex(f"regex {shown(pattern)} uses a {what} whose cut this automaton "
                               "cannot express")

    def possessive(self, cur: int, s: Intervals, lo: int, hi: int) -> int:
        """S{lo,hi}+ : S{hi} | S{lo,hi-1} followed by a guard that the next character is not in S."""
        end = self.new()
        if hi is not C.MAXREPEAT:
            a = cur
            for _ in range(hi):
                a = self.char(a, s)
            self.eps[a].append((None, end))
            if hi == lo:
                return end
        b = cur
        for _ in range(lo):
            b = self.char(b, s)
        if hi is C.MAXREPEAT:
            loop = self.new()
            self.eps[b].append((None, loop))
            if s:
                self.chars[loop].append((self.set_id(s), loop))
            b = loop
        else:
            opt = self.new()
            for _ in range(hi - 1 - lo):
                self.eps[b].append((None, opt))
                b = self.char(b, s)
            self.eps[b].append((None, opt))
            b = opt
        self.has_assertions = True
        self.eps[b].append((("NX", self.set_id(s), False), end))
        return end

    def lookbehind(self, body, positive: bool, cur: int, flags: int, pattern: str) -> int:
        """A guard that holds where the text so far is in L((?s:.*)B) (or is not, for (?<!B)).

        B is read as a full match ending here, so anchors inside B that look at the next
        character ($, \\Z, \\b, \\B) would see the end of the prefix instead: those stay
        unsupported, as do lookarounds and backreferences inside B.
        """
        if not _lookbehind_body_ok(body):
            raise UnsupportedRegex(f"regex {shown(pattern)} uses a lookbehind whose body has "
                                   "lookarounds, backreferences or end anchors")
        sub = NFA(pattern, self.placeholders)
        loop = sub.new()
        sub.chars[loop].append((sub.set_id(((0, MAXCP),)), loop))
        final = sub.build(body, loop, flags, pattern)
        self.lookbehinds.append((ByteDFA(sub, loop, final), positive))
        self.has_assertions = True
        dst = self.new()
        self.eps[cur].append((("LB", len(self.lookbehinds) - 1, positive), dst))
        return dst

    def lookahead(self, body, positive: bool, cur: int, flags: int, pattern: str) -> int:
        """A lookahead (?=C) / (?!C) that nothing after it consumes: it is only ever asked at the
        end of the text, where it holds iff C matches the empty string there (anchors in C see the
        previous character and the end). Where text could follow it, it is unsupported; that is
        checked once the whole NFA is built (``check_lookaheads``)."""
        if not _no_lookarounds(body):
            raise UnsupportedRegex(f"regex {shown(pattern)} uses a lookahead holding lookarounds or "
                                   "backreferences")
        sub = NFA(pattern, self.placeholders)
        start = sub.new()
        final = sub.build(body, start, flags, pattern)
        self.lookaheads.append((sub, start, final, positive))
        self.has_assertions = True
        dst = self.new()
        self.eps[cur].append((("LA", len(self.lookaheads) - 1, positive), dst))
        self._la_edges.append(dst)
        return dst

    def check_lookaheads(self) -> None:
        """Every lookahead's target must reach no character edge (then only the end sees it)."""
        for dst in self._la_edges:
            seen, stack = {dst}, [dst]
            while stack:
                q = stack.pop()
                if self.chars[q]:
                    raise UnsupportedRegex(f"regex {shown(self.pattern)} uses a lookahead that text "
                                           "can follow, which this automaton cannot express")
                for _, t in self.eps[q]:
                    if t not in seen:
                        seen.add(t)
                        stack.append(t)


def _no_lookarounds(seq) -> bool:
    for op, av in seq:
        if op in (C.ASSERT, C.ASSERT_NOT, C.GROUPREF, C.GROUPREF_EXISTS):
            return False
        if not all(_no_lookarounds(sub) for sub in subtrees(op, av)):
            return False
    return True


def _lookbehind_body_ok(seq) -> bool:
    for op, av in seq:
        if op in (C.ASSERT, C.ASSERT_NOT, C.GROUPREF, C.GROUPREF_EXISTS):
            return False
        if op is C.AT and av not in (C.AT_BEGINNING, C.AT_BEGINNING_STRING):
            return False
        if not all(_lookbehind_body_ok(sub) for sub in subtrees(op, av)):
            return False
    return True


def _empty_at_end(sub: "NFA", start: int, final: int, prev) -> bool:
    """Does C match the empty string at the end of the text, after a character of kind prev?"""
    seen, stack = {start}, [start]
    while stack:
        q = stack.pop()
        if q == final:
            return True
        for kind, t in sub.eps[q]:
            if kind is None or kind == DOLLAR or _holds(kind, prev, None):
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
    return False


# ---------------------------------------------------------------------------- the automaton

# A character's kind as anchors see it: (is newline, is Unicode word, is ASCII word).
Kind = tuple[bool, bool, bool]
_NEWLINE: Kind = (True, False, False)


def _holds(kind: int, prev: Kind | None, nxt: Kind | None) -> bool:
    if kind == BEGIN:
        return prev is None
    if kind == BOL:
        return prev is None or prev[0]
    if kind == END_Z:
        return nxt is None
    if kind == EOL:
        return nxt is None or nxt[0]
    k = 1 if kind in (BOUND, NONBOUND) else 2
    a = prev is not None and prev[k]
    b = nxt is not None and nxt[k]
    if kind in (BOUND, BOUND_A):
        return a != b
    return a == b and not (prev is None and nxt is None)  # re's \B fails on empty text


def _dense(rows: list[list[int]], width: int) -> "np.ndarray":
    """``rows`` (-1: dead) as an int32 array with a last, absorbing dead row."""
    dead = len(rows)
    table = np.full((dead + 1, width), dead, dtype=np.int32)
    if rows:
        got = np.asarray(rows, dtype=np.int32).reshape(dead, width)
        table[:dead] = np.where(got < 0, dead, got)
    return table


class ByteDFA:
    """Deterministic automaton over UTF-8 bytes for one regex, built lazily.

    ``start`` is the empty prefix's state; ``step(q, b)`` the state after byte b, or None when
    no continuation can reach a full match (exact); ``accepts(q)``: the bytes so far fully match.
    One automaton may serve several constraints (``Regex`` objects of one pattern, JSON schemas
    with one pattern), also from several threads: the lazy construction runs under a lock, and
    reading transitions already built takes none.
    """

    def __init__(self, nfa: NFA, start: int, final: int):
        self._lock = threading.RLock()
        self._nfa, self._final, self._has_at = nfa, final, nfa.has_assertions
        sets = list(nfa.sets)
        if self._has_at:
            # anchors need to know newlines and word characters
            sets += [((10, 10),), _category("\\w", False), _category("\\w", True)]
        self._lbs = nfa.lookbehinds
        for lb, _ in self._lbs:
            # classes refine every lookbehind automaton's classes, so one step drives both
            sets += list(lb._nfa.sets)
        self._classify(sets, len(nfa.sets))
        # character-level DFA: states are (kernel, kind of previous char or None at start)
        self._cstates: list[tuple[frozenset, Kind | None]] = []
        self._cids: dict[tuple[frozenset, Kind | None], int] = {}
        self._cdelta: dict[tuple[int, int], int] = {}
        self._closures: dict[tuple[int, Kind | None | int], frozenset] = {}
        self._clive: dict[int, bool] = {}
        # byte-level states: (character state, incomplete UTF-8 bytes)
        self._bstates: list[tuple[int, tuple[int, ...]]] = []
        self._bids: dict[tuple[int, tuple[int, ...]], int] = {}
        # one row of 256 transitions per byte state, as int arrays (untracked by the garbage
        # collector, which would otherwise walk every row at each pass)
        self._trans: list[array] = []
        self._high: set[int] = set()  # the states whose high bytes _fill_high decided
        self._accept: list[bool | None] = []
        self._leads: dict[tuple[int, ...], tuple[int, ...] | None] = {}
        # char_table's characters (code points, their classes used, the class of each) and
        # its rows so far (character state -> row, rows), and those rows as one array
        self._chars: tuple | None = None
        self._char_dense: "np.ndarray | None" = None
        self._coreach = None if self._has_at else self._coreachable()
        lbs = tuple(lb._bstates[lb.start][0] for lb, _ in self._lbs)
        init = self._cid(frozenset({(start, 0)}), None if self._has_at else (), lbs)
        self.start: int = self._bid(init, ())
        if self._has_at:
            # explores every reachable state now, so that a blow-up is found while compiling
            # (RegexTooLarge) and never in the middle of generation
            self._live(init)

    # -- classes of code points that every set treats alike
    def _classify(self, sets: list[Intervals], n_nfa_sets: int) -> None:
        cuts = {0, MAXCP + 1, SUR_LO, SUR_HI + 1}
        for s in sets:
            for lo, hi in s:
                cuts.add(lo)
                cuts.add(hi + 1)
        bounds = sorted(cuts)[:-1]
        masks = [0] * len(bounds)
        for m, s in enumerate(sets):
            for lo, hi in s:
                i = bisect.bisect_left(bounds, lo)
                while i < len(bounds) and bounds[i] <= hi:
                    masks[i] |= 1 << m
                    i += 1
        ids: dict[int, int] = {}
        iv_class = []
        for start, mask in zip(bounds, masks):
            if start == SUR_LO:
                iv_class.append(-1)  # surrogates never come from UTF-8
                continue
            iv_class.append(ids.setdefault(mask, len(ids)))
        self._bounds, self._iv_class = bounds, iv_class
        self._class_mask = [0] * len(ids)
        for mask, k in ids.items():
            self._class_mask[k] = mask & ((1 << n_nfa_sets) - 1)
        self._class_kind: list[Kind] = [()] * len(ids)  # type: ignore[list-item]
        if self._has_at:
            nl, wu, wa = n_nfa_sets, n_nfa_sets + 1, n_nfa_sets + 2
            for mask, k in ids.items():
                self._class_kind[k] = (bool(mask >> nl & 1), bool(mask >> wu & 1),
                                       bool(mask >> wa & 1))
        self._n_classes = len(ids)
        self._class_rep = [0] * len(ids)
        for start, k in zip(reversed(bounds), reversed(iv_class)):
            if k >= 0:
                self._class_rep[k] = start
        self._ascii_class = [self._class_of(b) for b in range(128)]

    @property
    def class_bounds(self) -> list[int]:
        """The sorted code points b_0 = 0 < b_1 < ... where the automaton's character classes
        change: the code points of [b_i, b_{i+1}) are treated alike by every transition."""
        return self._bounds

    def _class_of(self, cp: int) -> int:
        return self._iv_class[bisect.bisect_right(self._bounds, cp) - 1]

    def _prefix_classes(self, part: tuple[int, ...]) -> tuple[int, ...] | None:
        """The classes of the characters whose UTF-8 encoding begins with the bytes ``part``
        (one class when ``part`` is a whole character), None when no character does; kept
        per prefix, since every state's leading and continuation bytes ask it again."""
        got = self._leads.get(part, self)
        if got is self:
            span = utf8_range(part)
            if span is None:
                got = None
            elif len(part) == utf8_len(part[0]):
                got = (self._class_of(span[0]),)
            else:
                got = tuple(sorted(self._classes_in(*span)))
            self._leads[part] = got
        return got

    def _classes_in(self, lo: int, hi: int) -> set[int]:
        i = bisect.bisect_right(self._bounds, lo) - 1
        j = bisect.bisect_right(self._bounds, hi) - 1
        return {k for k in self._iv_class[i:j + 1] if k >= 0}

    # -- character-level DFA
    def _cid(self, kernel: frozenset, prev: Kind | None, lbs: tuple = ()) -> int:
        if not kernel:
            return DEAD
        key = (kernel, prev, lbs)
        sid = self._cids.get(key)
        if sid is None:
            limit = max(MAX_DFA_STATES, len(self._nfa.eps))
            if len(self._cstates) >= limit:
                raise RegexTooLarge(f"regex {shown(self._nfa.pattern)} needs more than "
                                    f"{limit:,} automaton states")
            sid = self._cids[key] = len(self._cstates)
            self._cstates.append(key)
        return sid

    def _closure(self, sid: int, k: int | None) -> frozenset:
        """Epsilon closure of a state's kernel, anchors judged with the next char's kind.

        Elements are (nfa state, flag): flag 1 means the rest of the text must be exactly
        "\\n" (a ``$`` passed before a final newline), flag 2 that the text must end here.
        """
        key = (sid, k)
        nxt = None if k is None else self._class_kind[k]
        got = self._closures.get(key)
        if got is not None:
            return got
        kernel, prev, lbs = self._cstates[sid]
        eps = self._nfa.eps
        seen = set(kernel)
        stack = list(kernel)
        while stack:
            q, flag = stack.pop()
            ahead = None if flag == 2 else _NEWLINE if flag == 1 else nxt
            ahead_k = None if flag == 2 else self._ascii_class[10] if flag == 1 else k
            for kind, dst in eps[q]:
                if kind is None:
                    item = (dst, flag)
                elif kind == DOLLAR:
                    if ahead is None:
                        item = (dst, flag)
                    elif ahead[0]:
                        item = (dst, 1)
                    else:
                        continue
                elif type(kind) is tuple and kind[0] == "NX":
                    # the next character is (is not) in one of the NFA's sets
                    inside = ahead_k is not None and bool(self._class_mask[ahead_k] >> kind[1] & 1)
                    if inside != kind[2]:
                        continue
                    item = (dst, flag)
                elif type(kind) is tuple and kind[0] == "LA":
                    if ahead is not None:
                        continue  # nothing after it consumes: only the end can see it
                    sub, s0, f0, positive = self._nfa.lookaheads[kind[1]]
                    if _empty_at_end(sub, s0, f0, prev) != positive:
                        continue
                    item = (dst, flag)
                elif type(kind) is tuple:
                    lb, positive = self._lbs[kind[1]]
                    if lb._caccepts(lbs[kind[1]]) != positive:
                        continue
                    item = (dst, flag)
                elif _holds(kind, prev, ahead):
                    item = (dst, flag)
                else:
                    continue
                if item not in seen:
                    seen.add(item)
                    stack.append(item)
        got = self._closures[key] = frozenset(seen)
        return got

    def _cstep(self, sid: int, k: int) -> int:
        key = (sid, k)
        got = self._cdelta.get(key)
        if got is not None:
            return got
        kind = self._class_kind[k] if self._has_at else None
        is_nl = kind is not None and kind[0]
        mask = self._class_mask[k]
        chars = self._nfa.chars
        new = set()
        for q, flag in self._closure(sid, k if self._has_at else None):
            if flag == 2 or (flag == 1 and not is_nl):
                continue
            nflag = 2 if flag == 1 else 0
            for m, dst in chars[q]:
                if mask >> m & 1:
                    new.add((dst, nflag))
        lbs = self._cstates[sid][2]
        if lbs:
            rep = self._class_rep[k]
            lbs = tuple(lb._cstep(s, lb._class_of(rep)) for (lb, _), s in zip(self._lbs, lbs))
        got = self._cdelta[key] = self._cid(frozenset(new), kind if self._has_at else (), lbs)
        return got

    def _caccepts(self, sid: int) -> bool:
        return any(q == self._final and flag != 1 for q, flag in self._closure(sid, None))

    def _coreachable(self) -> set[int]:
        """NFA states with a path to the final state (exact liveness when there are no anchors)."""
        nfa = self._nfa
        usable = [any(not (SUR_LO <= lo and hi <= SUR_HI) for lo, hi in s) for s in nfa.sets]
        back: list[list[int]] = [[] for _ in nfa.eps]
        for q in range(len(nfa.eps)):
            for _, dst in nfa.eps[q]:
                back[dst].append(q)
            for m, dst in nfa.chars[q]:
                if usable[m]:
                    back[dst].append(q)
        seen, stack = {self._final}, [self._final]
        while stack:
            for p in back[stack.pop()]:
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        return seen

    def _live(self, sid: int) -> bool:
        """Can some text take character state ``sid`` to a full match?"""
        if sid == DEAD:
            return False
        got = self._clive.get(sid)
        if got is not None:
            return got
        if self._coreach is not None:
            got = self._clive[sid] = any(q in self._coreach for q, _ in self._closure(sid, None))
            return got
        # with anchors: explore everything reachable, then propagate liveness backwards
        order, seen, preds = [sid], {sid}, {}
        i = 0
        while i < len(order):
            s = order[i]
            i += 1
            if self._clive.get(s) is not None:
                continue
            for k in range(self._n_classes):
                t = self._cstep(s, k)
                if t == DEAD:
                    continue
                preds.setdefault(t, []).append(s)
                if t not in seen:
                    seen.add(t)
                    order.append(t)
        alive = [s for s in order if self._clive.get(s) or (s not in self._clive
                                                              and self._caccepts(s))]
        live = set(alive)
        while alive:
            s = alive.pop()
            for p in preds.get(s, ()):
                if p not in live:
                    live.add(p)
                    alive.append(p)
        for s in order:
            self._clive.setdefault(s, s in live)
        return self._clive[sid]

    # -- byte level
    def _bid(self, sid: int, part: tuple[int, ...]) -> int:
        key = (sid, part)
        bid = self._bids.get(key)
        if bid is None:
            bid = self._bids[key] = len(self._bstates)
            self._bstates.append(key)
            self._trans.append(_NEW_ROW[:])
            self._accept.append(None)
        return bid

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def _compute(self, state: int, byte: int) -> int:
        with self._lock:
            return self._compute_locked(state, byte)

    def _compute_locked(self, state: int, byte: int) -> int:
        sid, part = self._bstates[state]
        if sid == DEAD:
            return DEAD
        if not part and byte >= 0x80:
            # a leading byte some character can continue with (no other high byte is): its state
            return DEAD if self._fill_high(state, sid)[byte] == DEAD else self._bid(sid, (byte,))
        part = part + (byte,)
        if len(part) == 1:
            t = self._cstep(sid, self._ascii_class[byte])
            return self._bid(t, ()) if self._live(t) else DEAD
        classes = self._prefix_classes(part)
        if classes is None:
            return DEAD
        if len(part) == utf8_len(part[0]):
            t = self._cstep(sid, classes[0])
            return self._bid(t, ()) if self._live(t) else DEAD
        for k in classes:
            if self._live(self._cstep(sid, k)):
                return self._bid(sid, part)
        return DEAD

    def _fill_high(self, state: int, sid: int) -> "array":
        """Decide the bytes >= 0x80 of ``state`` (between characters) at once, the first time:
        a continuation byte cannot start a character, and a leading byte lives iff some class of
        the characters it begins does (each class decided once). The dead ones are written in
        the row, the live ones left to ``_compute`` (their states built only when stepped);
        returns the row. (A trie walk tries many first bytes of a new state; most are dead.)"""
        row = self._trans[state]
        if state in self._high:
            return row
        self._high.add(state)
        live: dict[int, bool] = {}
        for b in range(0x80, 0x100):
            if row[b] != UNCOMPUTED:
                continue
            alive = False
            for k in self._prefix_classes((b,)) or ():
                v = live.get(k)
                if v is None:
                    v = live[k] = self._live(self._cstep(sid, k))
                if v:
                    alive = True
                    break
            if not alive:
                row[b] = DEAD
        return row

    def step(self, state: int, byte: int) -> int | None:
        """State after ``byte``, or None when no continuation can fully match."""
        row = self._trans[state]
        t = row[byte]
        if t == UNCOMPUTED:
            t = row[byte] = self._compute(state, byte)
        return None if t == DEAD else t

    def walk(self, state: int | None, data: bytes) -> int | None:
        """State after all of ``data`` (None once dead)."""
        trans = self._trans
        for byte in data:
            if state is None:
                return None
            t = trans[state][byte]
            if t == UNCOMPUTED:
                t = trans[state][byte] = self._compute(state, byte)
            state = None if t == DEAD else t
        return state

    def char_table(self, state: int, cps: "np.ndarray", limit: int = 4096
                   ) -> "tuple[np.ndarray, np.ndarray, int, int] | None":
        """The automaton from byte state ``state`` over whole characters, as dense arrays:
        (T, cls, dead, i_0) such that a text of code points p_1 .. p_n (each one of ``cps``)
        keeps ``state`` alive iff

            i_k = T[i_{k-1}, cls[j_k]] != dead   for every k  (p_k = cps[j_k])

        (dead absorbing). The rows are those of every state reached so far from states asked
        with the same ``cps`` (a later state of one string finds its rows built), at most
        ``limit`` transitions; past that, the rows reachable from ``state`` alone. None when
        ``state`` stops inside a character or its own table needs more than ``limit``."""
        sid, part = self._bstates[state]
        if part or sid == DEAD:
            return None
        if self._chars is None or self._chars[0] is not cps:
            # the same character set (an LM's plain characters) comes with every state: its
            # classes are computed once, and the table grows from state to state
            idx = np.searchsorted(np.asarray(self._bounds), cps, side="right") - 1
            classes = np.asarray(self._iv_class, dtype=np.int64)[idx]
            used, cls = np.unique(classes, return_inverse=True)
            self._chars = (cps, used.tolist(), cls.astype(np.int32).reshape(-1), {}, [])
            self._char_dense = None
        _, kinds, cls, index, rows = self._chars
        if kinds and kinds[0] < 0:  # a surrogate code point: not from UTF-8 text
            return None
        with self._lock:
            if sid in index or self._char_rows(sid, kinds, index, rows, limit):
                if self._char_dense is None or len(self._char_dense) != len(rows) + 1:
                    self._char_dense = _dense(rows, len(kinds))
                return self._char_dense, cls, len(rows), index[sid]
            own_index: dict[int, int] = {}
            own_rows: list[list[int]] = []
            if not self._char_rows(sid, kinds, own_index, own_rows, limit):
                return None
        return _dense(own_rows, len(kinds)), cls, len(own_rows), 0

    def _char_rows(self, start: int, kinds: list[int], index: dict[int, int],
                   rows: list[list[int]], limit: int) -> bool:
        """Extend ``rows`` (row ``index[s]`` of character state s: the row of each state it
        steps to on each class of ``kinds``, -1 when dead) with the states reachable from
        ``start`` not yet in ``index``; False, and nothing added, past ``limit`` transitions."""
        first = len(rows)
        index[start] = first
        queue = [start]
        i = 0
        while i < len(queue):
            if (first + len(queue)) * len(kinds) > limit:
                for s in queue:
                    del index[s]
                del rows[first:]
                return False
            s = queue[i]
            i += 1
            row = []
            for k in kinds:
                t = self._cstep(s, k)
                if t == DEAD or not self._live(t):
                    row.append(-1)
                    continue
                j = index.get(t)
                if j is None:
                    j = index[t] = first + len(queue)
                    queue.append(t)
                row.append(j)
            rows.append(row)
        return True

    def accepts(self, state: int) -> bool:
        """Do the bytes that led to ``state`` fully match?"""
        got = self._accept[state]
        if got is None:
            sid, part = self._bstates[state]
            with self._lock:
                got = self._accept[state] = sid != DEAD and not part and self._caccepts(sid)
        return got

    def live(self, state: int) -> bool:
        """Can some continuation of ``state`` fully match? (False only for a dead ``start``.)"""
        sid, _ = self._bstates[state]
        with self._lock:
            return self._live(sid)

    @property
    def is_empty(self) -> bool:
        """True when the pattern matches no text at all."""
        return not self.live(self.start)

    def next_bytes(self, state: int) -> list[int]:
        """Bytes that keep ``state`` alive (ASCII bytes decided once per character class)."""
        sid, part = self._bstates[state]
        if part:
            return [b for b in range(256) if self.step(state, b) is not None]
        by_class: dict[int, bool] = {}
        out = []
        for b in range(128):
            k = self._ascii_class[b]
            alive = by_class.get(k)
            if alive is None:
                alive = by_class[k] = self.step(state, b) is not None
            if alive:
                out.append(b)
        with self._lock:
            row = self._fill_high(state, sid)
        out.extend(b for b in range(0xC2, 0xF5) if row[b] != DEAD)
        return out

    def fullmatch(self, data: bytes) -> bool:
        q = self.walk(self.start, data)
        return q is not None and self.accepts(q)

    @property
    def num_states(self) -> int:
        """Byte-level states built so far (the automaton grows lazily)."""
        return len(self._bstates)


def check_flags(flags: int) -> int:
    """``flags`` as an int, if it is a combination of ``RE_FLAGS`` (re's values); else an error.

    The ``regex`` package's own flag values differ (its VERSION1 is re's ASCII), so its
    VERSION1 and other extras are asked for inside the pattern: ``(?V1)``.
    """
    if isinstance(flags, bool) or not isinstance(flags, int):
        raise TypeError(f"regex flags must be an int of re flags (e.g. re.IGNORECASE), "
                        f"got {type(flags).__name__} {flags!r}")
    flags = int(flags)
    if flags & re.LOCALE:
        raise ValueError("regex flag re.LOCALE is for bytes patterns; patterns here are str")
    bad = flags & ~RE_FLAGS
    if bad or flags < 0:
        raise ValueError(f"unknown regex flags {bad if flags >= 0 else flags:#x} in {flags:#x}: "
                         "use re.IGNORECASE, MULTILINE, DOTALL, VERBOSE, ASCII or UNICODE")
    return flags


def _to_regex_package_flags(flags: int) -> int:
    """re's flag values as the ``regex`` package numbers them (only ASCII differs)."""
    out = flags & ~re.ASCII
    return out | regex.ASCII if flags & re.ASCII else out


#: largest pattern handed to the `regex` package, in repeat-unrolled atoms (``unrolled_size``):
#: its compiler unrolls counted repeats, about 0.3 s and 100 MB per million
MAX_UNROLLED = 1_000_000

_REPEAT = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def unrolled_size(pattern: str) -> int:
    """An upper bound on the atoms of ``pattern`` once counted repeats are unrolled.

    size(atom) = 1, size(group) = size of its body, size(x{m,n}) = size(x) * max(m, n, 1),
    summed over sequences and alternatives; escapes and sets count as one atom each.
    """
    stack: list[list[int]] = [[]]  # per open group: sizes of its items so far
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            j = i + 2
            if j <= n and pattern[i + 1] in "pPNxuUg" and j < n and pattern[j] in "{<":
                close = pattern.find("}" if pattern[j] == "{" else ">", j)
                j = n if close < 0 else close + 1
            stack[-1].append(1)
            i = j
        elif ch == "[":
            depth, j = 1, i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and depth:
                if pattern[j] == "\\":
                    j += 1
                elif pattern[j] == "[":
                    depth += 1
                elif pattern[j] == "]":
                    depth -= 1
                j += 1
            stack[-1].append(1)
            i = j
        elif ch == "(":
            stack.append([])
            i += 1
        elif ch == ")" and len(stack) > 1:
            body = stack.pop()
            stack[-1].append(sum(body))
            i += 1
        elif ch == "{" and (m := _REPEAT.match(pattern, i)) and stack[-1]:
            counts = [int(g) for g in m.groups() if g]
            stack[-1][-1] *= max(counts + [1])
            i = m.end()
        else:
            stack[-1].append(1)
            i += 1
    while len(stack) > 1:
        body = stack.pop()
        stack[-1].append(sum(body))
    return sum(stack[0])


def regex_package_compile(pattern: str, flags: int = 0):
    """``regex.compile`` of a pattern given with re's ``flags``; InvalidRegex if it rejects it.

    A pattern neither package accepts gets the ``regex`` package's message and position (re's
    when regex's has none). An inline ``(?L)`` is refused as re refuses it for str patterns.
    """
    flags = check_flags(flags)
    size = unrolled_size(pattern)
    if size > MAX_UNROLLED:
        raise RegexTooLarge(f"regex {shown(pattern)} is too large: about {size} characters once its "
                            f"repeats are unrolled (the limit is {MAX_UNROLLED})")
    try:
        rx = regex.compile(pattern, _to_regex_package_flags(flags))
    except regex.error as err:
        raise InvalidRegex(pattern, err.msg, err.pos) from None
    except (ValueError, OverflowError, TypeError) as err:
        raise InvalidRegex(pattern, str(err), None) from None
    if rx.flags & regex.LOCALE:
        where = pattern.find("L")
        raise InvalidRegex(pattern, "cannot use the LOCALE flag (?L) with a str pattern",
                           where if where >= 0 else None)
    return rx


def parse_flags(pattern: str, flags: int) -> tuple[object, int]:
    """``re``'s parse tree of ``pattern`` and its global flags; InvalidRegex on bad syntax."""
    if not isinstance(pattern, str):
        raise TypeError(f"regex pattern must be a str, got {type(pattern).__name__}")
    require("re")
    try:
        tree = parse_regex(pattern, flags)
    except re.error as e:
        raise InvalidRegex(pattern, e.msg, e.pos) from None
    except (ValueError, OverflowError) as e:
        raise InvalidRegex(pattern, str(e), None) from None
    return tree, tree_flags(tree)


def compile_regex(pattern: str, flags: int = 0, *, lookaround: bool = False) -> ByteDFA:
    """The byte automaton of ``{s.encode() : fullmatch(pattern, s, flags)}`` (module docstring).

    Args:
        pattern: a regex, ``re`` syntax or, where ``re`` rejects it, the ``regex`` package's.
        flags: re's flags (``check_flags``).
        lookaround: build lookbehinds and trailing lookaheads in, reading the pattern as a full
            match of the whole text (the start and end of the text are what they see). Off by
            default: a regex matched inside a longer text (a grammar terminal) would see its
            neighbours instead.

    Raises InvalidRegex (a ValueError naming the problem and its position) for a pattern neither
    package accepts, UnsupportedRegex (a ValueError) for what is not regular here (lookaheads,
    backreferences, conditionals, atomic groups, possessive repeats, most regex-only syntax),
    RegexTooLarge (an UnsupportedRegex) beyond the size limits, TypeError for a non-str pattern.
    """
    flags = check_flags(flags)
    try:
        tree, gflags = parse_flags(pattern, flags)
        try:
            # re's compiler rejects some trees its parser builds (variable-width lookbehind)
            re.compile(pattern, flags)
        except re.error as e:
            raise InvalidRegex(pattern, e.msg, e.pos) from None
    except InvalidRegex as err:
        try:
            regex_package_compile(pattern, flags)
        except InvalidRegex as other:
            if other.msg != err.msg:
                raise InvalidRegex(pattern, f"{err.msg}{_at(err.pos)} (re); {other.msg}"
                                   f"{_at(other.pos)} (regex package)", None) from None
            raise err from None
        return _compile_regex_package_syntax(pattern, flags)
    return _build(pattern, tree, gflags, {}, lookaround)


def parse_regex_package_syntax(pattern: str, flags: int) -> tuple[Any, int, dict[int, Intervals]] | None:
    """(parse tree, global flags, placeholder -> code-point set) of a pattern in the ``regex``
    package's syntax, through its translation to ``re`` syntax (potentials.regex.syntax); None
    when it has no translation."""
    got = translate(pattern, flags)
    if got is None:
        return None
    rewritten, sets = got
    try:
        tree, gflags = parse_flags(rewritten, flags)
    except InvalidRegex:
        return None
    return tree, gflags, dict(sets)


def _compile_regex_package_syntax(pattern: str, flags: int) -> ByteDFA:
    """The automaton of a pattern only the ``regex`` package accepts, with regex's meaning."""
    got = parse_regex_package_syntax(pattern, flags)
    if got is None:
        raise UnsupportedRegex(f"regex {shown(pattern)} uses syntax of the `regex` package that Python's re lacks")
    return _build(pattern, *got)


def _build(pattern: str, tree, gflags: int, placeholders: dict[int, Intervals],
           lookaround: bool = False) -> ByteDFA:
    nfa = NFA(pattern, placeholders, lookaround)
    start = nfa.new()
    final = nfa.build(tree_items(tree), start, gflags, pattern)
    nfa.check_lookaheads()
    return ByteDFA(nfa, start, final)


def _at(pos: int | None) -> str:
    return f" at position {pos}" if pos is not None else ""
