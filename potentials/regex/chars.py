"""Which characters a ``regex``-package pattern can tell apart: representatives per code-point class.

The fallback of ``potentials.regex`` must decide, for a text t and a code-point range R (the
characters an incomplete UTF-8 tail can still become), whether some c in R makes t + c a viable
prefix. Trying all of R costs up to 2**18 ``regex`` calls. Instead, the pattern's *character
atoms* A_1..A_k (literals, escapes such as ``\\w`` or ``\\p{L}``, whole sets and every item inside
them, ``.``), each compiled under the flag variants the pattern can switch on, split R into cells

    cell(c) = (c in A_1, ..., c in A_k)

The engine consults a text character only through such atoms, through equality with other text
characters (backreferences, possibly case-insensitive) and through the word/line classes that
anchors use (always among the atoms). So two characters of one cell, neither equal (up to case)
to a character of t, give t + c the same verdict, and

    candidates(t, R) = {min of each cell} + {c in R : c equals a case variant of a char of t}

decides the question exactly with a few calls. Syntax whose character tests are not atoms
(``\\X`` graphemes, Unicode word boundaries under the WORD flag, named lists, fuzzy matching)
makes ``atoms_of`` return None, and the caller tries every character instead.

``all_chars`` is the text of every code point in order, the one string through which this
module, the automaton and the syntax translation ask a regex engine about every character.
"""

from __future__ import annotations

import bisect
import functools
import warnings

import regex as regex_pkg

from potentials.text import MAXCP

# character classes anchors and `.` consult, always among the atoms
_BASE_ATOMS = [r"\w", r"(?a)\w", r"\d", r"\s", r"\n", r".", r"(?s).", r"\r"]
_ZERO_WIDTH = set("bBAZzGmMK")


@functools.lru_cache(maxsize=1)
def all_chars() -> str:
    """chr(0) chr(1) ... chr(MAXCP), surrogates included, so offset = code point (one 4.5 MB
    string per process, shared by everything that asks a regex engine about every character)."""
    return "".join(map(chr, range(MAXCP + 1)))


def _escape_end(pattern: str, i: int) -> int | None:
    """End of the escape starting at pattern[i] == '\\\\' (None: not a one-character test)."""
    n = len(pattern)
    if i + 1 >= n:
        return None
    c = pattern[i + 1]
    if c in "pPN":
        if i + 2 < n and pattern[i + 2] == "{":
            close = pattern.find("}", i + 2)
            return None if close < 0 else close + 1
        return i + 3
    if c == "x":
        if i + 2 < n and pattern[i + 2] == "{":
            close = pattern.find("}", i + 2)
            return None if close < 0 else close + 1
        return i + 4
    if c == "u":
        return i + 6
    if c == "U":
        return i + 10
    if c == "0":
        j = i + 2
        while j < n and j < i + 4 and pattern[j] in "01234567":
            j += 1
        return j
    return i + 2


@functools.lru_cache(maxsize=256)
def atoms_of(pattern: str) -> tuple[str, ...] | None:
    """Source texts of the character atoms of ``pattern`` (a superset is harmless), or None."""
    if any(s in pattern for s in ("\\X", "(*", "\\L<", "{e", "{s", "{i", "{d")) or "(?w" in pattern:
        return None
    atoms: set[str] = set(_BASE_ATOMS)
    n, i = len(pattern), 0
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            end = _escape_end(pattern, i)
            if end is None:
                return None
            c = pattern[i + 1]
            if c not in _ZERO_WIDTH and not c.isdigit() or c == "0":
                if c not in "gk":
                    atoms.add(pattern[i:end])
            i = end
        elif ch == "[":
            # every plausible end of the set (V0 and V1 read nesting differently) and every item
            # inside it: wrong guesses only add atoms, which refines the cells harmlessly
            j, depth = i + 1, 1
            while j < n:
                cj = pattern[j]
                if cj == "\\":
                    end = _escape_end(pattern, j)
                    if end is None:
                        return None
                    atoms.add(pattern[j:end])
                    j = end
                    continue
                if cj == "[":
                    depth += 1
                    if pattern.startswith("[:", j):
                        close = pattern.find(":]", j)
                        if close > 0:
                            atoms.add("[" + pattern[j:close + 2] + "]")
                elif cj == "]" and j > i + 1:
                    atoms.add(pattern[i:j + 1])
                    depth -= 1
                    if depth == 0:
                        break
                else:
                    atoms.add(pattern[j])
                    if j + 2 < n and pattern[j + 1] == "-" and pattern[j + 2] not in "]-[\\":
                        atoms.add(f"[{cj}-{pattern[j + 2]}]")
                j += 1
            atoms.add(pattern[i])
            i += 1
        else:
            atoms.add(ch)
            # full case folding lets one text character match several pattern characters
            for k in (2, 3):
                gram = pattern[i:i + k]
                if len(gram) == k and not any(g in "\\[](){}|*+?.^$" for g in gram):
                    atoms.add(gram)
            i += 1
    return tuple(sorted(atoms))


def _variants(pattern: str, atom: str) -> list[str]:
    """Flag prefixes under which ``atom`` may be tested: the pattern may switch these on."""
    flags = "".join(set("".join(regex_pkg.findall(r"\(\?\^?([a-zA-Z]+)", pattern)))) + "i"
    out = [""]
    if "i" in flags:
        out += ["(?i)", "(?fi)"]
    if "a" in flags or "A" in flags:
        out += ["(?a)", "(?ai)"]
    if "s" in flags and "." in atom:
        out.append("(?s)")
    if "V1" in pattern:
        out += ["(?V1)", "(?V1i)", "(?V1fi)"]
    return out


@functools.lru_cache(maxsize=64)
def _cells(pattern: str) -> tuple[list[int], list[int]] | None:
    """Elementary intervals of all code points (their starts) and a cell id for each."""
    atoms = atoms_of(pattern)
    if atoms is None:
        return None
    # surrogates stand in as themselves: they never come from UTF-8, only their positions matter
    text = all_chars()
    cuts = {0, len(text)}
    members = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for atom in atoms:
            for v in _variants(pattern, atom):
                try:
                    rx = regex_pkg.compile(f"{v}(?:{atom})+")
                except (regex_pkg.error, ValueError, OverflowError):
                    continue
                runs = [m.span() for m in rx.finditer(text) if m.end() > m.start()]
                for a, b in runs:
                    cuts.add(a)
                    cuts.add(b)
                members.append(runs)
    starts = sorted(cuts)[:-1]
    ids: dict[tuple, int] = {}
    cell = [ids.setdefault(tuple(_inside(runs, b) for runs in members), len(ids)) for b in starts]
    return starts, cell


def representatives(pattern: str, lo: int, hi: int) -> tuple[int, ...] | None:
    """The least code point of every cell met in [lo, hi] (see the module docstring), or None."""
    got = _cells(pattern)
    if got is None:
        return None
    starts, cell = got
    i = bisect.bisect_right(starts, lo) - 1
    reps: dict[int, int] = {}
    while i < len(starts) and starts[i] <= hi:
        reps.setdefault(cell[i], max(lo, starts[i]))
        i += 1
    return tuple(sorted(reps.values()))


def _inside(runs: list[tuple[int, int]], b: int) -> bool:
    i = bisect.bisect_right(runs, (b, 1 << 62)) - 1
    return i >= 0 and runs[i][0] <= b < runs[i][1]
