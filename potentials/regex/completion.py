"""How many characters a text still needs to fully match a pattern with backreferences.

    m(x) = min { |y| : x y in L(P) },  and a y of that length  (None when not found in budget)

For a regular pattern this is a shortest path in its automaton; with backreferences it depends
on what the groups captured, which is why the ``regex`` fallback (potentials.regex) cannot read
it off a state. ``shortest_completion`` finds it by backtracking over the pattern's parse tree
(``re``'s own parser, through potentials._compat) against x, the way a matcher would, except
that when the text runs out it goes on *writing*: a character test writes one character it
accepts, a backreference writes
the rest of its group's capture, a repeat stops as soon as its minimum is met. Every way of
matching x is tried, so the result is the shortest completion over all parses, up to these
departures, which only matter to how well the estimate steers (``potentials.lookahead``), never
to which texts the constraint accepts:

- past the text, a repeat that has met its minimum is not extended, and a character test writes
  one fixed representative, so a completion that needs a longer repeat, or another character
  that a later backreference copies, is missed (m too large, or None);
- atomic groups and possessive repeats are searched as ordinary ones (m may be too small);
- patterns ``re`` cannot parse (``regex``-only syntax), lookarounds, word boundaries,
  case-insensitive and multi-line matching are not searched: None.

The search stops after ``budget`` steps with the best completion found so far (None if none).
"""

from __future__ import annotations

import functools
import re
from typing import Callable, Sequence

from potentials._compat import C, parse_regex, tree_flags, tree_items

#: steps one search may take (a few milliseconds of Python)
BUDGET = 20_000
#: longest text searched; longer ones get None (the recursion grows with the text, and Python's
#: default limit of 1,000 frames ends a search of a few hundred characters anyway)
MAX_TEXT = 200

_CATEGORIES: dict[object, Callable[[str], bool]] = {
    C.CATEGORY_DIGIT: str.isdecimal,
    C.CATEGORY_NOT_DIGIT: lambda c: not c.isdecimal(),
    C.CATEGORY_SPACE: str.isspace,
    C.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
    C.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
    C.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
}
#: characters tried, in order, when a character test has to write one
_WRITE = "a0 _A1b.-x\n"


class _Unsupported(Exception):
    """The pattern uses something this search does not model."""


class _OutOfSteps(Exception):
    pass


@functools.lru_cache(maxsize=256)
def _parse(pattern: str, flags: int) -> tuple[list, bool] | None:
    """(parse tree, dotall), or None when ``re`` cannot parse the pattern or it sets a flag the
    search does not model."""
    try:
        tree = parse_regex(pattern, flags)
    except (re.error, OverflowError, RecursionError):
        return None
    flags = tree_flags(tree)
    if flags & (re.IGNORECASE | re.MULTILINE | re.LOCALE | re.ASCII):
        return None
    return tree_items(tree), bool(flags & re.DOTALL)


def shortest_completion(pattern: str, flags: int, text: str, budget: int = BUDGET) -> str | None:
    """The shortest y found with ``text`` + y fully matching ``pattern`` under ``re`` flags
    ``flags`` (its length is m(text) of the module docstring), or None."""
    parsed = _parse(pattern, flags)
    if parsed is None or len(text) > MAX_TEXT:
        return None
    search = _Search(text, parsed[1], budget)
    try:
        search.seq(parsed[0], 0, 0, text, (), False, search.done)
    except _OutOfSteps:
        pass
    except (_Unsupported, RecursionError):
        return None
    return search.best


class _Search:
    """Depth-first search over the ways of matching; the state of a branch is
    (pos, s, groups, closed): the position in s = text + what the branch wrote, the groups'
    spans in s, and whether an end anchor has been passed at the end (nothing more may be
    written)."""

    def __init__(self, text: str, dotall: bool, budget: int):
        self.n, self.dotall, self.steps = len(text), dotall, budget
        self.best: str | None = None

    def done(self, pos: int, s: str, groups: tuple, closed: bool) -> None:
        if pos == len(s) and pos >= self.n:
            self.best = s[self.n:]

    def _tick(self, s: str) -> bool:
        """Count a step; False when this branch has already written as much as the best."""
        self.steps -= 1
        if self.steps < 0:
            raise _OutOfSteps
        return self.best is None or len(s) - self.n < len(self.best)

    def seq(self, items: Sequence, i: int, pos: int, s: str, groups: tuple, closed: bool,
            k: Callable) -> None:
        """Match items[i:] from pos, then call k on every way it ends."""
        if not self._tick(s):
            return
        if i == len(items):
            k(pos, s, groups, closed)
            return
        op, av = items[i]

        def then(p: int, s2: str, g: tuple, c: bool) -> None:
            self.seq(items, i + 1, p, s2, g, c, k)

        if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
            self.char(op, av, pos, s, groups, closed, then)
        elif op is C.SUBPATTERN:
            gid, add, dele, sub = av
            if add & (re.IGNORECASE | re.MULTILINE | re.LOCALE | re.ASCII):
                raise _Unsupported
            outer = self.dotall
            inner = bool(add & re.DOTALL) or (outer and not dele & re.DOTALL)

            def close(p: int, s2: str, g: tuple, c: bool) -> None:
                self.dotall = outer  # the rest of the pattern reads the outer flag
                if gid is not None:
                    g = _set(g, gid, (pos, p))
                then(p, s2, g, c)
                self.dotall = inner  # other ways of matching the group go on inside it

            self.dotall = inner
            self.seq(tree_items(sub), 0, pos, s, groups, closed, close)
            self.dotall = outer
        elif op is C.ATOMIC_GROUP:
            self.seq(tree_items(av), 0, pos, s, groups, closed, then)
        elif op is C.BRANCH:
            for alt in av[1]:
                self.seq(tree_items(alt), 0, pos, s, groups, closed, then)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, item = av
            self.repeat(tree_items(item), lo, hi, 0, pos, s, groups, closed, then)
        elif op is C.GROUPREF:
            span = groups[av] if av < len(groups) else None
            if span is not None:
                self.write(s[span[0]:span[1]], pos, s, groups, closed, then)
        elif op is C.GROUPREF_EXISTS:
            gid, yes, no = av
            taken = gid < len(groups) and groups[gid] is not None
            branch = yes if taken else no
            self.seq(tree_items(branch) if branch is not None else [], 0, pos, s, groups, closed, then)
        elif op is C.AT:
            self.anchor(av, pos, s, groups, closed, then)
        else:  # lookarounds, case-insensitive references, ...
            raise _Unsupported

    def repeat(self, item: list, lo: int, hi: int, count: int, pos: int, s: str, groups: tuple,
               closed: bool, k: Callable) -> None:
        if not self._tick(s):
            return
        if count >= lo:
            k(pos, s, groups, closed)
            if pos >= len(s) >= self.n:
                return  # past the text a met minimum is not extended (module docstring)
        if count < hi:
            def again(p: int, s2: str, g: tuple, c: bool) -> None:
                if p > pos or count < lo:  # an empty pass counts only toward the minimum
                    self.repeat(item, lo, hi, count + 1, p, s2, g, c, k)

            self.seq(item, 0, pos, s, groups, closed, again)

    def char(self, op: object, av: object, pos: int, s: str, groups: tuple, closed: bool,
             k: Callable) -> None:
        if pos < len(s):
            if self._accepts(op, av, s[pos]):
                k(pos + 1, s, groups, closed)
            return
        if closed:
            return
        for c in _WRITE + _literals(op, av):
            if self._accepts(op, av, c):
                k(pos + 1, s + c, groups, closed)
                return

    def write(self, t: str, pos: int, s: str, groups: tuple, closed: bool, k: Callable) -> None:
        """Match t from pos, writing what lies past the end of s."""
        have = s[pos:pos + len(t)]
        if not t.startswith(have) or (closed and len(have) < len(t)):
            return
        k(pos + len(t), s + t[len(have):], groups, closed)

    def anchor(self, code: object, pos: int, s: str, groups: tuple, closed: bool, k: Callable) -> None:
        if code in (C.AT_BEGINNING, C.AT_BEGINNING_STRING):
            if pos == 0:
                k(pos, s, groups, closed)
        elif code in (C.AT_END, C.AT_END_STRING):
            if pos == len(s) and pos >= self.n:
                k(pos, s, groups, True)
        else:  # word boundaries: the next character is not known yet
            raise _Unsupported

    def _accepts(self, op: object, av: object, c: str) -> bool:
        if op is C.LITERAL:
            return ord(c) == av
        if op is C.NOT_LITERAL:
            return ord(c) != av
        if op is C.ANY:
            return self.dotall or c != "\n"
        return _in_set(av, c)


def _in_set(items: Sequence, c: str) -> bool:
    """c is in the character set ``items`` (an IN node's list)."""
    o, hit, negate = ord(c), False, False
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            hit = hit or o == av
        elif op is C.RANGE:
            hit = hit or av[0] <= o <= av[1]
        elif op is C.CATEGORY:
            if av not in _CATEGORIES:
                raise _Unsupported
            hit = hit or _CATEGORIES[av](c)
        else:  # NOT_LITERAL inside a set, case-folded ranges, ...
            raise _Unsupported
    return hit != negate


def _literals(op: object, av: object) -> str:
    """Characters a test names itself (its literal, a set's literals and range starts), tried
    after the usual ones."""
    if op is C.LITERAL:
        return chr(av)
    if op is C.IN:
        return "".join(chr(a if o is C.LITERAL else a[0]) for o, a in av if o in (C.LITERAL, C.RANGE))
    return ""


def _set(groups: tuple, gid: int, span: tuple[int, int]) -> tuple:
    if gid >= len(groups):
        groups = groups + (None,) * (gid + 1 - len(groups))
    return groups[:gid] + (span,) + groups[gid + 1:]
