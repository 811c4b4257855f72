"""``regex``-package syntax rewritten into ``re`` syntax, character tests settled by ``regex`` itself.

A pattern that only the ``regex`` package accepts has the ``regex`` package's meaning (VERSION0
unless it starts with ``(?V1)``). Many such patterns are regular and differ from ``re`` syntax
only in their character tests and group names:

    \\p{...} \\P{...} \\pL   Unicode properties, scripts, blocks
    [... && ... -- ... || ...]   VERSION1 set operations and nested sets
    \\w \\d \\s ...        whose code points differ between the two packages
    (?<name>...)          named groups

``translate`` replaces every character test T (an escape or a whole set) by a private-use code
point u_T that the pattern does not contain, and returns the rewritten pattern with the map
u_T -> { c : regex.fullmatch(T, c) } (computed by the ``regex`` package over all code points, so
the sets are regex's own). The rest of the pattern (literals, ``.``, groups, alternation,
repeats, ``^ $ \\A \\Z``) means the same in both packages, so the byte automaton of the rewritten
pattern, with u_T read as its set, accepts exactly what ``regex.fullmatch`` accepts.

Anything whose meaning could differ is left alone (``translate`` returns None and the pattern
stays on the ``regex`` fallback): case-insensitive or verbose matching, inline flags other than a
leading ``(?V0)``/``(?V1)``, word boundaries (regex's ``\\b`` uses its own ``\\w``), and all
other regex-only syntax (recursion, branch reset, ``\\K``, fuzzy matching, verbs, ...).
"""

from __future__ import annotations

import functools
import re
import warnings

import regex as regex_pkg

from potentials.regex.chars import all_chars
from potentials.text import SUR_HI, SUR_LO

PUA_BASE = 0xF0000  # plane 15 private use: placeholders

# escapes that test one character, whose code points the two packages may define differently
_CLASS_ESCAPES = set("dDwWsS")
# escapes that mean the same one character in both packages
_SAME_ESCAPES = set("\\.^$|?*+()[]{}-/ntrfa0123456789'\"#&~ :;,<>=!@%`_")


@functools.lru_cache(maxsize=1024)
def regex_set(test: str, prefix: str) -> tuple[tuple[int, int], ...]:
    """{ c : regex.fullmatch(prefix + test, c) } as sorted code-point intervals, surrogates out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rx = regex_pkg.compile(f"{prefix}(?:{test})+")
    out: list[tuple[int, int]] = []
    for m in rx.finditer(all_chars()):
        lo, hi = m.start(), m.end() - 1
        for a, b in ((lo, min(hi, SUR_LO - 1)), (max(lo, SUR_HI + 1), hi)):
            if a <= b:
                out.append((a, b))
    return tuple(out)


def _escape_end(p: str, i: int) -> int:
    c = p[i + 1]
    if c in "pP":
        if i + 2 < len(p) and p[i + 2] == "{":
            close = p.find("}", i + 2)
            return -1 if close < 0 else close + 1
        return i + 3
    return i + 2


def _set_end(p: str, i: int, v1: bool) -> int:
    """Index after the set starting at p[i] == '[' (VERSION1 nests sets), or -1."""
    j, n = i + 1, len(p)
    if j < n and p[j] == "^":
        j += 1
    if j < n and p[j] == "]":
        j += 1
    depth = 1
    while j < n:
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if c == "[" and v1:
            depth += 1
        elif c == "[" and p.startswith("[:", j):
            close = p.find(":]", j)
            if close < 0:
                return -1
            j = close + 2
            continue
        elif c == "]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return -1


def translate(pattern: str, flags: int) -> tuple[str, dict[int, tuple[tuple[int, int], ...]]] | None:
    """(re pattern with placeholders, placeholder -> code-point set), or None (see above)."""
    if flags & ~(re.MULTILINE | re.DOTALL | re.ASCII | re.UNICODE):
        return None
    if any(ord(c) >= PUA_BASE for c in pattern):
        return None
    v1 = False
    body = pattern
    for marker in ("(?V1)", "(?V0)"):
        if body.startswith(marker):
            v1 = marker == "(?V1)"
            body = body[len(marker):]
    prefix = ("(?V1)" if v1 else "(?V0)") + ("(?a)" if flags & re.ASCII else "")
    sets: dict[int, tuple[tuple[int, int], ...]] = {}
    ids: dict[str, int] = {}
    out: list[str] = []

    def placeholder(test: str) -> str:
        if test not in ids:
            ids[test] = PUA_BASE + len(ids)
            sets[ids[test]] = regex_set(test, prefix)
        return chr(ids[test])

    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c == "\\":
            if i + 1 >= n:
                return None
            e = body[i + 1]
            if e in "pP" or e in _CLASS_ESCAPES:
                end = _escape_end(body, i)
                if end < 0:
                    return None
                out.append(placeholder(body[i:end]))
                i = end
            elif e in _SAME_ESCAPES or e in "AZ":
                if e.isdigit() and e != "0":
                    return None  # backreference
                out.append(body[i:i + 2])
                i += 2
            else:
                return None  # \b \B \G \K \X \N{} \x \u \g \m \M ...: left to the fallback
        elif c == "[":
            end = _set_end(body, i, v1)
            if end < 0:
                return None
            out.append(placeholder(body[i:end]))
            i = end
        elif c == "(" and body.startswith("(?", i):
            if body.startswith("(?<", i) and not body.startswith(("(?<=", "(?<!"), i):
                out.append("(?P<")
                i += 3
            elif body.startswith("(?s:", i):
                out.append("(?s:")  # DOTALL: `.` means the same in both packages
                i += 4
            elif body.startswith(("(?:", "(?P<", "(?#"), i):
                if body.startswith("(?#", i):
                    close = body.find(")", i)
                    if close < 0:
                        return None
                    i = close + 1
                    continue
                out.append(body[i:i + 3])
                i += 3
            else:
                return None  # lookarounds, flags, recursion, conditionals, branch reset ...
        else:
            out.append(c)
            i += 1
    return "".join(out), sets
