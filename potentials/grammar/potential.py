"""Lark grammars as byte-level Boolean potentials.

With L the language that ``lark.Lark(text, start=start, parser="earley",
lexer="dynamic_complete")`` accepts (text as UTF-8 bytes):

    complete(x) = 0 if x in L else -inf          prefix(x) = 0 if x y in L for some y else -inf
"""

from __future__ import annotations

from pathlib import Path

import lark

from potentials._compat import C, parse_regex, subtrees, tree_items
from smc.core.logmath import NEG_INF
from potentials.base import BytePotential
from potentials.grammar.earley import CFG, Column, Earley, TokenDFA
from potentials.regex.automaton import UnsupportedRegex, compile_regex, shown

# lark's common.ESCAPED_STRING uses a lookbehind and relies on its lazy first match; read that
# way it is exactly this regular language (checked exhaustively against lark in the tests).
_LARK_ESCAPED_STRING = r'".*?(?<!\\)(\\\\)*?"'
_ESCAPED_STRING = r'"(?:[^"\\\n]|\\[^\n])*"'


class Grammar(BytePotential[Column]):
    """A Lark grammar as a Boolean constraint on UTF-8 text, with exact prefix viability.

    The language is what lark's Earley parser with ``lexer="dynamic_complete"`` accepts: the
    grammar read as a context-free grammar over characters, where a terminal matches any of its
    regex's matches (no lexer priorities; rule and terminal priorities do not change the
    language). Rules and terminals come from lark itself, so every grammar feature lark resolves
    (``%import``, templates, ``?rule``, ``_inline``, aliases, ``[]``/``*``/``+``, literals with
    ``i``, regex flags, ``%override``/``%extend``) works. Parsing is a byte-level Earley
    recognizer whose terminals are byte automata (``potentials.regex.automaton``); its state is
    persistent, so advancing over k bytes costs O(k) columns whatever the prefix length.

    Matching details, following lark's dynamic_complete lexer:
    - a terminal whose regex has a lazy quantifier (``*?``, ``+?``, ...) matches its shortest
      match only (as ``re.match`` finds it); any other terminal matches every way it can;
    - ``%ignore``d terminals may appear before any terminal and at the end; each ignored match
      is its pattern's longest one at that point (e.g. an ignored WS run is never cut short).

    Departures and limits (the first and last are silent; the others raise at construction):
    - a terminal whose Python ``re.match`` is not its longest match for reasons other than a lazy
      quantifier (an alternation such as ``/a|ab/``) is read as its whole regular language, where
      lark tries only the first match and its truncations;
    - regex features without a finite automaton (lookarounds, backreferences, ...) raise
      ValueError naming the terminal, except in lark's ``common.ESCAPED_STRING``, which is
      replaced by its exact regular equivalent;
    - ``%declare``d terminals (no pattern) raise ValueError;
    - an ignored pattern must be decided by one character: once it matches, every further
      character must either keep it matching or end it (true of whitespace, line comments and
      ``/* */`` comments); otherwise ValueError;
    - where prefix viability depends on the longest-match rule for ignored text, two corners
      are read generously (a prefix may count as viable and die a character later; complete
      stays exact): a prefix ending inside a multi-byte character right after an ignored match
      (the check waits for the character's last byte), and, with two or more ignored
      terminals, a position where only another ignored match could still start.

    A grammar whose language is empty gives ``prefix(b"") == -inf``. An invalid grammar raises
    ValueError with lark's message. Invalid UTF-8 in a context is simply not in the language.

    Args:
        lark_text: the grammar, in Lark syntax.
        start: the start rule.
    """

    def __init__(self, lark_text: str, start: str = "start"):
        if not isinstance(lark_text, str):
            raise TypeError(f"lark_text must be a str, got {type(lark_text).__name__}")
        if not isinstance(start, str):
            raise TypeError(f"start must be a str, got {type(start).__name__}")
        try:
            lark_text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"grammar text is not valid Unicode: {lark_text[e.start:e.end]!r} at position "
                f"{e.start} is a lone surrogate"
            ) from None
        self.lark_text, self.start = lark_text, start
        self.earley = Earley(_to_cfg(lark_text, start))

    def initial(self) -> Column:
        return self.earley.root

    def advance(self, state: Column, data: bytes) -> Column | None:
        if not state.viable:
            return None
        return self.earley.walk(state, data)

    async def state_prefix(self, state: Column) -> float:
        return 0.0 if state.viable else NEG_INF

    async def state_complete(self, state: Column) -> float:
        return 0.0 if state.accept else NEG_INF

    def __repr__(self) -> str:
        return f"Grammar({self.lark_text!r}, start={self.start!r})"


def _to_cfg(lark_text: str, start: str) -> CFG:
    """lark's own rules and terminals, with each terminal compiled to a byte automaton."""
    try:
        parser = lark.Lark(lark_text, start=start, parser="earley", lexer="dynamic_complete")
    except lark.exceptions.LarkError as e:
        raise ValueError(f"invalid Lark grammar: {e}") from None
    except FileNotFoundError as e:
        raise ValueError(
            f"invalid Lark grammar: %import of {Path(e.filename or '?').stem!r} found no grammar file "
            f"{Path(e.filename or '?').name!r} (lark looks in its own grammars, e.g. common, and "
            "in the current directory)"
        ) from None
    except RecursionError:
        raise ValueError("invalid Lark grammar: nested too deeply for lark to read") from None
    except Exception as e:  # noqa: BLE001 - e.g. a terminal's regex that lark cannot compile
        raise ValueError(f"invalid Lark grammar: {_describe(e)}") from e
    defs = {t.name: t for t in parser.terminals}
    nonterminals: dict[str, int] = {start: 0}
    terminals: dict[str, int] = {}

    def symbol(sym) -> int:
        if sym.is_term:
            if sym.name not in defs:
                raise ValueError(
                    f"terminal {sym.name} has no pattern (declared with %declare?); "
                    "Grammar needs every terminal to be defined"
                )
            return ~terminals.setdefault(sym.name, len(terminals))
        return nonterminals.setdefault(sym.name, len(nonterminals))

    lhs, rhs = [], []
    for rule in parser.rules:
        lhs.append(symbol(rule.origin))
        rhs.append(tuple(symbol(s) for s in rule.expansion))
    term_dfas = tuple(_token_dfa(defs[name]) for name in terminals)
    ignore_dfas = tuple(_token_dfa(defs[name]) for name in parser.ignore_tokens)
    for auto in ignore_dfas:
        _check_ignorable(auto)
    return CFG(tuple(lhs), tuple(rhs), 0, len(nonterminals), term_dfas, ignore_dfas)


def _token_dfa(tdef) -> TokenDFA:
    regexp = tdef.pattern.to_regexp().replace(_LARK_ESCAPED_STRING, _ESCAPED_STRING)
    try:
        dfa = compile_regex(regexp)
        lazy = _is_lazy(tree_items(parse_regex(regexp)))
    except UnsupportedRegex as e:
        raise ValueError(f"terminal {tdef.name} is not supported: {e}") from None
    except Exception as e:  # noqa: BLE001 - any failure to compile the user's pattern
        raise ValueError(f"terminal {tdef.name} (pattern {shown(regexp)}) cannot be compiled: {_describe(e)}") from e
    return TokenDFA(tdef.name, dfa, lazy)


def _describe(e: BaseException) -> str:
    """One line: the exception's message, prefixed by its type unless that is a plain ValueError."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    kind = type(e).__name__
    return msg if kind == "ValueError" and msg else f"{kind}: {msg}" if msg else kind


def _is_lazy(seq) -> bool:
    """Does the parsed regex contain a lazy repeat (``*?``, ``+?``, ``??``, ``{m,n}?``)?"""
    return any(op is C.MIN_REPEAT or any(_is_lazy(sub) for sub in subtrees(op, av))
               for op, av in seq)


def _check_ignorable(auto: TokenDFA) -> None:
    """Ignored matches are longest matches, decided one character after the match ends.

    That holds when, from every accepting state, each character read either dies or lands in
    an accepting state again; explored with one character per class of the automaton.
    """
    reps = [chr(cp).encode() for cp in sorted(auto.char_cuts())]
    reach, stack = {auto.start}, [auto.start]
    while stack:
        q = stack.pop()
        for ch in reps:
            q2 = auto.walk(q, ch)
            if q2 is None:
                continue
            if auto.accepts(q) and not auto.accepts(q2):
                raise ValueError(
                    f"ignored terminal {auto.name} is not supported: after a match, one more "
                    f"character ({ch.decode()!r}) can extend it without matching, so lark's "
                    "longest-match reading of it is not decided by the next character"
                )
            if q2 not in reach:
                reach.add(q2)
                stack.append(q2)
