"""Segments: byte-level constraints composed in sequence, and free text with triggered tags.

A text x is accepted by ``Segments([P_1, ..., P_m])`` iff it splits as x = x_1 ... x_m with each
x_k accepted by the part P_k:

    complete(x) = 0  iff  some split x = x_1 ... x_m has every x_k in L(P_k), else -inf
    prefix(x)   = 0  iff  x y is accepted for some y

The parts (``Part``):

- ``Literal(s)``: exactly the text s;
- ``FreeText(stop, max_bytes)``: well-formed UTF-8 t followed by the stop string, where t holds
  no occurrence of stop (the first occurrence ends the part) and has at most max_bytes bytes;
  without a stop the part runs to the end of the text (only the last part may);
- ``Constrained(p)``: a text that the Boolean byte potential p accepts (Regex, Grammar,
  JSONSchema, Choice, a Segments, ...); p's ``state_complete`` says where it may end;
- ``Triggered(tags, triggers, ...)``: free text in which every occurrence of a trigger string
  opens a tag (begin, content, end) whose begin starts with that trigger; free text goes on
  after each tag's end (or, with stop_after_first, the text ends there); at_least_one asks for
  at least one tag.

The state is a set of configurations (k, s): part k in its state s. Where part k's text could
end or go on (a JSON document followed by whitespace, a regex match that may grow) both are
kept, so the set is a nondeterministic automaton run on the text, and

    prefix(x) = 0  iff  the set after x is non-empty      complete(x) = 0 iff it holds (m+1, -)

This is exact whenever every part's own liveness is exact: each part's live states can be
completed, and at construction every part's empty text is checked to be live (a part with an
empty language makes the whole language empty, so the initial set is empty). A constraint part
dead-ends a configuration at the first byte it refuses, and the text dies with its last
configuration.

The inner constraints are driven synchronously: ``advance`` is synchronous, so the inner
``state_complete`` (and, for the start, ``state_prefix``) coroutines are run to their end on the
spot (``run_now``); every shipped constraint's are plain computations. A constraint whose check
really awaits (a ``Predicate`` with an ``async`` function) is refused when it is asked.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Coroutine, Hashable, Iterable, Sequence

from smc.core.errors import InvalidArgument, InvalidArgumentType
from smc.core.logmath import NEG_INF
from potentials.base import BytePotential
from potentials.text import utf8_lead

#: the configuration index that stands for "every part done"
_END = -1


def run_now(coro: Coroutine[Any, Any, float]) -> float:
    """The value of a coroutine that completes without suspending (a potential's weight that is
    a plain computation); InvalidArgument when it would suspend (a check that really awaits)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise InvalidArgument(
        "a constraint inside Segments awaits in its completion check (e.g. a Predicate with an "
        "async function); Segments needs constraints whose checks are synchronous")


# -- UTF-8 well-formedness as a small automaton: state 0 = between characters, else
# (continuation bytes due, lowest and highest allowed next byte) packed in one tuple
UTF8_START: tuple[int, int, int] = (0, 0, 0)


def utf8_step(u: tuple[int, int, int], b: int) -> tuple[int, int, int] | None:
    """The UTF-8 state after byte b, None when b breaks well-formedness (Unicode table 3-7)."""
    need, lo, hi = u
    if need:
        if not lo <= b <= hi:
            return None
        return (need - 1, 0x80, 0xBF) if need > 1 else UTF8_START
    if b < 0x80:
        return UTF8_START
    return utf8_lead(b)


class Strings:
    """An Aho-Corasick automaton of a few strings: ``step(j, b)`` is the state after byte b,
    state j standing for the longest suffix of the text that is a prefix of some string
    (``depth[j]`` bytes long); ``match[j]`` is the index of a string that ends here (-1 none).
    The first occurrence of any string is where its state first has a match."""

    def __init__(self, patterns: Sequence[bytes]):
        self.patterns = list(patterns)
        goto: list[dict[int, int]] = [{}]
        self.depth = [0]
        self.match = [-1]
        for k, p in enumerate(self.patterns):
            node = 0
            for b in p:
                nxt = goto[node].get(b)
                if nxt is None:
                    nxt = len(goto)
                    goto[node][b] = nxt
                    goto.append({})
                    self.depth.append(self.depth[node] + 1)
                    self.match.append(-1)
                node = nxt
            if self.match[node] < 0:
                self.match[node] = k
        fail = [0] * len(goto)
        order = list(goto[0].values())
        for node in order:  # breadth first: a node's failure link is shallower than it
            for b, child in goto[node].items():
                order.append(child)
                f = fail[node]
                while f and b not in goto[f]:
                    f = fail[f]
                fail[child] = goto[f].get(b, 0) if goto[f].get(b, 0) != child else 0
                if self.match[child] < 0 and self.match[fail[child]] >= 0:
                    self.match[child] = self.match[fail[child]]
        self._goto, self._fail = goto, fail
        self._memo: dict[tuple[int, int], int] = {}

    def step(self, j: int, b: int) -> int:
        got = self._memo.get((j, b))
        if got is None:
            node = j
            while node and b not in self._goto[node]:
                node = self._fail[node]
            got = self._memo[(j, b)] = self._goto[node].get(b, 0)
        return got


class Part(ABC):
    """One segment of a ``Segments``: a nondeterministic state machine over bytes."""

    @abstractmethod
    def initial(self) -> Any:
        """The state of the part's empty text."""

    @abstractmethod
    def step(self, state: Any, b: int) -> Iterable[Any]:
        """The states after byte b (none: the byte is refused)."""

    @abstractmethod
    def ends(self, state: Any) -> bool:
        """May the part's text end here?"""

    def live_start(self) -> bool:
        """Can the part's text be completed at all (checked once, at construction)?"""
        return True

    def key(self, state: Any) -> Hashable | None:
        """A key such that states with equal keys agree, for every continuation, on liveness
        and on whether the part may end (None: no such key)."""
        return None


class Literal(Part):
    """Exactly the text ``text``; the state is the number of its bytes read."""

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise InvalidArgumentType(f"Literal takes a str, got {type(text).__name__}")
        self.text = text
        self.data = text.encode("utf-8")

    def __repr__(self) -> str:
        return f"Literal({self.text!r})"

    def initial(self) -> int:
        return 0

    def step(self, state: int, b: int) -> Iterable[int]:
        return (state + 1,) if state < len(self.data) and self.data[state] == b else ()

    def ends(self, state: int) -> bool:
        return state == len(self.data)

    def key(self, state: int) -> Hashable:
        return state


class FreeText(Part):
    """Well-formed UTF-8 free text t, then ``stop`` (t holds no occurrence of it, so its first
    occurrence ends the part), |t| <= ``max_bytes``; without a stop, t runs to the end.

    The state is (n, j, u): n bytes read, j the stop automaton's state (the longest suffix that
    begins the stop, ``depth[j]`` bytes), u the UTF-8 state; ``None`` once the stop was read.
    With a bound B the state lives iff t can still fit: n - depth[j] <= B when a stop is begun
    (finishing it ends t there), else n + (bytes due in the current character) <= B.
    """

    def __init__(self, stop: str | None = None, max_bytes: int | None = None):
        if stop is not None and (not isinstance(stop, str) or not stop):
            raise InvalidArgument(f"FreeText's stop must be a non-empty str or None, got {stop!r}")
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)
                                      or max_bytes < 0):
            raise InvalidArgument(f"FreeText's max_bytes must be an int >= 0 or None, got {max_bytes!r}")
        self.stop, self.max_bytes = stop, max_bytes
        self.bound = float("inf") if max_bytes is None else max_bytes
        self.strings = Strings([stop.encode("utf-8")]) if stop is not None else None

    def __repr__(self) -> str:
        return f"FreeText(stop={self.stop!r}, max_bytes={self.max_bytes!r})"

    def initial(self) -> tuple[int, int, tuple[int, int, int]]:
        return (0, 0, UTF8_START)

    def step(self, state: Any, b: int) -> Iterable[Any]:
        if state is None:
            return ()
        n, j, u = state
        u2 = utf8_step(u, b)
        if u2 is None:
            return ()
        n += 1
        if self.strings is None:
            return ((n, 0, u2),) if n + u2[0] <= self.bound else ()
        j = self.strings.step(j, b)
        if self.strings.match[j] >= 0:
            return (None,)
        depth = self.strings.depth[j]
        fits = n - depth <= self.bound if depth else n + u2[0] <= self.bound
        return ((n, j, u2),) if fits else ()

    def ends(self, state: Any) -> bool:
        if self.strings is None:
            return state is not None and state[2][0] == 0
        return state is None

    def key(self, state: Any) -> Hashable:
        if state is None:
            return None, 0
        n, j, u = state
        return j, u, self.bound - n  # liveness reads n only through the room left


class Constrained(Part):
    """A text the Boolean byte potential ``potential`` accepts; the state is its state."""

    def __init__(self, potential: BytePotential):
        if not isinstance(potential, BytePotential):
            raise InvalidArgumentType(
                f"a Segments part must be a byte-level constraint (Regex, Grammar, JSONSchema, "
                f"Choice, ...), got {type(potential).__name__}")
        if not potential.boolean:
            raise InvalidArgument(f"a Segments part must be a Boolean constraint, got {potential!r}")
        self.potential = potential

    def __repr__(self) -> str:
        return f"Constrained({self.potential!r})"

    def initial(self) -> Any:
        return self.potential.initial()

    def step(self, state: Any, b: int) -> Iterable[Any]:
        nxt = self.potential.advance(state, bytes((b,)))
        return () if nxt is None else (nxt,)

    def ends(self, state: Any) -> bool:
        return run_now(self.potential.state_complete(state)) > NEG_INF

    def live_start(self) -> bool:
        return run_now(self.potential.state_prefix(self.potential.initial())) > NEG_INF

    def key(self, state: Any) -> Hashable | None:
        # liveness alone (mask_key) does not fix where the part may end, which decides the
        # next parts: both keys are needed
        mk = self.potential.mask_key(state)
        ck = None if mk is None else self.potential.complete_key(state)
        return None if ck is None else (mk, ck)


def as_part(item: Part | BytePotential | str) -> Part:
    """A part from a Part, a byte potential (``Constrained``) or a str (``Literal``)."""
    if isinstance(item, Part):
        return item
    if isinstance(item, str):
        return Literal(item)
    return Constrained(item)


class Segments(BytePotential[tuple]):
    """The concatenation of ``parts`` (see the module docstring): each a ``Part``, a Boolean
    byte potential (read as ``Constrained``) or a str (read as ``Literal``).

    Raises InvalidArgument for no parts, a FreeText without a stop that is not the last part,
    a weighted (non-Boolean) potential; InvalidArgumentType for anything else as a part.
    """

    def __init__(self, parts: Sequence[Part | BytePotential | str]):
        if isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence) or not parts:
            raise InvalidArgument("Segments takes a non-empty list of parts")
        self.parts = tuple(as_part(p) for p in parts)
        for k, p in enumerate(self.parts[:-1]):
            if isinstance(p, FreeText) and p.stop is None:
                raise InvalidArgument(
                    f"part {k} is free text without a stop string, so nothing says where it "
                    "ends; give it a stop (only the last part may run to the end)")
        self.satisfiable = all(p.live_start() for p in self.parts)
        self._initial = self._closure([(0, self.parts[0].initial())]) if self.satisfiable else ()

    def __repr__(self) -> str:
        return f"Segments({list(self.parts)!r})"

    def _closure(self, configs: Iterable[tuple[int, Any]]) -> tuple:
        """The configurations plus, wherever a part may end, the next part's start (and _END
        after the last), deduplicated, in a fixed order."""
        out: dict[tuple[int, Any], None] = {}
        todo = list(configs)
        last = len(self.parts) - 1
        while todo:
            k, s = todo.pop()
            if (k, s) in out:
                continue
            out[(k, s)] = None
            if k != _END and self.parts[k].ends(s):
                todo.append((_END, None) if k == last else (k + 1, self.parts[k + 1].initial()))
        return tuple(out)

    def initial(self) -> tuple:
        return self._initial

    def advance(self, state: tuple, data: bytes) -> tuple | None:
        configs = state
        for b in data:
            stepped = [(k, s2) for k, s in configs if k != _END for s2 in self.parts[k].step(s, b)]
            if not stepped:
                return None
            configs = self._closure(stepped)
        return configs if configs else None

    def accepts(self, state: tuple) -> bool:
        """Does the text behind ``state`` complete every part? (state_complete, synchronously)"""
        return any(k == _END for k, _ in state)

    async def state_prefix(self, state: tuple) -> float:
        return 0.0 if state else NEG_INF

    async def state_complete(self, state: tuple) -> float:
        return 0.0 if self.accepts(state) else NEG_INF

    def mask_key(self, state: tuple) -> Hashable | None:
        """The set of the configurations' keys: each fixes its configuration's liveness and
        endings after every continuation, so the set fixes the union of their futures."""
        keys = []
        for k, s in state:
            if k == _END:
                keys.append((_END, None))
                continue
            key = self.parts[k].key(s)
            if key is None:
                return None
            keys.append((k, key))
        return frozenset(keys)

    def complete_key(self, state: tuple) -> Hashable | None:
        return self.mask_key(state)


class Tag:
    """A tag of ``Triggered``: the text ``begin``, then ``content`` (a Part, a byte potential,
    a str, or a list of those in sequence), then ``end``."""

    def __init__(self, begin: str, content: Any, end: str):
        if not isinstance(begin, str) or not isinstance(end, str):
            raise InvalidArgumentType("a tag's begin and end must be strings")
        self.begin, self.end = begin, end
        inner = list(content) if isinstance(content, (list, tuple)) else [content]
        parts: list[Part | BytePotential | str] = [begin] if begin else []
        parts += inner
        if end:
            parts.append(end)
        self.content = inner
        self.segments = Segments(parts)

    def __repr__(self) -> str:
        return f"Tag({self.begin!r}, {self.content!r}, {self.end!r})"


class Triggered(Part):
    """Free text in which each occurrence of a trigger opens a tag (see the module docstring).

    States: ("free", j, u, called) -- free text, j the triggers' automaton state, u the UTF-8
    state, called whether a tag was closed before; ("tag", t, s, called) -- inside tag t, s its
    Segments state; ("end",) -- after the first tag with stop_after_first.

    Args:
        tags: the tags (``Tag``); each begin must start with one of the triggers.
        triggers: the strings that open a tag (default: each tag's whole begin).
        at_least_one: the text must hold at least one tag.
        stop_after_first: the text ends with the first tag's end.
    """

    def __init__(self, tags: Sequence[Tag], triggers: Sequence[str] | None = None,
                 at_least_one: bool = False, stop_after_first: bool = False):
        tags = list(tags)
        if not tags or not all(isinstance(t, Tag) for t in tags):
            raise InvalidArgument("Triggered needs a non-empty list of Tag")
        if triggers is None:
            triggers = sorted({t.begin for t in tags})
        triggers = list(triggers)
        if not triggers or not all(isinstance(t, str) and t for t in triggers):
            raise InvalidArgument("triggers must be a non-empty list of non-empty strings")
        self.tags, self.triggers = tags, triggers
        self.at_least_one, self.stop_after_first = bool(at_least_one), bool(stop_after_first)
        self.strings = Strings([t.encode("utf-8") for t in triggers])
        # trigger index -> the tags it opens, each in its state after the trigger's bytes
        self.opens: list[list[tuple[int, tuple]]] = [[] for _ in triggers]
        for i, tag in enumerate(tags):
            firing = [k for k, trig in enumerate(triggers) if tag.begin.startswith(trig)]
            if not firing:
                raise InvalidArgument(
                    f"tag {i}'s begin {tag.begin!r} starts with none of the triggers {triggers!r}")
            for k in firing:
                s = tag.segments.advance(tag.segments.initial(), triggers[k].encode("utf-8"))
                if s is not None:
                    self.opens[k].append((i, s))

    def __repr__(self) -> str:
        return (f"Triggered({self.tags!r}, triggers={self.triggers!r}, "
                f"at_least_one={self.at_least_one}, stop_after_first={self.stop_after_first})")

    def initial(self) -> tuple:
        return ("free", 0, UTF8_START, False)

    def _after_tag(self) -> tuple:
        return ("end",) if self.stop_after_first else ("free", 0, UTF8_START, True)

    def step(self, state: tuple, b: int) -> Iterable[tuple]:
        if state[0] == "end":
            return ()
        if state[0] == "free":
            _, j, u, called = state
            u2 = utf8_step(u, b)
            if u2 is None:
                return ()
            j = self.strings.step(j, b)
            fired = self.strings.match[j]
            if fired < 0:
                return (("free", j, u2, called),)
            out = []
            for t, s in self.opens[fired]:
                out.append(("tag", t, s, called))
                if self.tags[t].segments.accepts(s):
                    out.append(self._after_tag())
            return out
        _, t, s, called = state
        seg = self.tags[t].segments
        s2 = seg.advance(s, bytes((b,)))
        if s2 is None:
            return ()
        return (("tag", t, s2, called), self._after_tag()) if seg.accepts(s2) else (("tag", t, s2, called),)

    def ends(self, state: tuple) -> bool:
        if state[0] == "end":
            return True
        if state[0] == "free":
            return state[2][0] == 0 and (state[3] or not self.at_least_one)
        return False

    def live_start(self) -> bool:
        # free text may always end, except when a tag is required: then one must be satisfiable
        return not self.at_least_one or any(self.opens)

    def key(self, state: tuple) -> Hashable | None:
        if state[0] != "tag":
            return state
        _, t, s, called = state
        k = self.tags[t].segments.mask_key(s)
        return None if k is None else ("tag", t, k, called)
