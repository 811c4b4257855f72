"""Sound dead-prefix tests for the ``regex``-package fallback of ``potentials.regex``.

The fallback decides viability with ``regex.fullmatch(P, t, partial=True)``. That answer is
*permissive*: the ``regex`` engine calls a match partial as soon as any path, a lookahead's
included, reaches the end of the text, so ``\\b(?!.*[aeiou])\\w+\\b`` keeps ``"ab\\\\"``
(its lookahead's ``.*`` reached the end), though no text starting so can match. It can also be
slow to say no (``(\\w+(?0)?\\w+)`` on 25 word characters and a space runs past 5 s). This module
gives two extra tests; each only ever answers "dead" for prefixes no completion can rescue, so
the fallback may reject a prefix when either says so and stays exact where it was exact.

1. ``relaxed_automaton(P)``: a byte automaton of a *regular superset* R(P) of L(P), made by
   relaxing what an automaton cannot express:

       lookarounds (?=C) (?!C) (?<=C) (?<!C)  ->  empty (always holds)
       word boundary \\b \\B              ->  empty (the regex package's \\w is not re's)
       a set with \\w \\d \\s or IGNORECASE ->  re's set united with the regex package's
       atomic group, possessive repeat  ->  the ordinary group / greedy repeat (the cut only
                                            removes matches)
       backreference \\k                 ->  group k's body with its zero-width assertions
                                            removed (its capture is a string of that body;
                                            under IGNORECASE, or inside group k: any string)
       conditional (?(k)Y|N)            ->  Y | N
       recursion (?R) (?0) (?1) (?&n)   ->  S* with S the union of every character set of P
                                            (a recursive call matches characters of P's sets)

   Each rule only enlarges the language, so L(P) <= R(P), and a prefix R's automaton calls dead
   (no completion in R(P)) has no completion in L(P) either.

2. ``leading_negative_lookaheads(P)``: for P = A (?!C_1) ... (?!C_m) rest, with A zero-width
   anchors, each (?!C_i) is evaluated at position 0 by every match attempt. When C_i is
   *extension-stable* (no lookaheads, no end or word-boundary anchors, no atomic groups or
   possessive repeats, no conditionals, backreferences only to its own groups), a match of C_i on
   a prefix of t is a match on a prefix of every t y, so

       regex.match(C_i, t) succeeds  =>  no t y fully matches P.

Both are built once per pattern; each returns None / [] when the pattern is outside what it
handles, which only means no extra pruning.
"""

from __future__ import annotations

import functools
from typing import Any

import regex

from potentials._compat import C, subtrees, tree_items
from potentials.regex.automaton import (
    ByteDFA,
    InvalidRegex,
    UnsupportedRegex,
    Intervals,
    NFA,
    normalized_intervals,
    render_item,
    parse_flags,
    parse_regex_package_syntax,
    regex_package_compile,
)
from potentials.regex.chars import all_chars
from potentials.text import MAXCP

#: a private-use code point standing for one character of the pattern's alphabet (recursion);
#: potentials.regex.syntax allocates its placeholders from U+F0000 upwards, far below it
RECURSION_MARK = 0xFFFFD
_ANY = ((0, MAXCP),)


def _class_end(p: str, i: int) -> int:
    """Index just past the character class starting at p[i] == '['."""
    j = i + 1
    if j < len(p) and p[j] == "^":
        j += 1
    if j < len(p) and p[j] == "]":
        j += 1
    while j < len(p):
        if p[j] == "\\":
            j += 2
            continue
        if p[j] == "[":  # a nested set (regex VERSION1) or a POSIX class [:alpha:]
            j = _class_end(p, j)
            continue
        if p[j] == "]":
            return j + 1
        j += 1
    return len(p)


def _group_end(p: str, i: int) -> int | None:
    """Index just past the group opened at p[i] == '(' (None when unbalanced)."""
    depth, j = 0, i
    while j < len(p):
        ch = p[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "[":
            j = _class_end(p, j)
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return None


def _is_recursion(p: str, i: int) -> int | None:
    """End of a recursive call (?R) (?0) (?N) (?+N) (?-N) (?&name) (?P>name) at p[i], else None."""
    if not p.startswith("(?", i):
        return None
    j = i + 2
    if p.startswith("P>", j):
        j += 2
    elif p.startswith("&", j):
        j += 1
    elif p.startswith("R)", j):
        return j + 2
    elif j < len(p) and p[j] in "+-0123456789":
        j += 1 if p[j] in "+-" else 0
        k = j
        while k < len(p) and p[k].isdigit():
            k += 1
        return k + 1 if k > j and k < len(p) and p[k] == ")" else None
    else:
        return None
    k = j
    while k < len(p) and (p[k].isalnum() or p[k] == "_"):
        k += 1
    return k + 1 if k > j and k < len(p) and p[k] == ")" else None


def mark_recursion(pattern: str) -> tuple[str, bool] | None:
    """(pattern with every recursive call replaced by ``(?:M*)``, M = RECURSION_MARK, and named
    groups ``(?<n>`` spelled ``(?P<n>``; whether there was a recursive call), or None when the
    pattern already holds M."""
    mark = chr(RECURSION_MARK)
    if mark in pattern:
        return None
    out, i, found = [], 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if ch == "[":
            end = _class_end(pattern, i)
            out.append(pattern[i:end])
            i = end
            continue
        if pattern.startswith("(?<", i) and i + 3 < len(pattern) and pattern[i + 3] not in "=!":
            out.append("(?P<")  # a named group in the regex package's spelling, for re's parser
            i += 3
            continue
        end = _is_recursion(pattern, i) if ch == "(" else None
        if end is not None:
            out.append(f"(?:{mark}*)")
            found = True
            i = end
            continue
        out.append(ch)
        i += 1
    return "".join(out), found


def _groups(seq, flags: int, out: dict[int, tuple[Any, int]]) -> dict[int, tuple[Any, int]]:
    """group number -> (its body, the flags it is matched under)."""
    for op, av in seq:
        if op is C.SUBPATTERN:
            group, add, remove, sub = av
            inner = (flags | add) & ~remove
            if group is not None:
                out[group] = (sub, inner)
            _groups(sub, inner, out)
        else:
            for sub in subtrees(op, av):
                _groups(sub, flags, out)
    return out


class _RelaxedNFA(NFA):
    """An NFA of the superset R(P) of the module docstring."""

    def __init__(self, pattern: str, placeholders: dict, groups: dict):
        super().__init__(pattern, placeholders, lookaround=True)
        self.groups = groups
        self._expanding: set[int] = set()
        self._strip = 0  # > 0 inside a backreference's copy of its group: assertions dropped

    def any_string(self, cur: int) -> int:
        loop = self.new()
        self.eps[cur].append((None, loop))
        self.chars[loop].append((self.set_id(_ANY), loop))
        return loop

    def item(self, op, av, cur: int, flags: int, pattern: str) -> int:
        if op in (C.ASSERT, C.ASSERT_NOT):
            # lookbehinds too: their automata would read sets the way re does, not regex
            return cur
        if op is C.AT and (self._strip or av in (C.AT_BOUNDARY, C.AT_NON_BOUNDARY)):
            return cur  # regex's word boundaries use its own \\w: relaxed to 'holds' 
        if op is C.ATOMIC_GROUP:
            return self.build(av, cur, flags, pattern)
        if op is C.POSSESSIVE_REPEAT:
            return super().item(C.MAX_REPEAT, av, cur, flags, pattern)
        if op is C.GROUPREF_EXISTS:
            branches = [s for s in av[1:] if s is not None]
            end = self.new()
            if len(branches) < 2:
                self.eps[cur].append((None, end))
            for sub in branches:
                start = self.new()
                self.eps[cur].append((None, start))
                self.eps[self.build(sub, start, flags, pattern)].append((None, end))
            return end
        if op is C.GROUPREF:
            got = self.groups.get(av)
            if got is None or av in self._expanding or (flags | got[1]) & C.SRE_FLAG_IGNORECASE:
                return self.any_string(cur)
            body, gflags = got
            self._expanding.add(av)
            self._strip += 1
            try:
                return self.build(body, cur, gflags, pattern)
            finally:
                self._strip -= 1
                self._expanding.discard(av)
        return super().item(op, av, cur, flags, pattern)

    def char_set(self, op, av, flags: int) -> Intervals | None:
        """re's set for the item, widened by the ``regex`` package's where the two can differ
        (``\\w \\d \\s`` and case folding: regex's ``\\w`` has combining marks, re's has ``½``)."""
        ivs = super().char_set(op, av, flags)
        if ivs is None or op not in (C.LITERAL, C.NOT_LITERAL, C.IN):
            return ivs  # `.` reads alike; a one-item group's set came through here already
        items = list(av) if op is C.IN else [(C.LITERAL, av)]
        if not (flags & C.SRE_FLAG_IGNORECASE or any(o is C.CATEGORY for o, _ in items)):
            return ivs
        if any(o is C.LITERAL and a in self.placeholders for o, a in items):
            return _ANY
        negate = op is C.NOT_LITERAL or (bool(items) and items[0][0] is C.NEGATE)
        body = "".join(render_item(o, a) for o, a in items if o is not C.NEGATE)
        other = _regex_set("[" + ("^" if negate else "") + body + "]",
                           flags & (C.SRE_FLAG_IGNORECASE | C.SRE_FLAG_ASCII))
        return normalized_intervals([*ivs, *other])

    def check_lookaheads(self) -> None:
        """No lookahead is built into R(P) (they are all relaxed to 'holds')."""


@functools.lru_cache(maxsize=1024)
def _regex_set(item: str, flags: int) -> Intervals:
    """The code points the ``regex`` package (VERSION0) matches with the one-character ``item``
    under re's IGNORECASE/ASCII ``flags``."""
    rflags = regex.VERSION0 | (regex.IGNORECASE if flags & C.SRE_FLAG_IGNORECASE else 0) | (
        regex.ASCII if flags & C.SRE_FLAG_ASCII else 0)
    rx = regex.compile("(?:" + item + ")+", rflags)
    return tuple((m.start(), m.end() - 1) for m in rx.finditer(all_chars()))


def _tree(pattern: str, flags: int) -> tuple[Any, int, dict] | None:
    """(re parse tree, global flags, placeholders) of ``pattern``, through
    potentials.regex.syntax for regex-only syntax; None when neither route parses it."""
    try:
        tree, gflags = parse_flags(pattern, flags)
        return tree, gflags, {}
    except InvalidRegex:
        pass
    return parse_regex_package_syntax(pattern, flags)


def relaxed_automaton(pattern: str, flags: int = 0) -> ByteDFA | None:
    """The byte automaton of R(pattern) (module docstring, 1), or None when it cannot be built.

    Args:
        pattern: a pattern the ``regex`` package compiles (the fallback's).
        flags: ``re`` flags as checked by ``potentials.regex.automaton.check_flags``.
    """
    if flags & (regex.VERSION1 | regex.VERBOSE) or "(?V1)" in pattern:
        return None  # VERSION1 sets and full case folding differ from re's reading
    marked = mark_recursion(pattern)
    if marked is None:
        return None
    text, recursive = marked
    parsed = _tree(text, flags)
    if parsed is None:
        return None
    tree, gflags, placeholders = parsed
    if gflags & regex.VERBOSE:
        return None
    items = tree_items(tree)
    groups = _groups(items, gflags, {})
    try:
        if recursive:
            # the alphabet S: every set the pattern matches characters with
            probe = _RelaxedNFA(pattern, {**placeholders, RECURSION_MARK: ()}, groups)
            probe.build(items, probe.new(), gflags, pattern)
            alphabet = normalized_intervals([iv for s in probe.sets for iv in s])
            placeholders = {**placeholders, RECURSION_MARK: alphabet}
        nfa = _RelaxedNFA(pattern, placeholders, groups)
        start = nfa.new()
        final = nfa.build(items, start, gflags, pattern)
        return ByteDFA(nfa, start, final)
    except (UnsupportedRegex, RecursionError):
        return None


def _stable(seq, own: set[int]) -> bool:
    """C is extension-stable (module docstring, 2); ``own``: C's group numbers."""
    for op, av in seq:
        if op is C.ASSERT or op is C.ASSERT_NOT:
            if av[0] != -1:
                return False
        elif op is C.AT:
            if av not in (C.AT_BEGINNING, C.AT_BEGINNING_STRING):
                return False
        elif op in (C.ATOMIC_GROUP, C.POSSESSIVE_REPEAT, C.GROUPREF_EXISTS):
            return False
        elif op is C.GROUPREF and av not in own:
            return False
        if not all(_stable(sub, own) for sub in subtrees(op, av)):
            return False
    return True


def leading_negative_lookaheads(pattern: str, flags: int = 0) -> list:
    """Compiled ``regex`` patterns C_i of the extension-stable leading negative lookaheads of
    ``pattern`` (module docstring, 2); [] when there are none or the pattern is outside the
    simple prefix syntax read here (anchors ``^ \\A \\b`` and lookaheads, no inline flags)."""
    if flags & (regex.VERSION1 | regex.VERBOSE):
        return []
    out, i, shifted = [], 0, False
    while i < len(pattern):
        if pattern[i] == "^":
            i += 1
        elif pattern.startswith(("\\A", "\\b"), i):
            i += 2
        elif pattern.startswith(("(?=", "(?!"), i):
            end = _group_end(pattern, i)
            if end is None:
                return out
            body = pattern[i + 3:end - 1]
            # standalone, the body's groups are numbered from 1: right unless an earlier
            # lookahead held groups
            if pattern[i + 2] == "!" and not (shifted and "(" in body):
                rx = _stable_body(body, flags)
                if rx is not None:
                    out.append(rx)
            shifted = shifted or "(" in body
            i = end
        else:
            break
    return out


def _stable_body(body: str, flags: int):
    """regex.compile(body) when ``body`` parses with re and is extension-stable, else None."""
    try:
        tree, _ = parse_flags(body, flags)
        rx = regex_package_compile(body, flags)
    except (InvalidRegex, UnsupportedRegex):
        return None
    items = tree_items(tree)
    if not _stable(items, set(_groups(items, 0, {}))):
        return None
    return rx
