"""Byte-level Earley recognition with persistent columns, for grammars whose terminals are byte DFAs.

A column C_x is the Earley chart after the bytes x. With the grammar reduced (every rule
productive), the recognizer answers

    viable(C_x) = [exists y : x y in L]        accept(C_x) = [x in L]

exactly. Terminals are matched inside the chart: a *lexeme* (terminal t, DFA state q, the group
of items waiting for t) moves with every byte, and when q accepts, the waiting items advance.
Every way of cutting the text into terminals is tried (a terminal that accepts may also go on),
except for *shortest* automata, which stop at their first accepting state.

Ignored terminals follow lark's dynamic Earley lexer: an ignored match may sit before any
terminal and at the end; it starts wherever items wait for a terminal and carries those items
(a *group*) to where it ends; and it is the longest match of its pattern there. "Longest" is a
guard on the carried group: the first character after the match must not extend it (the guard
state walks that character and kills the group if the ignored pattern accepts again). The
grammar module only admits ignored patterns for which one character decides this.

Columns are immutable and point back to the columns their items started in, so a state is
shared by every context that extends it, and advancing one byte costs the size of the new
column, whatever the length of the prefix. Transitions are memoized per (column, byte).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Sequence

from potentials.text import utf8_len

UNSEEN = -2
SURROGATES = (0xD800, 0xDFFF)


class TokenDFA:
    """A terminal's byte automaton (``potentials.regex.automaton.ByteDFA``) with lark's matching
    mode.

    shortest: the terminal is read by its shortest match (lazy regexes); an accepting state
    then has no continuation.
    """

    def __init__(self, name: str, dfa, shortest: bool):
        self.name, self.dfa, self.shortest = name, dfa, shortest
        self.start: int = dfa.start
        self._cont: dict[int, bool] = {}
        self._first = [UNSEEN] * 256

    def accepts(self, q: int) -> bool:
        return self.dfa.accepts(q)

    def step(self, q: int, b: int) -> int | None:
        if self.shortest and self.dfa.accepts(q):
            return None
        return self.dfa.step(q, b)

    def first(self, b: int) -> int | None:
        """step(start, b), memoized: every lexeme starts here."""
        got = self._first[b]
        if got == UNSEEN:
            got = self._first[b] = self.step(self.start, b)
        return got

    def walk(self, q: int | None, data: bytes) -> int | None:
        for b in data:
            if q is None:
                return None
            q = self.step(q, b)
        return q

    def char_cuts(self) -> frozenset[int]:
        """Code points where the automaton's classes begin: code points between two cuts are
        treated alike, so one character per class stands for all (ByteDFA's class bounds)."""
        return frozenset(
            cp for cp in self.dfa.class_bounds if not SURROGATES[0] <= cp <= SURROGATES[1]
        )

    def can_continue(self, q: int) -> bool:
        got = self._cont.get(q)
        if got is None:
            got = self._cont[q] = any(self.step(q, b) is not None for b in range(256))
        return got

    def is_empty(self) -> bool:
        return not self.accepts(self.start) and not self.can_continue(self.start)


@dataclass(frozen=True)
class CFG:
    """Rules ``lhs[r] -> rhs[r]``; a symbol s >= 0 is a nonterminal, s < 0 the terminal ~s."""

    lhs: tuple[int, ...]
    rhs: tuple[tuple[int, ...], ...]
    start: int
    n_nonterminals: int
    terminals: tuple[TokenDFA, ...]
    ignores: tuple[TokenDFA, ...]


class Group:
    """Items waiting for a terminal at one position, possibly carried there over ignored text.

    entries: terminal -> items waiting for it; accept: the start symbol is complete from 0;
    guard: (ignore index, accepting DFA state) of the ignored match that carried the group here.
    """

    __slots__ = ("entries", "accept", "guard_x", "guard_q", "sig")

    def __init__(self, entries: dict, accept: bool, guard_x: int | None, guard_q: int | None):
        self.entries, self.accept = entries, accept
        self.guard_x, self.guard_q = guard_x, guard_q
        self.sig = (frozenset(entries), accept)


class Column:
    """The chart after some bytes: items waiting on nonterminals, groups, lexemes in progress."""

    __slots__ = ("waiting", "groups", "lexemes", "accept", "viable", "utf8_left")

    def __init__(self, utf8_left: int = 0) -> None:
        #: bytes still missing from the current character (0 at a character boundary)
        self.utf8_left = utf8_left
        self.waiting: dict[int, list] = {}
        self.groups: list[Group] = []
        self.lexemes: list[tuple] = []
        self.accept = False
        self.viable = False


class Earley:
    """Recognizer for ``cfg`` (reduced here), stepping persistent columns byte by byte."""

    def __init__(self, cfg: CFG, cache_size: int = 200_000):
        self.terms, self.ignores = cfg.terminals, cfg.ignores
        self.start = cfg.start
        self.lhs, self.rhs = cfg.lhs, cfg.rhs
        keep = self._productive_rules(cfg)
        self.rules_of: list[list[int]] = [[] for _ in range(cfg.n_nonterminals)]
        for r in keep:
            self.rules_of[cfg.lhs[r]].append(r)
        self.nullable = self._nullable(cfg, keep)
        # bounded FIFO memo; OrderedDict pops its oldest entry in O(1), where a dict's
        # next(iter(...)) after many deletions walks over their tombstones
        self._cache: OrderedDict[tuple[Column, int], Column | None] = OrderedDict()
        self._cache_size = cache_size
        self._compat: dict[tuple, bool] = {}
        self._group_ok: dict[tuple, bool] = {}
        self._ignore_ok: dict[tuple, bool] = {}
        self._rep_cache: dict[tuple, list[bytes]] = {}
        self.root = Column()
        self._close(self.root, [(r, 0, self.root) for r in self.rules_of[self.start]], [])

    # ------------------------------------------------------------------ grammar analysis

    def _productive_rules(self, cfg: CFG) -> list[int]:
        """Rules whose every symbol derives some byte string (Earley is then exact on prefixes)."""
        live_t = [not t.is_empty() for t in cfg.terminals]
        productive = [False] * cfg.n_nonterminals
        changed = True
        while changed:
            changed = False
            for r, rhs in enumerate(cfg.rhs):
                if not productive[cfg.lhs[r]] and all(
                    live_t[~s] if s < 0 else productive[s] for s in rhs
                ):
                    productive[cfg.lhs[r]] = changed = True
        return [
            r for r, rhs in enumerate(cfg.rhs)
            if all(live_t[~s] if s < 0 else productive[s] for s in rhs)
        ]

    @staticmethod
    def _nullable(cfg: CFG, rules: Sequence[int]) -> list[bool]:
        nullable = [False] * cfg.n_nonterminals
        changed = True
        while changed:
            changed = False
            for r in rules:
                if not nullable[cfg.lhs[r]] and all(s >= 0 and nullable[s] for s in cfg.rhs[r]):
                    nullable[cfg.lhs[r]] = changed = True
        return nullable

    # ------------------------------------------------------------------ chart construction

    def _close(self, col: Column, seeds: list, carried: list[Group]) -> None:
        """Predict/complete from ``seeds`` into ``col`` (Aycock-Horspool for nullable symbols)."""
        rhs_of, lhs_of, rules_of, nullable = self.rhs, self.lhs, self.rules_of, self.nullable
        root, start = self.root, self.start
        waiting = col.waiting
        entries: dict[int, list] = {}
        accept = False
        seen: set = set()
        predicted: set = set()
        agenda = seeds
        while agenda:
            item = agenda.pop()
            if item in seen:
                continue
            seen.add(item)
            r, d, origin = item
            rhs = rhs_of[r]
            if d == len(rhs):
                a = lhs_of[r]
                if a == start and origin is root:
                    accept = True
                # a completion inside its own column is an empty derivation, already
                # stepped over when the waiting item was predicted (nullable rule below)
                if origin is not col:
                    for w in origin.waiting.get(a, ()):
                        agenda.append((w[0], w[1] + 1, w[2]))
                continue
            s = rhs[d]
            if s < 0:
                entries.setdefault(~s, []).append(item)
                continue
            waiting.setdefault(s, []).append(item)
            if s not in predicted:
                predicted.add(s)
                agenda.extend((r2, 0, col) for r2 in rules_of[s])
            if nullable[s]:
                agenda.append((r, d + 1, origin))
        groups = [Group(entries, accept, None, None)] if entries or accept else []
        col.groups = groups + carried
        col.accept = any(g.accept for g in col.groups)
        col.viable = bool(col.lexemes) or bool(col.groups)

    def step(self, col: Column, b: int) -> Column | None:
        """The column after one more byte ``b`` (None when no extension is in the language)."""
        key = (col, b)
        cache = self._cache
        if key in cache:
            return cache[key]
        nxt = self._step(col, b)
        if len(cache) >= self._cache_size:
            cache.popitem(last=False)
        cache[key] = nxt
        return nxt

    def walk(self, col: Column | None, data: bytes) -> Column | None:
        for b in data:
            if col is None:
                return None
            col = self.step(col, b)
        return col

    def _step(self, col: Column, b: int) -> Column | None:
        terms, ignores = self.terms, self.ignores
        left = (utf8_len(b) - 1) if col.utf8_left == 0 else col.utf8_left - 1
        # guard and ignore look-ahead checks run on whole characters; inside a multi-byte
        # character they wait for its last byte (the lexeme is kept until then)
        boundary = left == 0
        if not col.groups and len(col.lexemes) == 1:
            # inside one terminal (a string, a comment): only its DFA moves until it can end
            is_ign, sym, q, group, gq = col.lexemes[0]
            if not is_ign and gq is None:
                q2 = terms[sym].step(q, b)
                if q2 is None:
                    return None
                if not terms[sym].accepts(q2):
                    new = Column(left)
                    new.lexemes = [(False, sym, q2, group, None)]
                    new.viable = True
                    return new
        lexemes: dict[tuple, None] = {}
        carried: dict[tuple, Group] = {}
        seeds: list = []

        def move(is_ign: bool, sym: int, q: int | None, group: Group, gq: int | None) -> None:
            if q is None:
                return
            if gq is not None:
                gdfa = ignores[group.guard_x]
                g2 = gdfa.step(gq, b)
                if g2 is not None:
                    if gdfa.accepts(g2):
                        return  # the ignored match would have gone on: not lark's longest match
                    if boundary and not self._compatible(group.guard_x, g2, is_ign, sym, q):
                        return
                gq = g2
            auto = ignores[sym] if is_ign else terms[sym]
            if gq is None and auto.accepts(q):
                if not is_ign:
                    for w in group.entries[sym]:
                        seeds.append((w[0], w[1] + 1, w[2]))
                elif (sym, q, group) not in carried:
                    g = Group(group.entries, group.accept, sym, q)
                    if self._group_viable(g):
                        carried[(sym, q, group)] = g
            if auto.can_continue(q) and not (
                is_ign and boundary and not self._ignore_viable(sym, q, group)
            ):
                lexemes[(is_ign, sym, q, group, gq)] = None

        for is_ign, sym, q, group, gq in col.lexemes:
            auto = ignores[sym] if is_ign else terms[sym]
            move(is_ign, sym, auto.step(q, b), group, gq)
        for group in col.groups:
            for t in group.entries:
                move(False, t, terms[t].first(b), group, group.guard_q)
            for x, auto in enumerate(ignores):
                move(True, x, auto.first(b), group, group.guard_q)
        new = Column(left)
        new.lexemes = list(lexemes)
        self._close(new, seeds, list(carried.values()))
        return new if new.viable else None

    # ------------------------------------------------------------------ guards

    def _reps(self, *autos: TokenDFA) -> list[bytes]:
        """One character per joint class of ``autos``: enough to explore them together."""
        key = tuple(id(a) for a in autos)
        got = self._rep_cache.get(key)
        if got is None:
            cuts = frozenset().union(*(a.char_cuts() for a in autos))
            got = self._rep_cache[key] = [chr(cp).encode() for cp in sorted(cuts)]
        return got

    def _compatible(self, x: int, g: int, is_ign: bool, sym: int, q: int) -> bool:
        """From character-boundary states: can the lexeme (sym, q) be finished while ignore x,
        in state g, dies before it accepts again?"""
        key = (x, g, is_ign, sym, q)
        got = self._compat.get(key)
        if got is not None:
            return got
        gdfa, auto = self.ignores[x], (self.ignores if is_ign else self.terms)[sym]
        reps = self._reps(gdfa, auto)
        got = False
        seen = {(g, q)}
        queue = deque([(g, q)])
        while queue and not got:
            g1, q1 = queue.popleft()
            for ch in reps:
                q2 = auto.walk(q1, ch)
                if q2 is None:
                    continue
                g2 = gdfa.walk(g1, ch)
                if g2 is None:
                    got = True  # the guard is settled and (sym, q2) is live
                    break
                if gdfa.accepts(g2) or (g2, q2) in seen:
                    continue
                seen.add((g2, q2))
                queue.append((g2, q2))
        self._compat[key] = got
        return got

    def _group_viable(self, g: Group) -> bool:
        """Does some continuation respect the guard of a carried group?

        Exact when the next thing is a terminal or the end; a further ignored match is taken
        to be viable when its own first character respects the guard.
        """
        if g.accept:
            return True
        key = (g.guard_x, g.guard_q, g.sig)
        got = self._group_ok.get(key)
        if got is None:
            got = any(
                self._compatible(g.guard_x, g.guard_q, False, t, self.terms[t].start)
                for t in g.entries
            ) or any(
                self._compatible(g.guard_x, g.guard_q, True, x, auto.start)
                for x, auto in enumerate(self.ignores)
            )
            self._group_ok[key] = got
        return got

    def _ignore_viable(self, x: int, q: int, group: Group) -> bool:
        """From a character boundary: can ignore x, in state q, still end (after more
        characters) in a viable carried group?"""
        key = (x, q, group.sig)
        got = self._ignore_ok.get(key)
        if got is not None:
            return got
        auto = self.ignores[x]
        reps = self._reps(auto)
        got = False
        seen = {q}
        queue = deque([q])
        while queue and not got:
            q1 = queue.popleft()
            for ch in reps:
                q2 = auto.walk(q1, ch)
                if q2 is None:
                    continue
                if auto.accepts(q2) and self._group_viable(Group(group.entries, group.accept, x, q2)):
                    got = True
                    break
                if q2 in seen:
                    continue
                seen.add(q2)
                queue.append(q2)
        self._ignore_ok[key] = got
        return got
