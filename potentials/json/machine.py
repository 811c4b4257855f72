"""A persistent, schema-driven incremental recognizer of JSON text (RFC 8259, UTF-8).

A configuration is an immutable stack of frames (``Stack``: a frame over its parent, with a
cached hash); a recognizer state is a frozenset of configurations, one per way the schema's
disjunctions (``potentials.json.clauses``) can still be satisfied. Reading one byte steps every
configuration, touching only its top frames, so the cost of a byte does not depend on how much
text came before. Frames are plain tuples tagged by their first field:

    (TOP, phase, ws)                                         the document
    (OBJ, clause, phase, seen_keys, key, ws, start)          inside an object
    (ARR, clause, phase, index, ws, start)                   inside an array
    (STR, clause, esc, utf8, count, dfa_states, lit_pos, lits, text, is_key)
    (NUM, clause, grammar_state, text)                       inside a number
    (LIT, clause, rest, value)                               inside true / false / null

A finished scalar is checked against its clause (``Clause.scalar_ok``) when it ends; a number
ends at the byte after it, which its parent then reads. A container whose clause has keywords
no fact enforces (``oneOf`` exclusivity, ``uniqueItems``, ``contains``, ``dependencies``, ``not``,
``if``, ``unevaluated*``, ...; ``Clause.needs_check``) is checked by the validator when it
closes. The recognizer does not keep text, so such a container records where it started:

    start = None     not checked
            OPENED   opened by the byte just read (the caller writes in its offset)
            n >= 0   the offset of its opening bracket in the document

and its closing bracket yields a ``(CHECK, clause, kind, start)`` frame over the parent; the
caller (potentials.json.potential) decodes the text from ``start`` to that bracket, runs
``Clause.container_ok`` and keeps the parent or drops the configuration, before the next byte.
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from typing import Any, Callable

from potentials.text import utf8_lead

TOP, OBJ, ARR, STR, NUM, LIT, CHECK = range(7)
OPENED = -1
WS = frozenset(b" \t\n\r")
INF = float("inf")
DIGITS = frozenset(b"0123456789")
HEX = {**{c: c - 48 for c in b"0123456789"}, **{c: c - 87 for c in b"abcdef"},
       **{c: c - 55 for c in b"ABCDEF"}}
SIMPLE_ESCAPES = {ord('"'): 0x22, ord("\\"): 0x5C, ord("/"): 0x2F, ord("b"): 0x08,
                  ord("f"): 0x0C, ord("n"): 0x0A, ord("r"): 0x0D, ord("t"): 0x09}

# object phases
O_OPEN, O_KEY, O_COLON, O_VALUE_NEXT, O_VALUE, O_AFTER, O_COMMA = range(7)
# array phases
A_OPEN, A_VALUE, A_AFTER, A_COMMA = range(4)
# number grammar states (accepting: N_ZERO, N_INT, N_FRAC, N_EXP)
N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP = range(8)
N_ACCEPT = frozenset({N_ZERO, N_INT, N_FRAC, N_EXP})
#: the states a fraction or an exponent begins with, which an integer literal has neither of
_NOT_INTEGER = frozenset({N_DOT, N_E})

# the bytes that can follow a frame on top of the stack (``Machine.next_bytes``)
_VALUE = frozenset(b'"{[-0123456789tfn')
_OBJ_NEXT = {O_OPEN: WS | frozenset(b'"}'), O_COLON: WS | frozenset(b":"),
             O_VALUE_NEXT: WS | _VALUE, O_AFTER: WS | frozenset(b",}"), O_COMMA: WS | frozenset(b'"')}
_TOP_NEXT = {0: WS | _VALUE, 2: WS}  # phase 1 (inside the root value) is never on top
_ARR_NEXT = {A_OPEN: WS | _VALUE | frozenset(b"]"), A_AFTER: WS | frozenset(b",]"),
             A_COMMA: WS | _VALUE}
# a number's own bytes, or what a container (or the document) reads after a value
_NUM_NEXT = DIGITS | frozenset(b"+-.eE") | WS | frozenset(b",]}")
_ESC_NEXT = frozenset(SIMPLE_ESCAPES) | frozenset(b"u")
_HEX_NEXT = frozenset(HEX)
# inside free string text: the quote, a backslash, printable ASCII, UTF-8 leading bytes
_FREE_NEXT = frozenset(range(0x20, 0x80)) | frozenset(range(0xC2, 0xF5))
_QUOTE_OR_ESCAPE = frozenset(b'"\\')
#: values a completion tries where one starts: whole short values, then (after the clause's
#: own examples) the starts of longer ones
_SHORT_VALUES = (b"0", b'""', b"[]", b"{}", b"null", b"true", b"false")
_VALUE_STARTS = (*(bytes((d,)) for d in b"123456789"), b'"', b"[", b"{", b"-")
#: what a completion tries inside a number (after its end, where its parent reads one)
_NUMBER_MOVES = dict.fromkeys(bytes((d,)) for d in b"0123456789")
#: the bytes a completion tries inside a plain string: its end, and one more character while
#: it is shorter than its minLength
_FREE_MOVES = frozenset(b'"a')
_QUOTE = frozenset(b'"')
#: the order in which a completion tries single bytes inside a string: what ends it, then
#: letters, digits, the rest of printable ASCII, then the bytes that continue a character
_BYTE_ORDER = tuple(dict.fromkeys(b'"' + bytes(range(0x61, 0x7B)) + bytes(range(0x30, 0x3A))
                                  + bytes(range(0x41, 0x5B)) + bytes(range(0x20, 0x7F))
                                  + bytes(range(0x80, 0x100))))
#: joint automaton states a pattern's shortest match is searched over
PATTERN_PATH_STATES = 2_000
#: the bytes of plain text (one character each), letters and digits first
_PLAIN_ORDER = tuple(b for b in _BYTE_ORDER if 0x20 <= b < 0x7F and b not in b'"\\')
#: ASCII text whose every byte is one string character: no quote, backslash or control byte
_PLAIN_ASCII = re.compile(rb"[\x20\x21\x23-\x5b\x5d-\x7f]+")


class Stack:
    """An immutable stack node: ``frame`` on top of ``parent`` (None at the bottom)."""

    __slots__ = ("frame", "parent", "_hash")

    def __init__(self, frame: tuple, parent: "Stack | None"):
        self.frame, self.parent = frame, parent
        self._hash = hash((frame, parent._hash if parent is not None else 0))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Stack) or self._hash != other._hash:
            return False
        a, b = self, other
        while a is not None and b is not None:
            if a is b:
                return True
            if a.frame != b.frame:
                return False
            a, b = a.parent, b.parent
        return a is b


def _num_step(st: int | None, b: int) -> int | None:
    """The JSON number grammar: state after byte b (None: b cannot continue the number)."""
    d = b in DIGITS
    if st is None:
        return N_MINUS if b == 45 else N_ZERO if b == 48 else N_INT if d else None
    if st == N_MINUS:
        return N_ZERO if b == 48 else N_INT if d else None
    if st in (N_ZERO, N_INT):
        if st == N_INT and d:
            return N_INT
        return N_DOT if b == 46 else N_E if b in (101, 69) else None
    if st in (N_DOT, N_FRAC):
        return N_FRAC if d else N_E if st == N_FRAC and b in (101, 69) else None
    if st == N_E:
        return N_ESIGN if b in (43, 45) else N_EXP if d else None
    return N_EXP if d else None  # N_ESIGN, N_EXP


class Machine:
    """Steps sets of configurations byte by byte. ``ws_limit`` bounds each run of whitespace
    between tokens and ``end_ws_limit`` the run after the root value (None: unbounded)."""

    def __init__(self, root_alternatives: tuple, ws_limit: int | None,
                 end_ws_limit: int | None):
        self.root = root_alternatives
        self.ws_limit = ws_limit
        self.end_ws_limit = end_ws_limit
        self._lits: dict = {}
        self._dfa_live: dict = {}
        self._pattern_paths: dict = {}

    def initial(self) -> frozenset:
        return frozenset({Stack((TOP, 0, 0), None)}) if self.root else frozenset()

    def step(self, configs: frozenset, b: int) -> frozenset:
        out: set = set()
        for node in configs:
            out.update(self._step(node, b))
        return frozenset(out)

    def plain_run(self, configs: frozenset, data: bytes) -> frozenset | None:
        """``step`` over all of ``data`` at once, when ``data`` is ASCII text with no quote,
        backslash or control byte and every configuration is inside a string, between
        characters, with no enum/const literals: each byte is then one character, and a
        configuration lives iff its count stays within maxLength and its pattern automata
        survive the bytes (``_emit``'s checks, byte by byte). None where that does not hold."""
        if not _PLAIN_ASCII.fullmatch(data):
            return None
        n = len(data)
        out = []
        for node in configs:
            f = node.frame
            if not _between_free_characters(f):
                return None
            facts = f[1].string
            count = f[4] + n
            if count > facts.max_len:
                continue
            dstates = f[5]
            if dstates:
                dstates = tuple(d.walk(q, data) for d, q in zip(facts.dfas, dstates))
                if None in dstates:
                    continue
            text = None if f[8] is None else f[8] + data
            out.append(Stack((STR, f[1], 0, None, min(count, facts.cap), dstates, f[6], None, text, f[9]),
                             node.parent))
        return frozenset(out)

    def plain_text_budget(self, configs: frozenset) -> float | None:
        """max over configurations of (maxLength - characters read) when every configuration
        is inside a string, between characters, whose only byte-level checks are its length
        bounds (no pattern, no enum/const literals); else None. Plain text only adds
        characters there, so it stays alive exactly while it fits under that budget."""
        best = None
        for node in configs:
            f = node.frame
            if not _between_free_characters(f) or f[5]:
                return None
            room = f[1].string.max_len - f[4]
            if best is None or room > best:
                best = room
        return best

    @staticmethod
    def completion_key(configs: frozenset) -> Any:
        """``configs`` with the character count of each string between characters, with no
        enum/const literals, and no pattern or no maxLength, replaced by the characters it
        still needs, max(minLength - count, 0): the closing quote is as near after 5
        characters as after 150 (with a pattern: from the same automaton states), so states
        of one string share a key (``JSONSchema.completion_key``)."""
        out = []
        for node in configs:
            f = node.frame
            if _between_free_characters(f) and (not f[5] or f[1].string.max_len == INF):
                out.append((f[:4] + (-1 - max(f[1].string.min_len - f[4], 0),) + f[5:], node.parent))
            else:
                out.append(node)
        return frozenset(out)

    def plain_text_key(self, configs: frozenset) -> tuple[frozenset, float] | None:
        """(k, B) of ``BytePotential.plain_text_key`` when every configuration is inside a
        string, between characters, with no enum/const literals, and all have the same room
        B = maxLength - characters read: plain text w then lives iff it has at most B characters
        and every configuration's pattern automata survive its bytes, which depends only on
        k = {(automata, their states)}. Else None."""
        room = None
        parts = []
        for node in configs:
            f = node.frame
            if not _between_free_characters(f):
                return None
            facts = f[1].string
            r = facts.max_len - f[4]
            if room is None:
                room = r
            elif r != room:
                return None
            parts.append((facts.dfas, f[5]))
        return None if room is None else (frozenset(parts), room)

    def inner_text_key(self, configs: frozenset) -> frozenset | None:
        """When every configuration is inside a string: {(pattern automata, their states,
        maxLength - characters read, escape and UTF-8 progress, enum/const literals and the
        position in them)}. Bytes other than the closing quote keep a configuration inside
        its string, where only these decide whether it lives (the text and the stack below
        are not read). Else None."""
        parts = []
        for node in configs:
            f = node.frame
            if f[0] != STR:
                return None
            facts = f[1].string
            parts.append((facts.dfas, f[5], facts.max_len - f[4], f[2], f[3], f[6], f[7]))
        return frozenset(parts) if parts else None

    def next_bytes(self, configs: frozenset) -> frozenset | None:
        """A superset of the bytes b with ``step(configs, b)`` non-empty, read off the top
        frames (``BytePotential.next_bytes``); None under an unsettled CHECK frame."""
        out: frozenset = frozenset()
        for node in configs:
            f = node.frame
            tag = f[0]
            if tag == OBJ:
                got = _OBJ_NEXT.get(f[2])
            elif tag == ARR:
                got = _ARR_NEXT.get(f[2])
            elif tag == NUM:
                got = _NUM_NEXT
            elif tag == LIT:
                got = frozenset(f[2][:1])
            elif tag == TOP:
                got = _TOP_NEXT.get(f[1])
            elif tag == STR:
                got = _string_next(f)
                if got is _FREE_NEXT and f[5]:
                    # a character's first byte goes through the pattern automata too
                    for d, q in zip(f[1].string.dfas, f[5]):
                        got = got & self._dfa_bytes(d, q)
                    got = got | _QUOTE_OR_ESCAPE
            else:
                got = None
            if got is None:
                return None
            out = out | got
        return out

    def completion_moves(self, configs: frozenset) -> list[bytes]:
        """The chunks a short completion tries next from ``configs``, in the order tried, read
        off each configuration's top frame (``JSONSchema.completion``): what closes the value
        or container first (a quote, a bracket, a number's end), then a key the object
        still needs (its required keys before others it names), then the shortest values.
        The configurations' lists are merged in the order of the lists themselves, not of the
        set, whose order follows object ids: a completion is a function of the state."""
        per_config = sorted(self._config_moves(node) for node in configs)
        return list(dict.fromkeys(move for moves in per_config for move in moves))

    @staticmethod
    def committed(configs: frozenset) -> bytes:
        """The bytes every configuration writes next because the text has begun a literal: the
        rest of true, false or null; in a string against enum/const literals (a closed
        object's key names them) with at least one of their characters read, the rests of
        the candidates with their closing quote. Their common prefix; b"" where some
        configuration is elsewhere (``JSONSchema.committed``)."""
        rests = []
        for node in configs:
            f = node.frame
            if f[0] == LIT:
                rests.append(f[2])
            elif f[0] == STR and f[7] is not None and f[6] > 0 and f[2] == 0 and f[3] is None:
                rests.extend(v[f[6]:] + b'"' for v in f[7])
            else:
                return b""
        return os.path.commonprefix(rests) if rests else b""

    def _config_moves(self, node: Stack) -> list[bytes]:
        """``completion_moves`` for one configuration."""
        out: dict[bytes, None] = {}
        f = node.frame
        tag = f[0]
        if tag == OBJ:
            phase = f[2]
            if phase in (O_OPEN, O_AFTER):
                out[b"}"] = None
            if phase == O_AFTER:
                out[b","] = None
            elif phase in (O_OPEN, O_COMMA):
                keys = f[1].key_candidates(f[3])
                for k in keys:
                    out[json.dumps(k, ensure_ascii=False).encode("utf-8", "surrogatepass")] = None
                if not keys:  # then a key no member names (patternProperties, propertyNames)
                    out[b'"'] = None
            elif phase == O_COLON:
                out[b":"] = None
            elif phase == O_VALUE_NEXT:
                _value_moves(out, f[1].value_alternatives(f[4]))
        elif tag == ARR:
            phase = f[2]
            if phase in (A_OPEN, A_AFTER):
                out[b"]"] = None
            if phase == A_AFTER:
                out[b","] = None
            else:
                _value_moves(out, f[1].item_alternatives(f[3]))
        elif tag == TOP:
            if f[1] == 0:
                _value_moves(out, self.root)
        elif tag == NUM:
            # the number ends at the byte its parent reads next (TOP: a finished document)
            if f[3] is not None:  # checked when it ends: first the rest of an example
                _example_rests(out, f[1].value_examples(), f[3])
            parent = node.parent.frame[0]
            if f[2] in N_ACCEPT and parent != TOP:
                out[b"}" if parent == OBJ else b"]"] = None
                out[b","] = None
            out.update(_NUMBER_MOVES)
        elif tag == LIT:
            out[f[2]] = None
        elif tag == STR:
            allowed = self.next_bytes(frozenset((node,)))
            if f[7] is not None and f[2] == 0 and f[3] is None:
                # against enum/const literals (a closed object's key names them): the rest of
                # each, where its bytes are its JSON text (nothing to escape); a key in the
                # order its object tries keys (required ones still missing first), a value
                # shortest first
                rank: dict[bytes, int] = {}
                if f[9] and node.parent.frame[0] == OBJ:
                    obj = node.parent.frame
                    rank = {k.encode("utf-8", "surrogatepass"): i
                            for i, k in enumerate(obj[1].key_candidates(obj[3]))}
                for v in sorted(f[7], key=lambda v: (rank.get(v, len(rank)), len(v), v)):
                    rest = v[f[6]:]
                    if not any(b < 0x20 or b in b'"\\' for b in rest):
                        out[rest + b'"'] = None
            if f[8] is not None and not f[9] and _between_free_characters(f):
                # checked when it ends (a format, say): first the rest of an example
                _example_rests(out, f[1].value_examples(), b'"' + f[8])
            if _between_free_characters(f):
                need = max(f[1].string.min_len - f[4], 0)
                if f[5]:
                    # the patterns' shortest match, then as many characters as minLength asks
                    w = remembered(self._pattern_paths, (f[1].string.dfas, f[5]),
                                   _pattern_completion, 10_000)
                    if w is not None:
                        out[w + b"a" * max(need - len(w), 0) + b'"'] = None
                else:
                    # any character is as good as another, and none helps past minLength
                    out[b"a" * need + b'"'] = None
                    allowed = _FREE_MOVES if need else _QUOTE
            for b in _BYTE_ORDER:
                if b in allowed:
                    out[bytes((b,))] = None
        return list(out)

    def _dfa_bytes(self, dfa: Any, q: int) -> frozenset:
        """The bytes that keep automaton ``dfa`` in state ``q`` alive, computed once."""
        return remembered(self._dfa_live, (dfa, q), lambda k: frozenset(k[0].next_bytes(k[1])), 100_000)

    @staticmethod
    def all_in_strings(configs: frozenset) -> bool:
        return all(node.frame[0] == STR for node in configs)

    @staticmethod
    def pending(configs: frozenset) -> bool:
        """Does ``settle`` have work in ``configs`` (an opening to stamp, a CHECK to decide)?"""
        for node in configs:
            f = node.frame
            tag = f[0]
            if tag == CHECK or (tag == OBJ and f[6] == OPENED) or (tag == ARR and f[5] == OPENED):
                return True
        return False

    @staticmethod
    def open_start(configs: frozenset) -> int | None:
        """The smallest start offset of a checked container open in some configuration."""
        best = None
        for node in configs:
            while node is not None:
                f = node.frame
                start = f[6] if f[0] == OBJ else f[5] if f[0] == ARR else None
                if start is not None and (best is None or start < best):
                    best = start
                node = node.parent
        return best

    @staticmethod
    def settle(configs: frozenset, offset: int, text: Any) -> frozenset:
        """``configs`` after the byte at ``offset``: containers it opened get that offset, and
        containers it closed are decided on their text (``text()``: the document's bytes up
        to and including that byte)."""
        out = set()
        doc = None
        for node in configs:
            f = node.frame
            tag = f[0]
            if tag == CHECK:
                if doc is None:
                    doc = text()
                if f[1].container_ok(f[2], doc[f[3]:]):
                    out.add(node.parent)
            elif tag == OBJ and f[6] == OPENED:
                out.add(Stack(f[:6] + (offset,), node.parent))
            elif tag == ARR and f[5] == OPENED:
                out.add(Stack(f[:5] + (offset,), node.parent))
            else:
                out.add(node)
        return frozenset(out)

    def finished(self, configs: frozenset) -> bool:
        """Is some configuration a complete document (a trailing number ends here)?"""
        for node in configs:
            f = node.frame
            if f[0] == TOP and f[1] == 2:
                return True
            if f[0] == NUM and node.parent.frame[0] == TOP and self._end_number(f):
                return True
        return False

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _ws(count: int, limit: int | None) -> int | None:
        """Whitespace count after one more whitespace byte, or None when over ``limit``."""
        if limit is None:
            return 0
        return count + 1 if count < limit else None

    def _start_value(self, alts: tuple, b: int, parent: Stack) -> list:
        out = []
        for c in alts:
            types = c.types
            if b == 123 and "object" in types:  # {
                for c2 in c.container_alternatives("object"):
                    start = OPENED if c2.needs_check("object") else None
                    out.append(Stack((OBJ, c2, O_OPEN, frozenset(), None, 0, start), parent))
            elif b == 91 and "array" in types:  # [
                for c2 in c.container_alternatives("array"):
                    start = OPENED if c2.needs_check("array") else None
                    out.append(Stack((ARR, c2, A_OPEN, 0, 0, start), parent))
            elif b == 34 and "string" in types:  # "
                out.append(Stack(self._new_string(c, False), parent))
            elif (b == 45 or b in DIGITS) and "number" in types:
                text = bytes((b,)) if c.needs_check("number") else None
                out.append(Stack((NUM, c, _num_step(None, b), text), parent))
            elif b in (116, 102) and "boolean" in types:  # t f
                value = b == 116
                if value in c.booleans:
                    out.append(Stack((LIT, c, b"rue" if value else b"alse", value), parent))
            elif b == 110 and "null" in types:  # n
                out.append(Stack((LIT, c, b"ull", None), parent))
        return out

    def _new_string(self, c: Any, is_key: bool) -> tuple:
        f = c.string
        text = b"" if is_key or c.needs_check("string") else None
        return (STR, c, 0, None, 0, tuple(d.start for d in f.dfas), 0, f.literals, text, is_key)

    def _pop(self, node: Stack, result: Any = None) -> list:
        """The parent of ``node`` once the value on top of it is finished."""
        p = node.parent
        f = p.frame
        tag = f[0]
        if tag == TOP:
            return [Stack((TOP, 2, 0), None)]
        if tag == ARR:
            c = f[1]
            return [Stack((ARR, c, A_AFTER, min(f[3] + 1, c.array.cap), 0, f[5]), p.parent)]
        c, phase, seen = f[1], f[2], f[3]
        if phase == O_KEY:
            if result in seen or not c.value_alternatives(result):
                return []
            return [Stack((OBJ, c, O_COLON, seen, result, 0, f[6]), p.parent)]
        return [Stack((OBJ, c, O_AFTER, seen | {f[4]}, None, 0, f[6]), p.parent)]

    def _close(self, node: Stack, kind: str, start: int | None) -> list:
        """The parent once container ``node`` closes, under a CHECK frame when it is checked."""
        out = self._pop(node)
        if start is None:
            return out
        return [Stack((CHECK, node.frame[1], kind, start), q) for q in out]

    def _end_number(self, f: tuple) -> bool:
        if f[2] not in N_ACCEPT:
            return False
        if f[3] is None:
            return True
        try:
            value = json.loads(f[3])
        except ValueError:  # beyond Python's int digit limit: left to complete
            return True
        return f[1].scalar_ok("number", value)

    # ------------------------------------------------------------------ one byte
    def _step(self, node: Stack, b: int) -> list:
        f = node.frame
        tag = f[0]
        if tag == STR:
            return self._step_string(node, f, b)
        if tag == NUM:
            st = _num_step(f[2], b)
            if st in _NOT_INTEGER and f[1].integer_literals:
                return []
            if st is not None:
                text = f[3] + bytes((b,)) if f[3] is not None else None
                return [Stack((NUM, f[1], st, text), node.parent)]
            if not self._end_number(f):
                return []
            out = []
            for q in self._pop(node):
                out += self._step(q, b)
            return out
        if tag == LIT:
            rest = f[2]
            if b != rest[0]:
                return []
            if len(rest) > 1:
                return [Stack((LIT, f[1], rest[1:], f[3]), node.parent)]
            if f[1].needs_check("null" if f[3] is None else "boolean"):
                if not f[1].scalar_ok("null" if f[3] is None else "boolean", f[3]):
                    return []
            return self._pop(node)
        if tag == OBJ:
            return self._step_object(node, f, b)
        if tag == ARR:
            return self._step_array(node, f, b)
        # TOP
        phase, ws = f[1], f[2]
        if b in WS and phase != 1:
            n = self._ws(ws, self.end_ws_limit if phase == 2 else self.ws_limit)
            return [] if n is None else [Stack((TOP, phase, n), None)]
        if phase == 0:
            return self._start_value(self.root, b, Stack((TOP, 1, 0), None))
        return []

    def _step_object(self, node: Stack, f: tuple, b: int) -> list:
        _, c, phase, seen, key, ws, start = f
        if b in WS and phase in (O_OPEN, O_COLON, O_VALUE_NEXT, O_AFTER, O_COMMA):
            n = self._ws(ws, self.ws_limit)
            return [] if n is None else [Stack((OBJ, c, phase, seen, key, n, start), node.parent)]
        facts = c.object
        if phase in (O_OPEN, O_COMMA) and b == 34:  # a key opens
            if len(seen) >= facts.max_props:
                return []
            parent = Stack((OBJ, c, O_KEY, seen, None, 0, start), node.parent)
            return [Stack(self._new_string(k, True), parent) for k in c.key_alternatives(seen)]
        if phase in (O_OPEN, O_AFTER) and b == 125:  # }
            if len(seen) < facts.min_props or not facts.required <= seen:
                return []
            return self._close(node, "object", start)
        if phase == O_COLON:
            return [Stack((OBJ, c, O_VALUE_NEXT, seen, key, 0, start), node.parent)] if b == 58 else []
        if phase == O_VALUE_NEXT:
            parent = Stack((OBJ, c, O_VALUE, seen, key, 0, start), node.parent)
            return self._start_value(c.value_alternatives(key), b, parent)
        if phase == O_AFTER and b == 44:  # ,
            if len(seen) >= facts.max_props or not c.key_alternatives(seen):
                return []
            return [Stack((OBJ, c, O_COMMA, seen, None, 0, start), node.parent)]
        return []

    def _step_array(self, node: Stack, f: tuple, b: int) -> list:
        _, c, phase, index, ws, start = f
        if b in WS and phase != A_VALUE:
            n = self._ws(ws, self.ws_limit)
            return [] if n is None else [Stack((ARR, c, phase, index, n, start), node.parent)]
        facts = c.array
        if phase in (A_OPEN, A_AFTER) and b == 93:  # ]
            return self._close(node, "array", start) if index >= facts.min_items else []
        if phase == A_AFTER:
            if b != 44 or index >= facts.max_items or not c.item_alternatives(index):
                return []
            return [Stack((ARR, c, A_COMMA, index, 0, start), node.parent)]
        if index >= facts.max_items:
            return []
        parent = Stack((ARR, c, A_VALUE, index, 0, start), node.parent)
        return self._start_value(c.item_alternatives(index), b, parent)

    # ------------------------------------------------------------------ strings
    def _step_string(self, node: Stack, f: tuple, b: int) -> list:
        _, c, esc, utf8, count, dstates, lpos, lits, text, is_key = f
        if utf8 is not None:  # inside a multi-byte character
            need, lo, hi = utf8
            if not lo <= b <= hi:
                return []
            utf8 = (need - 1, 0x80, 0xBF) if need > 1 else None
            return self._emit(node, f, bytes((b,)), 0, esc, utf8)
        if esc == 0:
            if b == 34:  # closing quote
                return self._close_string(node, f)
            if b == 92:
                return [Stack(f[:2] + (1,) + f[3:], node.parent)]
            if b < 0x20:
                return []
            if b < 0x80:
                return self._emit(node, f, bytes((b,)), 1, 0, None)
            due = utf8_lead(b)
            if due is None:
                return []
            return self._emit(node, f, bytes((b,)), 1, 0, due)
        if esc == 1:  # after a backslash
            if b in SIMPLE_ESCAPES:
                return self._emit(node, f, bytes((SIMPLE_ESCAPES[b],)), 1, 0, None)
            if b == 117:  # u
                return [Stack(f[:2] + ((2, 0, 0, 0),) + f[3:], node.parent)]
            return []
        kind = esc[0]
        if kind == 3:  # a high surrogate wants "\" then "u" of its low half
            return [Stack(f[:2] + ((4, esc[1]),) + f[3:], node.parent)] if b == 92 else []
        if kind == 4:
            return [Stack(f[:2] + ((2, 0, 0, esc[1]),) + f[3:], node.parent)] if b == 117 else []
        _, ndig, value, high = esc  # reading the hex digits of \uXXXX
        if b not in HEX:
            return []
        value = value * 16 + HEX[b]
        if ndig < 3:
            if f[7] is not None and not high and not _escape_may_spell(f[7], f[6], value, 3 - ndig):
                return []  # no enum/const literal's next character begins with these digits
            return [Stack(f[:2] + ((2, ndig + 1, value, high),) + f[3:], node.parent)]
        if high:
            if not 0xDC00 <= value <= 0xDFFF:
                return []
            cp = 0x10000 + ((high - 0xD800) << 10) + (value - 0xDC00)
            return self._emit(node, f, chr(cp).encode("utf-8"), 1, 0, None)
        if 0xD800 <= value <= 0xDBFF:
            return [Stack(f[:2] + ((3, value),) + f[3:], node.parent)]
        if 0xDC00 <= value <= 0xDFFF:
            return []  # a lone low surrogate is not a character
        return self._emit(node, f, chr(value).encode("utf-8"), 1, 0, None)

    def _emit(self, node: Stack, f: tuple, data: bytes, chars: int, esc: Any, utf8: Any) -> list:
        """Feed decoded bytes ``data`` (``chars`` new characters) to the string's checks."""
        _, c, _, _, count, dstates, lpos, lits, text, is_key = f
        facts = c.string
        if chars:
            count += 1
            if count > facts.max_len:
                return []
            count = min(count, facts.cap)
        if dstates:
            new = []
            for d, q in zip(facts.dfas, dstates):
                for x in data:
                    q = d.step(q, x)
                    if q is None:
                        return []
                new.append(q)
            dstates = tuple(new)
        if lits is not None:
            key = (lits, lpos, data)
            got = self._lits.get(key)
            if got is None:
                if len(self._lits) > 100_000:
                    self._lits.clear()
                end = lpos + len(data)
                got = self._lits[key] = frozenset(v for v in lits if v[lpos:end] == data)
            if not got:
                return []
            lits, lpos = got, lpos + len(data)
        if text is not None:
            text = text + data
        frame = (STR, c, esc, utf8, count, dstates, lpos, lits, text, is_key)
        return [Stack(frame, node.parent)]

    def _close_string(self, node: Stack, f: tuple) -> list:
        _, c, _, _, count, dstates, lpos, lits, text, is_key = f
        facts = c.string
        if count < facts.min_len:
            return []
        if not all(d.accepts(q) for d, q in zip(facts.dfas, dstates)):
            return []
        if lits is not None and not any(len(v) == lpos for v in lits):
            return []
        value = text.decode("utf-8") if text is not None else None
        if value is not None and c.needs_check("string") and not c.scalar_ok("string", value):
            return []
        return self._pop(node, value if is_key else None)


def _pattern_completion(key: tuple) -> bytes | None:
    """The shortest plain ASCII text (no quote, backslash or control byte, so one character per
    byte) after which every automaton of ``key`` = (automata, their states) accepts, by
    breadth-first search over their joint states; None beyond PATTERN_PATH_STATES of them."""
    dfas, states = key
    if all(d.accepts(q) for d, q in zip(dfas, states)):
        return b""
    parents: dict = {states: None}
    queue = deque([states])
    while queue and len(parents) < PATTERN_PATH_STATES:
        cur = queue.popleft()
        for b in _PLAIN_ORDER:
            nxt = []
            for d, q in zip(dfas, cur):
                q = d.step(q, b)
                if q is None:
                    break
                nxt.append(q)
            else:
                nxt = tuple(nxt)
                if nxt in parents:
                    continue
                parents[nxt] = (cur, b)
                if all(d.accepts(q) for d, q in zip(dfas, nxt)):
                    path = []
                    while parents[nxt] is not None:
                        nxt, b = parents[nxt]
                        path.append(b)
                    return bytes(reversed(path))
                queue.append(nxt)
    return None


def _example_rests(out: dict, examples: tuple[bytes, ...], written: bytes) -> None:
    """Add to ``out`` what each example (JSON text) has after ``written``, the value's text
    so far, where it begins with it."""
    for e in examples:
        if len(e) > len(written) and e.startswith(written):
            out[e[len(written):]] = None


def _value_moves(out: dict, alternatives: tuple) -> None:
    """Add to ``out`` the chunks a completion tries where a value of one of ``alternatives``
    starts: short values, the clauses' own examples (``Clause.value_examples``), the starts
    of longer values."""
    out.update(dict.fromkeys(_SHORT_VALUES))
    # sorted: the alternatives' order follows the schema members' set order
    out.update(dict.fromkeys(sorted({e for c in alternatives for e in c.value_examples()},
                                    key=lambda e: (len(e), e))))
    out.update(dict.fromkeys(_VALUE_STARTS))


def _escape_may_spell(lits: frozenset, lpos: int, value: int, left: int) -> bool:
    """Can a ``\\u`` escape whose digits so far read ``value``, with ``left`` digits to come,
    spell the next character of one of the literals ``lits`` (UTF-8 bytes, ``lpos`` read)? Its
    code point lies in [value * 16^left, (value + 1) * 16^left); a range that meets the
    surrogates may begin a pair that spells any astral character, so it is kept."""
    lo, hi = value << (4 * left), ((value + 1) << (4 * left)) - 1
    if lo <= 0xDFFF and hi >= 0xD800:
        return True
    for v in lits:
        if lpos < len(v):
            n = utf8_lead(v[lpos])
            size = 1 if n is None else n[0] + 1
            try:
                cp = ord(v[lpos:lpos + size].decode("utf-8"))
            except (UnicodeDecodeError, TypeError):
                return True  # not a whole character here: keep (sound)
            if lo <= cp <= hi:
                return True
    return False


def remembered(table: dict, key: Any, compute: Callable[[Any], Any], limit: int) -> Any:
    """``compute(key)``, kept in ``table`` (cleared once past ``limit`` entries)."""
    got = table.get(key, table)
    if got is table:
        if len(table) > limit:
            table.clear()
        got = table[key] = compute(key)
    return got


def _between_free_characters(f: tuple) -> bool:
    """Is frame ``f`` a string between two characters (no escape or UTF-8 sequence begun),
    with no enum/const literals to follow?"""
    return f[0] == STR and f[2] == 0 and f[3] is None and f[7] is None


def _string_next(f: tuple) -> frozenset | None:
    """The bytes that can follow a string frame: the escape's or the character's next byte,
    or, against enum/const literals, their next bytes, the closing quote when one ends here,
    and the backslash (an escape may spell the literal's next character); else any byte
    that may start a character, an escape or the closing quote."""
    esc, utf8, lpos, lits = f[2], f[3], f[6], f[7]
    if utf8 is not None:
        return frozenset(range(utf8[1], utf8[2] + 1))
    if esc == 1:
        return _ESC_NEXT
    if esc != 0:
        kind = esc[0]
        return _HEX_NEXT if kind == 2 else frozenset(b"\\") if kind == 3 else frozenset(b"u")
    if lits is None:
        return _FREE_NEXT
    out = {v[lpos] for v in lits if len(v) > lpos} | {92}
    if any(len(v) == lpos for v in lits):
        out.add(34)
    return frozenset(out)
