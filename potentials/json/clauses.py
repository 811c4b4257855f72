"""A JSON Schema read as disjunctions of conjunctive clauses, for incremental checking.

A value v is valid under a set of schemas M when it is valid under every m in M. Expanding the
in-place applicators ($ref, allOf, anyOf, oneOf) of the members gives

    valid(v, M)  =>  OR_{C in dnf(M)} AND_{m in C} own(v, m)

where own(v, m) are m's own keywords. A ``Clause`` is one such C: the facts the recognizer
enforces while v is read (its type, string length and patterns, object keys, array items) are
implied by AND own(v, m), so enforcing them never rejects a valid value. What a clause cannot
enforce byte by byte it checks when a scalar ends (``Clause.scalar_ok``), by running the
validator on the scalar against the members that need it; containers are left to ``complete``.

Members are schema nodes (contents plus the ``referencing`` resolver jsonschema itself would use
there, and the node's draft: facts are drawn from its keywords in 2020-12 terms,
potentials.json.drafts.view, and checks run that draft's validator on its own keywords), constants (one candidate of an ``enum``/``const`` that is an object or an array, fixed
when the container opens) and key restrictions (the names an object with
``additionalProperties: false`` allows).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from potentials._compat import base_uri, json_equal, require, validator_resolver, with_resolver
from potentials.regex.automaton import UnsupportedRegex, compile_regex
from potentials.json.drafts import (
    DEFAULT,
    LIST_OF_SCHEMAS,
    MAP_OF_SCHEMAS,
    ONE_SCHEMA,
    SPECS,
    before,
    draft_of,
    view,
)
from potentials.json import formats as json_formats
from potentials.json import patterns as json_patterns
from potentials.json.patterns import maybe_search

#: enum candidates and examples a completion tries per keyword
EXAMPLES_PER_KEYWORD = 4
#: a short value of each common string format, for completions (``Clause.value_examples``)
FORMAT_EXAMPLES = {
    "date": "2000-01-01", "date-time": "2000-01-01T00:00:00Z", "time": "00:00:00Z",
    "email": "a@a.aa", "idn-email": "a@a.aa", "hostname": "a.aa", "idn-hostname": "a.aa",
    "ipv4": "0.0.0.0", "ipv6": "::", "uri": "a:a", "iri": "a:a", "uri-reference": "a",
    "iri-reference": "a", "uuid": "00000000-0000-0000-0000-000000000000", "duration": "P1D",
    "regex": "a", "json-pointer": "", "relative-json-pointer": "0", "uri-template": "a",
}
TYPES = ("null", "boolean", "object", "array", "string", "number")
#: a disjunction larger than this is not split; its member is then checked when a scalar ends
MAX_ALTERNATIVES = 64
INF = float("inf")
#: nesting read by Schemas.possible_types (deeper: every type, which is sound)
TYPES_DEPTH = 200


def own_types(s: dict) -> set:
    """The JSON types (of TYPES, integer read as number) a schema object's own ``type``,
    ``const`` and ``enum`` allow."""
    allowed = set(TYPES)
    t = s.get("type")
    if isinstance(t, str):
        t = [t]
    if isinstance(t, list):
        allowed &= {"number" if x == "integer" else x for x in t}
    if "const" in s:
        allowed &= {json_type(s["const"])}
    if isinstance(s.get("enum"), list):
        allowed &= {json_type(v) for v in s["enum"]}
    return allowed


def integer_only(s: dict) -> bool:
    """Does a schema object's own ``type`` allow integers and no other numbers?"""
    t = s.get("type")
    t = [t] if isinstance(t, str) else t
    return isinstance(t, list) and "integer" in t and "number" not in t


# keywords a scalar can fail that no clause fact enforces (beyond the per-type ones below)
_LOOSE_ANY = frozenset({"oneOf", "not", "if", "$dynamicRef", "$recursiveRef", "format"})
# keywords about a whole object or array that no clause fact enforces: checked when it closes
_LOOSE_CONTAINER = frozenset(
    {"oneOf", "not", "if", "uniqueItems", "contains", "minContains", "maxContains",
     "dependencies", "dependentRequired", "dependentSchemas", "unevaluatedItems",
     "unevaluatedProperties", "$recursiveRef"}
)
# a member whose keywords (the validator's own, in its subschemas too) are these, or ones
# that only objects, arrays or numbers can fail, checks a string without the validator
_STRING_WORDS = frozenset({"type", "format", "minLength", "maxLength", "pattern", "enum", "const",
                           "allOf", "anyOf", "oneOf", "not"})
_NOT_FOR_STRINGS = frozenset(
    {"properties", "patternProperties", "additionalProperties", "required", "minProperties",
     "maxProperties", "dependencies", "dependentRequired", "dependentSchemas", "propertyNames",
     "unevaluatedProperties", "items", "additionalItems", "prefixItems", "contains", "minContains",
     "maxContains", "minItems", "maxItems", "uniqueItems", "unevaluatedItems", "minimum",
     "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)


_LOOSE_NUMBER = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum", "const"}
)


def _string_form(schema: Any, known: Any, top: bool = True) -> Any:
    """``schema`` cut to the keywords a string can fail that the validator knows (``known``:
    ``const`` is not draft 4's), in its allOf / anyOf / oneOf / not subschemas too, for
    ``_string_ok``; None when it has a keyword the validator knows that is neither such a
    keyword nor one only other types can fail (``$ref``, ``if``, ...), or a subschema that
    declares its own ``$schema``."""
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, dict) or not top and "$schema" in schema:
        return None
    form: dict = {}
    for k, v in schema.items():
        if k not in known or k in _NOT_FOR_STRINGS:
            continue
        if k not in _STRING_WORDS:
            return None
        if k in ("allOf", "anyOf", "oneOf"):
            if not isinstance(v, list):
                return None
            v = [_string_form(x, known, False) for x in v]
            if any(x is None for x in v):
                return None
        elif k == "not":
            v = _string_form(v, known, False)
            if v is None:
                return None
        form[k] = v
    return form


def _string_ok(form: Any, value: str, checker: Any) -> bool:
    """``value`` against a ``_string_form`` as jsonschema's keywords check a string: lengths
    in code points, the pattern searched by json_patterns.search, the format by the
    validator's format checker, enum and const by equality with string members, allOf /
    anyOf / oneOf (exactly one) / not over the subschemas."""
    if isinstance(form, bool):
        return form
    t = form.get("type")
    if t is not None and not (t == "string" or isinstance(t, list) and "string" in t):
        return False
    lo, hi = form.get("minLength"), form.get("maxLength")
    if _is_count(lo) and len(value) < lo or _is_count(hi) and len(value) > hi:
        return False
    if "const" in form and form["const"] != value:
        return False
    if isinstance(form.get("enum"), list) and not any(isinstance(e, str) and e == value
                                                       for e in form["enum"]):
        return False
    pattern = form.get("pattern")
    if isinstance(pattern, str) and not json_patterns.search(pattern, value):
        return False
    fmt = form.get("format")
    if checker is not None and isinstance(fmt, str) and not checker.conforms(value, fmt):
        return False
    if "allOf" in form and not all(_string_ok(x, value, checker) for x in form["allOf"]):
        return False
    if "anyOf" in form and not any(_string_ok(x, value, checker) for x in form["anyOf"]):
        return False
    if "oneOf" in form and sum(_string_ok(x, value, checker) for x in form["oneOf"]) != 1:
        return False
    return not ("not" in form and _string_ok(form["not"], value, checker))


@functools.lru_cache(maxsize=16)
def _known_words(cls: type) -> frozenset:
    """The keywords a validator class checks."""
    return frozenset(cls.VALIDATORS)


def json_type(value: Any) -> str:
    """The JSON type of a decoded value (integers and floats are both "number")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise TypeError(f"not a JSON value: {value!r}")


@dataclass(frozen=True)
class Node:
    """A subschema of ``draft`` with the resolver jsonschema uses to evaluate it: ``contents``
    is its keywords in 2020-12 terms (facts), ``raw`` the subschema itself (checks)."""

    contents: Any = field(compare=False)
    resolver: Any = field(compare=False)
    key: tuple = field(default=())
    raw: Any = field(default=None, compare=False)
    draft: str = field(default=DEFAULT, compare=False)


@dataclass(frozen=True)
class Const:
    """The value must equal ``value`` (an object/array enum candidate, or a part of one)."""

    value: Any = field(compare=False)
    key: tuple = field(default=())


@dataclass(frozen=True)
class Names:
    """An object key must be one of ``names`` (or, when ``patterns``, match one of them)."""

    names: frozenset
    patterns: tuple = ()


@dataclass(frozen=True)
class KeyPattern:
    """An object key must contain a match of ``pattern`` (re.search)."""

    pattern: str


@dataclass
class StringFacts:
    min_len: int
    max_len: float
    dfas: tuple  # ByteDFA per pattern, run as an unanchored search
    literals: frozenset | None  # the decoded string must be one of these (UTF-8 bytes)
    cap: int  # character counts at or above cap behave alike


@dataclass
class ObjectFacts:
    required: frozenset
    min_props: int
    max_props: float


@dataclass
class ArrayFacts:
    min_items: int
    max_items: float
    cap: int


class Clause:
    """One conjunction of members; facts are computed on first use."""

    __slots__ = ("sid", "members", "loose", "schemas", "_cache")

    def __init__(self, schemas: "Schemas", sid: int, members: frozenset, loose: frozenset):
        self.schemas, self.sid, self.members, self.loose = schemas, sid, members, loose
        self._cache: dict = {}

    def _memo(self, key: Any, make: Callable[[], Any]) -> Any:
        got = self._cache.get(key, self)
        if got is self:
            got = self._cache[key] = make()
        return got

    # ------------------------------------------------------------------ types and scalars
    @property
    def types(self) -> frozenset:
        return self._memo("types", self._types)

    def _types(self) -> frozenset:
        allowed = set(TYPES)
        for m in self.members:
            if isinstance(m, Const):
                allowed &= {json_type(m.value)}
            elif isinstance(m, (Names, KeyPattern)):
                allowed &= {"string"}
            elif isinstance(m, Node):
                allowed &= own_types(m.contents)
        for m in self.loose:
            # a disjunction too wide to split still allows only its branches' types
            allowed &= self.schemas.possible_types(m)
        if "string" in allowed and self.string is None:
            allowed.discard("string")
        if "boolean" in allowed and not self.booleans:
            allowed.discard("boolean")
        if "array" in allowed and self.array.min_items > self.array.max_items:
            allowed.discard("array")
        if "object" in allowed and self.object.min_props > self.object.max_props:
            allowed.discard("object")
        return frozenset(allowed)

    def _candidates(self, kind: str) -> list[list] | None:
        """Per member with enum/const, its candidates of JSON type ``kind``."""
        out = []
        for m in self.members:
            if isinstance(m, Const):
                out.append([m.value] if json_type(m.value) == kind else [])
            elif isinstance(m, Node):
                s = m.contents
                if "const" in s:
                    out.append([s["const"]] if json_type(s["const"]) == kind else [])
                if isinstance(s.get("enum"), list):
                    out.append([v for v in s["enum"] if json_type(v) == kind])
        return out

    @property
    def integer_literals(self) -> bool:
        """Are numbers here written as integer literals, without a fraction or an exponent?
        So when a member's ``type`` allows integers and no other numbers (a departure from
        JSON Schema, where 1.0 and 1e2 are integers: potentials.json.potential)."""
        return self._memo("integer_literals", lambda: any(
            isinstance(m, Node) and integer_only(m.contents) for m in self.members))

    @property
    def booleans(self) -> frozenset:
        def make() -> frozenset:
            ok = {True, False}
            for cands in self._candidates("boolean"):
                ok &= set(cands)
            return frozenset(ok)

        return self._memo("booleans", make)

    @property
    def string(self) -> StringFacts | None:
        """String facts, or None when no string can satisfy the clause."""
        return self._memo("string", self._string)

    def _string(self) -> StringFacts | None:
        lo, hi, dfas, lits = 0, INF, [], None
        for cands in self._candidates("string"):
            got = frozenset(v.encode("utf-8", "surrogatepass") for v in cands)
            lits = got if lits is None else lits & got
        for m in self.members:
            if isinstance(m, Names):  # patterns were split off by expand()
                got = frozenset(n.encode("utf-8", "surrogatepass") for n in m.names)
                lits = got if lits is None else lits & got
            elif isinstance(m, KeyPattern):
                dfa = self.schemas.search_dfa(m.pattern)
                if dfa is not None:
                    dfas.append(dfa)
            elif isinstance(m, Node):
                s = m.contents
                if _is_count(s.get("minLength")):
                    lo = max(lo, int(s["minLength"]))
                if _is_count(s.get("maxLength")):
                    hi = min(hi, int(s["maxLength"]))
                if isinstance(s.get("pattern"), str):
                    dfa = self.schemas.search_dfa(s["pattern"])
                    if dfa is not None:
                        dfas.append(dfa)
                if isinstance(s.get("format"), str):
                    dfa = self.schemas.format_dfa(m, s["format"])
                    if dfa is not None:
                        dfas.append(dfa)
        if lo > hi or any(d.is_empty for d in dfas):
            return None
        if lits is not None:
            lits = frozenset(
                v for v in lits if lo <= len(v.decode("utf-8", "surrogatepass")) <= hi
            )
            if not lits:
                return None
        cap = int(hi) + 1 if hi < INF else lo
        return StringFacts(lo, hi, tuple(dfas), lits, cap)

    def needs_check(self, kind: str) -> tuple:
        """Members a finished scalar of JSON type ``kind`` must still be validated against."""
        return self._memo(("check", kind), lambda: self._needs_check(kind))

    def _needs_check(self, kind: str) -> tuple:
        if kind in ("object", "array"):
            if self.schemas.dynamic:
                return ()  # out of context only scalar keywords are checked: nothing to add
            return tuple(
                m for m in self.members
                if isinstance(m, Node)
                and (m in self.loose or not _LOOSE_CONTAINER.isdisjoint(m.contents))
            )
        out = []
        for m in self.members:
            if isinstance(m, Const):
                if kind == "number":
                    out.append(m)
            elif isinstance(m, KeyPattern):
                if self.schemas.search_dfa(m.pattern) is None:
                    out.append(m)
            elif isinstance(m, Node):
                s = m.contents
                loose = m in self.loose or not _LOOSE_ANY.isdisjoint(s)
                if kind == "number":
                    # an integer ``type`` needs no check: such a clause writes integer literals
                    loose = loose or not _LOOSE_NUMBER.isdisjoint(s)
                if kind == "string" and isinstance(s.get("pattern"), str):
                    loose = loose or self.schemas.search_dfa(s["pattern"]) is None
                if loose:
                    out.append(m)
        return tuple(out)

    def scalar_ok(self, kind: str, value: Any) -> bool:
        """Does the finished scalar ``value`` satisfy the members no fact fully enforces?"""
        for m in self.needs_check(kind):
            if not self.schemas.member_accepts(m, value):
                return False
        return True

    def container_ok(self, kind: str, text: bytes) -> bool:
        """Does the finished container ``text`` (an object or array, as JSON bytes) satisfy the
        members whose container keywords no fact enforces? (Undecidable here: True.)"""
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # huge integers, deep nesting: left to complete
            return True
        return self.scalar_ok(kind, value)

    # ------------------------------------------------------------------ objects
    @property
    def object(self) -> ObjectFacts:
        return self._memo("object", self._object)

    def _object(self) -> ObjectFacts:
        req, lo, hi = set(), 0, INF
        for m in self.members:
            if isinstance(m, Const) and isinstance(m.value, dict):
                req |= set(m.value)
                lo, hi = max(lo, len(m.value)), min(hi, len(m.value))
            elif isinstance(m, Node):
                s = m.contents
                if isinstance(s.get("required"), list):
                    req |= {k for k in s["required"] if isinstance(k, str)}
                if _is_count(s.get("minProperties")):
                    lo = max(lo, int(s["minProperties"]))
                if _is_count(s.get("maxProperties")):
                    hi = min(hi, int(s["maxProperties"]))
        return ObjectFacts(frozenset(req), max(lo, len(req)), hi)

    def key_alternatives(self, seen: frozenset) -> tuple:
        """Clauses for the next key of an object whose keys so far are ``seen``."""
        return self._memo(("keys", seen), lambda: self._key_alternatives(seen))

    def _key_alternatives(self, seen: frozenset) -> tuple:
        sch = self.schemas
        parts: list = []
        for m in self.members:
            if isinstance(m, Const) and isinstance(m.value, dict):
                parts.append(Names(frozenset(m.value) - seen))
            elif isinstance(m, Node):
                s = m.contents
                if "propertyNames" in s:
                    parts.append(sch.child(m, s["propertyNames"]))
                if s.get("additionalProperties") is False:
                    props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
                    pats = s.get("patternProperties")
                    pats = tuple(pats) if isinstance(pats, dict) else ()
                    parts.append(Names(frozenset(props) - seen, pats))
        return sch.expand(parts)

    def key_candidates(self, seen: frozenset) -> tuple[str, ...]:
        """Names a short completion tries for the next key after ``seen``: the required keys
        still missing, then the other keys some member names, each group sorted."""
        def make() -> tuple[str, ...]:
            named, _ = self._memo("named", self._named_keys)
            missing = self.object.required - seen
            return tuple(sorted(missing)) + tuple(sorted(named - missing - seen))

        return self._memo(("candidates", seen), make)

    def value_examples(self) -> tuple[bytes, ...]:
        """Whole values a short completion tries for this clause, as compact JSON text: its
        members' ``const``, ``enum`` candidates, ``default`` and ``examples``, a value of each
        string ``format`` (FORMAT_EXAMPLES), and the integers at its numeric bounds, shortest
        first. Only a heuristic reads them (``Machine.completion_moves``): each is checked
        like any other text before it is used."""
        def make() -> tuple[bytes, ...]:
            values: list = []
            for m in self.members:
                if isinstance(m, Const):
                    values.append(m.value)
                elif isinstance(m, Node) and isinstance(m.contents, dict):
                    s = m.contents
                    for word in ("const", "default"):
                        if word in s:
                            values.append(s[word])
                    for word in ("enum", "examples"):
                        if isinstance(s.get(word), list):
                            values.extend(s[word][:EXAMPLES_PER_KEYWORD])
                    if s.get("format") in FORMAT_EXAMPLES:
                        values.append(FORMAT_EXAMPLES[s["format"]])
                    values.extend(_bounds(s))
            texts = {}
            for v in values:
                try:
                    text = json.dumps(v, ensure_ascii=False, separators=(",", ":"))
                except (TypeError, ValueError):  # not JSON (a Python-only default)
                    continue
                texts[text.encode("utf-8", "surrogatepass")] = None
            return tuple(sorted(texts, key=lambda t: (len(t), t)))

        return self._memo("examples", make)

    def value_alternatives(self, key: str) -> tuple:
        """Clauses for the value of property ``key``."""
        named, patterns = self._memo("named", self._named_keys)
        if key in named:
            return self._memo(("value", key), lambda: self._value_alternatives(key))
        # a key no member names gets clauses that depend only on which patternProperties it
        # matches: one entry per verdict vector, not one per candidate name a mask tries
        hits = tuple(maybe_search(p, key) for p in patterns)
        return self._memo(("value-other", hits), lambda: self._value_alternatives(key, hits))

    def _named_keys(self) -> tuple[frozenset, tuple]:
        """(the keys some member names: ``properties`` or a const object's, the members'
        patternProperties patterns in the order ``_value_alternatives`` reads them)."""
        named: set = set()
        patterns: list = []
        for m in self.members:
            if isinstance(m, Const) and isinstance(m.value, dict):
                named |= set(m.value)
            elif isinstance(m, Node):
                s = m.contents
                if isinstance(s.get("properties"), dict):
                    named |= set(s["properties"])
                if isinstance(s.get("patternProperties"), dict):
                    patterns.extend(s["patternProperties"])
        return frozenset(named), tuple(patterns)

    def _value_alternatives(self, key: str, hits: tuple | None = None) -> tuple:
        """``hits``: the verdicts of ``maybe_search`` for the patterns of ``_named_keys``
        on ``key``, when already known."""
        sch = self.schemas
        verdicts = iter(hits) if hits is not None else None
        parts: list = []
        for m in self.members:
            if isinstance(m, Const) and isinstance(m.value, dict):
                parts.append(Const(m.value[key], (m.key, key)) if key in m.value else False)
            elif isinstance(m, Node):
                s = m.contents
                matched = False
                props = s.get("properties")
                if isinstance(props, dict) and key in props:
                    parts.append(sch.child(m, props[key]))
                    matched = True
                pats = s.get("patternProperties")
                if isinstance(pats, dict):
                    for p, sub in pats.items():
                        hit = maybe_search(p, key) if verdicts is None else next(verdicts)
                        if hit:
                            parts.append(sch.child(m, sub))
                        # undecided in time: neither this subschema nor additionalProperties
                        # is asserted (the validator decides at complete)
                        matched = matched or hit is not False
                if not matched and "additionalProperties" in s:
                    parts.append(sch.child(m, s["additionalProperties"]))
        return sch.expand(parts)

    # ------------------------------------------------------------------ arrays
    @property
    def array(self) -> ArrayFacts:
        return self._memo("array", self._array)

    def _array(self) -> ArrayFacts:
        lo, hi, longest = 0, INF, 0
        for m in self.members:
            if isinstance(m, Const) and isinstance(m.value, list):
                lo, hi = max(lo, len(m.value)), min(hi, len(m.value))
            elif isinstance(m, Node):
                s = m.contents
                if _is_count(s.get("minItems")):
                    lo = max(lo, int(s["minItems"]))
                if _is_count(s.get("maxItems")):
                    hi = min(hi, int(s["maxItems"]))
                if isinstance(s.get("prefixItems"), list):
                    longest = max(longest, len(s["prefixItems"]))
        cap = max(lo, longest, int(hi) if hi < INF else 0) + 1
        return ArrayFacts(lo, hi, cap)

    def item_alternatives(self, index: int) -> tuple:
        """Clauses for the array item at position ``index`` (capped indices behave alike)."""
        return self._memo(("item", index), lambda: self._item_alternatives(index))

    def _item_alternatives(self, index: int) -> tuple:
        sch = self.schemas
        parts: list = []
        for m in self.members:
            if isinstance(m, Const) and isinstance(m.value, list):
                v = m.value
                parts.append(Const(v[index], (m.key, index)) if index < len(v) else False)
            elif isinstance(m, Node):
                s = m.contents
                pre = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else []
                if index < len(pre):
                    parts.append(sch.child(m, pre[index]))
                elif "items" in s and not isinstance(s["items"], list):
                    parts.append(sch.child(m, s["items"]))
        return sch.expand(parts)

    def container_alternatives(self, kind: str) -> tuple:
        """This clause with each object/array enum-or-const candidate fixed as a ``Const``."""
        return self._memo(("fix", kind), lambda: self._container_alternatives(kind))

    def _container_alternatives(self, kind: str) -> tuple:
        choices: list[list] = []
        for m in self.members:
            if isinstance(m, Node):
                s = m.contents
                for word in ("const", "enum"):
                    if word not in s:
                        continue
                    vals = [s[word]] if word == "const" else s[word]
                    cands = [
                        Const(v, (m.key, word, i))
                        for i, v in enumerate(vals)
                        if json_type(v) == kind
                    ]
                    choices.append(_dedupe_values(cands))
        alts = [frozenset()]
        for cands in choices:
            alts = [a | {c} for a in alts for c in cands]
        out = []
        for extra in alts:
            c = self.schemas.clause(self.members | extra, self.loose)
            if kind in c.types:
                out.append(c)
        return tuple(out)


def _dedupe_values(cands: list[Const]) -> list[Const]:
    out: list[Const] = []
    for c in cands:
        if not any(json_equal(c.value, d.value) for d in out):
            out.append(c)
    return out


def _bounds(s: dict) -> list[int]:
    """The integers nearest inside a schema object's numeric bounds (minimum, maximum and the
    exclusive ones, in their 2020-12 numeric form), where a bound is a number below 1e15."""
    nearest = {"minimum": math.ceil, "maximum": math.floor,
               "exclusiveMinimum": lambda v: math.floor(v) + 1,
               "exclusiveMaximum": lambda v: math.ceil(v) - 1}
    out = []
    for word, near in nearest.items():
        v = s.get(word)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e15:
            out.append(near(v))
    return out


def _is_count(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == int(v) and v >= 0


class Schemas:
    """Interning of members and clauses for one root schema, with the validator for checks."""

    def __init__(self, root: Any, validator: Any, draft: str = DEFAULT,
                 make_validator: Callable[[str], Any] | None = None):
        require("jsonschema")
        self.validator = validator
        #: draft -> validator (with format checking) that checks members of that draft
        self.validators = {draft: validator}
        self._make_validator = make_validator
        self.root_resolver = validator_resolver(validator)
        self._clauses: dict = {}
        self._possible: dict = {}
        self._accepts: dict = {}
        self._string_forms: dict = {}  # member -> its _string_form (None: the validator checks)
        self.dynamic = False  # set by check_refs when dynamic scope matters
        self.root = self.node(root, self.root_resolver, draft)

    # ------------------------------------------------------------------ nodes
    def _meta(self, uri: str) -> Any:
        """A custom metaschema named by ``$schema``, from the registry."""
        return self.root_resolver.lookup(uri).contents

    def node(self, contents: Any, resolver: Any, draft: str) -> Node | bool:
        """A member for subschema ``contents`` of ``draft`` (or of the draft it declares)."""
        if isinstance(contents, bool):
            return contents
        if not isinstance(contents, dict):
            return True  # malformed subschema: check_schema rejects these first
        if "$schema" in contents:
            draft = draft_of(contents["$schema"], lookup=self._meta)
        key = (id(contents), base_uri(resolver))
        return Node(view(contents, draft), resolver, key, contents, draft)

    def child(self, parent: Node, sub: Any) -> Node | bool:
        """The node of subschema ``sub`` met inside ``parent`` (as jsonschema descends)."""
        if isinstance(sub, bool) or not isinstance(sub, dict):
            return self.node(sub, None, parent.draft)
        draft = draft_of(sub["$schema"], lookup=self._meta) if "$schema" in sub else parent.draft
        try:
            res = parent.resolver.in_subresource(SPECS[draft].create_resource(sub))
        except (AttributeError, TypeError) as err:
            # e.g. a non-string "id" in a subschema the metaschema never saw (reached by $ref
            # through a non-keyword): jsonschema itself would fail on it
            raise ValueError(
                f"invalid subschema at {self.path_of(sub)} ({draft}): its identifier cannot be "
                f"read ({err})"
            ) from None
        return self.node(sub, res, draft)

    def path_of(self, target: Any) -> str:
        """Where ``target`` (by identity) sits in the root schema, as a JSON pointer."""
        todo = [(self.root.raw if isinstance(self.root, Node) else None, "")]
        while todo:
            v, path = todo.pop()
            if v is target:
                return path or "(root)"
            if isinstance(v, dict):
                todo += [(x, f"{path}/{k}") for k, x in v.items()]
            elif isinstance(v, list):
                todo += [(x, f"{path}/{i}") for i, x in enumerate(v)]
        return "(a referenced schema)"

    def reference(self, node: Node, ref: str | None = None) -> Node | bool:
        resolved = node.resolver.lookup(node.contents["$ref"] if ref is None else ref)
        target = resolved.contents
        # the target's draft: the one it declares, else the referring node's
        return self.node(target, resolved.resolver, node.draft)

    def in_place(self, node: Node) -> list[Node | bool]:
        s = node.contents
        out: list[Node | bool] = []
        if isinstance(s.get("$ref"), str):
            out.append(self.reference(node))
        if (node.draft == "draft2019-09" and isinstance(s.get("$recursiveRef"), str)
                and not self.dynamic):
            # with at most one $recursiveAnchor in reach, $recursiveRef is a plain $ref
            out.append(self.reference(node, s["$recursiveRef"]))
        if isinstance(s.get("allOf"), list):
            out += [self.child(node, x) for x in s["allOf"]]
        return out

    def possible_types(self, node: Node | bool, depth: int = 0) -> frozenset:
        """A superset of the JSON types (of TYPES) of the values valid under ``node``: its own
        ``type``/``const``/``enum`` (``own_types``), intersected with what applies in place
        (``$ref``, ``allOf``) and, for each ``anyOf``/``oneOf``, with the union of its branches'
        types. Sound by induction; a ``$ref`` cycle, or nesting deeper than TYPES_DEPTH, reads
        as every type. Kept per node."""
        if node is True:
            return frozenset(TYPES)
        if node is False:
            return frozenset()
        got = self._possible.get(node)
        if got is not None:
            return got
        if depth > TYPES_DEPTH:
            return frozenset(TYPES)
        self._possible[node] = frozenset(TYPES)  # what a cycle back to this node reads
        allowed = set(own_types(node.contents))
        for child in self.in_place(node):
            allowed &= self.possible_types(child, depth + 1)
        for branch in self.branches(node):
            allowed &= set().union(*(self.possible_types(b, depth + 1) for b in branch))
        got = self._possible[node] = frozenset(allowed)
        return got

    def branches(self, node: Node) -> list[list[Node | bool]]:
        s = node.contents
        return [
            [self.child(node, x) for x in s[word]]
            for word in ("anyOf", "oneOf")
            if isinstance(s.get(word), list)
        ]

    # ------------------------------------------------------------------ clauses
    def clause(self, members: frozenset, loose: frozenset = frozenset()) -> Clause:
        key = (members, loose)
        c = self._clauses.get(key)
        if c is None:
            c = self._clauses[key] = Clause(self, len(self._clauses), members, loose)
        return c

    def expand(self, parts: list) -> tuple:
        """dnf(parts): the clauses whose disjunction every value valid under all parts meets."""
        alts: list[tuple[frozenset, frozenset]] = []
        stack = [(frozenset(), frozenset(), tuple(parts))]
        while stack:
            members, loose, todo = stack.pop()
            if not todo:
                alts.append((members, loose))
                continue
            m, rest = todo[0], todo[1:]
            if m is True or m in members:
                stack.append((members, loose, rest))
                continue
            if m is False:
                continue
            if isinstance(m, Names) and m.patterns:
                # names OR one of the patterns: one alternative each
                for o in [Names(m.names)] + [KeyPattern(p) for p in m.patterns]:
                    stack.append((members, loose, (o,) + rest))
                continue
            members = members | {m}
            if isinstance(m, Node):
                rest = tuple(self.in_place(m)) + rest
                split = self.branches(m)
                width = len(stack) + len(alts) + 1
                for b in split:
                    width *= max(len(b), 1)
                if split and width <= MAX_ALTERNATIVES:
                    combos: list[tuple] = [()]
                    for b in split:
                        combos = [c + (x,) for c in combos for x in b]
                    for combo in combos:
                        stack.append((members, loose, combo + rest))
                    continue
                if split:
                    loose = loose | {m}
            stack.append((members, loose, rest))
        clauses = {self.clause(mem, lo) for mem, lo in alts}
        clauses = [c for c in clauses if c.types]
        # A weaker clause makes a stronger one redundant in a disjunction.
        kept = [
            c
            for c in clauses
            if not any(d is not c and d.members <= c.members and d.loose <= c.loose
                       and (d.members < c.members or d.loose < c.loose) for d in clauses)
        ]
        return tuple(sorted(kept, key=lambda c: c.sid))

    # ------------------------------------------------------------------ checks
    @staticmethod
    def search_dfa(pattern: str) -> Any:
        """Byte DFA of ``re.search(pattern, s)``, or None when it is not regular here."""
        return _search_dfa(pattern)

    def format_dfa(self, m: Node, fmt: str) -> Any:
        """Byte DFA of a regular superset of the strings member ``m``'s validator accepts as
        ``fmt`` (potentials.json.formats), or None when there is none."""
        validator = self._validator(m.draft)
        checker = getattr(validator, "format_checker", None)
        return None if checker is None else json_formats.format_dfa(checker, fmt)

    def member_accepts(self, m: Any, value: Any) -> bool:
        key = (m, json_type(value), repr(value))
        got = self._accepts.get(key)
        if got is None:
            if len(self._accepts) > 100_000:
                self._accepts.clear()
            got = self._accepts[key] = self._member_accepts(m, value)
        return got

    def _member_accepts(self, m: Any, value: Any) -> bool:
        if isinstance(m, Const):
            return json_equal(m.value, value)
        if isinstance(m, KeyPattern):
            return maybe_search(m.pattern, value) is not False
        raw = m.raw
        validator = self._validator(m.draft)
        if validator is None:
            return True  # no validator for this nested draft: checked at complete
        try:
            form = self._string_form(m, raw, validator) if isinstance(value, str) else None
            if form is not None:
                # a mask's walk ends the string once per candidate token's text: these
                # keywords are checked as jsonschema checks them, without a validator pass
                return _string_ok(form, value, validator.format_checker)
            if self.dynamic:
                # Dynamic scope is lost out of context; check only the scalar's own keywords.
                schema, resolver = {k: v for k, v in raw.items() if k in _SCALAR_WORDS}, None
                if before(m.draft, "draft2019-09") and "$ref" in raw:
                    schema = {}  # $ref's siblings are not keywords there
            else:
                # $schema is dropped so that jsonschema keeps this draft's class (its regex search)
                schema, resolver = {k: v for k, v in raw.items() if k != "$schema"}, m.resolver
            return with_resolver(validator, schema, resolver).is_valid(value)
        except Exception:  # undecidable here (the validator raised, a pattern timed out)
            return True

    def _string_form(self, m: Any, raw: Any, validator: Any) -> Any:
        """``_string_form`` of member ``m``, computed once."""
        got = self._string_forms.get(m, self)
        if got is self:
            got = self._string_forms[m] = _string_form(raw, _known_words(type(validator)))
        return got

    def _validator(self, draft: str) -> Any:
        """The validator (with format checking) that checks members of ``draft``; None when
        there is none for that nested draft."""
        validator = self.validators.get(draft)
        if validator is None and self._make_validator is not None:
            validator = self.validators[draft] = self._make_validator(draft)
        return validator

    def check_refs(self) -> None:
        """Resolve every reachable $ref now (ValueError naming the first that fails)."""
        seen: set = set()
        anchors = 0
        todo = [self.root]
        while todo:
            node = todo.pop()
            if not isinstance(node, Node) or node.key in seen:
                continue
            seen.add(node.key)
            s = node.contents
            if not isinstance(s, dict):
                continue
            if "$dynamicRef" in s:
                self.dynamic = True
            if node.draft == "draft2019-09":
                anchors += node.raw.get("$recursiveAnchor") is True
                if anchors > 1:
                    self.dynamic = True
                if isinstance(s.get("$recursiveRef"), str):
                    try:
                        todo.append(self.reference(node, s["$recursiveRef"]))
                    except Exception as err:
                        raise ValueError(
                            f"cannot resolve $recursiveRef {s['$recursiveRef']!r}: {err}"
                        ) from None
            if isinstance(s.get("$ref"), str):
                try:
                    todo.append(self.reference(node))
                except Exception as err:  # referencing's Unresolvable and friends
                    raise ValueError(f"cannot resolve $ref {s['$ref']!r}: {err}") from None
            for word, sub in s.items():
                if word in _ONE_SUB:
                    todo.append(self.child(node, sub))
                elif word in _LIST_SUBS and isinstance(sub, list):
                    todo += [self.child(node, x) for x in sub]
                elif word in _DICT_SUBS and isinstance(sub, dict):
                    todo += [self.child(node, x) for x in sub.values()]


# The subschemas check_refs walks: those that apply to the value in view()'s 2020-12 terms. Left
# out: contentSchema (an annotation), additionalItems and list-form items (view() renames them),
# $defs and definitions (reached through $ref only, so an unused definition never fails), and
# draft 4-7 dependencies (the validator resolves its refs when it checks a closed object).
_ONE_SUB = ONE_SCHEMA - {"contentSchema", "additionalItems"}
_LIST_SUBS = LIST_OF_SCHEMAS - {"items"}
_DICT_SUBS = MAP_OF_SCHEMAS - {"$defs", "definitions", "dependencies"}
_SCALAR_WORDS = frozenset(
    {"type", "enum", "const", "format", "pattern", "minLength", "maxLength", "minimum",
     "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)


@functools.lru_cache(maxsize=512)
def _search_dfa(pattern: str) -> Any:
    """``Schemas.search_dfa``, one automaton per pattern for all schemas: the automaton fills
    its transitions lazily, and the lifted string masks are cached per LM by (automaton, state)
    (``JSONSchema.shares_text_keys``), so schemas that share a pattern (dates, identifiers,
    URIs) share that work, and so do repeated compilations of one schema."""
    try:
        return compile_regex(f"(?s:.*)(?:{pattern})(?s:.*)")
    except (UnsupportedRegex, ValueError):
        return None
