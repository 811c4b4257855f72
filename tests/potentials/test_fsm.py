"""The regex-to-byte-DFA compiler against Python's re: full matches and exact liveness."""

from __future__ import annotations

import itertools
import re
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from potentials.regex.automaton import ByteDFA, InvalidRegex, UnsupportedRegex, compile_regex

# (pattern, flags, alphabet for exhaustive strings up to length 5)
CASES = [
    (r"a{3}b", 0, "ab"),
    (r"(a|bc)*c?", 0, "abc"),
    (r"a*?b+|ba{2,}", 0, "ab"),
    (r"[^a]b.", 0, "ab\né"),
    (r"a.b", re.DOTALL, "ab\n"),
    (r"\w+\s\d", 0, "a1 ١é_"),
    (r"\w\d", re.ASCII, "a1١é"),
    (r"(?i)k[a-c]", 0, "kKKAbC"),
    (r"[^x-z]+", re.IGNORECASE, "xXaé"),
    (r"é+|€ü", 0, "é€üa"),
    (r"\bab\b|a\Bb", 0, "ab "),
    (r"\b\w+\b", re.ASCII, "aé "),
    (r"a$|b$\n", 0, "ab\n"),
    (r"^a$\n?", re.MULTILINE, "ab\n"),
    (r"(?m)a$\n^b", 0, "ab\n"),
    (r"\Aa\Z|b", 0, "ab\n"),
    (r"(?x) a  b # comment", 0, "ab "),
    (r"(ab|a)(bc|c)?", 0, "abc"),
    (r"x?", 0, "x"),
    (r"𝄞{2}|a", 0, "𝄞a"),
]


_COMPLETIONS: dict[tuple[ByteDFA, int], bytes | None] = {}


def completion(dfa: ByteDFA, state: int) -> bytes | None:
    key = (dfa, state)
    if key not in _COMPLETIONS:
        _COMPLETIONS[key] = _completion(dfa, state)
    return _COMPLETIONS[key]


def _completion(dfa: ByteDFA, state: int, limit: int = 64) -> bytes | None:
    """Shortest bytes taking ``state`` to acceptance (breadth-first over live steps)."""
    seen, todo = {state}, deque([(state, b"")])
    while todo:
        q, w = todo.popleft()
        if dfa.accepts(q):
            return w
        if len(w) >= limit:
            continue
        for b in range(256):
            t = dfa.step(q, b)
            if t is not None and t not in seen:
                seen.add(t)
                todo.append((t, w + bytes((b,))))
    return None


def check_string(dfa: ByteDFA, rx: re.Pattern, text: str) -> None:
    data = text.encode()
    want = rx.fullmatch(text) is not None
    q = dfa.walk(dfa.start, data)
    assert (q is not None and dfa.accepts(q)) == want, (rx.pattern, text)
    if want:  # no false dead ends: every byte prefix of a match is alive
        state = dfa.start
        for i, b in enumerate(data):
            state = dfa.step(state, b)
            assert state is not None, (rx.pattern, text, data[: i + 1])
    if q is not None and (data or dfa.live(q)):  # no missed dead ends: live means completable
        w = completion(dfa, q)
        assert w is not None, (rx.pattern, text)
        assert rx.fullmatch((data + w).decode()), (rx.pattern, text, w)


@pytest.mark.parametrize("pattern,flags,alphabet", CASES)
def test_exhaustive_small_alphabets(pattern, flags, alphabet):
    dfa, rx = compile_regex(pattern, flags), re.compile(pattern, flags)
    for n in range(6):
        for chars in itertools.product(alphabet, repeat=n):
            check_string(dfa, rx, "".join(chars))


@pytest.mark.parametrize("pattern,flags,alphabet", CASES)
def test_byte_prefixes_inside_characters(pattern, flags, alphabet):
    """A prefix ending inside a multi-byte character is alive iff a completion of it is."""
    dfa, rx = compile_regex(pattern, flags), re.compile(pattern, flags)
    for n in range(4):
        for chars in itertools.product(alphabet, repeat=n):
            data = "".join(chars).encode()
            for cut in range(len(data) + 1):
                q = dfa.walk(dfa.start, data[:cut])
                if q is not None and dfa.live(q):
                    w = completion(dfa, q)
                    assert w is not None and rx.fullmatch((data[:cut] + w).decode())


def test_dead_end_found_as_soon_as_it_exists():
    dfa = compile_regex(r"a{3}b")
    assert dfa.walk(dfa.start, b"aaa") is not None
    assert dfa.walk(dfa.start, b"aaaa") is None
    dfa = compile_regex(r"(ab)*c|a")
    assert dfa.walk(dfa.start, b"aba") is not None
    assert dfa.walk(dfa.start, b"abb") is None


def test_invalid_utf8_is_dead():
    dfa = compile_regex(r"(?s).*")
    for bad in [b"\xff", b"\xc0\x80", b"\xe0\x80", b"\xed\xa0", b"\xf4\x90", b"a\x80", b"\xc3a"]:
        assert dfa.walk(dfa.start, bad) is None, bad
    assert dfa.walk(dfa.start, b"\xf0\x9d") is not None
    assert not dfa.accepts(dfa.walk(dfa.start, b"\xf0\x9d"))


def test_ignorecase_agrees_with_re_on_all_cased_code_points():
    from potentials.regex.automaton import cased_code_points

    for pattern in [r"(?i)k", r"(?i)[a-z]", r"(?i)[^s]", r"(?i)ß", r"(?ia)k"]:
        dfa, rx = compile_regex(pattern), re.compile(pattern)
        for cp in cased_code_points():
            ch = chr(cp)
            assert dfa.fullmatch(ch.encode()) == (rx.fullmatch(ch) is not None), (pattern, hex(cp))


def test_unicode_classes_agree_with_re_on_every_code_point():
    for pattern, flags in [(r"\w", 0), (r"\d", 0), (r"\s", 0), (r"\W", re.ASCII), (r".", 0)]:
        dfa, rx = compile_regex(pattern, flags), re.compile(pattern, flags)
        for cp in itertools.chain(range(0, 0xD800, 7), range(0xE000, 0x110000, 97)):
            ch = chr(cp)
            assert dfa.fullmatch(ch.encode()) == (rx.fullmatch(ch) is not None), (pattern, cp)


def test_errors_name_the_problem():
    with pytest.raises(InvalidRegex, match=r"bad character range .* at position 1"):
        compile_regex(r"[z-a]")
    with pytest.raises(ValueError, match="unterminated character set"):
        compile_regex("[]")
    with pytest.raises(UnsupportedRegex, match="lookaround"):
        compile_regex(r"a(?=b)b")
    with pytest.raises(UnsupportedRegex, match="backreference"):
        compile_regex(r"(a)\1")
    with pytest.raises(UnsupportedRegex, match="regex"):
        compile_regex(r"(?|(a)|(b))")  # branch reset: regex-package only
    with pytest.raises(TypeError):
        compile_regex(b"a")  # type: ignore[arg-type]


def test_empty_language_is_reported():
    assert compile_regex(r"[^\s\S]").is_empty
    assert compile_regex(r"a\Zb").is_empty
    assert not compile_regex(r"").is_empty
    dfa = compile_regex(r"[^\s\S]")
    assert dfa.step(dfa.start, ord("a")) is None and not dfa.accepts(dfa.start)


PATTERNS = [r"[0-9]{3}-[0-9]{4}", r"(\w+ ){1,3}\w+\.", r"(?i)(ab|é€)+x?", r"[a-c]*d[^e]{2}",
            r"\d+(\.\d+)?(e-?\d+)?", r"(?s)<.*?>"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_hypothesis_matches_and_mutations(data):
    pattern = data.draw(st.sampled_from(PATTERNS))
    dfa, rx = compile_regex(pattern), re.compile(pattern)
    text = data.draw(st.from_regex(pattern, fullmatch=True))
    check_string(dfa, rx, text)
    ops = data.draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40),
                                       st.sampled_from("a1 -.é€x\n<>")), max_size=3))
    for op, i, ch in ops:
        i = min(i, len(text))
        text = (text[:i] + ch + text[i:] if op == 0 else text[:i] + text[i + 1:] if op == 1
                else text[:i] + ch + text[i + 1:])
        check_string(dfa, rx, text)


ATOMS = st.sampled_from(["a", "b", ".", "[ab]", "[^a]", r"\n", r"\b", r"\B", "^", "$", r"\Z",
                         r"\w", r"\W", "é", "(?i:A)", ""])


def _combine(children):
    return st.one_of(
        st.tuples(children, children).map("".join),
        st.tuples(children, children).map(lambda p: f"(?:{p[0]}|{p[1]})"),
        st.tuples(children, st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "{1,}", "*?"])).map(
            lambda p: f"(?:{p[0]}){p[1]}"),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(ATOMS, _combine, max_leaves=6), st.sampled_from([0, re.MULTILINE,
                                                                       re.DOTALL, re.ASCII]))
def test_random_patterns_agree_with_re(pattern, flags):
    dfa, rx = compile_regex(pattern, flags), re.compile(pattern, flags)
    for n in range(5):
        for chars in itertools.product("ab\né", repeat=n):
            check_string(dfa, rx, "".join(chars))


# ---------------------------------------------------------------- regex-package syntax

REGEX_PACKAGE_CASES = [
    r"\p{L}+", r"\P{Greek}\p{N}?", r"[\p{L}&&[^\p{Lu}]]", r"(?V1)[\p{L}&&[^\p{Lu}]]+",
    r"(?V1)[\w--[\d_]]{2}", r"[\w--\d]", r"(?V1)[\p{L}--[\p{Lu}--\p{ASCII}]]",
    r"(?<year>\d{4})-(?<m>\d{2})", r"\p{Emoji}|[\p{Sc}x]", r"(?V1)[\p{Ll}||\d]\s",
    r"^\p{Lu}(?:[\p{Ll}\-]+)$", r"[^\P{Lu}]", r"\w\s\d", r"(?s:.*)(?:\p{Lu}\d)(?s:.*)",
]
_ALPHABET = list("]&[^-aAzZ09_:. \n\x1cɐßΣσéÉ٣ⅫАяあ©€\u0300\u00a0\u2028") + ["\U0001F600", "ǅ"]


@pytest.mark.parametrize("pattern", REGEX_PACKAGE_CASES)
def test_regex_package_syntax_on_the_automaton_agrees_with_regex(pattern):
    import random
    import warnings

    import regex

    dfa = compile_regex(pattern)  # no UnsupportedRegex: these are regular
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        rx = regex.compile(pattern)
    rng = random.Random(0)
    texts = [a + b for a in _ALPHABET for b in _ALPHABET] + _ALPHABET + [""]
    texts += ["".join(rng.choice(_ALPHABET) for _ in range(rng.randint(3, 8))) for _ in range(800)]
    texts += ["2024-01", "ab1", "Ab-c", "a]", "a\n"]
    for text in texts:
        assert dfa.fullmatch(text.encode()) == (rx.fullmatch(text) is not None), (pattern, text)


@pytest.mark.parametrize("pattern", [r"(?i)\p{Lu}", r"\b\p{L}+\b", r"(?x)\p{L} +", r"\p{L}\K\d",
                                     r"(?<n>a)\g<n>", r"(?|(a)|(b))"])
def test_regex_package_syntax_with_other_meanings_stays_on_the_fallback(pattern):
    with pytest.raises(UnsupportedRegex, match="`regex` package"):
        compile_regex(pattern)


# ---------------------------------------------------------------- lookbehind on the automaton

LOOKBEHIND_CASES = [
    r"(?<!A)B", r"\b\w+(?<!s)\b", r"(?<!\s)\w+", r"(?<![0-9])[a-zA-Z]", r"(?<!000)\d{3}",
    r"a(?<=a)b", r"(?:a|b)+(?<=ab)c", r"(?<=^)a", r"x*(?<!x)y", r"(?m)\n(?<=^)z?",
    r"(?i)k+(?<=K)", r".*(?<=é)(?<!\d\d)", r"(?:ab|b)*(?<!aab)b", r"(?<=\Aa)b|a",
]


@pytest.mark.parametrize("pattern", LOOKBEHIND_CASES)
def test_lookbehind_agrees_with_re(pattern):
    import random

    dfa = compile_regex(pattern, lookaround=True)
    rx = re.compile(pattern)
    rng = random.Random(1)
    alphabet = "aAbBsxyz0 \nédlngiukKé1"
    texts = ["".join(c) for n in range(4) for c in itertools.product("abs0 é", repeat=n)]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9))) for _ in range(1500)]
    texts += ["walking", "sing", "000", "123", "xy", "aabb", "abb", "kK", "aé", "a12é", "ab"]
    for text in texts:
        assert dfa.fullmatch(text.encode()) == (rx.fullmatch(text) is not None), (pattern, text)
    for text in texts:  # liveness: a matching text's prefixes are all alive
        if rx.fullmatch(text):
            q = dfa.start
            for b in text.encode():
                q = dfa.step(q, b)
                assert q is not None, (pattern, text)


def test_lookbehind_exact_dead_ends():
    dfa = compile_regex(r"\w+(?<!s)", lookaround=True)
    q = dfa.walk(dfa.start, b"bus")
    assert q is not None and not dfa.accepts(q)  # "bus" may still grow: "bust"
    dfa = compile_regex(r"\d{3}(?<!000)", lookaround=True)
    assert dfa.walk(dfa.start, b"000") is None   # no continuation can fix it
    assert dfa.walk(dfa.start, b"00") is not None


@pytest.mark.parametrize("pattern", [r"(?<!\bun)able", r"(?<=a$)", r"(?<=(a)\1)b", r"(?<=a(?=b))b"])
def test_lookbehind_bodies_that_read_past_their_end_stay_unsupported(pattern):
    with pytest.raises(UnsupportedRegex):
        compile_regex(pattern, lookaround=True)


def test_variable_width_lookbehind_is_regex_package_syntax():
    # re's parser builds the tree but its compiler refuses it: regex's meaning, not re's
    with pytest.raises(UnsupportedRegex, match="`regex` package"):
        compile_regex(r"\w+(?<!ing|ed)")


# ---------------------------------------------------------------- lookahead at the end of the text

LOOKAHEAD_CASES = [
    r"(?<!\d{4}-)(?:\d{4}-){3}(?!\d{4}-)", r"(?<!a)b(?!c)", r"(?<![(])\b\d+\b(?![)])",
    r"a(?=$)", r"a(?!$)", r"a(?=\b)", r"a(?!\b)", r"\w+(?=\W|$)", r"a(?=b)", r"a$(?!x)",
    r"a(?=\n?\Z)", r"a(?=a*)|b(?!)", r"a(?:(?!b)|c)", r"(?m)a(?=^)", r"x(?=\B)",
]


@pytest.mark.parametrize("pattern", LOOKAHEAD_CASES)
def test_trailing_lookahead_agrees_with_re(pattern):
    import random

    dfa = compile_regex(pattern, lookaround=True)
    rx = re.compile(pattern)
    rng = random.Random(1)
    alphabet = "aAbBsxyz0 \nédlngiukKé1(-)"
    texts = ["".join(c) for n in range(4) for c in itertools.product("ab0 -\n", repeat=n)]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9))) for _ in range(1500)]
    texts += ["1234-1234-1234-", "12", "(12)", "a\n", "b"]
    for text in texts:
        assert dfa.fullmatch(text.encode()) == (rx.fullmatch(text) is not None), (pattern, text)


@pytest.mark.parametrize("pattern", [r"(?:a(?=b))+", r"(a|b(?!x))*", r"a(?=b)b", r"a(?=(a)\1)"])
def test_lookahead_that_text_can_follow_stays_unsupported(pattern):
    with pytest.raises(UnsupportedRegex, match="lookahead"):
        compile_regex(pattern, lookaround=True)


# ---------------------------------------------------------------- atomic groups, possessive repeats

ATOMIC_CASES = [
    r"^(?>a{2,4})b$", r"^(?>.*?)a.*$", r"^(?>a+?)b+$", r"^(?>\d{3}-\d{3})$", r"(?>a{1,3}+)b",
    r"^[a-z]++\d*+$", r"^a?+b$", r"^a{3}+b$", r"(?>a*?)b", r"(?>a?)b", r"(?>a{2}b{3})",
    r"(?>a{3,5})", r"(?>pattern)", r"(?>(?:a|b)(?>c|d))+", r"^(?>a?+)b$", r"(?>[a-z]{2,5}?)123",
    r"a*+a", r"a++b", r"[ab]{2,4}+b", r"(?:a|b)*+", r"(?i)K++k?", r"\w++\b", r"x{0}+a",
    r"(?>[^aeiou]++)(?<!x)",
]


@pytest.mark.parametrize("pattern", ATOMIC_CASES)
def test_atomic_and_possessive_agree_with_re(pattern):
    import random

    dfa = compile_regex(pattern, lookaround=True)
    rx = re.compile(pattern)
    rng = random.Random(1)
    texts = ["".join(c) for n in range(6) for c in itertools.product("abK1-", repeat=n)]
    texts += ["".join(rng.choice("abcdpK k01239-x") for _ in range(rng.randint(0, 10)))
              for _ in range(1500)]
    texts += ["aab", "aaab", "aaaab", "123-456", "aaabbb", "pattern", "acbd", "ab123", "zzz"]
    for text in texts:
        assert dfa.fullmatch(text.encode()) == (rx.fullmatch(text) is not None), (pattern, text)
    for text in texts:
        if rx.fullmatch(text):
            q = dfa.start
            for b in text.encode():
                q = dfa.step(q, b)
                assert q is not None, (pattern, text)


def test_possessive_dead_end_is_found_at_once():
    dfa = compile_regex(r"a*+a")  # the possessive star leaves no `a` for the end: empty language
    assert dfa.is_empty
    dfa = compile_regex(r"(?>a{1,3}+)b")
    assert dfa.walk(dfa.start, b"aaaa") is None  # the group took three, the fourth is not b


@pytest.mark.parametrize("pattern", [r"(?>a|ab|abc)+", r"(?>a++|b++|c++)", r"(?>abc|ab|a)123"])
def test_atomic_groups_whose_cut_matters_stay_unsupported(pattern):
    with pytest.raises(UnsupportedRegex, match="atomic group"):
        compile_regex(pattern, lookaround=True)


def test_lookarounds_only_on_request():
    # a grammar terminal is matched inside a longer text: its lookarounds would see neighbours
    with pytest.raises(UnsupportedRegex, match="lookaround"):
        compile_regex(r"a(?=b)")
    with pytest.raises(UnsupportedRegex, match="lookaround"):
        compile_regex(r"(?<!x)a")
    assert compile_regex(r"(?<!x)a", lookaround=True).fullmatch(b"a")


CHAR_TEXTS = ["", "a", "ab", "abc", "a/b", "/", "ab/cd", "é", "日本", "a😀", "A1_", "12-34", "x y",
              "aaaa", "ZZ", "\u00df", "k\u212a", "a\nb", "ab/", "9"]


@pytest.mark.parametrize("pattern, flags", [
    (r"^[^/]+/[^/]+$", 0), (r"[a-z]+\d*", 0), (r"\bab\b.*", 0), (r"(?<=a)b|a", 0), (r"k+", re.I),
    (r"[\w ]{1,3}", 0), (r"\d{2}-\d{2}", 0), (r".*(?<!b)", 0), (r"[^\W\d]+$", 0), (r"^$", re.M),
])
def test_char_table_agrees_with_the_byte_walk(pattern, flags):
    """char_table: walking whole characters through the dense table keeps a text alive
    exactly when the byte automaton's walk does, from the start and from later states (whose
    rows the start's table already holds: asking for them builds none)."""
    import numpy as np

    cps = np.asarray(sorted({ord(c) for t in CHAR_TEXTS for c in t} | {ord("q")}))
    dfa = compile_regex(pattern, flags, lookaround=True)
    for head in ["", "a", "ab/", "é", "ab"]:
        q = dfa.walk(dfa.start, head.encode())
        if q is None:
            continue
        rows = _rows(dfa)
        got = dfa.char_table(q, cps)
        assert got is not None
        if head == "ab":
            assert _rows(dfa) == rows  # reached from the start: already built
        _agrees_with_the_byte_walk(dfa, q, cps, got, pattern)


def _rows(dfa) -> int:
    """How many rows char_table's shared table of ``dfa`` holds."""
    return len(dfa._chars[4]) if dfa._chars else 0


def _agrees_with_the_byte_walk(dfa, q, cps, got, pattern, texts=CHAR_TEXTS) -> None:
    """Walking each text's characters through char_table's answer ``got`` for state ``q``
    keeps it alive iff the byte walk does."""
    table, cls, dead, start = got
    where = {int(c): i for i, c in enumerate(cps)}
    for text in texts:
        i = start
        for c in text:
            i = table[i, cls[where[ord(c)]]]
        assert (i != dead) == (dfa.walk(q, text.encode()) is not None), (pattern, text)


def test_char_table_shares_rows_and_falls_back_to_its_own():
    """States of one automaton share one growing table; a state whose rows would push it past
    the limit gets a table of its own (starting at row 0), and the shared one is unchanged."""
    import numpy as np

    dfa = compile_regex(r"a\d{3}x|b[xy]{3}")
    cps = np.asarray([ord(c) for c in "abxy0123"])
    qa, qb = dfa.walk(dfa.start, b"a"), dfa.walk(dfa.start, b"b")
    ta = dfa.char_table(qa, cps)
    n, width = _rows(dfa), ta[0].shape[1]
    later = dfa.char_table(dfa.walk(qa, b"1"), cps)
    assert later[0] is ta[0] and _rows(dfa) == n
    tb = dfa.char_table(qb, cps, limit=(n + 1) * width)
    assert tb[3] == 0 and _rows(dfa) == n
    for q, got in [(qa, ta), (dfa.walk(qa, b"1"), later), (qb, tb)]:
        _agrees_with_the_byte_walk(dfa, q, cps, got, "shared", ["123x", "1x", "xyx", "xy", "12", "bx", ""])


def test_char_table_declines_inside_a_character_and_past_its_limit():
    import numpy as np

    dfa = compile_regex(r"é{0,50}x")
    inside = dfa.walk(dfa.start, "é".encode()[:1])
    cps = np.asarray([ord("é"), ord("x")])
    assert dfa.char_table(inside, cps) is None
    assert dfa.char_table(dfa.start, cps, limit=20) is None
    assert dfa.char_table(dfa.start, cps) is not None


@pytest.mark.parametrize("pattern, flags", [
    (r"[a-z]+\d*", 0), (r"\bab\b.*", 0), (r"(?<=a)b|a", 0), (r"k+", re.I), (r".{2}é", 0),
    (r"[^\W\d]+$", 0), (r"^$", re.M), (r"(?s).*", 0), (r"[\x80-\uffff]x", 0),
])
def test_next_bytes_is_every_byte_that_steps(pattern, flags):
    dfa = compile_regex(pattern, flags, lookaround=True)
    for head in [b"", b"a", b"ab", "é".encode()[:1], "é".encode(), b"k"]:
        q = dfa.walk(dfa.start, head)
        if q is None:
            continue
        want = [b for b in range(256) if dfa.step(q, b) is not None]
        assert dfa.next_bytes(q) == want, (pattern, head)


def test_one_automaton_built_from_several_threads_and_pickled():
    """Threads that walk one lazily built automaton (as Regex objects of one pattern share it)
    build the same states as one thread alone; a pickled automaton (in a checkpoint) loads and
    keeps building."""
    import pickle
    import random
    import threading

    pattern = r"(?:[a-c]{2}\d|x(?:yz)*|é+)+"
    texts = ["".join(random.Random(k).choice("abcxyz19é") for _ in range(12)).encode() for k in range(400)]
    want = [compile_regex(pattern).fullmatch(t) for t in texts]
    shared = compile_regex(pattern)
    got: dict[int, bool] = {}

    def work(part: int) -> None:
        for k in range(part, len(texts), 4):
            got[k] = shared.fullmatch(texts[k])

    threads = [threading.Thread(target=work, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[k] for k in range(len(texts))] == want == [re.fullmatch(pattern, t.decode()) is not None
                                                           for t in texts]
    again = pickle.loads(pickle.dumps(shared))
    assert [again.fullmatch(t + b"9") for t in texts] == [re.fullmatch(pattern, t.decode() + "9") is not None
                                                         for t in texts]


@pytest.mark.parametrize("pattern", [r"[0-9]+", r"\w+", r"[^a]*é", r"(?s:.*)(?:[\u0400-\u04ff]{2})(?s:.*)", r"日本|ab"])
def test_next_bytes_are_the_live_bytes(pattern):
    """next_bytes (leading bytes decided per character class) is exactly the bytes a step keeps
    alive, on automata that have not yet built those steps."""
    reference = compile_regex(pattern)
    for text in [b"", b"1", b"a", "é".encode(), "д".encode(), "日".encode()]:
        fresh = compile_regex(pattern)
        q, r = fresh.walk(fresh.start, text), reference.walk(reference.start, text)
        if q is None:
            continue
        want = [b for b in range(256) if reference.step(r, b) is not None]
        assert fresh.next_bytes(q) == want, (pattern, text)


@pytest.mark.parametrize("pattern", [r"[\u0400-\u04ff]+", r"é|日本", r"[^\x00-\u07ff]x", r"a[α-ω]|bé", r"[\u0800-\u0fff]"])
def test_lead_bytes_live_iff_some_character_they_begin_can_continue(pattern):
    """A leading byte is kept iff some character it begins continues a match (decided per class
    for all high bytes at once): checked against ``regex``'s partial full match, over every
    code point of the two- and three-byte leads and a sample of the four-byte ones."""
    import regex

    dfa = compile_regex(pattern)
    for head in ["", "a", "д"]:
        q = dfa.walk(dfa.start, head.encode())
        if q is None:
            continue
        for first in range(0x80, 0x100):
            if 0xC2 <= first <= 0xDF:
                cps = range(((first & 0x1F) << 6), ((first & 0x1F) << 6) + 64)
            elif 0xE0 <= first <= 0xEF:
                cps = range((first & 0x0F) << 12, ((first & 0x0F) << 12) + 4096)
            elif 0xF0 <= first <= 0xF4:
                cps = range((first & 0x07) << 18, min(((first & 0x07) << 18) + (1 << 18), 0x110000), 97)
            else:
                cps = range(0)
            want = any(regex.fullmatch(pattern, head + chr(cp), partial=True) is not None
                       for cp in cps if not 0xD800 <= cp <= 0xDFFF and chr(cp).encode()[0] == first)
            assert (dfa.step(q, first) is not None) == want, (pattern, head, hex(first))
