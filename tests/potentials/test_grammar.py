"""Grammar potential: the contract, and agreement with lark's dynamic_complete Earley parser.

Oracle: lark(g).parse(s) succeeds  <=>  complete(s) == 0, and prefix(x) == 0 <=> some extension
of x is accepted. Exhaustive checks enumerate every string up to a length over small alphabets;
for prefixes, "some extension" is decided by brute force on grammars where every viable prefix
of length m has an accepted extension of length <= 2m + 2 (so the enumeration is decisive).
Hypothesis adds strings derived from the grammar (terminals drawn by random walks on their
automata) and mutations of them.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from functools import lru_cache

import lark
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from potentials import Grammar
from smc.core.logmath import NEG_INF
from potentials.testing import PotentialContract

ARITH = r"""
?start: sum
?sum: product | sum "+" product | sum "-" product
?product: atom | product "*" atom | product "/" atom
?atom: NUMBER | "(" sum ")" | "-" atom
%import common.NUMBER
%import common.WS_INLINE
%ignore WS_INLINE
"""

JSON = r"""
?start: value
?value: object | array | string | SIGNED_NUMBER -> number | "true" | "false" | "null"
array  : "[" [value ("," value)*] "]"
object : "{" [pair ("," pair)*] "}"
pair   : string ":" value
string : ESCAPED_STRING
COMMENT: C_COMMENT
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.C_COMMENT
%import common.WS
%ignore WS
%ignore COMMENT
"""

PARENS = r"""
start: "(" start ")" start | "[" start "]" start |
"""

NULLABLE = r"""
start: a b "x" b
a: "a"?
b: (_pair)*
_pair: "b" c
c: | "c"
"""

UNICODE = r"""
start: greeting+
greeting: "é"+ "ü"i | "日本" GREEK | WORD
GREEK: /[α-ω]+/
WORD: /[a-z]/
"""

TEMPLATES = r"""
start: list{item} | "!" start
list{x}: "(" [x (";" x)*] ")"
?item: /[0-9]+/ | "z"i | list{item}
%ignore " "
"""

LINES = r"""
start: (line NEWLINE)* line?
line: WORD (" "+ WORD)*
WORD: /[a-z]+/
NEWLINE: "\n"
COMMENT: /#[^\n]*/
%ignore COMMENT
"""

FEATURES = r"""
start: stmt+
?stmt: assign | expr ";"
assign.2: NAME "=" expr ";" -> assignment
?expr: expr "+" term | term
?term: _paren{expr} | NAME | INT | "-" term | _inl
_inl: "#"
_paren{x}: "(" x ")"
NAME.2: /[a-z]/
INT: /[0-9]+/
%ignore " "
"""

GRAMMARS = {
    "arith": ARITH,
    "json": JSON,
    "parens": PARENS,
    "nullable": NULLABLE,
    "unicode": UNICODE,
    "templates": TEMPLATES,
    "lines": LINES,
    "features": FEATURES,
}


@lru_cache(maxsize=None)
def grammar(name: str) -> Grammar:
    return Grammar(GRAMMARS[name])


@lru_cache(maxsize=None)
def oracle(name: str) -> lark.Lark:
    return lark.Lark(GRAMMARS[name], parser="earley", lexer="dynamic_complete")


def lark_accepts(name: str, data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    try:
        oracle(name).parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


def run(coro):
    return asyncio.run(coro)


# ------------------------------------------------------------------------------ contract


class GrammarContract(PotentialContract):
    name = ""
    samples: tuple = ()

    def potential(self):
        return grammar(self.name)

    def contexts(self):
        ctxs = [b""]
        for s in self.samples:
            data = s.encode() if isinstance(s, str) else s
            ctxs += [data[:k] for k in range(1, len(data) + 1)]
        return list(dict.fromkeys(ctxs))


class TestArithContract(GrammarContract):
    name = "arith"
    samples = ("1 + (2.5*-3) / 4", "1 +", "((", "1 2", "1e5", ")")


class TestJSONContract(GrammarContract):
    name = "json"
    symbols_per_context = 40
    samples = ('{"a": [1, -2.5e3, "x\\"y"], /* c */ "b": null}', '["\u00e9', '{"a" 1}', "[1,]")


class TestParensContract(GrammarContract):
    name = "parens"
    samples = ("([])()", "(]", "(()")


class TestNullableContract(GrammarContract):
    name = "nullable"
    samples = ("abcbxb", "xbcb", "aa", "bx")


class TestUnicodeContract(GrammarContract):
    name = "unicode"
    samples = ("ééÜ日本αβa", "日本", "éü".encode()[:3], b"\xff", "日".encode()[:2] + b"a")


# ------------------------------------------------------------------------------ exhaustive oracle


def strings(alphabet, max_len):
    for n in range(max_len + 1):
        for chars in itertools.product(alphabet, repeat=n):
            yield "".join(chars).encode()


EXHAUSTIVE = [
    ("arith", "1+*( ).e", 4),
    ("json", '[]":,1 /*', 4),
    ("parens", "()[]", 5),
    ("nullable", "abcx", 5),
    ("unicode", ["é", "ü", "Ü", "日", "本", "α", "a"], 4),
    ("templates", "(1;)! Z", 4),
    ("lines", "a \n#", 5),
    ("features", "a=1+;( ", 4),
]


@pytest.mark.parametrize("name,alphabet,max_len", EXHAUSTIVE)
def test_complete_agrees_with_lark_exhaustively(name, alphabet, max_len):
    pot = grammar(name)
    for s in strings(alphabet, max_len):
        assert (run(pot.complete(s)) == 0) == lark_accepts(name, s), s


# (grammar, alphabet, prefix length m, extension length): every viable prefix of length <= m
# has an accepted extension within the bound, so brute force decides viability.
DECISIVE = [
    ("parens", "()[]", 3, 3),
    ("nullable", "abcx", 3, 2),
    ("arith", "1+()", 2, 3),
    ("templates", "(1;)", 3, 4),
    ("lines", "a \n#", 3, 1),
    ("features", "a;()", 2, 4),
]


@pytest.mark.parametrize("name,alphabet,m,k", DECISIVE)
def test_prefix_is_exact_viability(name, alphabet, m, k):
    pot = grammar(name)
    accepted = [s for s in strings(alphabet, m + k) if lark_accepts(name, s)]
    assert accepted
    for x in strings(alphabet, m):
        viable = any(s.startswith(x) for s in accepted)
        assert (run(pot.prefix(x)) == 0) == viable, x


@pytest.mark.parametrize("name,alphabet,max_len", EXHAUSTIVE)
def test_accepted_strings_have_viable_byte_prefixes(name, alphabet, max_len):
    pot = grammar(name)
    for s in strings(alphabet, max_len):
        if lark_accepts(name, s):
            assert all(run(pot.prefix(s[:k])) == 0 for k in range(len(s) + 1)), s


# ------------------------------------------------------------------------------ generated strings


def sample_terminal(auto, rng: random.Random) -> bytes | None:
    """A random member of a terminal's byte language: a walk that stops at accepting states."""
    q, out = auto.start, bytearray()
    for _ in range(40):
        if auto.accepts(q) and (rng.random() < 0.4 or not auto.can_continue(q)):
            return bytes(out)
        live = [b for b in range(256) if auto.step(q, b) is not None]
        ascii_ = [b for b in live if b < 0x80]
        b = rng.choice(ascii_ if ascii_ and rng.random() < 0.9 else live)
        out.append(b)
        q = auto.step(q, b)
    return None


@lru_cache(maxsize=None)
def heights(earley) -> tuple[float, ...]:
    """Least derivation height of every nonterminal (terminals count 0)."""
    h = [float("inf")] * len(earley.rules_of)
    changed = True
    while changed:
        changed = False
        for a, rules in enumerate(earley.rules_of):
            for r in rules:
                v = 1 + max((h[s] if s >= 0 else 0 for s in earley.rhs[r]), default=0)
                if v < h[a]:
                    h[a], changed = v, True
    return tuple(h)


def rule_height(earley, r: int) -> float:
    return max((heights(earley)[s] if s >= 0 else 0 for s in earley.rhs[r]), default=0)


def derive(name: str, rng: random.Random) -> bytes | None:
    """A random string of the grammar's derivations, with random ignored text between tokens."""
    earley = grammar(name).earley
    out = bytearray()

    def ignored():
        if earley.ignores and rng.random() < 0.3:
            piece = sample_terminal(rng.choice(earley.ignores), rng)
            if piece:
                out.extend(piece)

    def expand(sym: int, depth: int) -> bool:
        if sym < 0:
            ignored()
            piece = sample_terminal(earley.terms[~sym], rng)
            if piece is None:
                return False
            out.extend(piece)
            return True
        rules = earley.rules_of[sym]
        if depth > 6:  # head for the shallowest derivation so the recursion ends
            rules = [min(rules, key=lambda r: rule_height(earley, r))]
        r = rng.choice(rules)
        return all(expand(s, depth + 1) for s in earley.rhs[r])

    if not expand(earley.start, 0) or len(out) > 200:
        return None
    ignored()
    return bytes(out)


def mutate(data: bytes, rng: random.Random, alphabet: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        k = rng.randint(0, len(data))
        op = rng.choice("idr") if data else "i"
        if op == "i":
            data[k:k] = bytes([rng.choice(alphabet)])
        elif op == "d" and k < len(data):
            del data[k]
        elif k < len(data):
            data[k] = rng.choice(alphabet)
    return bytes(data)


MUTATION_BYTES = {
    "arith": b"0123456789+-*/(). e\t",
    "json": b'[]{}":,0123456789-.eE tnruefals\\/*\n',
    "parens": b"()[]",
    "nullable": b"abcx",
    "unicode": "éüÜ日本αβa".encode(),
    "templates": b"(); !0123zZ",
    "lines": b"ab \n#",
    "features": b"ab=1+;(-)# ",
}


@pytest.mark.parametrize("name", sorted(GRAMMARS))
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_generated_and_mutated_strings_agree_with_lark(name, seed):
    rng = random.Random(seed)
    pot = grammar(name)
    text = derive(name, rng)
    if text is None:
        return
    for s in (text, mutate(text, rng, MUTATION_BYTES[name])):
        ok = lark_accepts(name, s)
        assert (run(pot.complete(s)) == 0) == ok, s
        if ok:
            for k in range(len(s) + 1):
                assert run(pot.prefix(s[:k])) == 0, (s, k)
        elif run(pot.prefix(s)) == NEG_INF:
            # a dead prefix: no accepted string in a sample of completions may extend it
            for _ in range(5):
                more = derive(name, rng) or b""
                assert not lark_accepts(name, s + more) or run(pot.complete(s + more)) == 0


# ------------------------------------------------------------------------------ specific semantics


async def test_escaped_string_matches_lark_first_closing_quote():
    pot = grammar("json")
    for s in [b'"a"', b'"a\\"b"', b'"a"b"', b'"\\\\"', b'"\\\\\\"', b'"a\nb"', b'["a", "b"]',
              b'"\\u00e9"', '"日本"'.encode()]:
        assert (await pot.complete(s) == 0) == lark_accepts("json", s), s
    assert await pot.prefix(b'"a"b') == NEG_INF
    assert await pot.prefix(b'"a\\"b') == 0


async def test_ignored_whitespace_is_a_longest_match():
    # lark skips a whole whitespace run at once, so a NEWLINE terminal right after spaces that
    # the ignored WS would swallow is not reachable: "a \nb" is rejected, "a\n b" accepted.
    g = 'start: "a" NL "b"\nNL: "\\n"\n%import common.WS\n%ignore WS'
    pot = Grammar(g)
    p = lark.Lark(g, parser="earley", lexer="dynamic_complete")
    for s in ["a\nb", "a \nb", "a\n b", " a\nb ", "a\n\nb", "a \n b"]:
        try:
            p.parse(s)
            ok = True
        except lark.exceptions.LarkError:
            ok = False
        assert (await pot.complete(s.encode()) == 0) == ok, s
    assert await pot.prefix(b"a \n") == NEG_INF


async def test_partial_utf8_and_invalid_bytes():
    pot = grammar("unicode")
    assert await pot.prefix("日".encode()[:1]) == 0
    assert await pot.prefix("日".encode()[:2]) == 0
    assert await pot.prefix("本".encode()[:2]) == NEG_INF  # 本 cannot start a greeting
    assert await pot.prefix(b"\xff") == NEG_INF
    assert await pot.complete(b"\xc3") == NEG_INF
    assert await pot.complete("日本αβ".encode()) == 0


async def test_case_insensitive_literal_and_regex_flags():
    pot = Grammar('start: "ab"i /x+/i')
    for s, ok in [(b"abx", True), (b"ABXX", True), (b"aBxX", True), (b"abz", False)]:
        assert (await pot.complete(s) == 0) == ok, s


async def test_empty_language_is_dead_at_start():
    pot = Grammar('start: a\na: "x" a')
    assert await pot.prefix(b"") == NEG_INF
    assert await pot.prefix(b"x") == NEG_INF
    assert await pot.complete(b"") == NEG_INF


async def test_unproductive_branches_do_not_make_prefixes_viable():
    pot = Grammar('start: "a" loop | "b"\nloop: "c" loop')
    assert await pot.prefix(b"a") == NEG_INF
    assert await pot.prefix(b"b") == 0


async def test_nullable_start_accepts_empty():
    pot = grammar("parens")
    assert await pot.complete(b"") == 0
    assert lark_accepts("parens", b"")


async def test_documented_departure_first_match_alternation():
    # lark's dynamic_complete lexer tries only re.match's first match ("a") and its
    # truncations, so it never lexes "ab" with /a|ab/; Grammar reads X as the language {a, ab}
    g = 'start: X "c"\nX: /a|ab/'
    pot = Grammar(g)
    assert await pot.complete(b"ac") == 0 and await pot.complete(b"abc") == 0
    p = lark.Lark(g, parser="earley", lexer="dynamic_complete")
    with pytest.raises(lark.exceptions.LarkError):
        p.parse("abc")


def test_invalid_grammar_names_the_problem():
    with pytest.raises(ValueError, match="invalid Lark grammar"):
        Grammar("start: undefined_rule")
    with pytest.raises(ValueError, match="invalid Lark grammar"):
        Grammar('start: "a" (')
    with pytest.raises(TypeError):
        Grammar(b"start: 'a'")


def test_unsupported_features_are_named():
    with pytest.raises(ValueError, match="A.*no pattern"):
        Grammar("start: A\n%declare A")
    with pytest.raises(ValueError, match="X is not supported.*lookahead|X is not supported"):
        Grammar("start: X\nX: /a(?=b)/")
    with pytest.raises(ValueError, match="ignored terminal"):
        Grammar('start: "x"\nIGN: /ab|abcd/\n%ignore IGN')


async def test_persistent_state_is_shared_and_memoized():
    pot = grammar("arith")
    s1 = pot.advance(pot.initial(), b"1+2")
    s2 = pot.advance(s1, b"*")
    assert pot.advance(s1, b"*") is s2  # memoized transition
    assert await pot.state_prefix(s1) == 0 and await pot.state_complete(s1) == 0
    assert await pot.state_complete(s2) == NEG_INF
    assert pot.advance(s1, b")") is None


async def test_override_extend_and_import_alias():
    g = r"""
start: NUM ("," NUM)* | WORD
%import common.INT -> NUM
%import common.WORD
%override WORD: /[a-c]+/
%extend NUM: "x"
"""
    pot = Grammar(g)
    p = lark.Lark(g, parser="earley", lexer="dynamic_complete")
    for s in ["1,22", "x,1", "ab", "abd", "1,", "a1", ""]:
        try:
            p.parse(s)
            ok = True
        except lark.exceptions.LarkError:
            ok = False
        assert (await pot.complete(s.encode()) == 0) == ok, s
