"""The Regex constraint family: Python ``re``/``regex`` patterns over UTF-8 text.

    automaton.py   regular patterns compiled to a byte DFA with exact liveness (``ByteDFA``)
    syntax.py      ``regex``-package-only syntax rewritten into ``re`` syntax, its character
                   tests settled by the ``regex`` package
    chars.py       code points: the whole range, and representatives per class that a
                   ``regex``-package pattern can tell apart
    relax.py       sound dead-prefix tests for the ``regex``-package fallback
    completion.py  shortest completions under backreferences (the lookahead twist's y)
    potential.py   the ``Regex`` potential: the automaton where it is exact, else the fallback
"""

from potentials.regex.automaton import InvalidRegex, RegexTooLarge, UnsupportedRegex
from potentials.regex.potential import DEFAULT_TIMEOUT, Regex
from potentials.text import split_utf8

__all__ = ["DEFAULT_TIMEOUT", "InvalidRegex", "Regex", "RegexTooLarge", "UnsupportedRegex", "split_utf8"]
